-- tollgate: the instant a call decides at, from ARGV[1] (see evalsha.lua), shared by
-- the scripts' driver and the function library's entry point (fcall.lua).

-- A server clock behind the client's floor by more than this was corrected on
-- purpose (or came back from a glitch far ahead): follow the server, not the floor.
local MAX_LEAD_US = 3600000000

-- The instant to decide at from a clock of `kind` 0 (`value` is the caller's instant,
-- µs), 1 (the server's TIME) or 2 (the server's TIME, but never earlier than the floor
-- `value`), given the server's TIME `time` in µs (nil for kind 0): a batch reads it
-- once for all its decisions, which run in one call, at one instant (fcall_batch.lua).
-- Also sets `ttl_lead` for this decision. A function library keeps its upvalues from
-- one call to the next, so the lead is reset here rather than trusted to start at 0.
local function clock_at(kind, value, time)
  ttl_lead = 0
  if kind == 0 then
    return value
  end
  local now = time
  -- A clock stepped back is read as the floor: keys idle through the step gain
  -- nothing from it, as keys with state gain nothing through their latest instant.
  if kind == 2 and value > now and value - now <= MAX_LEAD_US then
    ttl_lead = value - now
    now = value
  end
  return now
end

-- The server's TIME, µs.
local function server_time()
  local time = redis.call('TIME')
  return time[1] * 1000000 + time[2]
end

-- The same, reading TIME when the clock needs it.
local function clock_from(kind, value)
  if kind == 0 then
    ttl_lead = 0
    return value
  end
  return clock_at(kind, value, server_time())
end

-- The same from ARGV[1] as text: '<µs>', '' or 'f<µs>' (evalsha.lua).
local function decision_clock(arg)
  local now = tonumber(arg)
  if now then
    return clock_from(0, now)
  end
  local floor = tonumber(string.sub(arg, 2))
  if floor then
    return clock_from(2, floor)
  end
  return clock_from(1, 0)
end
