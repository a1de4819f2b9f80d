-- Fixed window: the Lua twin of src/algorithm/fixed_window.rs.
-- State (string, see prelude.lua): "<s> <w> <k>", s = latest instant seen,
-- w = window index, k = count.

-- One whole decision (algorithm::evaluate, specialised, as gcra/decide.lua's): the
-- state stays in locals. `m` is the latest instant seen, `t` the instant decided at.
local function fw_decide(keys, now, args, i, charge, force, v, mark)
  local cost, limit = args[i + 1] + 0, args[i + 2] + 0
  local period, cap = args[i + 3] + 0, args[i + 4] + 0
  local w, k, floor, tail = 0, 0, 0, nil
  if v then
    local s, rest, sw, sk = string.match(v, '^.(%S+)( (%S+) (%S+))$')
    w, k, floor, tail = tonumber(sw), tonumber(sk), tonumber(s), rest
  end
  local m = math.max(now, floor)
  local window = idiv(m, period)
  if window > w then
    w = window
    k = 0
  end
  -- A clock behind the stored window stands at the window's start.
  local t = math.max(m, w * period)
  local allowed = force or cost == 0 or (cost <= cap and k + cost <= limit)
  local retry = -1
  local window_end = (w + 1) * period
  if allowed and charge and cost > 0 then
    -- A stored count in this window was written with a TTL to the window's end (m
    -- is never after it): a charge in the same window keeps that TTL.
    local kept = v and k > 0
    k = k + cost
    if kept then
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f', m, w, k), 'KEEPTTL')
    else
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f', m, w, k), 'PX',
        ttl_ms(math.max(window_end, m), now))
    end
  else
    if not allowed and cost <= cap then
      retry = math.max(window_end - now, 0)
    end
    if v and m > floor then
      -- No charge, but a later instant: record it, so that a clock stepping back
      -- later stands still here, as the memory store's floor does.
      redis.call('SET', keys[1], mark .. num(m) .. tail, 'KEEPTTL')
    end
  end
  local reset = 0
  if k > 0 and window_end > t then
    reset = window_end - now
  end
  return verdict(allowed, math.min(math.max(limit - k, 0), cap), reset, retry, 0)
end

D.fixed_window = fw_decide
