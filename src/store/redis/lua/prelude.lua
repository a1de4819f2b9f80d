-- tollgate: what every script and the function library define first (README.md,
-- "Assembly"): the state's string and its mark (`read_state`), the table `D` of each
-- algorithm's `decide`, the verdict and its packed reply (the reply's layout is at the
-- top of evalsha.lua), exact integer division (`idiv`, `ceil_div`) and the TTL
-- helpers (`ttl_ms`, `ttl_kept`). Which Rust rule each Lua file twins: README.md.
--
-- Lua numbers are doubles: every integer here stays below 2^53 (the store rejects
-- limits that could leave that range), and every division goes through `idiv`,
-- which is exact where `a / b` rounded to a double is not.

-- A state is one string: a mark, then the state's numbers with `s` (the latest instant
-- seen) first; one GET reads it and one `SET … PX` writes it with its TTL, where a hash
-- took HMGET, HSET and PEXPIRE. A decision that charges nothing but saw a later
-- instant rewrites only `s` and keeps what follows it (`KEEPTTL`). GCRA's and the leaky
-- bucket's numbers are packed doubles (`struct.pack`: one C call each way, where
-- formatting and matching text cost a decision more than a microsecond); the other
-- algorithms' are decimal text, "<s> <field> ...".
--
-- The mark, the string's first byte, says whether the key's block record
-- (block.lua) may exist: '!' it may, '.' it did not when the state was written.
-- Every writer of a block record marks the state (`pb_write`), so a decision reads
-- the record only for a marked state or a key without state: most decisions make
-- one read. A writer that did not read the record writes '!'.
local MARKED, UNMARKED = '!', '.'
local MARK_BYTE, UNMARKED_BYTE = 33, 46 -- string.byte('!'), string.byte('.')

-- The state at `key` (false when there is none) and its mark's byte. A value that
-- does not start with a mark was not written by this tollgate (another program's value
-- under the prefix, a hand edit, an older format): the call fails rather than decide
-- on a misread state.
local function read_state(key)
  local v = redis.call('GET', key)
  if not v then
    return false, nil
  end
  local mark = string.byte(v, 1)
  if mark ~= UNMARKED_BYTE and mark ~= MARK_BYTE then
    error('tollgate: ' .. key .. ' holds a value tollgate did not write')
  end
  return v, mark
end

-- Each algorithm's `decide(keys, now, args, i, charge, force, v, mark)`, by name
-- (`Algorithm::name`): one whole decision of the charge whose arguments start at
-- args[i] (evalsha.lua's layout); `force` charges even what does not fit (an
-- operator's penalty); `v` the state string as the caller read it (false: no state), `mark`
-- the mark to write (block.lua's `guarded` reads the state once for both the block
-- check and the decision; `decide_fresh` reads it for the other callers).
local D = {}

-- The reply of a call of one charge decided: its verdict's eight integers and the
-- instant decided at (`v[9]`), packed as little-endian 64-bit integers in one string,
-- which Redis sends as it is (an array of integers costs it a conversion each, and
-- the client a parse each).
local function packed_reply(v)
  return struct.pack('<i8i8i8i8i8i8i8i8i8', v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8],
    v[9])
end

-- Arguments arrive as strings: `args[j] + 0` converts one (Lua's own coercion) at half
-- the cost of `tonumber(args[j])`, a function call.

-- Integers travel to Redis as decimal text: Lua's own conversion would print
-- 1.69992e+15.
local function num(x)
  return string.format('%.0f', x)
end

-- floor(a / b) for 0 <= a, 0 < b: fmod is exact in IEEE arithmetic, so a - fmod(a, b)
-- is an exact multiple of b and the division is exact too.
local function idiv(a, b)
  return (a - math.fmod(a, b)) / b
end

local function ceil_div(a, b)
  local q = idiv(a, b)
  if math.fmod(a, b) > 0 then
    q = q + 1
  end
  return q
end

-- A decision as the store reads it back (evalsha.lua's `v[1]` to `v[8]`): allowed (1
-- or 0), remaining, reset, retry, delay, blocked_for (-1: not blocked), tripped (0),
-- trips (0; block.lua's `guarded` sets them), and a slot for the instant decided at,
-- so that the reply's table is sized once.
local function verdict(allowed, remaining, reset, retry, delay)
  return { allowed and 1 or 0, remaining, reset, retry, delay, -1, 0, 0, 0 }
end

-- Keys outlive the instant they become idle by this much, so that state still
-- protects a clock that stepped back a little (its `s`, the latest instant seen).
local SLACK_MS = 1000

-- How far the instant decided at is ahead of the server's own clock (when the driver
-- applies the client's floor). Redis expires keys on its own clock, so a key that must
-- live until `until_us` on the decision clock lives this much longer on the server's.
local ttl_lead = 0

-- Keys expire at the end of a whole second: a key lives up to a second longer than it
-- must, and most writes at a busy key find its expiry already where it must be and
-- keep it (`SET … KEEPTTL`, cheaper for Redis than `PX`; see `ttl_kept`).
local GRAIN_US = 1000000

-- `math.ceil(a / b)` is `ceil_div(a, b)` for b = GRAIN_US or 1000 and a whole a with
-- 0 <= a < CEIL_EXACT_BELOW (2^34 × 10^6 µs, in the year 2514; instants stop at 10^16,
-- src/clock.rs `MAX_NOW_MICROS`), at a fifth of its cost: a and b are doubles exactly,
-- and the quotient a / b, rounded once to the nearest double, moves by at most half
-- its ulp, 2^-20 below 2^34 (2^-10 below 2^44 for b = 1000), less than the 1 / b that
-- separates a quotient that is not whole from the nearest whole number; so the
-- rounding never reaches or crosses a whole number, and `math.ceil` lands where the
-- exact quotient's ceiling is. Larger values keep `ceil_div`.
local CEIL_EXACT_BELOW = 17179869184000000

-- Milliseconds a key must live: until the end of the second holding `until_us` on the
-- caller's clock (`now`). On the server's clock that is the same instant: `now` is
-- ahead of it by `ttl_lead`.
local function ttl_ms(until_us, now)
  local left
  if until_us < CEIL_EXACT_BELOW then
    left = math.ceil(until_us / GRAIN_US) * GRAIN_US - now + ttl_lead
  else
    left = ceil_div(until_us, GRAIN_US) * GRAIN_US - now + ttl_lead
  end
  if left < 0 then
    left = 0
  end
  if left < CEIL_EXACT_BELOW then
    return math.ceil(left / 1000) + SLACK_MS
  end
  return ceil_div(left, 1000) + SLACK_MS
end

-- Whether a key whose last `PX` was for `before_us` (or later) already lives long
-- enough for `until_us`: the same second or an earlier one. Every `PX` goes through
-- `ttl_ms`, and a write that keeps the TTL never moves what it was set for later.
local function ttl_kept(before_us, until_us)
  if until_us < CEIL_EXACT_BELOW and before_us < CEIL_EXACT_BELOW then
    return math.ceil(until_us / GRAIN_US) <= math.ceil(before_us / GRAIN_US)
  end
  return ceil_div(until_us, GRAIN_US) <= ceil_div(before_us, GRAIN_US)
end
