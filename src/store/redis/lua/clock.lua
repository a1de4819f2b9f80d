-- tollgate: the instant a call decides at, from ARGV[1] (see evalsha.lua), shared by
-- the scripts' driver and the function library's entry point (fcall.lua).

-- A server clock behind the client's floor by more than this was corrected on
-- purpose (or came back from a glitch far ahead): follow the server, not the floor.
local MAX_LEAD_US = 3600000000

-- Also sets `ttl_lead` for this call. A function library keeps its upvalues from one
-- call to the next, so the lead is reset here rather than trusted to start at 0.
local function decision_clock(arg)
  ttl_lead = 0
  local now = tonumber(arg)
  if now then
    return now
  end
  local time = redis.call('TIME')
  now = time[1] * 1000000 + time[2]
  -- A clock stepped back is read as the floor: keys idle through the step gain
  -- nothing from it, as keys with state gain nothing through their latest instant.
  local floor = tonumber(string.sub(arg, 2))
  if floor and floor > now and floor - now <= MAX_LEAD_US then
    ttl_lead = floor - now
    now = floor
  end
  return now
end
