-- Sliding window counters: the Lua twin of src/algorithm/sliding_window_counters.rs.
-- State (see prelude.lua): the mark, then packed doubles: s, i, t, then a (slot,
-- count) pair per non-zero sub-window count; s = latest instant seen, i = newest
-- sub-window index, t = total, slot = the sub-window's ring slot (index mod N).

-- The state's struct format with `pairs` (slot, count) pairs, built once per length
-- (at call time: a function library's load runs without the string library).
local SWC_FORMATS = {}

local function swc_format(pairs_count)
  local format = SWC_FORMATS[pairs_count]
  if not format then
    format = '<ddd' .. string.rep('dd', pairs_count)
    SWC_FORMATS[pairs_count] = format
  end
  return format
end

-- Reads a state: the latest instant seen, the newest index, the total and the ring
-- (slot -> count).
local function swc_decode(v)
  local pairs_count = (#v - 25) / 16
  local x = { struct.unpack(swc_format(pairs_count), v, 2) }
  local c = {}
  for j = 4, 3 + 2 * pairs_count, 2 do
    c[x[j]] = x[j + 1]
  end
  return x[1], x[2], x[3], c
end

-- The state (without its mark); sub-windows that left or were refunded to zero
-- disappear.
local function swc_encode(s, index, total, c)
  local x = { s, index, total }
  for slot, count in pairs(c) do
    if count > 0 then
      x[#x + 1] = slot
      x[#x + 1] = count
    end
  end
  return struct.pack(swc_format((#x - 3) / 2), unpack(x))
end

-- The earliest instant >= now at which total <= room, with nothing arriving: the
-- ring `c` (slot -> count) of n sub-windows of `bucket` µs, the newest at `index`.
local function swc_within(c, index, total, n, bucket, now, room)
  if total <= room then
    return now
  end
  for ahead = 1, n do
    total = total - (c[math.fmod(index + ahead, n)] or 0)
    if total <= room then
      return (index + ahead) * bucket
    end
  end
  return (index + n) * bucket
end

-- Moves the ring forward to sub-window `at`: the counts of the sub-windows that left
-- are dropped. Returns the ring, the total and the newest index.
local function swc_advance(c, index, total, n, at)
  if at <= index then
    return c, total, index
  end
  if at - index >= n or total == 0 then
    return {}, 0, at
  end
  for gone = index + 1, at do
    local slot = math.fmod(gone, n)
    total = total - (c[slot] or 0)
    c[slot] = nil
  end
  return c, total, at
end

-- One whole decision (algorithm::evaluate, specialised, as gcra/decide.lua's): the
-- index, total and instants stay in locals, the ring is one table of the non-zero
-- counts by slot. `m` is the latest instant seen, `t` the instant decided at.
local function swc_decide(keys, now, args, i, charge, force, v, mark)
  local cost, limit = args[i + 1] + 0, args[i + 2] + 0
  local cap = args[i + 4] + 0
  local n, bucket = args[i + 5] + 0, args[i + 6] + 0
  local floor, index, total, c = 0, 0, 0, nil
  if v then
    floor, index, total, c = swc_decode(v)
  else
    c = {}
  end
  local m = math.max(now, floor)
  -- A stored count was written with a TTL to its newest sub-window's last one or later
  -- (`ttl_kept`).
  local before = v and total > 0 and (index + n) * bucket
  c, total, index = swc_advance(c, index, total, n, idiv(m, bucket))
  -- A clock behind the newest sub-window stands at its start.
  local t = math.max(m, index * bucket)
  local allowed = force or cost == 0 or (cost <= cap and total + cost <= limit)
  local retry = -1
  if allowed and charge and cost > 0 then
    local slot = math.fmod(index, n)
    c[slot] = (c[slot] or 0) + cost
    total = total + cost
    local until_us = math.max((index + n) * bucket, m)
    if before and ttl_kept(before, until_us) then
      redis.call('SET', keys[1], mark .. swc_encode(m, index, total, c), 'KEEPTTL')
    else
      redis.call('SET', keys[1], mark .. swc_encode(m, index, total, c), 'PX',
        ttl_ms(until_us, now))
    end
  else
    if not allowed and cost <= cap then
      retry = math.max(swc_within(c, index, total, n, bucket, t, limit - cost) - now, 0)
    end
    if v and m > floor then
      -- No charge, but a later instant: record it, so that a clock stepping back
      -- later stands still here, as the memory store's floor does.
      -- The stored counts stay as they are: only `s`, the first number, changes.
      redis.call('SET', keys[1], mark .. struct.pack('<d', m) .. string.sub(v, 10), 'KEEPTTL')
    end
  end
  local reset = swc_within(c, index, total, n, bucket, t, 0)
  if reset <= t then
    reset = 0
  else
    reset = reset - now
  end
  return verdict(allowed, math.min(math.max(limit - total, 0), cap), reset, retry, 0)
end

D.sliding_window_counters = swc_decide
