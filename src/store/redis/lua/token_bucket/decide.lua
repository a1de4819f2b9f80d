-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
-- State (string, see prelude.lua): "<s> <d> <l>", s = latest instant seen,
-- d = deficit in units (capacity minus tokens), l = last refill. One token is p.upt units; p.ups units refill per µs.
-- capacity * upt <= 2^53 (checked when the policy is built), so every deficit is exact.

-- One whole decision (evalsha_batch.lua's `evaluate`, specialised, as gcra/decide.lua's): the
-- state stays in locals. `m` is the latest instant seen, `t` the instant decided at.
local function tb_decide(keys, now, args, i, charge)
  local cost, cap = tonumber(args[i + 1]), tonumber(args[i + 4])
  local upt, ups = tonumber(args[i + 5]), tonumber(args[i + 6])
  local v = redis.call('GET', keys[1])
  local d, l, floor, tail = 0, 0, 0, nil
  if v then
    local s, rest, sd, sl = string.match(v, '^(%S+)( (%S+) (%S+))$')
    d, l, floor, tail = tonumber(sd), tonumber(sl), tonumber(s), rest
  end
  local m = math.max(now, floor)
  if m > l then
    -- elapsed * ups >= d  <=>  elapsed >= ceil(d / ups), without the product that
    -- may leave the exact range.
    local elapsed = m - l
    if elapsed >= ceil_div(d, ups) then
      d = 0
    else
      d = d - elapsed * ups
    end
    l = m
  end
  -- A clock behind `l` stands still there: it refills nothing.
  local t = l
  local allowed = cost == 0 or (cost <= cap and d <= cap * upt - cost * upt)
  local retry = -1
  if allowed and charge and cost > 0 then
    d = d + cost * upt
    redis.call('SET', keys[1], string.format('%.0f %.0f %.0f', m, d, l), 'PX',
      ttl_ms(math.max(l + ceil_div(d, ups), m), now))
  else
    if not allowed and cost <= cap then
      retry = math.max(t + ceil_div(d - (cap - cost) * upt, ups) - now, 0)
    end
    if v and m > floor then
      -- No charge, but a later instant: record it (see evalsha_batch.lua's `evaluate`).
      redis.call('SET', keys[1], num(m) .. tail, 'KEEPTTL')
    end
  end
  local reset = t + ceil_div(d, ups)
  if reset <= t then
    reset = 0
  else
    reset = reset - now
  end
  return verdict(allowed, math.min(idiv(cap * upt - d, upt), cap), reset, retry, 0)
end

D.token_bucket = tb_decide
