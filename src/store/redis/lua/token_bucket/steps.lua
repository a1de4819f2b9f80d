-- Token bucket: the steps that evalsha_batch.lua combines for refunds; every
-- decision, batched or not, is `decide` (token_bucket/decide.lua).

local function tb_refill_time(p, units)
  return ceil_div(units, p.ups)
end

A.token_bucket = {
  nkeys = 1,
  load = function(keys)
    local v = read_state(keys[1])
    if not v then
      return nil
    end
    local s, d, l, u, r = struct.unpack(TB_STATE, v, 2)
    return { d = d, l = l, u = u, r = r, s = s }
  end,
  -- The steps below serve refunds: a deficit counted under another quota is
  -- re-counted first (the state is saved after a refund).
  normalize = function(p, s, now)
    if s.u ~= p.upt or s.r ~= p.ups then
      if s.u ~= 0 then
        s.d, s.l = tb_carry_over(s.d, s.l, s.u, s.r, now, p.upt)
      end
      s.u, s.r = p.upt, p.ups
    end
    s.d, s.l = tb_refill(s.d, s.l, now, p.ups)
    return s.l
  end,
  refund = function(p, s, _, amount)
    if amount >= ceil_div(s.d, p.upt) then
      s.d = 0
    else
      s.d = s.d - amount * p.upt
    end
  end,
  -- The refill repays the oldest deficit first: only the part of the charge still
  -- owed comes back, d * ups units less the reset instant's rounding (ups - 1), i.e.
  -- (d - 1) * ups + 1 (algorithm::still_owed); formed only when below `units`, so
  -- the product stays exact.
  refund_charge = function(p, s, t, amount, r)
    local units = amount * p.upt
    local d = owed_for(r, t)
    if d and units > 0 then
      if d == 0 then
        units = 0
      elseif d - 1 < ceil_div(units - 1, p.ups) then
        units = (d - 1) * p.ups + 1
      end
    end
    if units >= s.d then
      s.d = 0
    else
      s.d = s.d - units
    end
  end,
  idle_at = function(p, s)
    return s.l + tb_refill_time(p, s.d)
  end,
  save = function(keys, p, s, ttl)
    redis.call('SET', keys[1], tb_pack(MARKED, s.s, s.d, s.l, p.upt, p.ups), 'PX', ttl)
  end,
}
