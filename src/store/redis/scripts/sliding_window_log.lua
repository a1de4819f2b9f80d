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

-- One whole decision (general.lua's `evaluate`, specialised, as gcra.lua's): the
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
    -- No charge, but a later instant or entries that left: record them (see
    -- general.lua's `evaluate`).
    redis.call('SET', keys[1], string.format('%.0f %.0f', t, total), 'KEEPTTL')
  end
  local reset = 0
  if newest and newest + period > t then
    reset = newest + period - now
  end
  return verdict(allowed, math.min(math.max(limit - total, 0), cap), reset, retry, 0)
end

D.sliding_window_log = swl_decide
