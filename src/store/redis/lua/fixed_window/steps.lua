-- Fixed window: the steps that evalsha_batch.lua combines for refunds; every
-- decision, batched or not, is `decide` (fixed_window/decide.lua).

A.fixed_window = {
  nkeys = 1,
  load = function(keys)
    local s, w, k = load_two(keys[1])
    if not s then
      return nil
    end
    return { w = w, k = k, s = s }
  end,
  -- The steps below serve refunds.
  normalize = function(p, s, now)
    local w = idiv(now, p.period)
    if w > s.w then
      s.w = w
      s.k = 0
    end
    -- A clock behind the stored window stands at the window's start.
    return math.max(now, s.w * p.period)
  end,
  refund = function(_, s, _, amount)
    s.k = s.k - math.min(amount, s.k)
  end,
  -- Only in the charge's own window: it counts until that window's end.
  refund_charge = function(p, s, _, amount, r)
    if (s.w + 1) * p.period == r.till then
      s.k = s.k - math.min(amount, s.k)
    end
  end,
  idle_at = function(p, s)
    if s.k == 0 then
      return 0
    end
    return (s.w + 1) * p.period
  end,
  save = function(keys, _, s, ttl)
    redis.call('SET', keys[1], MARKED .. string.format('%.0f %.0f %.0f', s.s, s.w, s.k), 'PX', ttl)
  end,
}
