-- tollgate: helpers shared by every algorithm's `decide`. Each script the store sends
-- is, in this order: this prelude, the algorithm files it needs (the Lua twins of
-- src/algorithm/*.rs, each a `decide` and the helpers it calls), clock.lua,
-- driver.lua (the common case, which returns), then prelude_steps.lua, each
-- algorithm's *_steps.lua and general.lua (see src/store/redis/script.rs). Lua runs a
-- script's body on every call, creating a closure for each `local function` it
-- reaches: the common case returns before the definitions that only the general
-- path uses. The function library (src/store/redis/function.rs) is this prelude,
-- every algorithm file, clock.lua and function.lua, loaded once per server.
--
-- Lua numbers are doubles: every integer here stays below 2^53 (the store rejects
-- policies that could leave that range), and every division goes through `idiv`,
-- which is exact where `a / b` rounded to a double is not.

-- A state is one string of integers, "<s> <field> ...", with `s` (the latest
-- instant seen) first: one GET reads it and one `SET … PX` writes it with its TTL,
-- where a hash took HMGET, HSET and PEXPIRE. A decision that charges nothing but saw
-- a later instant rewrites only `s` and keeps the text after it (`KEEPTTL`).

-- Each algorithm's `decide(keys, now, args, i, charge)`, by name (see driver.lua).
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
