-- tollgate: helpers shared by every algorithm. The store sends one script made of this
-- prelude, the seven algorithm files (the Lua twins of src/algorithm/*.rs) and
-- driver.lua, so a request that spans several algorithms is still one round trip.
--
-- Lua numbers are doubles: every integer here stays below 2^53 (the store rejects
-- policies that could leave that range), and every division goes through `idiv`,
-- which is exact where `a / b` rounded to a double is not.

local A = {}

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

-- HSET with every value written as an integer.
local function hset(key, ...)
  local args = { ... }
  for i = 2, #args, 2 do
    args[i] = num(args[i])
  end
  redis.call('HSET', key, unpack(args))
end

-- Keys outlive the instant they become idle by this much, so that state still
-- protects a clock that stepped back a little (its `s`, the latest instant seen).
local SLACK_MS = 1000

-- Milliseconds a key must live: until `until_us` on the caller's clock (`now`).
local function ttl_ms(until_us, now)
  local left = until_us - now
  if left < 0 then
    left = 0
  end
  return ceil_div(left, 1000) + SLACK_MS
end
