-- Sliding window log: the steps that evalsha_batch.lua combines for refunds; every
-- decision, batched or not, is `decide` (sliding_window_log/decide.lua).

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

A.sliding_window_log = {
  nkeys = 2,
  load = function(keys)
    local v = read_state(keys[1])
    if not v then
      return nil
    end
    -- The third field (the TTL's instant, decide.lua) is not kept: what the steps
    -- write makes the next charge set both TTLs again.
    local at, total = string.match(v, '^.(%S+) (%S+)')
    local s = { keys = keys, t = tonumber(total), s = tonumber(at), del = {}, add = {},
      trim = nil, floor_at = -1 }
    local newest = redis.call('ZRANGE', keys[2], -1, -1)
    if #newest > 0 then
      s.newest = swl_parse(newest[1])
    end
    return s
  end,
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
  -- The charge's entry leaves one period after its instant, its reset instant; only
  -- that entry gives back, while it is in the log.
  refund_charge = function(p, s, _, amount, r)
    local at = r.till - p.period
    if at <= s.floor_at then
      return
    end
    local found = redis.call('ZRANGEBYSCORE', s.keys[2], num(at), num(at))
    if #found == 0 then
      return
    end
    local entry = swl_parse(found[1])
    local taken = math.min(amount, entry.cost)
    local left = { at = entry.at, cost = entry.cost - taken }
    s.t = s.t - taken
    swl_change(s, entry, left)
    -- The newest entry sets the key's TTL: when it goes, the one before it is newest.
    if s.newest and s.newest.at == at then
      if left.cost > 0 then
        s.newest = left
      else
        local before = redis.call('ZREVRANGEBYSCORE', s.keys[2], '(' .. num(at),
          '(' .. num(s.floor_at), 'LIMIT', 0, 1)
        s.newest = nil
        if #before > 0 then
          s.newest = swl_parse(before[1])
        end
      end
    end
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
  save = function(keys, _, s, ttl)
    A.sliding_window_log.apply(keys, s)
    redis.call('SET', keys[1], MARKED .. string.format('%.0f %.0f', s.s, s.t), 'PX', ttl)
    if s.newest then
      redis.call('PEXPIRE', keys[2], ttl)
    end
  end,
}
