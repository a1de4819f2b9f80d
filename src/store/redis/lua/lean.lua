-- tollgate: the common call, one charge decided ('a' or 'd'), as both entry points
-- (evalsha.lua, fcall.lua) take it: one argument, every number of the call packed as
-- little-endian doubles, where Redis would parse, copy and hand Lua each argument on
-- its own (README.md, "The lean common call"). Written by script.rs `Call::packed`.
-- The numbers, in order:
--   1  the clock's kind: 0 the caller's instant; 1 the server's TIME; 2 TIME, never
--      earlier than a floor (clock.lua)
--   2  the clock's value, µs
--   3  the mode: 0 acquire, 1 dry run, plus twice when it reads the record (evalsha.lua's
--      i+13)
--   4  the algorithm: its place in `LEAN_ALGORITHMS` (`Algorithm::code` + 1)
--   5.. the charge's numbers as evalsha.lua lists them from i+1: cost, limit, period,
--      capacity, five parameters, and the penalty box's three when it has one.
-- A penalty that escalates sends its escalation (evalsha.lua's i+14, text) as a second
-- argument.

-- `Algorithm::ALL`'s names in its order (a unit test in script/wire.rs compares them).
local LEAN_ALGORITHMS = { 'fixed_window', 'sliding_window', 'sliding_window_counters',
  'sliding_window_log', 'token_bucket', 'gcra', 'leaky_bucket' }

-- By how many numbers the call packs: without a penalty box and with one. (Literal:
-- a function library's load runs without the string library.)
local LEAN_FORMATS = { [13] = '<ddddddddddddd', [16] = '<dddddddddddddddd' }

-- Unpacks into `t` the call of `n` numbers (13 or 16, `LEAN_FORMATS`) packed in `packed`
-- from its byte `pos`, and returns the position after them. `t` is a table of 18 slots
-- (`lean_args`): `lean_decide` writes the charge's reads and escalation at 17 and 18,
-- which a table built from the unpacked values (`{ struct.unpack(...) }`, sized to
-- them) would grow twice to hold, the longest part of the decision's table work. A
-- call without a penalty box leaves its three numbers (14 to 16) nil, as before.
local function lean_unpack(t, n, packed, pos)
  if n == 16 then
    t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], t[14],
      t[15], t[16], pos = struct.unpack(LEAN_FORMATS[16], packed, pos)
  else
    t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10], t[11], t[12], t[13], pos =
      struct.unpack(LEAN_FORMATS[13], packed, pos)
    t[14], t[15], t[16] = nil, nil, nil
  end
  return pos
end

-- A table for `lean_unpack`, its 18 slots allocated at once.
local function lean_args()
  return { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
end

-- The verdict (with the instant decided at in `v[9]`) of the packed call unpacked in
-- `args` (lean.lua's numbers, in order), with `escalation` (or nil), on `keys`; `time`
-- the server's TIME if the caller read it (a batch: fcall_batch.lua), else nil. Nil
-- when `args` names no algorithm here.
local function lean_decide(keys, args, escalation, time)
  local name = LEAN_ALGORITHMS[args[4]]
  if not name or not D[name] then
    return nil
  end
  local now
  if time then
    now = clock_at(args[1], args[2], time)
  else
    now = clock_from(args[1], args[2])
  end
  local mode = args[3]
  local dry = math.fmod(mode, 2)
  local acquire = dry == 0
  -- The charge at index 4, laid out as the other calls lay theirs out: its
  -- algorithm's name, then its numbers, when it reads the record at 4 + 13 and its
  -- escalation at 4 + 14.
  args[4] = name
  args[17] = (mode - dry) / 2
  args[18] = escalation
  local v = guarded(keys, now, args, 4, acquire, acquire)
  v[9] = now
  return v
end

-- The reply of the call `packed` (with `escalation`, or nil) on `keys`
-- (`packed_reply`), or nil when `packed` is not such a call.
local function lean_call(keys, packed, escalation)
  local n = #packed / 8
  if not LEAN_FORMATS[n] then
    return nil
  end
  local args = lean_args()
  lean_unpack(args, n, packed, 1)
  local v = lean_decide(keys, args, escalation, nil)
  if v then
    return packed_reply(v)
  end
  return nil
end
