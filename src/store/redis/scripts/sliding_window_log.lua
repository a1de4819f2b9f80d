-- Sliding window log: the Lua twin of src/algorithm/sliding_window_log.rs.
-- State: keys[1] (string, see prelude.lua) "<s> <t>", s = latest instant seen (the
-- log's `last`), t = total cost;
-- keys[2] (sorted set) one member per admission instant, "<instant>:<cost>", scored
-- by the instant. One member per instant keeps members unique: a charge at the
-- instant of the newest entry joins it, as in the Rust twin.
--
-- A call reads only what it needs: the entries that just left (the total is kept in
-- keys[1]) and, unless it charges at a later instant, the newest entry. The whole
-- log is read only to compute a denial's retry or to refund, so an admitted request
-- costs the same however long the log is.

local function swl_parse(member)
  local at, cost = string.match(member, '^(%d+):(%d+)$')
  return { at = tonumber(at), cost = tonumber(cost) }
end

local function swl_member(entry)
  return num(entry.at) .. ':' .. num(entry.cost)
end

-- Records the change of one entry (`old` replaced by `new`, either may be nil).
local function swl_change(s, old, new)
  if old then
    s.del[#s.del + 1] = swl_member(old)
  end
  if new and new.cost > 0 then
    s.add[#s.add + 1] = new
  end
end

-- The entries still in the log, oldest first, for refunds (none is changed before
-- this is read).
local function swl_entries(keys, s)
  local members = redis.call('ZRANGEBYSCORE', keys[2], '(' .. num(s.floor_at), '+inf')
  local entries = {}
  for j = 1, #members do
    entries[j] = swl_parse(members[j])
  end
  return entries
end

-- One whole decision (the driver's `evaluate`, specialised, as gcra.lua's): the
-- total and instants stay in locals, and the call reads only what its answer needs.
-- The newest entry is never after the latest instant seen (`floor`), so a charge at a
-- later instant starts an entry of its own without reading the newest; a decision
-- that charges nothing reads it for the reset (from the live entries when a denial
-- reads them anyway for the retry). `t` is the instant decided at, also the latest
-- instant seen.
local function swl_decide(keys, now, args, i, charge)
  local cost, limit = tonumber(args[i + 1]), tonumber(args[i + 2])
  local period, cap = tonumber(args[i + 3]), tonumber(args[i + 4])
  local v = redis.call('GET', keys[1])
  local total, floor = 0, 0
  if v then
    local s, st = string.match(v, '^(%S+) (%S+)$')
    total, floor = tonumber(st), tonumber(s)
  end
  local t = math.max(now, floor)
  -- An entry counts while t - at < P: those at or before the edge leave.
  local edge = t - period
  local trim = false
  if v then
    local gone = redis.call('ZRANGEBYSCORE', keys[2], '-inf', num(edge))
    for j = 1, #gone do
      total = total - tonumber(string.match(gone[j], ':(%d+)$'))
    end
    trim = #gone > 0
  end
  local allowed = cost == 0 or (cost <= cap and total + cost <= limit)
  local retry = -1
  local charged = allowed and charge and cost > 0
  -- The newest entry still in the log: its instant (nil for none) and cost.
  local newest, newest_cost = nil, 0
  if not charged and not allowed and cost <= cap then
    -- The entry whose leaving makes enough room (a denial has total > room); the
    -- last live entry is the newest.
    local room, left, at = limit - cost, total, t
    local live = redis.call('ZRANGEBYSCORE', keys[2], '(' .. num(edge), '+inf')
    for j = 1, #live do
      left = left - tonumber(string.match(live[j], ':(%d+)$'))
      if left <= room then
        at = tonumber(string.match(live[j], '^(%d+)')) + period
        break
      end
    end
    retry = math.max(at - now, 0)
    if v and #live > 0 then
      local a, c = string.match(live[#live], '^(%d+):(%d+)$')
      newest, newest_cost = tonumber(a), tonumber(c)
    end
  elseif v and (t == floor or not charged) then
    -- A charge at the latest instant seen may join the newest entry; a decision
    -- without a charge reports when the newest leaves.
    local last = redis.call('ZRANGE', keys[2], -1, -1)[1]
    if last then
      local a, c = string.match(last, '^(%d+):(%d+)$')
      if tonumber(a) > edge then
        newest, newest_cost = tonumber(a), tonumber(c)
      end
    end
  end
  if trim then
    redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', num(edge))
  end
  if charged then
    -- Charges at one instant share an entry, as in the Rust twin.
    if newest == t then
      redis.call('ZREM', keys[2], num(t) .. ':' .. num(newest_cost))
      newest_cost = newest_cost + cost
    else
      newest, newest_cost = t, cost
    end
    total = total + cost
    local ttl = ttl_ms(t + period, now)
    redis.call('ZADD', keys[2], num(t), num(t) .. ':' .. num(newest_cost))
    redis.call('SET', keys[1], string.format('%.0f %.0f', t, total), 'PX', ttl)
    redis.call('PEXPIRE', keys[2], ttl)
  elseif v and (t > floor or trim) then
    -- No charge, but a later instant or entries that left: record them (see the
    -- driver's `evaluate`).
    redis.call('SET', keys[1], string.format('%.0f %.0f', t, total), 'KEEPTTL')
  end
  local reset = 0
  if newest and newest + period > t then
    reset = newest + period - now
  end
  return verdict(allowed, math.min(math.max(limit - total, 0), cap), reset, retry, 0)
end

A.sliding_window_log = {
  nkeys = 2,
  load = function(keys)
    local v = redis.call('GET', keys[1])
    if not v then
      return nil
    end
    local at, total = string.match(v, '^(%S+) (%S+)$')
    local s = { keys = keys, t = tonumber(total), s = tonumber(at), del = {}, add = {},
      trim = nil, floor_at = -1 }
    local newest = redis.call('ZRANGE', keys[2], -1, -1)
    if #newest > 0 then
      s.newest = swl_parse(newest[1])
    end
    return s
  end,
  fresh = function(keys)
    return { keys = keys, t = 0, s = 0, del = {}, add = {}, trim = nil, floor_at = -1 }
  end,
  decide = swl_decide,
  -- The steps below serve refunds.
  normalize = function(p, s, now)
    -- A clock that went back stands still at the latest instant seen.
    now = math.max(now, s.s)
    -- An entry counts while now - t < P: those at or before now - P leave.
    local edge = now - p.period
    if s.newest then
      local gone = redis.call('ZRANGEBYSCORE', s.keys[2], '-inf', num(edge))
      for j = 1, #gone do
        s.t = s.t - swl_parse(gone[j]).cost
      end
      if #gone > 0 then
        s.trim = edge
      end
      if s.newest.at <= edge then
        s.newest = nil
      end
    end
    s.floor_at = edge
    return now
  end,
  refund = function(_, s, _, amount)
    -- Newest entries first; the first one left untouched (or reduced) is the newest.
    local entries = swl_entries(s.keys, s)
    local newest = nil
    for j = #entries, 1, -1 do
      local entry = entries[j]
      if amount == 0 then
        newest = entry
        break
      end
      local taken = math.min(amount, entry.cost)
      s.t = s.t - taken
      amount = amount - taken
      if taken < entry.cost then
        newest = { at = entry.at, cost = entry.cost - taken }
        swl_change(s, entry, newest)
        break
      end
      swl_change(s, entry, nil)
    end
    s.newest = newest
  end,
  idle_at = function(p, s)
    if s.newest then
      return s.newest.at + p.period
    end
    return 0
  end,
  -- Applies the trim and the changed entries; the set is never rewritten whole.
  apply = function(keys, s)
    if s.trim then
      redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', num(s.trim))
    end
    if #s.del > 0 then
      redis.call('ZREM', keys[2], unpack(s.del))
    end
    if #s.add > 0 then
      local args = {}
      for j = 1, #s.add do
        args[#args + 1] = num(s.add[j].at)
        args[#args + 1] = swl_member(s.add[j])
      end
      redis.call('ZADD', keys[2], unpack(args))
    end
  end,
  touch = function(keys, _, s)
    A.sliding_window_log.apply(keys, s)
    redis.call('SET', keys[1], string.format('%.0f %.0f', s.s, s.t), 'KEEPTTL')
  end,
  save = function(keys, _, s, ttl)
    A.sliding_window_log.apply(keys, s)
    redis.call('SET', keys[1], string.format('%.0f %.0f', s.s, s.t), 'PX', ttl)
    if s.newest then
      redis.call('PEXPIRE', keys[2], ttl)
    end
  end,
}
