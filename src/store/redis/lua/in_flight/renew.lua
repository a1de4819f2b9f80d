-- tollgate: renew a batch of this process's live slot records, over one or more keys.
--
-- KEYS[k]  the keys' sorted sets of slot records (see acquire.lua); on a cluster, all in
--          one hash slot
-- ARGV[1]  the slot records' new time to live, ms
-- then, for each key in order: its bound, the number n of its slot records named here, and
--          those n record ids
--
-- Returns one character per slot record, in order: '1' renewed; '2' added back (it had
-- expired and been dropped, its holder paused or cut off longer than the TTL, and the
-- key still had room); '0' lost (expired, dropped, and the key is full: its request
-- runs on uncounted). A slot record still in the set is renewed even past its expiry: every
-- acquire drops expired slot records first, so nobody took its place.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ttl = tonumber(ARGV[1])
local expiry = now + ttl
local out = {}
local a = 2
for k = 1, #KEYS do
  local set = KEYS[k]
  local bound = tonumber(ARGV[a])
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  local pruned = false
  for i = a, a + n - 1 do
    local id = ARGV[i]
    -- The usual case in one call: the slot record is there and its expiry moves (CH
    -- counts it); a slot record renewed within the millisecond it was set moves nowhere,
    -- and ZSCORE tells it from an absent one.
    if redis.call('ZADD', set, 'XX', 'CH', expiry, id) == 1
        or redis.call('ZSCORE', set, id) then
      out[#out + 1] = '1'
    else
      if not pruned then
        redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
        pruned = true
      end
      if redis.call('ZCARD', set) < bound then
        redis.call('ZADD', set, expiry, id)
        out[#out + 1] = '2'
      else
        out[#out + 1] = '0'
      end
    end
  end
  a = a + n
  -- The set lives as long as its latest slot record (see acquire.lua): its TTL covers
  -- every slot record already, so only a TTL shorter than these slot records' needs raising.
  -- (PTTL, not the latest score: reading a score back costs Redis several times
  -- more.)
  if redis.call('PTTL', set) < ttl then
    redis.call('PEXPIRE', set, ttl)
  end
end
return table.concat(out)
