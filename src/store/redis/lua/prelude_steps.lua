-- tollgate: what the scripts define after evalsha.lua's common case has returned
-- (README.md, "Assembly"): the table `A` of each algorithm's steps (the */steps.lua
-- files) and their shared helpers, for the general driver (evalsha_batch.lua). The
-- function library holds none of it.

-- Each algorithm's steps for refunds, by name: `nkeys`, `load`, `normalize`,
-- `refund`, `refund_charge`, `idle_at`, `save` (see evalsha_batch.lua). Decisions,
-- batched or not, are each algorithm's `decide` (through block.lua's `guarded`).
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

-- Reads a two-field state "<s> <x> <y>" (after its mark) at `key`: the latest instant
-- and the two fields; nil for a key with no state.
local function load_two(key)
  local v = read_state(key)
  if not v then
    return nil
  end
  local s, x, y = string.match(v, '^.(%S+) (%S+) (%S+)$')
  return tonumber(s), tonumber(x), tonumber(y)
end
