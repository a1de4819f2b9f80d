-- Where a coalesced decision's Redis time goes: the batch function of the store
-- (src/store/redis/lua/fcall_batch.lua) rebuilt one step at a time, each function doing
-- what the one before it does and one thing more, on the batch's own call (ARGV[1]: each
-- decision's head byte and 13 little-endian doubles, lean.lua's order; KEYS: each
-- decision's state, then its block record). benches/redis_profile/batch/profile.py appends
-- this file to tollgate's library (prelude.lua, every decide, block.lua, clock.lua,
-- lean.lua, fcall.lua, fcall_batch.lua, as src/store/redis/function.rs joins them), so the
-- steps call the store's own helpers (`LEAN_FORMATS`, `server_time`, `clock_at`,
-- `read_state`, `ttl_ms`, `gcra_pack`, `idiv`).
--
--   pb_ret1     the call and nothing else: `return 1` with the batch's keys and argument
--   pb_a        the loop: each decision's head byte read, its numbers skipped, its keys
--               taken, and a reply of the store's size (72 bytes) appended; one string
--               back, as the store's batch answers
--   pb_b        + each decision's numbers unpacked (`struct.unpack` into a table)
--   pb_c        + the clock: one TIME per batch, `clock_at` per decision
--   pb_d        + GET of the state (`read_state`)
--   pb_e        + GET of the block record when the state is missing or marked (as
--               block.lua's `guarded` reads it)
--   pb_e_skip   pb_e reading the record only for a marked state (the candidate: a record
--               writer that always leaves a state behind)
--   pb_f        + the GCRA rule (whole µs, as `gcra_whole` decides a charge) and the
--               packed reply of the verdict
--   pb_g        + SET … PX of the new state (`gcra_pack`, `ttl_ms`): a whole decision,
--               written inline
--   pb_g_skip   pb_g with pb_e_skip's record read
--   pb_g_skip1  pb_g_skip sent each decision's state key alone (the record's key made
--               from it in Lua when a marked state sends it there: not a cluster-safe
--               declaration of keys, a measure of what the second key costs the call)
--   pb_ret1_1   pb_ret1 with the state keys alone, the same
--   pb_min      every candidate at once (see `lean_min`)
--   pb_classic_batch  the classic GCRA script's logic (classic_gcra.lua: float TAT in
--               seconds, GET, SET … EX) in the same loop: one TIME per batch, one key per
--               decision, its reply a table per decision
--   pb_classic_one    classic_gcra.lua as a function of its own (one decision per call)
--
-- A step is chosen by an upvalue compared per decision: a few nanoseconds against the
-- microseconds measured.

local STEP_A, STEP_B, STEP_C, STEP_D, STEP_E, STEP_F, STEP_G = 1, 2, 3, 4, 5, 6, 7
local REPLY_FORMAT = '<i8i8i8i8i8i8i8i8i8'

