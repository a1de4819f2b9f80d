-- Sliding window ("sliding tail"): the Lua twin of src/algorithm/sliding_window.rs.
-- State (string, see prelude.lua): "<s> <w> <p> <k>", s = latest instant seen,
-- w = window index, p = previous count, k = current count.
-- The products count * period stay below 2^53: the store rejects larger L * P.

-- floor(count * (P - e) / P)
local function sw_weighted(count, elapsed, period)
  return idiv(count * (period - elapsed), period)
end

-- The smallest offset x with floor(count * (P - x) / P) <= room; may equal P.
local function sw_first_offset(count, room, period)
  if count <= room then
    return 0
  end
  return idiv((count - room - 1) * period, count) + 1
end

-- The earliest instant >= t at which the weighted count is <= room, with nothing
-- arriving; `start` is the current window's start.
local function sw_earliest_within(period, start, prev, k, t, room)
  if k <= room then
    local offset = sw_first_offset(prev, room - k, period)
    if offset < period then
      return math.max(t, start + offset)
    end
  end
  -- Roll into the next window: the current count becomes the previous one.
  return start + period + sw_first_offset(k, room, period)
end

-- One whole decision (algorithm::evaluate, specialised, as gcra/decide.lua's): the
-- state stays in locals. `m` is the latest instant seen, `t` the instant decided at.
local function sw_decide(keys, now, args, i, charge, force, v, mark)
  local cost, limit = args[i + 1] + 0, args[i + 2] + 0
  local period, cap = args[i + 3] + 0, args[i + 4] + 0
  local w, prev, k, floor, tail = 0, 0, 0, 0, nil
  if v then
    local s, rest, sw, sp, sk = string.match(v, '^.(%S+)( (%S+) (%S+) (%S+))$')
    w, prev, k, floor, tail = tonumber(sw), tonumber(sp), tonumber(sk), tonumber(s), rest
  end
  local m = math.max(now, floor)
  -- A stored count was written with a TTL to the end of the last window it weighs on,
  -- or later (`ttl_kept`).
  local before = nil
  if v and k > 0 then
    before = (w + 2) * period
  elseif v and prev > 0 then
    before = (w + 1) * period
  end
  local window = idiv(m, period)
  if window == w + 1 then
    prev = k
    k = 0
    w = window
  elseif window > w + 1 then
    prev = 0
    k = 0
    w = window
  end
  local start = w * period
  local t = math.max(m, start)
  local weighted = sw_weighted(prev, t - start, period)
  local allowed = force or cost == 0 or (cost <= cap and weighted + k + cost <= limit)
  local retry = -1
  if allowed and charge and cost > 0 then
    k = k + cost
    -- k > 0: the count weighs on the next window too.
    local until_us = math.max(start + 2 * period, m)
    if before and ttl_kept(before, until_us) then
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f %.0f', m, w, prev, k),
        'KEEPTTL')
    else
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f %.0f', m, w, prev, k),
        'PX', ttl_ms(until_us, now))
    end
  else
    if not allowed and cost <= cap then
      retry = math.max(sw_earliest_within(period, start, prev, k, t, limit - cost) - now, 0)
    end
    if v and m > floor then
      -- No charge, but a later instant: record it, so that a clock stepping back
      -- later stands still here, as the memory store's floor does.
      redis.call('SET', keys[1], mark .. num(m) .. tail, 'KEEPTTL')
    end
  end
  local reset = sw_earliest_within(period, start, prev, k, t, 0)
  if reset <= t then
    reset = 0
  else
    reset = reset - now
  end
  return verdict(allowed, math.min(math.max(limit - (weighted + k), 0), cap), reset, retry, 0)
end

D.sliding_window = sw_decide
