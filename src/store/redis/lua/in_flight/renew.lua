-- tollgate: renew this process's live leases of one key.
--
-- KEYS[1]  the key's sorted set of leases (see acquire.lua)
-- ARGV[1]  the leases' new time to live, ms
-- ARGV[2…] the lease ids
--
-- Returns how many leases were renewed. A lease that already expired and was
-- dropped is not brought back (XX): its request runs on uncounted, as if the store
-- had failed open.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
local scored = {}
for i = 2, #ARGV do
  scored[#scored + 1] = expiry
  scored[#scored + 1] = ARGV[i]
end
local renewed = redis.call('ZADD', KEYS[1], 'XX', 'CH', unpack(scored))
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then
  redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(last[2]) - now))
end
return renewed
