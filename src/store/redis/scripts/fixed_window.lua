-- Fixed window: the Lua twin of src/algorithm/fixed_window.rs.
-- State (hash): w = window index, k = count, s = latest instant seen.

A.fixed_window = {
  nkeys = 1,
  load = function(keys)
    local v = redis.call('HMGET', keys[1], 'w', 'k', 's')
    if not v[1] then
      return nil
    end
    return { w = tonumber(v[1]), k = tonumber(v[2]), s = tonumber(v[3]) }
  end,
  fresh = function()
    return { w = 0, k = 0, s = 0 }
  end,
  normalize = function(p, s, now)
    local w = idiv(now, p.period)
    if w > s.w then
      s.w = w
      s.k = 0
    end
    -- A clock behind the stored window stands at the window's start.
    return math.max(now, s.w * p.period)
  end,
  admits = function(p, s, _, cost)
    return s.k + cost <= p.limit
  end,
  charge = function(_, s, now, cost)
    s.k = s.k + cost
    return now
  end,
  remaining = function(p, s)
    return math.max(p.limit - s.k, 0)
  end,
  reset_at = function(p, s, now)
    if s.k == 0 then
      return now
    end
    return (s.w + 1) * p.period
  end,
  retry_at = function(p, s)
    return (s.w + 1) * p.period
  end,
  refund = function(_, s, _, amount)
    s.k = s.k - math.min(amount, s.k)
  end,
  idle_at = function(p, s)
    if s.k == 0 then
      return 0
    end
    return (s.w + 1) * p.period
  end,
  save = function(keys, _, s, ttl)
    hset(keys[1], 'w', s.w, 'k', s.k, 's', s.s)
    redis.call('PEXPIRE', keys[1], ttl)
  end,
}
