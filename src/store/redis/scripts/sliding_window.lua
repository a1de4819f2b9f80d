-- Sliding window ("sliding tail"): the Lua twin of src/algorithm/sliding_window.rs.
-- State (hash): w = window index, p = previous count, k = current count,
-- s = latest instant seen.
-- The products count * period stay below 2^53: the store rejects larger L * P.

-- floor(count * (P - e) / P)
local function sw_weighted(count, elapsed, period)
  return idiv(count * (period - elapsed), period)
end

-- The smallest offset x with floor(count * (P - x) / P) <= room; may equal P.
local function sw_first_offset(count, room, period)
  if count <= room then
    return 0
  end
  return idiv((count - room - 1) * period, count) + 1
end

local function sw_used(p, s, now)
  return sw_weighted(s.p, now - s.w * p.period, p.period) + s.k
end

local function sw_earliest_within(p, s, now, room)
  local start = s.w * p.period
  if s.k <= room then
    local offset = sw_first_offset(s.p, room - s.k, p.period)
    if offset < p.period then
      return math.max(now, start + offset)
    end
  end
  -- Roll into the next window: the current count becomes the previous one.
  return start + p.period + sw_first_offset(s.k, room, p.period)
end

A.sliding_window = {
  nkeys = 1,
  load = function(keys)
    local v = redis.call('HMGET', keys[1], 'w', 'p', 'k', 's')
    if not v[1] then
      return nil
    end
    return { w = tonumber(v[1]), p = tonumber(v[2]), k = tonumber(v[3]), s = tonumber(v[4]) }
  end,
  fresh = function()
    return { w = 0, p = 0, k = 0, s = 0 }
  end,
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
  admits = function(p, s, now, cost)
    return sw_used(p, s, now) + cost <= p.limit
  end,
  charge = function(_, s, now, cost)
    s.k = s.k + cost
    return now
  end,
  remaining = function(p, s, now)
    return math.max(p.limit - sw_used(p, s, now), 0)
  end,
  reset_at = function(p, s, now)
    return sw_earliest_within(p, s, now, 0)
  end,
  retry_at = function(p, s, now, cost)
    return sw_earliest_within(p, s, now, p.limit - cost)
  end,
  refund = function(_, s, _, amount)
    local from_current = math.min(amount, s.k)
    s.k = s.k - from_current
    s.p = s.p - math.min(amount - from_current, s.p)
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
    hset(keys[1], 'w', s.w, 'p', s.p, 'k', s.k, 's', s.s)
    redis.call('PEXPIRE', keys[1], ttl)
  end,
}
