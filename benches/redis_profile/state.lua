-- (d) and (e): a GCRA-like read-modify-write of one key, at a fixed instant (no TIME),
-- with the state's format chosen by ARGV[2] and how its TTL is set by ARGV[3], so that
-- every variant is this same code and differs only where it is measured (a string
-- compare per choice costs nanoseconds against the microseconds measured).
--
-- ARGV[2]  'fmt3': tollgate's state, "<s> <a> <b>" as string.format('%.0f %.0f %.0f')
--                  read back with string.match and three tonumber;
--          'fmt1': one integer, string.format('%.0f'), read back with tonumber;
--          'num':  one integer passed to SET as a Lua number (Redis prints it as an
--                  exact decimal), read back with tonumber;
--          'struct3': the three as doubles, struct.pack('<ddd') and struct.unpack;
--          'fmt3get2': 'fmt3', and a GET of a second (missing) key first, as a block
--                  record read before the state;
--          'fmt3mget': 'fmt3', both keys read with one MGET.
-- ARGV[3]  'px': SET … PX <ms>; 'ex': SET … EX <s>; 'keepttl': SET … KEEPTTL;
--          'pexpire': SET, then PEXPIRE; 'none': SET without TTL.
-- call:
local now = 1732000000000000
local form, ttl = ARGV[2], ARGV[3]
local v
if form == 'fmt3get2' then
  redis.call('GET', KEYS[1] .. ':b')
  v = redis.call('GET', KEYS[1])
  form = 'fmt3'
elseif form == 'fmt3mget' then
  v = redis.call('MGET', KEYS[1], KEYS[1] .. ':b')[1]
  form = 'fmt3'
else
  v = redis.call('GET', KEYS[1])
end
local s, a, b = now, now, 0
if v then
  if form == 'struct3' then
    s, a, b = struct.unpack('<ddd', v)
  elseif form == 'fmt3' then
    local vs, _, va, vb = string.match(v, '^(%S+)( (%S+) (%S+))$')
    s, a, b = tonumber(vs), tonumber(va), tonumber(vb)
  else
    a = tonumber(v)
  end
end
a = math.max(a, now) + 1000
local value
if form == 'struct3' then
  value = struct.pack('<ddd', math.max(s, now), a, b)
elseif form == 'fmt3' then
  value = string.format('%.0f %.0f %.0f', math.max(s, now), a, b)
elseif form == 'fmt1' then
  value = string.format('%.0f', a)
else
  value = a
end
if ttl == 'px' then
  redis.call('SET', KEYS[1], value, 'PX', 1001000)
elseif ttl == 'ex' then
  redis.call('SET', KEYS[1], value, 'EX', 1001)
elseif ttl == 'keepttl' then
  redis.call('SET', KEYS[1], value, 'KEEPTTL')
elseif ttl == 'pexpire' then
  redis.call('SET', KEYS[1], value)
  redis.call('PEXPIRE', KEYS[1], 1001000)
else
  redis.call('SET', KEYS[1], value)
end
return 1
