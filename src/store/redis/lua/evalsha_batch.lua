-- tollgate: the general driver, for refunds, batches of several charges and
-- operators' calls: reads every charge's arguments (the layout at the top of
-- evalsha.lua) into a table, the one place here that reads them, and combines the
-- algorithms' steps (prelude_steps.lua, */steps.lua) and decisions (block.lua's
-- `guarded`, each algorithm's `decide`).

local charges = {}
local next_key = 1
-- A refund of charges by their receipts carries two more arguments per charge, a
-- settle three.
local stride = PER_CHARGE
if mode == 'c' then
  stride = PER_REFUND
elseif mode == 's' then
  stride = PER_SETTLE
end
-- One charge (a refund, here) owns every key: no per-charge copy of KEYS. A give-back
-- by receipt ('c', 's') has one key more after its record, its given-back record,
-- which is not one of the charge's keys.
local by_receipt = mode == 'c' or mode == 's'
local single = #ARGV == BEFORE_CHARGES + stride and not by_receipt
for i = first_arg, #ARGV, stride do
  local alg = A[ARGV[i]]
  local keys = KEYS
  local given = false
  if not single then
    keys = {}
    -- The algorithm's keys, the base state's when passed (reads 2), then the
    -- record's (block.lua).
    local nkeys = alg.nkeys + 1
    if ARGV[i + 13] == '2' then
      nkeys = nkeys + 1
    end
    for j = 1, nkeys do
      keys[j] = KEYS[next_key]
      next_key = next_key + 1
    end
    if by_receipt then
      given = KEYS[next_key]
      next_key = next_key + 1
    end
  end
  local x1, x2, x3, x4 = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]),
    tonumber(ARGV[i + 7]), tonumber(ARGV[i + 8])
  charges[#charges + 1] = {
    alg = alg,
    keys = keys,
    argi = i,
    cost = tonumber(ARGV[i + 1]),
    given = given,
    p = {
      limit = tonumber(ARGV[i + 2]),
      period = tonumber(ARGV[i + 3]),
      cap = tonumber(ARGV[i + 4]),
      -- the five params (i+5 ..), by algorithm: sliding_window_counters
      buckets = x1, bucket = x2,
      -- token_bucket
      upt = x1, ups = x2,
      -- gcra, leaky_bucket (their fifth, the leaky bucket's bound, is read by
      -- `decide` alone)
      t_us = x1, t_ns = x2, b_us = x3, b_ns = x4,
    },
  }
  if mode == 'c' or mode == 's' then
    -- The receipt: when the charge was decided and its reset instant.
    charges[#charges].receipt = { at = tonumber(ARGV[i + 15]), till = tonumber(ARGV[i + 16]) }
  end
  if mode == 's' then
    charges[#charges].give_back = tonumber(ARGV[i + 17])
  end
end

-- Whether the charge's receipt gives back now: not if its given-back record says it
-- did before (a settle retried, a decision settled twice). Records that it does, for
-- as long as its charge may count (after that nothing of it comes back anyway).
local function first_use(c)
  if redis.call('EXISTS', c.given) == 1 then
    return false
  end
  -- As long as something of the charge may still come back (Receipt::counts_until),
  -- and ten seconds more: the record expires on the server's clock, and a decision
  -- clock that runs behind it (an injected one, one that stepped back) must not see it
  -- gone while the charge still counts on its own.
  local keep = c.receipt.till + c.p.period
  if keep > now then
    redis.call('SET', c.given, '1', 'PX', ttl_ms(keep, now) + 10000)
  end
  return true
end

local function persist(c, s)
  local until_us = math.max(c.alg.idle_at(c.p, s), s.s)
  c.alg.save(c.keys, c.p, s, ttl_ms(until_us, now))
end

-- One charge decided at `now`, behind its block (block.lua's `guarded`, the twin of
-- algorithm::evaluate); rejections are counted once the batch is decided (below).
local function evaluate(c, charge)
  return guarded(c.keys, now, ARGV, c.argi, charge, false)
end

-- Refunds `amount` of the key's newest charges, or, with a `receipt`, of the one
-- charge it names (the twin of algorithm::refund).
local function refund(c, amount, receipt)
  -- The caller's record, read once for a refund by receipt (its reset's instant, and
  -- the places `refund_place` parks there).
  local record = false
  if receipt then
    -- Decided before an operator's reset, which forgot the charge already.
    record = redis.call('GET', c.keys[#c.keys])
    local reset_at = record and pb_reset_at(select(5, pb_parse(record)))
    if reset_at and receipt.at <= reset_at then
      return
    end
  end
  local s = c.alg.load(c.keys)
  if not s then
    return
  end
  local floor = s.s
  -- GCRA's and the leaky bucket's latest instant may be a reserved place, ahead of
  -- the clock: a refund is measured on the clock, as the memory store measures it (a
  -- refund never leaves the TAT before `now`, which the store's floor already holds
  -- from going back).
  local at = math.max(now, floor)
  if c.alg.refund_place then
    at = now
  end
  local t = c.alg.normalize(c.p, s, at)
  s.s = math.max(now, floor)
  if receipt and c.alg.refund_place then
    c.alg.refund_place(c.keys, c.p, s, amount, receipt, record)
  elseif receipt then
    c.alg.refund_charge(c.p, s, t, amount, receipt)
  else
    c.alg.refund(c.p, s, t, amount)
  end
  persist(c, s)
end

local out = {}
-- Eight integers per verdict (its ninth slot is the single call's instant).
local function emit(verdicts)
  for _, v in ipairs(verdicts) do
    for j = 1, 8 do
      out[#out + 1] = v[j]
    end
  end
end

-- The charge's arguments with another cost, at index 1 of a table of their own.
local function with_cost(c, cost)
  local args = {}
  for j = 0, PER_CHARGE - 1 do
    args[j + 1] = ARGV[c.argi + j]
  end
  args[2] = num(cost)
  return args
end

if mode == 'r' then
  for _, c in ipairs(charges) do
    refund(c, c.cost, c.receipt)
  end
elseif mode == 'c' then
  for _, c in ipairs(charges) do
    -- A receipt that gave back before gives nothing, but its call still records the
    -- instant, as every refund does (and the memory store's).
    local amount = 0
    if first_use(c) then
      amount = c.cost
    end
    refund(c, amount, c.receipt)
  end
elseif mode == 'x' then
  -- The key's states under every period go, and its block, count and queue; the
  -- record stays as long as the latest forgotten charge would have counted, saying
  -- when the reset was: a receipt decided by then gives nothing back (`refund`).
  local forgotten = 0
  local record = charges[1].keys[#charges[1].keys]
  for _, c in ipairs(charges) do
    for k = 1, #c.keys - 1 do
      forgotten = math.max(forgotten, redis.call('PTTL', c.keys[k]))
      redis.call('DEL', c.keys[k])
    end
  end
  if forgotten > 0 then
    redis.call('SET', record, pb_text(0, 0, 0, 0, pb_suffix(now, {})), 'PX', forgotten)
  else
    redis.call('DEL', record)
  end
elseif mode == 'k' then
  -- An operator's block: replaces the caller's block and its count, in the one record
  -- every charge (each a state of the key) shares; every state is marked. The trips
  -- stay (only a reset forgets them), in the suffix, as long as they were to live.
  local first = charges[1]
  local _, _, _, q, record, parked = pb_read(first.keys)
  local trips = pb_remembered(ARGV, first.argi, parked, now)
  if first.cost > 0 then
    pb_write(first.keys, now + first.cost, 0, 0, q, now + first.cost, now, nil, parked)
    for _, c in ipairs(charges) do
      pb_mark(c.keys[1])
      emit({ pb_blocked(first.cost, false, trips) })
    end
  else
    -- Lifted: the block and the count go, a queue of reservations and the trips stay
    -- (the memory store's `block(0)`): its places are still taken.
    if record and (q > now or pb_reset_at(parked) or pb_trips(parked) > 0) then
      -- Kept as long as it was to live: a queue's places, a reset's instant, trips.
      redis.call('SET', first.keys[#first.keys], pb_text(0, 0, 0, q, parked), 'KEEPTTL')
    else
      redis.call('DEL', first.keys[#first.keys])
    end
    for _, c in ipairs(charges) do
      emit({ guarded(c.keys, now, with_cost(c, 0), 1, false, false) })
    end
  end
elseif mode == 'p' then
  -- Charged whether it fits or not; reported as a peek would (the forced decision's
  -- own verdict is the state after the charge, without a delay to wait).
  for _, c in ipairs(charges) do
    local v = decide_fresh(c.keys, now, with_cost(c, c.cost), 1, c.cost > 0, true)
    local u, _, _, _, _, rest = pb_read(c.keys)
    local trips = pb_remembered(ARGV, c.argi, rest, now)
    v[5], v[6], v[7], v[8] = 0, -1, 0, trips
    if u > now then
      v = pb_blocked(u - now, false, trips)
    end
    emit({ v })
  end
elseif mode == 's' then
  -- Settle (Store::settle): the charge gives back by its receipt (as 'c'), then the
  -- extra, the cost, is charged whether or not it fits on this one state (as 'p'
  -- charges each). Answered with the state's own verdict, as a peek reads it (its
  -- reset names the extra's charge, for its receipt), the key's block beside it in
  -- v[6]: a block does not stop a settle, which is accounting, not admission.
  -- A receipt that gave back before moves nothing (no give-back, no extra), and says
  -- so in v[1]: 0.
  local c = charges[1]
  local fresh = first_use(c)
  local extra = c.cost
  if not fresh then
    extra = 0
  elseif c.give_back > 0 then
    refund(c, c.give_back, c.receipt)
  end
  local v = decide_fresh(c.keys, now, with_cost(c, extra), 1, extra > 0, true)
  local u, _, _, _, _, rest = pb_read(c.keys)
  v[5], v[6], v[7], v[8] = 0, -1, 0, pb_remembered(ARGV, c.argi, rest, now)
  v[1] = fresh and 1 or 0
  if u > now then
    v[6] = u - now
  end
  emit({ v })
elseif #charges == 1 then
  emit({ evaluate(charges[1], mode == 'a') })
else
  -- All-or-nothing: decide every charge first, charge only if all fit.
  local verdicts = {}
  local all = true
  for i, c in ipairs(charges) do
    verdicts[i] = evaluate(c, false)
    all = all and verdicts[i][1] == 1
  end
  if all and mode == 'a' then
    local admitted = {}
    for i, c in ipairs(charges) do
      local v = evaluate(c, true)
      if v[1] == 0 then
        -- Only when one batch names the same key twice: each part fits alone, not
        -- together. Undo and deny the batch.
        for j = 1, i - 1 do
          refund(charges[j], charges[j].cost)
        end
        verdicts[i] = v
        admitted = nil
        break
      end
      admitted[i] = v
    end
    if admitted then
      verdicts = admitted
    end
  end
  if mode == 'a' and not all then
    -- Each policy that denied counts the rejection in its penalty box.
    for i, c in ipairs(charges) do
      local v = verdicts[i]
      if v[1] == 0 and v[6] < 0 then
        local _, count, first, q, _, rest = pb_read(c.keys)
        verdicts[i] = pb_offend(c.keys, now, ARGV, c.argi, v, count, first, q, rest)
      end
    end
  end
  emit(verdicts)
end
out[#out + 1] = now
return out
