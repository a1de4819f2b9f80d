-- GCRA: the Lua twin of src/algorithm/gcra.rs, its `decide` and the pair arithmetic
-- its steps (gcra/steps.lua) and the leaky bucket (leaky_bucket/*.lua) share.
--
-- Why the arithmetic is written differently here (the same rule, the same answers):
-- Rust keeps the TAT, T and B*T in u64 nanoseconds, but Lua's numbers are doubles,
-- exact only below 2^53, and nanoseconds since the epoch (~1.7e18) are not. So every
-- instant and duration here is a pair (µs, ns) with 0 <= ns < 1000: the TAT,
-- T = (p.t_us, p.t_ns) and B*T = (p.b_us, p.b_ns), all split in Rust. A quota whose T
-- and B*T are whole µs (100 per minute, 10 per second: most) is decided in plain µs
-- arithmetic instead (`gcra_whole`: the pairs with every ns 0, measured cheaper); the
-- two paths differ only in how they add and compare instants, and share every write
-- and every wait they report (`gcra_write`, `gcra_note`, `gcra_retry`, `gcra_reset`).
--
-- State (see prelude.lua): the mark, then four packed doubles (s, a, b, e), s = latest
-- instant seen, (a, b) = TAT as (µs, ns), (0, 0) when idle, e = the T (ns) the TAT is
-- counted in. Every number is an integer below 2^53, exact in a double.

local GCRA_STATE = '<dddd'

local function gcra_pack(mark, s, a, b, e)
  return mark .. struct.pack(GCRA_STATE, s, a, b, e)
end

local function ns_norm(us, ns)
  local carry = idiv(ns, 1000)
  return us + carry, ns - carry * 1000
end

local function ns_add(a_us, a_ns, b_us, b_ns)
  return ns_norm(a_us + b_us, a_ns + b_ns)
end

-- a - b for a >= b.
local function ns_sub(a_us, a_ns, b_us, b_ns)
  local us, ns = a_us - b_us, a_ns - b_ns
  if ns < 0 then
    return us - 1, ns + 1000
  end
  return us, ns
end

local function ns_le(a_us, a_ns, b_us, b_ns)
  return a_us < b_us or (a_us == b_us and a_ns <= b_ns)
end

-- c * (t_us, t_ns); exact while c * t_us < 2^53.
local function ns_mul(c, t_us, t_ns)
  return ns_norm(c * t_us, c * t_ns)
end

local function ns_ceil_us(us, ns)
  if ns > 0 then
    return us + 1
  end
  return us
end

-- Whether n*T <= h.
local function gcra_fits(n, t_us, t_ns, h_us, h_ns)
  local m_us, m_ns = ns_mul(n, t_us, t_ns)
  return ns_le(m_us, m_ns, h_us, h_ns)
end

-- The most debt a quota change leaves, µs (gcra::MAX_DEBT_US).
local MAX_DEBT_US = 3153600000000000

-- floor(h / u) for pairs h = (h_us, h_ns) and u = (u_us, u_ns): a double estimate (off
-- by at most one), corrected with exact pair arithmetic.
local function gcra_floor_units(h_us, h_ns, u_us, u_ns)
  local q = math.floor((h_us * 1000 + h_ns) / (u_us * 1000 + u_ns))
  while q > 0 and not gcra_fits(q, u_us, u_ns, h_us, h_ns) do
    q = q - 1
  end
  while gcra_fits(q + 1, u_us, u_ns, h_us, h_ns) do
    q = q + 1
  end
  return q
end

-- ceil(h / e) for a pair h = (h_us, h_ns) and e ns.
local function gcra_ceil_units(h_us, h_ns, e)
  local e_us = idiv(e, 1000)
  local e_ns = e - e_us * 1000
  local q = gcra_floor_units(h_us, h_ns, e_us, e_ns)
  local m_us, m_ns = ns_mul(q, e_us, e_ns)
  if m_us == h_us and m_ns == h_ns then
    return q
  end
  return q + 1
end

-- gcra::carry_over: a TAT (a, b) counted in T = e ns, re-counted at `t` in the
-- current T (t_us, t_ns): its usage in whole requests, rounded up, owed again.
local function gcra_carry_over(a, b, e, t, t_us, t_ns)
  if e == 0 or ns_le(a, b, t, 0) then
    return a, b
  end
  local d_us, d_ns = ns_sub(a, b, t, 0)
  local used = math.min(gcra_ceil_units(d_us, d_ns, e), idiv(MAX_DEBT_US, t_us + 1))
  local n_us, n_ns = ns_mul(used, t_us, t_ns)
  return ns_add(t, 0, n_us, n_ns)
end

-- The parts of a decision that `gcra_whole` and `gcra_decide`'s pairs share: they
-- differ only in how they add and compare instants, and each passes these the
-- instants it computed (a whole-µs TAT is the pair (a, 0)).

-- Writes the state: the TAT (a, b) counted in T = `tn` ns, at the latest instant `t`;
-- with a TTL to the TAT's end (or `t`), or with `keep` under the TTL it has
-- (`KEEPTTL`).
local function gcra_write(keys, now, mark, t, a, b, tn, keep)
  if keep then
    redis.call('SET', keys[1], gcra_pack(mark, t, a, b, tn), 'KEEPTTL')
  else
    redis.call('SET', keys[1], gcra_pack(mark, t, a, b, tn), 'PX',
      ttl_ms(math.max(ns_ceil_us(a, b), t), now))
  end
end

-- The write of a decision that charged nothing: a TAT re-counted under this quota
-- (`carried`) is saved, as the memory store keeps it; else a later instant than the
-- state's is recorded, so that a clock stepping back later stands still here, as the
-- memory store's floor does.
local function gcra_note(keys, now, mark, t, a, b, tn, v, floor, carried)
  if carried then
    gcra_write(keys, now, mark, t, a, b, tn, false)
  elseif v and t > floor then
    gcra_write(keys, now, mark, t, a, b, tn, true)
  end
end

-- Rule::retry_at as a wait from `now`: `fit` is the instant the same request would fit
-- (max(TAT, t) + c*T - B*T, rounded up; 0 when it fits); the leaky bucket's queue
-- (`max_delay` set) also waits until its start, `served` (rounded up), is within
-- `max_delay`.
local function gcra_retry(now, fit, served, max_delay)
  if max_delay then
    fit = math.max(fit, served - max_delay)
  end
  return math.max(fit - now, 0)
end

-- Rule::reset_at as a wait from `now`: until the start `served` (rounded up), 0 when
-- that is not after the effective instant `t`.
local function gcra_reset(now, t, served)
  if served <= t then
    return 0
  end
  return served - now
end

-- The decision of `gcra_decide` when T, B*T and the TAT are whole µs (`t_ns`, `b_ns`
-- and the state's `b` are 0): the same rule on plain integers, every step exact, and
-- the same writes. `st` is where the next charge starts, max(TAT, t).
local function gcra_whole(keys, now, t, a, cost, cap, tu, bu, max_delay, charge, force, v,
                          floor, carried, tn, mark)
  local st = a
  if a <= t then
    st = t
  end
  local en = st + cost * tu
  local fits = en <= t + bu
  local within = not max_delay or st <= t + max_delay
  local allowed = force or cost == 0 or (cost <= cap and fits and within)
  local delay, retry = 0, -1
  if allowed and charge and cost > 0 then
    if max_delay and st > t then
      delay = st - now
    end
    -- The stored TAT was written with a TTL for it or later (`ttl_kept`): whole µs
    -- are the common case, so only this path spares the charge's `PX`.
    local before = a
    a, st = en, en
    gcra_write(keys, now, mark, t, a, 0, tn,
      v and not carried and ttl_kept(before, math.max(a, t)))
  else
    if not allowed and cost <= cap then
      local fit = 0
      if not fits then
        fit = en - bu
      end
      retry = gcra_retry(now, fit, st, max_delay)
    end
    gcra_note(keys, now, mark, t, a, 0, tn, v, floor, carried)
  end
  local remaining = 0
  if t + bu > st then
    remaining = math.min(idiv(t + bu - st, tu), cap)
  end
  return verdict(allowed, remaining, gcra_reset(now, t, st), retry, delay)
end

-- One whole decision (algorithm::evaluate, specialised): GCRA's state is
-- four numbers, so they stay in locals and the call builds no state table and makes
-- no per-step calls through the algorithm table; this is most of a call's cost in
-- Lua. `args[i..]` is the charge's arguments (see evalsha.lua); `v` and `mark` as in
-- prelude.lua; `queue`: the leaky bucket, whose admitted request waits until the
-- queue ahead of it has drained, at most `max_delay` µs (its fifth parameter;
-- leaky_bucket.lua's twin of the Rust rule).
local function gcra_decide(keys, now, args, i, charge, force, v, mark, queue)
  local cost, cap = args[i + 1] + 0, args[i + 4] + 0
  local t_us, t_ns = args[i + 5] + 0, args[i + 6] + 0
  local b_us, b_ns = args[i + 7] + 0, args[i + 8] + 0
  local max_delay = queue and args[i + 9] + 0
  local a, b, floor, e = 0, 0, 0, 0
  if v then
    floor, a, b, e = struct.unpack(GCRA_STATE, v, 2)
  end
  -- max(TAT, now) already treats a clock that went back as standing still; `t` is
  -- also the latest instant seen.
  local t = math.max(now, floor)
  -- A TAT counted under another quota (a plan, a reload) keeps its usage.
  local tn = t_us * 1000 + t_ns
  local carried = v and e ~= tn
  if carried then
    a, b = gcra_carry_over(a, b, e, t, t_us, t_ns)
  end
  if t_ns == 0 and b_ns == 0 and b == 0 then
    return gcra_whole(keys, now, t, a, cost, cap, t_us, b_us, max_delay, charge, force, v,
      floor, carried, tn, mark)
  end
  -- Where the next charge starts, max(TAT, t), and ends, + c*T.
  local st_us, st_ns = a, b
  if ns_le(a, b, t, 0) then
    st_us, st_ns = t, 0
  end
  local c_us, c_ns = ns_mul(cost, t_us, t_ns)
  local e_us, e_ns = ns_add(st_us, st_ns, c_us, c_ns)
  -- max(TAT, t) + c*T <= t + B*T
  local fits = ns_le(e_us, e_ns, t + b_us, b_ns)
  -- The queue: served within max_delay, ceil(start) <= t + max_delay.
  local within = not queue or ns_le(st_us, st_ns, t + max_delay, 0)
  local allowed = force or cost == 0 or (cost <= cap and fits and within)
  local delay, retry = 0, -1
  if allowed and charge and cost > 0 then
    if queue then
      local served = ns_ceil_us(st_us, st_ns)
      if served > t then
        delay = served - now
      end
    end
    -- The new TAT; the next charge starts there (it is >= the old start >= t).
    a, b = e_us, e_ns
    st_us, st_ns = e_us, e_ns
    gcra_write(keys, now, mark, t, a, b, tn, false)
  else
    if not allowed and cost <= cap then
      local fit = 0
      if not fits then
        fit = ns_ceil_us(ns_sub(e_us, e_ns, b_us, b_ns))
      end
      retry = gcra_retry(now, fit, ns_ceil_us(st_us, st_ns), max_delay)
    end
    gcra_note(keys, now, mark, t, a, b, tn, v, floor, carried)
  end
  -- floor((t + B*T - max(TAT, t)) / T)
  local remaining = 0
  local lim_us, lim_ns = ns_norm(t + b_us, b_ns)
  if not ns_le(lim_us, lim_ns, st_us, st_ns) then
    local h_us, h_ns = ns_sub(lim_us, lim_ns, st_us, st_ns)
    remaining = math.min(gcra_floor_units(h_us, h_ns, t_us, t_ns), cap)
  end
  return verdict(allowed, remaining, gcra_reset(now, t, ns_ceil_us(st_us, st_ns)), retry,
    delay)
end

-- The leaky bucket passes `queue` (leaky_bucket/decide.lua); GCRA itself leaves it nil.
D.gcra = gcra_decide
