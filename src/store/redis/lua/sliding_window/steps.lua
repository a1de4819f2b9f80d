-- Sliding window: the steps that evalsha_batch.lua combines for refunds; every
-- decision, batched or not, is `decide` (sliding_window/decide.lua).

A.sliding_window = {
  nkeys = 1,
  load = function(keys)
    local v = read_state(keys[1])
    if not v then
      return nil
    end
    local s, w, prev, k = string.match(v, '^.(%S+) (%S+) (%S+) (%S+)$')
    return { w = tonumber(w), p = tonumber(prev), k = tonumber(k), s = tonumber(s) }
  end,
  -- The steps below serve refunds.
  normalize = function(p, s, now)
    local w = idiv(now, p.period)
    if w == s.w + 1 then
      s.p = s.k
      s.k = 0
      s.w = w
    elseif w > s.w + 1 then
      s.p = 0
      s.k = 0
      s.w = w
    end
    return math.max(now, s.w * p.period)
  end,
  refund = function(_, s, _, amount)
    local from_current = math.min(amount, s.k)
    s.k = s.k - from_current
    s.p = s.p - math.min(amount - from_current, s.p)
  end,
  -- The charge's window w has its reset instant in ((w + 1) * P, (w + 2) * P]; the
  -- charge is in k during w, in p during w + 1, and counts no more after that.
  refund_charge = function(p, s, _, amount, r)
    local w = idiv(math.max(r.till - 1, 0), p.period) - 1
    if w < 0 then
      return
    end
    if s.w == w then
      s.k = s.k - math.min(amount, s.k)
    elseif s.w == w + 1 then
      s.p = s.p - math.min(amount, s.p)
    end
  end,
  idle_at = function(p, s)
    if s.k > 0 then
      return (s.w + 2) * p.period
    elseif s.p > 0 then
      return (s.w + 1) * p.period
    end
    return 0
  end,
  save = function(keys, _, s, ttl)
    redis.call('SET', keys[1], MARKED .. string.format('%.0f %.0f %.0f %.0f', s.s, s.w, s.p, s.k), 'PX', ttl)
  end,
}
