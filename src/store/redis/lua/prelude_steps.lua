-- tollgate: helpers for the algorithms' steps (the */steps.lua files) and the general
-- driver (evalsha_batch.lua); the common case never reaches here (see prelude.lua).

-- Each algorithm's steps, by name: `nkeys`, `load`, `fresh`, `decide`, `normalize`,
-- `refund`, `refund_charge`, `idle_at`, `save`, `touch` (see evalsha_batch.lua).
local A = {}

-- For algorithm::still_owed: how many µs of a charge's debt are still to run at `t`,
-- from its receipt `r` (`at`, the instant it was decided at; `till`, its reset
-- instant, the debt's end rounded up to the µs). Nil: owed in full (refunded at the
-- instant it was made). Each algorithm turns it into its units, exactly.
local function owed_for(r, t)
  if t <= r.at then
    return nil
  end
  return math.max(r.till - t, 0)
end

-- Records a later instant in a state string (see prelude.lua) without rewriting the
-- other fields: `tail` is the text after `s`. The steps do not read the block
-- record, so what they write is marked.
local function touch_string(keys, _, s)
  redis.call('SET', keys[1], MARKED .. num(s.s) .. s.tail, 'KEEPTTL')
end

-- Reads a two-field state "<s> <x> <y>" at `key`: the latest instant, the text after
-- it (for `touch_string`) and the two fields; nil for a key with no state.
local function load_two(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  local s, tail, x, y = string.match(v, '^.(%S+)( (%S+) (%S+))$')
  return tonumber(s), tail, tonumber(x), tonumber(y)
end
