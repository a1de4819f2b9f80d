-- GCRA: the Lua twin of src/algorithm/gcra.rs.
-- Nanoseconds since the epoch (~1.7e18) are not exact in a double, so every instant
-- and duration is a pair (µs, ns) with 0 <= ns < 1000: the TAT, T = (p.t_us, p.t_ns)
-- and B*T = (p.b_us, p.b_ns), all split in Rust.
-- State (hash): a, b = TAT as (µs, ns) (0, 0 when idle), s = latest instant seen.

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

-- max(TAT, now): where the next charge starts.
local function gcra_start(s, now)
  if ns_le(s.a, s.b, now, 0) then
    return now, 0
  end
  return s.a, s.b
end

-- max(TAT, now) + c*T
local function gcra_end(p, s, now, cost)
  local s_us, s_ns = gcra_start(s, now)
  local c_us, c_ns = ns_mul(cost, p.t_us, p.t_ns)
  return ns_add(s_us, s_ns, c_us, c_ns)
end

-- Whether n*T <= h.
local function gcra_fits(p, n, h_us, h_ns)
  local m_us, m_ns = ns_mul(n, p.t_us, p.t_ns)
  return ns_le(m_us, m_ns, h_us, h_ns)
end

A.gcra = {
  nkeys = 1,
  load = function(keys)
    local v = redis.call('HMGET', keys[1], 'a', 'b', 's')
    if not v[1] then
      return nil
    end
    return { a = tonumber(v[1]), b = tonumber(v[2]), s = tonumber(v[3]) }
  end,
  fresh = function()
    return { a = 0, b = 0, s = 0 }
  end,
  normalize = function(_, _, now)
    -- max(TAT, now) already treats a clock that went back as standing still.
    return now
  end,
  admits = function(p, s, now, cost)
    -- max(TAT, now) + c*T <= now + B*T
    local e_us, e_ns = gcra_end(p, s, now, cost)
    return ns_le(e_us, e_ns, now + p.b_us, p.b_ns)
  end,
  charge = function(p, s, now, cost)
    s.a, s.b = gcra_end(p, s, now, cost)
    return now
  end,
  remaining = function(p, s, now)
    -- floor((now + B*T - max(TAT, now)) / T): a double estimate, then corrected with
    -- exact pair arithmetic (the estimate is off by at most one).
    local lim_us, lim_ns = ns_norm(now + p.b_us, p.b_ns)
    local s_us, s_ns = gcra_start(s, now)
    if ns_le(lim_us, lim_ns, s_us, s_ns) then
      return 0
    end
    local h_us, h_ns = ns_sub(lim_us, lim_ns, s_us, s_ns)
    local q = math.floor((h_us * 1000 + h_ns) / (p.t_us * 1000 + p.t_ns))
    while q > 0 and not gcra_fits(p, q, h_us, h_ns) do
      q = q - 1
    end
    while gcra_fits(p, q + 1, h_us, h_ns) do
      q = q + 1
    end
    return q
  end,
  reset_at = function(_, s, now)
    return ns_ceil_us(gcra_start(s, now))
  end,
  retry_at = function(p, s, now, cost)
    -- max(TAT, now) + c*T - B*T, the instant the same request would fit.
    local e_us, e_ns = gcra_end(p, s, now, cost)
    return ns_ceil_us(ns_sub(e_us, e_ns, p.b_us, p.b_ns))
  end,
  refund = function(p, s, now, amount)
    -- TAT = max(now, TAT - r*T), saturating: a refund larger than the TAT is idle.
    local r_us, r_ns
    if p.t_us > 0 and amount > idiv(s.a, p.t_us) + 1 then
      r_us, r_ns = s.a + 1, 0
    else
      r_us, r_ns = ns_mul(amount, p.t_us, p.t_ns)
    end
    local a, b = 0, 0
    if ns_le(r_us, r_ns, s.a, s.b) then
      a, b = ns_sub(s.a, s.b, r_us, r_ns)
    end
    if ns_le(a, b, now, 0) then
      a, b = now, 0
    end
    s.a, s.b = a, b
  end,
  idle_at = function(_, s)
    return ns_ceil_us(s.a, s.b)
  end,
  save = function(keys, _, s, ttl)
    hset(keys[1], 'a', s.a, 'b', s.b, 's', s.s)
    redis.call('PEXPIRE', keys[1], ttl)
  end,
}
