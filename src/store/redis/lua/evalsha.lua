-- tollgate: the entry point of the script EVALSHA runs (README.md): the wire contract
-- of every call, and the common case, one charge decided by its algorithm's `decide`,
-- which returns here; refunds and batches fall through to evalsha_batch.lua.
--
-- ARGV[1]  now in µs since the epoch; or '' for the server's TIME; or 'f<µs>' for the
--          server's TIME but never earlier than <µs>, the latest server time this
--          client has seen carried forward (src/store/redis/server_time.rs), unless
--          the server is behind it by more than MAX_LEAD_US
-- ARGV[2]  'a' acquire (all-or-nothing), 'd' dry run (decide, charge nothing),
--          'r' refund each charge's cost of its key's newest charges,
--          'c' refund each charge's cost of the one charge its receipt names
-- then 10 per charge: algorithm, cost, limit, period (µs), capacity, and five
-- algorithm parameters (see src/store/redis/script.rs); with 'c', 12: those and the
-- receipt, the instant the charge was decided at and its reset instant (µs). KEYS:
-- each charge's keys in order (two for sliding_window_log, one otherwise).
--
-- Returns 5 integers per charge ('r' and 'c': none): allowed (1/0), remaining,
-- reset_after (µs), retry_after (µs, -1 for none), delay (µs), durations, never
-- timestamps; then the instant the script decided at (µs), from which the client
-- carries its floor and a charge's receipt its instants.
--
-- Every algorithm has a `decide(keys, now, ARGV, i, charge)` that makes one whole
-- decision from its arguments at ARGV[i..] (a flat function over locals is several
-- times cheaper in Lua than the steps), and steps (load, normalize, refund, save, ...)
-- that evalsha_batch.lua combines for refunds and batches.

local now = decision_clock(ARGV[1])
local mode = ARGV[2]

-- The common case, one charge decided (not refunded): straight to the algorithm's
-- `decide`, without defining the steps or building evalsha_batch.lua's tables.
if #ARGV == 12 and (mode == 'a' or mode == 'd') then
  local decide = D[ARGV[3]]
  if decide then
    local v = decide(KEYS, now, ARGV, 3, mode == 'a')
    v[#v + 1] = now
    return v
  end
end
