-- Sliding window counters: the Lua twin of src/algorithm/sliding_window_counters.rs.
-- State (string, see prelude.lua): "<s> <i> <t>" then " <slot>:<count>" per non-zero
-- sub-window count; s = latest instant seen, i = newest sub-window index, t = total,
-- slot = the sub-window's ring slot (index mod N).

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
    local v = redis.call('GET', keys[1])
    if not v then
      return nil
    end
    local at, tail, i, t, counts = string.match(v, '^(%S+)( (%S+) (%S+)(.*))$')
    local s = { i = tonumber(i), t = tonumber(t), s = tonumber(at), c = {}, tail = tail }
    for slot, count in string.gmatch(counts, ' (%d+):(%d+)') do
      s.c[tonumber(slot)] = tonumber(count)
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
    local parts = { string.format('%.0f %.0f %.0f', s.s, s.i, s.t) }
    for slot, count in pairs(s.c) do
      if count > 0 then
        parts[#parts + 1] = string.format('%.0f:%.0f', slot, count)
      end
    end
    redis.call('SET', keys[1], table.concat(parts, ' '), 'PX', ttl)
  end,
  touch = touch_string,
}
