-- tollgate: blocks and the penalty box, the twin of src/penalty.rs (`Offences`) and of
-- the memory store's check before each decision (src/store/memory/shard.rs). Each
-- charge's last key is the caller's record, `<prefix>:<limit>:{<subject>}:b`: one per
-- (limit name, caller key), whatever quota, period or algorithm the caller is decided
-- under. It holds "<blocked_until> <count> <first_at> <queue_until>" (µs) with a TTL
-- to the instant it says nothing any more; `queue_until` is the place of the key's
-- latest reservation (`Limiter::reserve`), the tail of its queue; places given back
-- out of order may follow (gcra/steps.lua, `gcra_refund_place`). It shares the
-- state's hash tag, so it is read and written in the same call as the rate decision:
-- a block or a penalty costs no round trip of its own, and every process sees it.
--
-- A charge's penalty is its arguments i+10 .. i+12 (see evalsha.lua): the rejections
-- that trip the box (0: no box), the window and the block (µs); i+13 says when it
-- reads the record (0: by its state's mark; 1: always; 2: always, and the base state's
-- key comes before the record's); i+14 is the escalation ('' for none; `pb_escalation`).
--
-- The record is read only when the state's mark (prelude.lua) says it may exist or
-- the key has no state, or when i+13 says always: `pb_write` marks the state whenever
-- it writes a record, and the base state too for a charge under another period (a
-- plan), whose own state an operator's block through the limit does not mark.

-- The record's text, read and formatted by the five functions below and nowhere else
-- (its writers: `pb_write`, evalsha_batch.lua's reset and block, gcra/steps.lua's
-- `gcra_refund_place`): "<blocked_until> <count> <first_at> <queue_until>", then its
-- suffix, in this order and each optional:
--   ' t<trips>:<at>:<until>'      the penalty's trips in a row, the latest at <at>,
--                                 kept until <until> (`pb_offend`; a record without
--                                 it has none)
--   ' r<reset_at>'                an operator's reset at this instant (evalsha_batch.lua,
--                                 mode 'x'): a receipt decided by then gives nothing back
--   ' <till>/<at>/<cost>,...'     the places given back out of order, parked until the
--                                 places after them are (gcra/steps.lua)
-- A writer that does not change the suffix passes it back to `pb_write` as it read it.

-- The record's four numbers and its suffix, from the record's text `v`. (The five
-- functions: `pb_parse`, `pb_trips`, `pb_reset_at`, `pb_parked`, `pb_suffix`.)
local function pb_parse(v)
  local u, c, f, q, rest = string.match(v, '^(%S+) (%S+) (%S+) (%S+)(.*)$')
  return tonumber(u), tonumber(c), tonumber(f), tonumber(q), rest
end

-- The trips a suffix records, the instant of the latest and until when they are
-- kept (0, 0, 0: none).
local function pb_trips(rest)
  local n, at, kept = string.match(rest, ' t(%d+):(%d+):(%d+)')
  if not n then
    return 0, 0, 0
  end
  return tonumber(n), tonumber(at), tonumber(kept)
end

-- The instant of the operator's reset a suffix records (nil: none).
local function pb_reset_at(rest)
  return tonumber(string.match(rest, ' r(%d+)'))
end

-- The places a suffix parks, oldest first, each { till, at, cost }.
local function pb_parked(rest)
  local parked = {}
  for till, at, cost in string.gmatch(rest, '(%d+)/(%d+)/(%d+)') do
    parked[#parked + 1] = { till = tonumber(till), at = tonumber(at), cost = tonumber(cost) }
  end
  return parked
end

-- The suffix's text for `reset_at` (nil: none), `parked` and the trips (nil or 0:
-- none), as the functions above read them.
local function pb_suffix(reset_at, parked, trips, tripped_at, kept)
  local out = {}
  for _, x in ipairs(parked) do
    out[#out + 1] = string.format('%.0f/%.0f/%.0f', x.till, x.at, x.cost)
  end
  local tail = ''
  if #out > 0 then
    tail = ' ' .. table.concat(out, ',')
  end
  if reset_at then
    tail = string.format(' r%.0f', reset_at) .. tail
  end
  if trips and trips > 0 then
    tail = string.format(' t%.0f:%.0f:%.0f', trips, tripped_at, kept) .. tail
  end
  return tail
end

-- The record's text for its four numbers and `suffix` (as `pb_suffix` or `pb_parse`
-- gives it).
local function pb_text(u, c, f, q, suffix)
  return string.format('%.0f %.0f %.0f %.0f', u, c, f, q) .. suffix
end

