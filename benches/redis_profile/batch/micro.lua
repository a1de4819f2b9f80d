-- The Lua work of the store's batch path, piece by piece, with Redis's commands stubbed:
-- micro.py loads tollgate's library body and steps.lua behind a `redis` whose `call`
-- answers TIME with a constant, GET of a state with `stub_state` (false: a fresh key)
-- and of a record with false, and drops SET; then this file. `pb_micro` runs one piece
-- ARGV[2] times in a loop (ARGV[1] names it; ARGV[3] is a batch's packed argument, KEYS
-- its keys): micro.py takes Redis's CPU over the call, minus the empty loop's, per
-- iteration.
local function micro(keys, args)
  local op, count, packed = args[1], tonumber(args[2]), args[3]
  local f13 = LEAN_FORMATS[13]
  local own = { keys[1], keys[2] }
  local a = { struct.unpack(f13, packed, 2) }
  local v = verdict(true, 999999, 1000, -1, 0)
  local now = 1732000000001000
  local function f(k, x)
    return x
  end
  local batch = { packed }
  stub_state = false
  if string.sub(op, -9) == '_existing' then
    stub_state = '.' .. struct.pack('<dddd', now - 10000000, now - 10000000, 0, 1000000)
    op = string.sub(op, 1, -10)
  end
  if op == 'empty' then
    for _ = 1, count do
    end
  elseif op == 'unpack' then
    for _ = 1, count do
      local b = { struct.unpack(f13, packed, 2) }
      b[14] = nil
    end
  elseif op == 'unpack_grow' then
    -- lean_decide's writes into the unpacked table: the name at 4, the reads at 17 and
    -- the escalation at 18 (beyond its 13 slots: the table grows).
    for _ = 1, count do
      local b = { struct.unpack(f13, packed, 2) }
      b[14] = nil
      b[4] = 'gcra'
      b[17] = 0
      b[18] = nil
    end
  elseif op == 'unpack_locals' then
    -- lean_min's decision: six doubles into locals, no table.
    for _ = 1, count do
      local k, c, co, ca, tu, bu, nx = struct.unpack('<dddddd', packed, 2)
    end
  elseif op == 'own' then
    for _ = 1, count do
      local k = { keys[1], keys[2] }
    end
  elseif op == 'call' then
    for _ = 1, count do
      f(own, a)
    end
  elseif op == 'pcall' then
    for _ = 1, count do
      pcall(f, own, a)
    end
  elseif op == 'verdict' then
    for _ = 1, count do
      verdict(true, 999999, 1000, -1, 0)
    end
  elseif op == 'packed_reply' then
    for _ = 1, count do
      packed_reply(v)
    end
  elseif op == 'packed_reply_d' then
    -- The same nine numbers as doubles: struct packs a double with one copy, an i8
    -- byte by byte.
    for _ = 1, count do
      struct.pack('<ddddddddd', v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9])
    end
  elseif op == 'packed_reply_5d' then
    -- lean_min's reply: five doubles.
    for _ = 1, count do
      struct.pack('<ddddd', v[1], v[2], v[3], v[4], v[9])
    end
  elseif op == 'ttl_ceil' then
    -- ttl_ms's TTL with math.ceil on the quotients instead of idiv's fmod (exact while
    -- the instant / 10⁶ keeps its rounding error under 10⁻⁶: instants below 2^52 µs).
    for _ = 1, count do
      local left = math.ceil((now + 1000) / 1000000) * 1000000 - now
      local _ = math.ceil(left / 1000) + 1000
    end
  elseif op == 'gcra_pack' then
    for _ = 1, count do
      gcra_pack(UNMARKED, now, now + 1000, 0, 1000000)
    end
  elseif op == 'ttl_ms' then
    for _ = 1, count do
      ttl_ms(now + 1000, now)
    end
  elseif op == 'stub_call' then
    for _ = 1, count do
      redis.call('GET', keys[1])
    end
  elseif op == 'store_batch' then
    for _ = 1, count do
      call_batch(keys, batch)
    end
  elseif op == 'inline_batch' then
    local g = STUBBED.pb_g
    for _ = 1, count do
      g(keys, batch)
    end
  elseif op == 'loop_batch' then
    local g = STUBBED.pb_a
    for _ = 1, count do
      g(keys, batch)
    end
  else
    return redis.error_reply('no such piece: ' .. op)
  end
  return 1
end
redis.register_function('pb_micro', micro)
