-- The classic GCRA script: the textbook algorithm as widely deployed Redis rate limiters
-- write it, the baseline benches/redis.rs and scripts/bench-redis-profile compare
-- tollgate's Gcra with. Written for this bench from the algorithm (not a product path,
-- not copied from any project): the theoretical arrival time (TAT) is a float of seconds
-- in a string, the clock is the server's TIME, and one GET and one SET ... EX per
-- admitted call are all the state it touches.
--
-- KEYS[1]  the key
-- ARGV     burst, rate (per period), period (s), cost
-- Returns  { allowed (1/0), remaining, retry_after (s, "-1" if allowed), reset_after (s) }
--
-- Redis 5 and later replicate a script's effects, not the script, so reading TIME before a
-- write needs no `redis.replicate_commands()`.
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1000000

local tat = tonumber(redis.call('GET', KEYS[1])) or now
tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
local remaining = math.floor(diff / emission_interval)

if remaining < 0 then
  return { 0, 0, tostring(-diff), tostring(tat - now) }
end

local reset_after = new_tat - now
-- A number argument reaches Redis as its shortest exact decimal (Redis 7 converts it).
redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(reset_after))
return { 1, remaining, '-1', tostring(reset_after) }
