-- (c) The server's clock: TIME, and µs since the epoch from its two strings.
-- call:
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
return now > 0 and 1 or 0
