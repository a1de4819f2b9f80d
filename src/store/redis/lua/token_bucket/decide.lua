-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
-- State (string, see prelude.lua): "<s> <d> <l> <u> <r>", s = latest instant seen,
-- d = deficit in units (capacity minus tokens), l = last refill, (u, r) = the units
-- per token and per µs it is counted in. One token is p.upt units; p.ups units refill
-- per µs.
-- capacity * upt <= 2^53 (checked when the policy is built), so every deficit is exact.

-- One whole decision (evalsha_batch.lua's `evaluate`, specialised, as gcra/decide.lua's): the
-- state stays in locals. `m` is the latest instant seen, `t` the instant decided at.
-- The most deficit a quota change leaves, in units (token_bucket::MAX_UNITS).
local TB_MAX_UNITS = 4503599627370496

-- token_bucket::carry_over: a deficit `d` counted in (u, r) units, refilled at the old
-- rate to `m`, re-counted in the current units: its usage in whole tokens, rounded
-- up, owed again. Returns the deficit and the last refill.
local function tb_carry_over(d, l, u, r, m, upt)
  if d == 0 then
    return d, l
  end
  if m > l then
    local elapsed = m - l
    if elapsed >= ceil_div(d, r) then
      d = 0
    else
      d = d - elapsed * r
    end
    l = m
  end
  return math.min(ceil_div(d, u), idiv(TB_MAX_UNITS, upt)) * upt, l
end

local function tb_decide(keys, now, args, i, charge, force, v, mark)
  local cost, cap = args[i + 1] + 0, args[i + 4] + 0
  local upt, ups = args[i + 5] + 0, args[i + 6] + 0
  if v == nil then
    v = redis.call('GET', keys[1])
  end
  mark = mark or MARKED
  local d, l, floor, tail = 0, 0, 0, nil
  local carried = false
  local m = now
  if v then
    local s, rest, sd, sl, su, sr = string.match(v, '^.(%S+)( (%S+) (%S+) (%S+) (%S+))$')
    d, l, floor, tail = tonumber(sd), tonumber(sl), tonumber(s), rest
    m = math.max(now, floor)
    local u, r = tonumber(su), tonumber(sr)
    -- A deficit counted under another quota (a plan, a reload) keeps its usage.
    if u ~= upt or r ~= ups then
      d, l = tb_carry_over(d, l, u, r, m, upt)
      carried = true
    end
  end
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
  local allowed = force or cost == 0 or (cost <= cap and d <= cap * upt - cost * upt)
  local retry = -1
  if allowed and charge and cost > 0 then
    d = d + cost * upt
    redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f %.0f %.0f', m, d, l, upt, ups),
      'PX', ttl_ms(math.max(l + ceil_div(d, ups), m), now))
  else
    if not allowed and cost <= cap then
      retry = math.max(t + ceil_div(d - (cap - cost) * upt, ups) - now, 0)
    end
    if carried then
      -- No charge, but the state is now counted under this quota, as the memory
      -- store keeps it.
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f %.0f %.0f', m, d, l, upt, ups),
        'PX', ttl_ms(math.max(l + ceil_div(d, ups), m), now))
    elseif v and m > floor then
      -- No charge, but a later instant: record it (see evalsha_batch.lua's `evaluate`).
      redis.call('SET', keys[1], mark .. num(m) .. tail, 'KEEPTTL')
    end
  end
  local reset = t + ceil_div(d, ups)
  if reset <= t then
    reset = 0
  else
    reset = reset - now
  end
  -- A deficit may exceed the capacity: a quota lowered under a caller's usage.
  return verdict(allowed, math.min(idiv(math.max(cap * upt - d, 0), upt), cap), reset, retry, 0)
end

D.token_bucket = tb_decide
