-- Token bucket: the Lua twin of src/algorithm/token_bucket.rs.
-- State (hash): d = deficit in units (capacity minus tokens), l = last refill,
-- s = latest instant seen. One token is p.upt units; p.ups units refill per µs.
-- capacity * upt <= 2^53 (checked when the policy is built), so every deficit is exact.

local function tb_refill_time(p, units)
  return ceil_div(units, p.ups)
end

A.token_bucket = {
  nkeys = 1,
  load = function(keys)
    local v = redis.call('HMGET', keys[1], 'd', 'l', 's')
    if not v[1] then
      return nil
    end
    return { d = tonumber(v[1]), l = tonumber(v[2]), s = tonumber(v[3]) }
  end,
  fresh = function()
    return { d = 0, l = 0, s = 0 }
  end,
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
  admits = function(p, s, _, cost)
    return s.d <= p.cap * p.upt - cost * p.upt
  end,
  charge = function(p, s, now, cost)
    s.d = s.d + cost * p.upt
    return now
  end,
  remaining = function(p, s)
    return idiv(p.cap * p.upt - s.d, p.upt)
  end,
  reset_at = function(p, s, now)
    return now + tb_refill_time(p, s.d)
  end,
  retry_at = function(p, s, now, cost)
    return now + tb_refill_time(p, s.d - (p.cap - cost) * p.upt)
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
    hset(keys[1], 'd', s.d, 'l', s.l, 's', s.s)
    redis.call('PEXPIRE', keys[1], ttl)
  end,
}
