-- Sliding window log: the Lua twin of src/algorithm/sliding_window_log.rs.
-- State: keys[1] (string, see prelude.lua) "<s> <t> <u>", s = latest instant seen (the
-- log's `last`), t = total cost, u = the instant both keys' TTL was last set for
-- (`ttl_kept`; absent when the writer did not say);
-- keys[2] (sorted set) one member per admission instant, "<instant>:<cost>", scored
-- by the instant. One member per instant keeps members unique: a charge at the
-- instant of the newest entry joins it, as in the Rust twin.
--
-- A call reads only what it needs: the entries that just left (the total is kept in
-- keys[1]), unless it charges at a later instant the newest entry, and for a denial
-- the few entries its retry time needs (see `swl_retry_at`). Only a refund reads the
-- whole log, so a decision costs about the same however long the log is.

-- Member "<instant>:<cost>" as two numbers.
local function swl_split(member)
  local a, c = string.match(member, '^(%d+):(%d+)$')
  return tonumber(a), tonumber(c)
end

-- When the entry whose leaving makes enough room leaves (the twin of the Rust
-- `earliest_within`), for a denial: the live entries (after `edge`) sum to `total`,
-- which is more than `room`. Every entry costs at least 1, so walking from the
-- oldest, the entry sought is among the first `total - room`; walking from the
-- newest (it is the first whose cost no longer fits in `room` with the newer ones'),
-- among the first `room + 1`. Reads only the shorter of the two: a denial at cost 1
-- of a full log reads one entry, as does one at cost L, never the whole log.
local function swl_retry_at(log, edge, total, room, period, t)
  local excess = total - room
  if excess <= room + 1 then
    local oldest = redis.call('ZRANGEBYSCORE', log, '(' .. num(edge), '+inf', 'LIMIT', 0,
      num(excess))
    local left = total
    for j = 1, #oldest do
      local at, cost = swl_split(oldest[j])
      left = left - cost
      if left <= room then
        return at + period
      end
    end
  else
    local newest = redis.call('ZREVRANGEBYSCORE', log, '+inf', '(' .. num(edge), 'LIMIT', 0,
      num(room + 1))
    local kept = 0
    for j = 1, #newest do
      local at, cost = swl_split(newest[j])
      kept = kept + cost
      if kept > room then
        return at + period
      end
    end
  end
  return t
end

-- One whole decision (algorithm::evaluate, specialised, as gcra/decide.lua's): the
-- total and instants stay in locals, and the call reads only what its answer needs.
-- The newest entry is never after the latest instant seen (`floor`), so a charge at a
-- later instant starts an entry of its own without reading the newest; a decision
-- that charges nothing reads it for the reset. `t` is the instant decided at, also
-- the latest instant seen.
local function swl_decide(keys, now, args, i, charge, force, v, mark)
  local cost, limit = args[i + 1] + 0, args[i + 2] + 0
  local period, cap = args[i + 3] + 0, args[i + 4] + 0
  local total, floor, kept_for = 0, 0, nil
  if v then
    local s, st, su = string.match(v, '^.(%S+) (%S+) ?(%S*)$')
    total, floor, kept_for = tonumber(st), tonumber(s), tonumber(su)
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
  local allowed = force or cost == 0 or (cost <= cap and total + cost <= limit)
  local retry = -1
  local charged = allowed and charge and cost > 0
  if not allowed and cost <= cap then
    retry = math.max(swl_retry_at(keys[2], edge, total, limit - cost, period, t) - now, 0)
  end
  -- The newest entry still in the log: its instant (nil for none) and cost.
  local newest, newest_cost = nil, 0
  if v and (t == floor or not charged) then
    -- A charge at the latest instant seen may join the newest entry; a decision
    -- without a charge reports when the newest leaves.
    local last = redis.call('ZRANGE', keys[2], -1, -1)[1]
    if last then
      local a, c = swl_split(last)
      if a > edge then
        newest, newest_cost = a, c
      end
    end
  end
  if trim then
    redis.call('ZREMRANGEBYSCORE', keys[2], '-inf', num(edge))
  end
  if charged then
    -- The sorted set keeps its TTL only while it holds entries: a charge into an
    -- empty log (Redis deleted the set) sets both TTLs again, as does one that
    -- replaces the only entry.
    local keep = kept_for and total > 0 and ttl_kept(kept_for, t + period)
    -- Charges at one instant share an entry, as in the Rust twin.
    if newest == t then
      redis.call('ZREM', keys[2], num(t) .. ':' .. num(newest_cost))
      keep = keep and total > newest_cost
      newest_cost = newest_cost + cost
    else
      newest, newest_cost = t, cost
    end
    total = total + cost
    redis.call('ZADD', keys[2], num(t), num(t) .. ':' .. num(newest_cost))
    if keep then
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f', t, total, kept_for),
        'KEEPTTL')
    else
      local ttl = ttl_ms(t + period, now)
      redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f', t, total, t + period),
        'PX', ttl)
      redis.call('PEXPIRE', keys[2], ttl)
    end
  elseif v and (t > floor or trim) then
    -- No charge, but a later instant or entries that left: record them (the instant
    -- so that a clock stepping back later stands still here, as in memory).
    redis.call('SET', keys[1], mark .. string.format('%.0f %.0f %.0f', t, total, kept_for or 0),
      'KEEPTTL')
  end
  local reset = 0
  if newest and newest + period > t then
    reset = newest + period - now
  end
  return verdict(allowed, math.min(math.max(limit - total, 0), cap), reset, retry, 0)
end

D.sliding_window_log = swl_decide
