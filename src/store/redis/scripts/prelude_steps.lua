-- tollgate: helpers for the algorithms' steps (the *_steps.lua files) and the general
-- driver (general.lua); the common case never reaches here (see prelude.lua).

-- Each algorithm's steps, by name: `nkeys`, `load`, `fresh`, `decide`, `normalize`,
-- `refund`, `refund_charge`, `idle_at`, `save`, `touch` (see general.lua).
local A = {}

-- The twin of algorithm::still_owed: how much of a charge's debt, in units of which
-- `per_us` are repaid per µs, is still owed at `t`, from its receipt `r` (`at`, the
-- instant it was decided at; `till`, its reset instant). Nil: owed in full (refunded
-- at the instant it was made). Unless `exact`, the receipt's reset instant is the
-- charge's end rounded up to the µs, so the bound takes off that rounding.
local function still_owed(r, t, per_us, exact)
  if t <= r.at then
    return nil
  end
  if r.till <= t then
    return 0
  end
  local owed = (r.till - t) * per_us
  if not exact then
    owed = owed - (per_us - 1)
  end
  return owed
end

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