local function steps(level, skip_record, stride)
  -- A reply of the store's size for the steps that decide nothing (built at the first
  -- call: a library's load runs without the string library).
  local constant = nil
  return function(keys, args)
    if not constant then
      constant = struct.pack(REPLY_FORMAT, 1, 999999, 1000, -1, 0, -1, 0, 0, 1732000000000000)
    end
    local packed = args[1]
    local pos, next_key = 1, 1
    local time = nil
    local replies = {}
    while pos <= #packed do
      local n = string.byte(packed, pos) % 128
      local a = nil
      if level >= STEP_B then
        a = { struct.unpack(LEAN_FORMATS[n], packed, pos + 1) }
        pos = a[n + 1]
        a[n + 1] = nil
      else
        pos = pos + 1 + 8 * n
      end
      local state_key, record_key = keys[next_key], nil
      if stride == 2 then
        record_key = keys[next_key + 1]
      end
      next_key = next_key + stride
      local now = 0
      if level >= STEP_C then
        if not time then
          time = server_time()
        end
        now = clock_at(a[1], a[2], time)
      end
      local v, mark = false, nil
      if level >= STEP_D then
        v, mark = read_state(state_key)
      end
      if level >= STEP_E then
        if (not skip_record and not v) or mark == MARK_BYTE then
          redis.call('GET', record_key or state_key .. ':b')
        end
      end
      local reply = constant
      if level >= STEP_F then
        -- gcra_whole's charge: cost, limit's capacity, T and B·T in whole µs.
        local cost, cap, tu, bu = a[5], a[8], a[9], a[11]
        local floor, tat = 0, 0
        if v then
          floor, tat = struct.unpack('<dd', v, 2)
        end
        local t = math.max(now, floor)
        local st = tat
        if tat <= t then
          st = t
        end
        local en = st + cost * tu
        local allowed = cost <= cap and en <= t + bu
        if allowed then
          st = en
        end
        local remaining = 0
        if t + bu > st then
          remaining = math.min(idiv(t + bu - st, tu), cap)
        end
        local reset = 0
        if st > t then
          reset = st - now
        end
        reply = struct.pack(REPLY_FORMAT, allowed and 1 or 0, remaining, reset, -1, 0, -1, 0, 0, now)
        if level >= STEP_G and allowed then
          redis.call('SET', state_key, gcra_pack(UNMARKED, t, st, 0, tu * 1000), 'PX',
            ttl_ms(math.max(st, t), now))
        end
      end
      replies[#replies + 1] = reply
    end
    return table.concat(replies)
  end
end

-- The leanest batch this profile can write, every candidate at once, to measure how far
-- they go together (not a correct store: no penalty box, no plans, GCRA only): one
-- function per algorithm and mode, so a decision packs only what GCRA reads (the clock's
-- kind and value, cost, capacity, T and B·T in whole µs: six doubles, no head byte),
-- unpacked into locals (no table); the state's key alone sent, the record's read (from
-- its key made in Lua) only for a marked state; the TTL with math.ceil; the reply five
-- doubles (allowed, remaining, reset, retry, the instant decided at).
local function lean_min(keys, args)
  local packed = args[1]
  local pos, next_key = 1, 1
  local time = nil
  local replies = {}
  local last = #packed
  while pos <= last do
    local kind, clock, cost, cap, tu, bu
    kind, clock, cost, cap, tu, bu, pos = struct.unpack('<dddddd', packed, pos)
    local key = keys[next_key]
    next_key = next_key + 1
    if not time then
      time = server_time()
    end
    local now = clock_at(kind, clock, time)
    local v = redis.call('GET', key)
    local floor, tat = 0, 0
    if v then
      if string.byte(v, 1) == MARK_BYTE then
        redis.call('GET', key .. ':b')
      end
      floor, tat = struct.unpack('<dd', v, 2)
    end
    local t = math.max(now, floor)
    local st = tat
    if tat <= t then
      st = t
    end
    local en = st + cost * tu
    local allowed = cost <= cap and en <= t + bu
    if allowed then
      st = en
    end
    local remaining = 0
    if t + bu > st then
      remaining = math.min(math.floor((t + bu - st) / tu), cap)
    end
    local reset = 0
    if st > t then
      reset = st - now
    end
    replies[#replies + 1] = struct.pack('<ddddd', allowed and 1 or 0, remaining, reset, -1, now)
    if allowed then
      local left = math.ceil(math.max(st, t) / 1000000) * 1000000 - now + ttl_lead
      redis.call('SET', key, gcra_pack(UNMARKED, t, st, 0, tu * 1000), 'PX',
        math.ceil(left / 1000) + 1000)
    end
  end
  return table.concat(replies)
end

local function ret1()
  return 1
end

-- classic_gcra.lua's logic, the numbers taken from the decision's packed ones (burst =
-- capacity, rate = limit, period = period µs / 10⁶ s, cost), at the batch's one TIME.
local function classic_batch(keys, args)
  local packed = args[1]
  local pos, next_key = 1, 1
  local now = nil
  local replies = {}
  while pos <= #packed do
    local n = string.byte(packed, pos) % 128
    local a = { struct.unpack(LEAN_FORMATS[n], packed, pos + 1) }
    pos = a[n + 1]
    local key = keys[next_key]
    next_key = next_key + 1
    if not now then
      local time = redis.call('TIME')
      now = tonumber(time[1]) + tonumber(time[2]) / 1000000
    end
    local burst, rate, period, cost = a[8], a[6], a[7] / 1000000, a[5]
    local emission_interval = period / rate
    local increment = emission_interval * cost
    local burst_offset = emission_interval * burst
    local tat = tonumber(redis.call('GET', key)) or now
    tat = math.max(tat, now)
    local new_tat = tat + increment
    local allow_at = new_tat - burst_offset
    local diff = now - allow_at
    local remaining = math.floor(diff / emission_interval)
    if remaining < 0 then
      replies[#replies + 1] = { 0, 0, tostring(-diff), tostring(tat - now) }
    else
      local reset_after = new_tat - now
      redis.call('SET', key, new_tat, 'EX', math.ceil(reset_after))
      replies[#replies + 1] = { 1, remaining, '-1', tostring(reset_after) }
    end
  end
  return replies
end

redis.register_function('pb_ret1', ret1)
redis.register_function('pb_a', steps(STEP_A, false, 2))
redis.register_function('pb_b', steps(STEP_B, false, 2))
redis.register_function('pb_c', steps(STEP_C, false, 2))
redis.register_function('pb_d', steps(STEP_D, false, 2))
redis.register_function('pb_e', steps(STEP_E, false, 2))
redis.register_function('pb_e_skip', steps(STEP_E, true, 2))
redis.register_function('pb_f', steps(STEP_F, false, 2))
redis.register_function('pb_g', steps(STEP_G, false, 2))
redis.register_function('pb_g_skip', steps(STEP_G, true, 2))
redis.register_function('pb_g_skip1', steps(STEP_G, true, 1))
redis.register_function('pb_ret1_1', ret1)
redis.register_function('pb_min', lean_min)
redis.register_function('pb_classic_batch', classic_batch)
