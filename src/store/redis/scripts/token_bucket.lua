-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
-- State (string, see prelude.lua): "<s> <d> <l>", s = latest instant seen,
-- d = deficit in units (capacity minus tokens), l = last refill. One token is p.upt units; p.ups units refill per µs.
-- capacity * upt <= 2^53 (checked when the policy is built), so every deficit is exact.

local function tb_refill_time(p, units)
  return ceil_div(units, p.ups)
end

-- One whole decision (the driver's `evaluate`, specialised, as gcra.lua's): the
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
      -- No charge, but a later instant: record it (see the driver's `evaluate`).
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

A.token_bucket = {
  nkeys = 1,
  load = function(keys)
    local s, tail, d, l = load_two(keys[1])
    if not s then
      return nil
    end
    return { d = d, l = l, s = s, tail = tail }
  end,
  fresh = function()
    return { d = 0, l = 0, s = 0 }
  end,
  decide = tb_decide,
  -- The steps below serve refunds.
  normalize = function(p, s, now)
    if now > s.l then
      -- elapsed * ups >= d  <=>  elapsed >= ceil(d / ups), without the product that
      -- may leave the exact range.
      local elapsed = now - s.l
      if elapsed >= tb_refill_time(p, s.d) then
        s.d = 0
      else
        s.d = s.d - elapsed * p.ups
      end
      s.l = now
    end
    -- A clock behind `l` stands still there: it refills nothing.
    return s.l
  end,
  refund = function(p, s, _, amount)
    if amount >= ceil_div(s.d, p.upt) then
      s.d = 0
    else
      s.d = s.d - amount * p.upt
    end
  end,
  idle_at = function(p, s)
    return s.l + tb_refill_time(p, s.d)
  end,
  save = function(keys, _, s, ttl)
    redis.call('SET', keys[1], string.format('%.0f %.0f %.0f', s.s, s.d, s.l), 'PX', ttl)
  end,
  touch = touch_string,
}
