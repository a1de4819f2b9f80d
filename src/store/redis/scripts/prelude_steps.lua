-- tollgate: helpers for the algorithms' steps (the *_steps.lua files) and the general
-- driver (general.lua); the common case never reaches here (see prelude.lua).

-- Each algorithm's steps, by name: `nkeys`, `load`, `fresh`, `decide`, `normalize`,
-- `refund`, `idle_at`, `save`, `touch` (see general.lua).
local A = {}

-- Records a later instant in a state string (see prelude.lua) without rewriting the
-- other fields: `tail` is the text after `s`.
local function touch_string(keys, _, s)
  redis.call('SET', keys[1], num(s.s) .. s.tail, 'KEEPTTL')
end

-- Reads a two-field state "<s> <x> <y>" at `key`: the latest instant, the text after
-- it (for `touch_string`) and the two fields; nil for a key with no state.
local function load_two(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local s, tail, x, y = string.match(v, '^(%S+)( (%S+) (%S+))$')
  return tonumber(s), tail, tonumber(x), tonumber(y)
end
