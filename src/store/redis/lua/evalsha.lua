-- tollgate: the entry point of the script EVALSHA runs (README.md, "Assembly"), and
-- the wire contract of every call, written once here and once in Rust
-- (src/store/redis/script/wire.rs: `arg`, `reply`; a unit test there compares the
-- two). This file reads the clock and the mode, and answers the common cases: one charge
-- decided ('a', 'd'), packed in one argument (lean.lua) or as text, and a
-- reservation ('w'), each by its algorithm's `decide` through block.lua; refunds,
-- batches and operators' calls fall through to evalsha_batch.lua, which reads every
-- charge's arguments into a table of its own.
--
-- ARGV[1]  now in µs since the epoch; or '' for the server's TIME; or 'f<µs>' for the
--          server's TIME but never earlier than <µs> (clock.lua)
-- ARGV[2]  the mode: 'a' acquire (all-or-nothing), 'd' dry run (decide, charge
--          nothing), 'w' reserve one charge's place (Limiter::reserve; its longest
--          wait, µs, is the last argument), 'r' refund each charge's cost of its key's
--          newest charges, 'c' refund each charge's cost of the one charge its receipt
--          names, 'x' reset (the key is idle: state, block and penalty count
--          deleted), 'k' block the key for `cost` µs (0: lift the block),
--          'p' penalize: charge `cost` whether or not it fits, 's' settle one charge
--          by its receipt: give back `give_back` of it, then charge `cost` (the
--          extra) whether or not it fits
-- ARGV[3..] the charges, 15 arguments each (17 with 'c', 18 with 's'). For a charge whose first
-- argument is ARGV[i] (every `decide` reads its charge as `args[i + <offset>]`):
--   i+0   algorithm        its name (`D` and `A` are indexed by it)
--   i+1   cost
--   i+2   limit
--   i+3   period           µs
--   i+4   capacity
--   i+5   params           five: the algorithm's own (wire.rs `ChargeArgs`)
--   i+10  penalty_after    rejections that trip the penalty box (0: no box)
--   i+11  penalty_within   its window, µs
--   i+12  penalty_block    its block, µs
--   i+13  reads            when the decision reads the caller's record (0: by its
--                          state's mark; 1: always; 2: always, and the base state's
--                          key is passed)
--   i+14  escalation       text: "<remember> <factor> <cap> <step>...", µs, how the
--                          penalty's block grows with the trips it remembers; ''
--                          when it remembers none (block.lua's `pb_escalation`)
--   i+15  receipt_at       'c' and 's' only: the instant the charge was decided at, µs
--   i+16  receipt_until    'c' and 's' only: its reset instant, µs
--   i+17  give_back        's' only: how much of the charge to give back by its receipt
--
-- KEYS: each charge's keys in order: its state, the log's sorted set for
-- sliding_window_log, the base state (with reads 2), then the caller's record
-- (block.lua), then, for 'c' and 's', the receipt's given-back record (it exists once
-- the receipt gave back: a receipt gives back once). The operators' calls ('x', 'k', 'p') name one key's states under every
-- (algorithm, period) the store knows for the limit, its own first, all with the one
-- record.
--
-- Returns 8 integers per charge ('r', 'c' and 'x': none; 'k' and 'p': one per state,
-- the first the limit's own; 's': its state's own verdict, as a peek reads it, with
-- the key's block in v[6] only, and in v[1] whether the receipt moved anything: 0
-- when it had given back before), durations, never timestamps (prelude.lua's
-- `verdict` builds them):
--   v[1]  allowed          1 or 0
--   v[2]  remaining
--   v[3]  reset_after      µs
--   v[4]  retry_after      µs, -1 for none
--   v[5]  delay            µs
--   v[6]  blocked_for      µs, -1 when not blocked
--   v[7]  tripped          1 when this call tripped the penalty box
--   v[8]  trips            the penalty's trips the key's record remembers
-- then the instant the script decided at (µs), from which the client carries its
-- floor and a charge's receipt its instants. A call of one charge decided gets the
-- same nine packed in one string, little-endian 64-bit integers (prelude.lua's
-- `packed_reply`).

-- The common call, one charge decided, packed in one argument (lean.lua; a second is
-- the escalation): decided before anything else is read.
if #ARGV == 1 or #ARGV == 2 then
  local reply = lean_call(KEYS, ARGV[1], ARGV[2])
  if reply then
    return reply
  end
  return redis.error_reply('tollgate: one argument must be a packed call')
end

-- The layout above, for the drivers (this file and evalsha_batch.lua): the arguments
-- before the first charge, and each charge's count (a refund of charges: with its
-- receipt; a settle: with its receipt and give-back): wire.rs
-- `arg::{PER_CHARGE, PER_REFUND, PER_SETTLE}`, tested against this line.
local BEFORE_CHARGES, PER_CHARGE, PER_REFUND, PER_SETTLE = 2, 15, 17, 18

local now = decision_clock(ARGV[1])
local mode = ARGV[2]
local first_arg = BEFORE_CHARGES + 1

-- The common case, one charge decided (not refunded): straight to the algorithm's
-- `decide`, without defining the steps or building evalsha_batch.lua's tables.
if #ARGV == first_arg + PER_CHARGE and mode == 'w' and D[ARGV[first_arg]] then
  -- A reservation (Limiter::reserve): one charge, its max wait (µs) last.
  local v = reserve(KEYS, now, ARGV, first_arg, tonumber(ARGV[#ARGV]))
  v[9] = now
  return v
end

if #ARGV == BEFORE_CHARGES + PER_CHARGE and (mode == 'a' or mode == 'd')
  and D[ARGV[first_arg]] then
  local v = guarded(KEYS, now, ARGV, first_arg, mode == 'a', mode == 'a')
  v[9] = now
  return v
end
