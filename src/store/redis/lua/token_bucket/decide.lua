-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
-- State (see prelude.lua): the mark, then five packed doubles (s, d, l, u, r), s =
-- latest instant seen, d = deficit in units (capacity minus tokens), l = last refill,
-- (u, r) = the units per token and per µs it is counted in. One token is p.upt units;
-- p.ups units refill per µs.
-- capacity * upt <= 2^53 (checked when the policy is built), so every deficit is exact.

local TB_STATE = '<ddddd'

local function tb_pack(mark, s, d, l, u, r)
  return mark .. struct.pack(TB_STATE, s, d, l, u, r)
end

-- The most deficit a quota change leaves, in units (token_bucket::MAX_UNITS).
local TB_MAX_UNITS = 4503599627370496

-- The deficit `d` last refilled at `l`, refilled at `rate` units per µs up to `m`:
-- the deficit and the last refill. A clock behind `l` stands still there: it refills
-- nothing. elapsed * rate >= d  <=>  elapsed >= ceil(d / rate), without the product
-- that may leave the exact range.
local function tb_refill(d, l, m, rate)
  if m <= l then
    return d, l
  end
  if m - l >= ceil_div(d, rate) then
    return 0, m
  end
  return d - (m - l) * rate, m
end

-- token_bucket::carry_over: a deficit `d` counted in (u, r) units, refilled at the old
-- rate to `m`, re-counted in the current units: its usage in whole tokens, rounded
-- up, owed again. Returns the deficit and the last refill.
local function tb_carry_over(d, l, u, r, m, upt)
  if d == 0 then
    return d, l
  end
  d, l = tb_refill(d, l, m, r)
  return math.min(ceil_div(d, u), idiv(TB_MAX_UNITS, upt)) * upt, l
end

-- One whole decision (algorithm::evaluate, specialised, as gcra/decide.lua's): the
-- state stays in locals. `m` is the latest instant seen, `t` the instant decided at.
local function tb_decide(keys, now, args, i, charge, force, v, mark)
  local cost, cap = args[i + 1] + 0, args[i + 4] + 0
  local upt, ups = args[i + 5] + 0, args[i + 6] + 0
  local d, l, floor = 0, 0, 0
  local sd, sl -- as stored
  local carried = false
  local m = now
  -- The instant the stored state was last written a TTL for, or later (`ttl_kept`).
  local before = nil
  if v then
    local u, r
    floor, d, l, u, r = struct.unpack(TB_STATE, v, 2)
    sd, sl = d, l
    m = math.max(now, floor)
    -- A deficit counted under another quota (a plan, a reload) keeps its usage.
    if u ~= upt or r ~= ups then
      d, l = tb_carry_over(d, l, u, r, m, upt)
      carried = true
    else
      before = l + ceil_div(d, ups)
    end
  end
  d, l = tb_refill(d, l, m, ups)
  local t = l
  local allowed = force or cost == 0 or (cost <= cap and d <= cap * upt - cost * upt)
  local retry = -1
  if allowed and charge and cost > 0 then
    d = d + cost * upt
    local until_us = math.max(l + ceil_div(d, ups), m)
    if before and ttl_kept(before, until_us) then
      redis.call('SET', keys[1], tb_pack(mark, m, d, l, upt, ups), 'KEEPTTL')
    else
      redis.call('SET', keys[1], tb_pack(mark, m, d, l, upt, ups), 'PX', ttl_ms(until_us, now))
    end
  else
    if not allowed and cost <= cap then
      retry = math.max(t + ceil_div(d - (cap - cost) * upt, ups) - now, 0)
    end
    if carried then
      -- No charge, but the state is now counted under this quota, as the memory
      -- store keeps it.
      redis.call('SET', keys[1], tb_pack(mark, m, d, l, upt, ups), 'PX',
        ttl_ms(math.max(l + ceil_div(d, ups), m), now))
    elseif v and m > floor then
      -- No charge, but a later instant: record it, so that a clock stepping back
      -- later stands still here, as the memory store's floor does.
      -- The refill up to `m` changes nothing the rule reads, so the stored deficit
      -- and refill instant are kept as they were written.
      redis.call('SET', keys[1], tb_pack(mark, m, sd, sl, upt, ups), 'KEEPTTL')
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
