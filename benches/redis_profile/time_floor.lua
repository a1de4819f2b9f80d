-- (c) TIME and the client's floor ('f<µs>' in ARGV[1]), as tollgate's clock applies it.
-- call:
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local floor = tonumber(string.sub(ARGV[1], 2))
if floor and floor > now and floor - now <= 3600000000 then
  now = floor
end
return now > 0 and 1 or 0
