-- tollgate: helpers shared by every algorithm's `decide`. How the files join into the
-- script and the function library, and which Rust rule each one twins: README.md.
--
-- Lua numbers are doubles: every integer here stays below 2^53 (the store rejects
-- policies that could leave that range), and every division goes through `idiv`,
-- which is exact where `a / b` rounded to a double is not.

-- A state is one string of integers, "<s> <field> ...", with `s` (the latest
-- instant seen) first: one GET reads it and one `SET … PX` writes it with its TTL,
-- where a hash took HMGET, HSET and PEXPIRE. A decision that charges nothing but saw
-- a later instant rewrites only `s` and keeps the text after it (`KEEPTTL`).

-- Each algorithm's `decide(keys, now, args, i, charge)`, by name (see evalsha.lua).
local D = {}

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

-- A decision as the store reads it back: allowed (1 or 0), remaining, reset, retry,
-- delay.
local function verdict(allowed, remaining, reset, retry, delay)
  return { allowed and 1 or 0, remaining, reset, retry, delay }
end

-- Keys outlive the instant they become idle by this much, so that state still
-- protects a clock that stepped back a little (its `s`, the latest instant seen).
local SLACK_MS = 1000

-- How far the instant decided at is ahead of the server's own clock (when the driver
-- applies the client's floor). Redis expires keys on its own clock, so a key that must
-- live until `until_us` on the decision clock lives this much longer on the server's.
local ttl_lead = 0

-- Milliseconds a key must live: until `until_us` on the caller's clock (`now`).
local function ttl_ms(until_us, now)
  local left = until_us - now + ttl_lead
  if left < 0 then
    left = 0
  end
  return ceil_div(left, 1000) + SLACK_MS
end
