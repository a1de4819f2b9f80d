-- Fixed window: the Lua twin of src/algorithm/fixed_window.rs.
-- State (string, see prelude.lua): "<s> <w> <k>", s = latest instant seen,
-- w = window index, k = count.

-- One whole decision (evalsha_batch.lua's `evaluate`, specialised, as gcra/decide.lua's): the
-- state stays in locals. `m` is the latest instant seen, `t` the instant decided at.
local function fw_decide(keys, now, args, i, charge, force)
  local cost, limit = tonumber(args[i + 1]), tonumber(args[i + 2])
  local period, cap = tonumber(args[i + 3]), tonumber(args[i + 4])
  local v = redis.call('GET', keys[1])
  local w, k, floor, tail = 0, 0, 0, nil
  if v then
    local s, rest, sw, sk = string.match(v, '^(%S+)( (%S+) (%S+))$')
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
    k = k + cost
    redis.call('SET', keys[1], string.format('%.0f %.0f %.0f', m, w, k), 'PX',
      ttl_ms(math.max(window_end, m), now))
  else
    if not allowed and cost <= cap then
      retry = math.max(window_end - now, 0)
    end
    if v and m > floor then
      -- No charge, but a later instant: record it (see evalsha_batch.lua's `evaluate`).
      redis.call('SET', keys[1], num(m) .. tail, 'KEEPTTL')
    end
  end
  local reset = 0
  if k > 0 and window_end > t then
    reset = window_end - now
  end
  return verdict(allowed, math.min(math.max(limit - k, 0), cap), reset, retry, 0)
end

D.fixed_window = fw_decide
