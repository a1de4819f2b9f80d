-- tollgate: take one in-flight slot record of a key, if fewer than a bound are live.
--
-- KEYS[1]  the key's sorted set of slot records: member = record id, score = expiry (ms, the
--          server's clock)
-- ARGV[1]  the record id (unique to one request of one process)
-- ARGV[2]  the bound: at most this many live slot records
-- ARGV[3]  the slot record's time to live, ms
--
-- Returns 1 when the slot record was taken, 0 when the bound is reached. Slot records whose
-- holder stopped renewing them (a crashed process) are dropped here, once expired.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- The set lives as long as its latest slot record (slot records of other processes may have
-- other lifetimes): nothing is left behind once every holder is gone. Its TTL covers
-- every other slot record already, so it is raised only if shorter than this one's (PTTL
-- is several times cheaper for Redis than reading the latest score back).
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