-- The record's four numbers (zeros when there is none), whether there is one, and
-- its suffix.
local function pb_read(keys)
  local v = redis.call('GET', keys[#keys])
  if not v then
    return 0, 0, 0, 0, false, ''
  end
  local u, c, f, q, rest = pb_parse(v)
  return u, c, f, q, true, rest
end

-- Marks the state at `key`, when there is one (prelude.lua): its decisions read the
-- record.
local function pb_mark(key)
  if redis.call('EXISTS', key) == 1 then
    redis.call('SETRANGE', key, 0, MARKED)
  end
end

-- The base state that a record written for the charge at args[i..] marks too (its key
-- comes before the record's), or nil.
local function pb_base(keys, args, i)
  if args[i + 13] + 0 == 2 then
    return keys[#keys - 1]
  end
  return nil
end

-- Writes the record; it lives until `idle_at` or the queue's tail `q`, the later. The
-- state, and `base` when given, are marked, so that decisions read the record.
local function pb_write(keys, u, c, f, q, idle_at, now, base, rest)
  local px = ttl_ms(math.max(idle_at, q), now)
  if rest and (pb_reset_at(rest) or string.find(rest, ' t', 1, true)) then
    -- A reset's instant (evalsha_batch.lua, mode 'x') and remembered trips
    -- (`pb_offend`) live as long as they were given.
    px = math.max(px, redis.call('PTTL', keys[#keys]))
  end
  redis.call('SET', keys[#keys], pb_text(u, c, f, q, rest or ''), 'PX', px)
  pb_mark(keys[1])
  if base then
    pb_mark(base)
  end
end

-- A blocked key's verdict (Verdict::blocked): denied, nothing left, both waits the
-- block's end; then the block (µs left), whether this call tripped it and the trips
-- remembered.
local function pb_blocked(left, tripped, trips)
  return { 0, 0, left, left, 0, left, tripped and 1 or 0, trips or 0, 0 }
end

-- The escalation of the charge at args[i..] (i+14, `Escalation::wire`): { remember,
-- factor, cap, step, ... } in µs; nil when no trip is remembered.
local function pb_escalation(args, i)
  local text = args[i + 14]
  if not text or text == '' then
    return nil
  end
  local e = {}
  for x in string.gmatch(text, '%d+') do
    e[#e + 1] = tonumber(x)
  end
  return e
end

-- The trips remembered at `now` of a record whose suffix is `rest`, under the
-- escalation of the charge at args[i..] (OffenceRecord::remembered): 0 once its
-- `remember` has passed since the latest, or they are past their keeping.
local function pb_remembered(args, i, rest, now)
  if rest == '' then
    return 0
  end
  local trips, at, kept = pb_trips(rest)
  if trips == 0 or now >= kept then
    return 0
  end
  local e = pb_escalation(args, i)
  if not e or now >= at + e[1] then
    return 0
  end
  return trips
end

-- The block (µs) of the `n`-th remembered trip under escalation `e`, the first
-- `first` (Escalation::block_of): the steps, then the last repeated, or grown by the
-- factor up to the cap. A product past 2^53 is inexact, but above every cap (below
-- 2^52): the cap, as Rust's saturating product gives.
local function pb_block_of(first, e, n)
  if not e or n <= 1 then
    return first
  end
  local steps = #e - 3
  if n - 1 <= steps then
    return e[3 + n - 1]
  end
  local block = first
  if steps > 0 then
    block = e[3 + steps]
  end
  local factor, cap = e[2], e[3]
  if factor >= 2 then
    local more = n - 1 - steps
    while more > 0 and block > 0 and block < cap do
      block = math.min(cap, block * factor)
      more = more - 1
    end
  end
  return block
end

-- The most trips a record counts (u32::MAX): more stay there.
local MAX_TRIPS = 4294967295

-- Counts the rejection `v` of the charge at args[i..], whose record read (c, f, q,
-- rest) (OffenceRecord::offend): the blocked verdict when it trips the box, with the
-- block of its trip, else `v` (whose v[8] already holds the trips remembered).
local function pb_offend(keys, now, args, i, v, c, f, q, rest)
  -- A call without a penalty box may leave its three arguments out (evalsha.lua).
  local n = tonumber(args[i + 10] or 0)
  if n == 0 or args[i + 1] + 0 == 0 then
    return v
  end
  local within, block = args[i + 11] + 0, args[i + 12] + 0
  if c == 0 or now >= f + within then
    c, f = 1, now
  else
    c = c + 1
  end
  local base = pb_base(keys, args, i)
  if c < n then
    pb_write(keys, 0, c, f, q, f + within, now, base, rest)
    return v
  end
  -- Tripped: blocked from now for its trip's block, and the count starts again. The
  -- suffix is written anew with the trips (none when the penalty remembers none).
  local e = pb_escalation(args, i)
  local trips, idle = 0, now + block
  if e then
    trips = math.min(pb_remembered(args, i, rest, now) + 1, MAX_TRIPS)
    block = pb_block_of(block, e, trips)
    idle = math.max(now + block, now + e[1])
  end
  local kept = now
  if e then
    kept = now + e[1]
  end
  if rest ~= '' then
    rest = pb_suffix(pb_reset_at(rest), pb_parked(rest), trips, now, kept)
  elseif trips > 0 then
    rest = pb_suffix(nil, {}, trips, now, kept)
  end
  pb_write(keys, now + block, 0, 0, q, idle, now, base, rest)
  return pb_blocked(block, true, trips)
end

-- One charge at args[i..] decided behind its block: a blocked key is denied without
-- reading its rate state (and charged nothing); with `count`, a rejection is counted
-- in the penalty box. Every reply carries the block fields.
--
-- The state is read first: the record is read only when the state is marked or
-- missing (prelude.lua) or the charge says always, and the state read is handed to the
-- algorithm's `decide`.
local function guarded(keys, now, args, i, charge, count)
  local state, mark_byte = read_state(keys[1])
  local u, c, f, q, record, rest = 0, 0, 0, 0, false, ''
  local trips = 0
  if not state or mark_byte == MARK_BYTE or args[i + 13] + 0 > 0 then
    u, c, f, q, record, rest = pb_read(keys)
    trips = pb_remembered(args, i, rest, now)
    if u > now then
      return pb_blocked(u - now, false, trips)
    end
  end
  local mark = record and MARKED or UNMARKED
  local v
  if q > now and args[i + 1] + 0 > 0 then
    -- Reservations ahead (the state runs ahead of the clock): the request's place is
    -- behind them, so it is denied now with the wait until that place (it did not
    -- ask to wait). Decided at the queue's tail; durations back on this clock.
    local lead = q - now
    local b = D[args[i]](keys, q, args, i, false, false, state, mark)
    local retry = -1
    if b[1] == 1 then
      retry = lead
    elseif b[4] >= 0 then
      retry = b[4] + lead
    end
    v = { 0, b[2], b[3] + lead, retry, 0, -1, 0, 0, 0 }
  else
    v = D[args[i]](keys, now, args, i, charge, false, state, mark)
  end
  v[8] = trips
  if count and v[1] == 0 then
    return pb_offend(keys, now, args, i, v, c, f, q, rest)
  end
  return v
end

-- The decision of the charge at args[i..] on the key's state as it is now, written
-- marked: for callers that did not read the block record (`reserve`, which writes
-- it, and the operators' penalty).
local function decide_fresh(keys, now, args, i, charge, force)
  return D[args[i]](keys, now, args, i, charge, force, (read_state(keys[1])), MARKED)
end

-- Reserves the charge at args[i..] within `max_wait` µs (Shard::reserve): its place
-- is the earliest instant, behind the key's queue, at which the rule admits it; there
-- it is charged now (the state runs ahead of the clock until then) and the verdict's
-- delay is the wait. Beyond `max_wait`, a denial that charges nothing.
local function reserve(keys, now, args, i, max_wait)
  local u, c, f, q, _, parked = pb_read(keys)
  local trips = pb_remembered(args, i, parked, now)
  if u > now then
    return pb_blocked(u - now, false, trips)
  end
  local first = math.max(now, q)
  local b = decide_fresh(keys, first, args, i, false)
  local lead = first - now
  local at = first
  if b[1] == 0 then
    if b[4] < 0 then
      return { 0, b[2], b[3] + lead, -1, 0, -1, 0, trips, 0 }
    end
    at = first + b[4]
  end
  -- The leaky bucket serves its place when the queue ahead has drained: the wait is
  -- until then (its reset at the place), and that is what max_wait bounds.
  local served, before = at, nil
  if args[i] == 'leaky_bucket' then
    before = redis.call('GET', keys[1])
    served = math.max(at, at + decide_fresh(keys, at, args, i, false)[3])
  end
  if served - now > max_wait then
    -- The probe at `at` may have moved the state's latest instant there, ahead of the
    -- clock and of the queue: every later decision would be decided as of then, and
    -- see the queue ahead of it already drained. Refused: the state is put back.
    if before then
      redis.call('SET', keys[1], before, 'KEEPTTL')
    end
    return { 0, b[2], b[3] + lead, served - now, 0, -1, 0, trips, 0 }
  end
  -- Charged at its place: keys must live until then on the server's clock too.
  local saved = ttl_lead
  ttl_lead = ttl_lead + (at - now)
  local v = decide_fresh(keys, at, args, i, true)
  ttl_lead = saved
  local ahead = at - now
  if v[1] == 1 then
    v[3] = v[3] + ahead
    v[5] = math.max(v[5] + ahead, ahead)
    if ahead > 0 then
      pb_write(keys, u, c, f, math.max(q, at), f + args[i + 11] + 0, now, pb_base(keys, args, i),
        parked)
    end
  else
    v[3] = v[3] + ahead
    if v[4] >= 0 then
      v[4] = v[4] + ahead
    end
  end
  v[6], v[7], v[8] = -1, 0, trips
  return v
end
