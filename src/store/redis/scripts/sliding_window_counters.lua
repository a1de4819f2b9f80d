-- Sliding window counters: the Lua twin of src/algorithm/sliding_window_counters.rs.
-- State (hash): i = newest sub-window index, t = total, s = latest instant seen, and
-- one field per non-zero sub-window count, named by its ring slot (index mod N).

local function swc_count(s, slot)
  return s.c[slot] or 0
end

-- The earliest instant >= now at which total <= room, with nothing arriving.
local function swc_earliest_within(p, s, now, room)
  if s.t <= room then
    return now
  end
  local total = s.t
  for ahead = 1, p.buckets do
    total = total - swc_count(s, math.fmod(s.i + ahead, p.buckets))
    if total <= room then
      return (s.i + ahead) * p.bucket
    end
  end
  return (s.i + p.buckets) * p.bucket
end

A.sliding_window_counters = {
  nkeys = 1,
  load = function(keys)
    local v = redis.call('HGETALL', keys[1])
    if #v == 0 then
      return nil
    end
    local s = { i = 0, t = 0, s = 0, c = {} }
    for j = 1, #v, 2 do
      local field, value = v[j], tonumber(v[j + 1])
      if field == 'i' or field == 't' or field == 's' then
        s[field] = value
      else
        s.c[tonumber(field)] = value
      end
    end
    return s
  end,
  fresh = function()
    return { i = 0, t = 0, s = 0, c = {} }
  end,
  normalize = function(p, s, now)
    local index = idiv(now, p.bucket)
    if index > s.i then
      if index - s.i >= p.buckets or s.t == 0 then
        s.c = {}
        s.t = 0
      else
        for gone = s.i + 1, index do
          local slot = math.fmod(gone, p.buckets)
          s.t = s.t - swc_count(s, slot)
          s.c[slot] = nil
        end
      end
      s.i = index
    end
    return math.max(now, s.i * p.bucket)
  end,
  admits = function(p, s, _, cost)
    return s.t + cost <= p.limit
  end,
  charge = function(p, s, now, cost)
    local slot = math.fmod(s.i, p.buckets)
    s.c[slot] = swc_count(s, slot) + cost
    s.t = s.t + cost
    return now
  end,
  remaining = function(p, s)
    return math.max(p.limit - s.t, 0)
  end,
  reset_at = function(p, s, now)
    return swc_earliest_within(p, s, now, 0)
  end,
  retry_at = function(p, s, now, cost)
    return swc_earliest_within(p, s, now, p.limit - cost)
  end,
  refund = function(p, s, _, amount)
    for back = 0, math.min(p.buckets, s.i + 1) - 1 do
      if amount == 0 or s.t == 0 then
        break
      end
      local slot = math.fmod(s.i - back, p.buckets)
      local taken = math.min(amount, swc_count(s, slot))
      s.c[slot] = swc_count(s, slot) - taken
      s.t = s.t - taken
      amount = amount - taken
    end
  end,
  idle_at = function(p, s)
    if s.t == 0 then
      return 0
    end
    return (s.i + p.buckets) * p.bucket
  end,
  save = function(keys, _, s, ttl)
    -- Rewritten whole: sub-windows that left or were refunded to zero disappear.
    redis.call('DEL', keys[1])
    local args = { 'i', s.i, 't', s.t, 's', s.s }
    for slot, count in pairs(s.c) do
      if count > 0 then
        args[#args + 1] = num(slot)
        args[#args + 1] = count
      end
    end
    hset(keys[1], unpack(args))
    redis.call('PEXPIRE', keys[1], ttl)
  end,
}
