-- Sliding window counters: the steps that evalsha_batch.lua combines for refunds; every
-- decision, batched or not, is `decide` (sliding_window_counters/decide.lua).

A.sliding_window_counters = {
  nkeys = 1,
  load = function(keys)
    local v = read_state(keys[1])
    if not v then
      return nil
    end
    local at, i, t, c = swc_decode(v)
    return { i = i, t = t, s = at, c = c }
  end,
  -- The steps below serve refunds.
  normalize = function(p, s, now)
    s.c, s.t, s.i = swc_advance(s.c, s.i, s.t, p.buckets, idiv(now, p.bucket))
    return math.max(now, s.i * p.bucket)
  end,
  refund = function(p, s, _, amount)
    for back = 0, math.min(p.buckets, s.i + 1) - 1 do
      if amount == 0 or s.t == 0 then
        break
      end
      local slot = math.fmod(s.i - back, p.buckets)
      local count = s.c[slot] or 0
      local taken = math.min(amount, count)
      s.c[slot] = count - taken
      s.t = s.t - taken
      amount = amount - taken
    end
  end,
  -- The charge's sub-window j leaves at boundary j + N, its reset instant; only
  -- that sub-window gives back, while it is in the window.
  refund_charge = function(p, s, _, amount, r)
    local j = idiv(r.till, p.bucket) - p.buckets
    if j < 0 or j > s.i or s.i - j >= p.buckets then
      return
    end
    local slot = math.fmod(j, p.buckets)
    local count = s.c[slot] or 0
    local taken = math.min(amount, count)
    s.c[slot] = count - taken
    s.t = s.t - taken
  end,
  idle_at = function(p, s)
    if s.t == 0 then
      return 0
    end
    return (s.i + p.buckets) * p.bucket
  end,
  save = function(keys, _, s, ttl)
    redis.call('SET', keys[1], MARKED .. swc_encode(s.s, s.i, s.t, s.c), 'PX', ttl)
  end,
}
