-- GCRA: the steps that evalsha_batch.lua combines for refunds; every
-- decision, batched or not, is `decide` (gcra/decide.lua).

-- TAT = max(floor, TAT − r) for a refund of r (µs, ns), saturating at 0.
local function take_back(s, r_us, r_ns, floor)
  local a, b = 0, 0
  if ns_le(r_us, r_ns, s.a, s.b) then
    a, b = ns_sub(s.a, s.b, r_us, r_ns)
  end
  if ns_le(a, b, floor, 0) then
    a, b = floor, 0
  end
  s.a, s.b = a, b
end

-- gcra::refund_charge_behind: while places are reserved ahead of the clock (the TAT
-- more than (ahead_us, ahead_ns) past `t`: GCRA's burst, the leaky bucket's one T),
-- only the newest charge (its receipt's end is the TAT) comes back: taking an older
-- one off the TAT's end would give its place to the next request a second time.
-- Ahead of the script's clock `now` (evalsha.lua), not of `t`: a reservation leaves
-- its place as the state's latest instant, which is not where the clock is.
local function gcra_refund_charge(p, s, t, amount, r, ahead_us, ahead_ns)
  if not ns_le(s.a, s.b, now + ahead_us, ahead_ns) and r.till ~= ns_ceil_us(s.a, s.b) then
    return
  end
  local r_us, r_ns = ns_mul(amount, p.t_us, p.t_ns)
  local d = owed_for(r, t)
  if d then
    local o_us, o_ns = d, 0
    if p.t_ns > 0 and d > 0 then
      o_us, o_ns = ns_sub(d, 0, 0, 999)
    end
    if ns_le(o_us, o_ns, r_us, r_ns) then
      r_us, r_ns = o_us, o_ns
    end
  end
  take_back(s, r_us, r_ns, t)
end

-- The most places a record keeps given back out of order (blocks.rs MAX_PARKED).
local MAX_PARKED = 64

-- Gives back the place of receipt `r` (`amount` of it) on a GCRA or leaky-bucket
-- state `s` whose caller's record is keys[#keys]: the twin of the memory store's
-- `Shard::refund_place`. Only the newest charge comes off the TAT's end; an older
-- place given back while later ones are reserved is parked in the record, and comes
-- off once the places after it have (in any order). The queue's tail, and the
-- state's latest instant (a reservation left its place there), then move back to
-- the place the TAT's end admits. Decided on the script's clock `now`. `v` is the
-- record as `refund` (evalsha_batch.lua) read it (false: none).
local function gcra_refund_place(keys, p, s, amount, r, ahead_us, ahead_ns, v)
  local u, c, f, q, rest = 0, 0, 0, 0, ''
  if v then
    u, c, f, q, rest = pb_parse(v)
  end
  local parked = pb_parked(rest)
  local function save()
    -- An operator's reset's instant (evalsha_batch.lua, mode 'x') and the trips stay.
    redis.call('SET', keys[#keys],
      pb_text(u, c, f, q, pb_suffix(pb_reset_at(rest), parked, pb_trips(rest))), 'KEEPTTL')
  end
  local ahead = not ns_le(s.a, s.b, now + ahead_us, ahead_ns)
  if ahead and r.till ~= ns_ceil_us(s.a, s.b) then
    if v and #parked < MAX_PARKED then
      parked[#parked + 1] = { till = r.till, at = r.at, cost = amount }
      save()
    end
    return
  end
  local e = { till = r.till, at = r.at, cost = amount }
  while e do
    gcra_refund_charge(p, s, now, e.cost, e, ahead_us, ahead_ns)
    e = nil
    local last = ns_ceil_us(s.a, s.b)
    local kept = {}
    for _, x in ipairs(parked) do
      -- Places whose time has come are served, not given back.
      if x.till > now then
        if not e and x.till == last then
          e = x
        else
          kept[#kept + 1] = x
        end
      end
    end
    parked = kept
  end
  if v then
    -- The latest place still reserved is where the TAT's end admits.
    local tail = 0
    if ns_le(p.b_us, p.b_ns, s.a, s.b) then
      tail = ns_ceil_us(ns_sub(s.a, s.b, p.b_us, p.b_ns))
    end
    q = math.min(q, tail)
    save()
    s.s = math.max(now, math.min(s.s, q))
  end
end

A.gcra = {
  nkeys = 1,
  load = function(keys)
    local v = read_state(keys[1])
    if not v then
      return nil
    end
    local s, a, b, e = struct.unpack(GCRA_STATE, v, 2)
    return { a = a, b = b, e = e, s = s }
  end,
  -- For refunds: a TAT counted under another quota is re-counted first (the state is
  -- saved after a refund).
  normalize = function(p, s, now)
    local tn = p.t_us * 1000 + p.t_ns
    if s.e ~= tn then
      s.a, s.b = gcra_carry_over(s.a, s.b, s.e, now, p.t_us, p.t_ns)
      s.e = tn
    end
    return now
  end,
  refund = function(p, s, now, amount)
    -- TAT = max(now, TAT - r*T), saturating: a refund larger than the TAT is idle.
    local r_us, r_ns
    if p.t_us > 0 and amount > idiv(s.a, p.t_us) + 1 then
      r_us, r_ns = s.a + 1, 0
    else
      r_us, r_ns = ns_mul(amount, p.t_us, p.t_ns)
    end
    take_back(s, r_us, r_ns, now)
  end,
  -- Time repays the debt up to the TAT oldest first: only the part of the charge
  -- still owed comes back (algorithm::still_owed: with a whole-µs T every TAT is a
  -- whole µs and the receipt's reset instant exact; otherwise less its rounding,
  -- 999 ns). In ns, as pairs.
  refund_charge = function(p, s, t, amount, r)
    gcra_refund_charge(p, s, t, amount, r, p.b_us, p.b_ns)
  end,
  refund_place = function(keys, p, s, amount, r, v)
    gcra_refund_place(keys, p, s, amount, r, p.b_us, p.b_ns, v)
  end,
  idle_at = function(_, s)
    return ns_ceil_us(s.a, s.b)
  end,
  save = function(keys, p, s, ttl)
    redis.call('SET', keys[1], gcra_pack(MARKED, s.s, s.a, s.b, p.t_us * 1000 + p.t_ns), 'PX',
      ttl)
  end,
}
