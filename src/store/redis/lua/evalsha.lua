-- tollgate: the entry point of the script EVALSHA runs (README.md): the wire contract
-- of every call, and the common case, one charge decided by its algorithm's `decide`,
-- which returns here; refunds, batches and operators' calls fall through to
-- evalsha_batch.lua.
--
-- ARGV[1]  now in µs since the epoch; or '' for the server's TIME; or 'f<µs>' for the
--          server's TIME but never earlier than <µs>, the latest server time this
--          client has seen carried forward (src/store/redis/server_time.rs), unless
--          the server is behind it by more than MAX_LEAD_US
-- ARGV[2]  'a' acquire (all-or-nothing), 'd' dry run (decide, charge nothing),
--          'r' refund each charge's cost of its key's newest charges,
--          'c' refund each charge's cost of the one charge its receipt names,
--          'x' reset (the key is idle: state, block and penalty count deleted),
--          'k' block the key for `cost` µs (0: lift the block),
--          'p' penalize: charge `cost` whether or not it fits
-- then 14 per charge: algorithm, cost, limit, period (µs), capacity, five algorithm
-- parameters (see src/store/redis/script.rs), the penalty box: rejections (0:
-- none), window (µs), block (µs), and when the decision reads the caller's record
-- (0: by its state's mark; 1: always; 2: always, and the base state's key is passed);
-- with 'c', 16: those and the receipt, the instant the charge was decided at and its
-- reset instant (µs). KEYS: each charge's keys in order: its state, the log's sorted
-- set for sliding_window_log, the base state (with 2), then the caller's record
-- (block.lua). The operators' calls ('x', 'k', 'p') name one key's states under
-- every (algorithm, period) the store knows for the limit, its own first, all with
-- the one record.
--
-- A call of one charge decided ('a', 'd': the common case) is sent as one argument
-- instead, every number of the call packed (lean.lua).
--
-- Returns 7 integers per charge ('r', 'c' and 'x': none; 'k' and 'p': each state's,
-- the first the limit's own): allowed (1/0), remaining,
-- reset_after (µs), retry_after (µs, -1 for none), delay (µs), blocked_for (µs, -1
-- when not blocked), tripped (1 when this call tripped the penalty box); durations,
-- never timestamps; then the instant the script decided at (µs), from which the
-- client carries its floor and a charge's receipt its instants. A call of one charge
-- decided gets the same eight packed in one string, little-endian 64-bit integers
-- (prelude.lua's `packed_reply`).
--
-- Every algorithm has a `decide(keys, now, ARGV, i, charge, force, v, mark)` that makes one
-- whole decision from its arguments at ARGV[i..] (a flat function over locals is
-- several times cheaper in Lua than the steps; `force` charges even what does not
-- fit, for 'p'), and steps (load, normalize, refund, save, ...) that evalsha_batch.lua
-- combines for refunds and batches. block.lua puts the block before each decision.

-- The common call, one charge decided, packed in one argument (lean.lua): decided
-- before anything else is read.
if #ARGV == 1 then
  local reply = lean_call(KEYS, ARGV[1])
  if reply then
    return reply
  end
  return redis.error_reply('tollgate: one argument must be a packed call')
end

local now = decision_clock(ARGV[1])
local mode = ARGV[2]

-- The common case, one charge decided (not refunded): straight to the algorithm's
-- `decide`, without defining the steps or building evalsha_batch.lua's tables.
if #ARGV == 17 and mode == 'w' and D[ARGV[3]] then
  -- A reservation (Limiter::reserve): one charge, its max wait (µs) last.
  local v = reserve(KEYS, now, ARGV, 3, tonumber(ARGV[17]))
  v[8] = now
  return v
end

if #ARGV == 16 and (mode == 'a' or mode == 'd') and D[ARGV[3]] then
  local v = guarded(KEYS, now, ARGV, 3, mode == 'a', mode == 'a')
  v[8] = now
  return v
end
