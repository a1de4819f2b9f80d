-- Token bucket: the steps that evalsha_batch.lua combines, for refunds and
-- batches; the common case only runs `decide` (token_bucket.lua).

local function tb_refill_time(p, units)
  return ceil_div(units, p.ups)
end

A.token_bucket = {
  nkeys = 1,
  load = function(keys)
    local s, tail, d, l = load_two(keys[1])
    if not s then
      return nil
    end
    return { d = d, l = l, s = s, tail = tail }
  end,
  fresh = function()
    return { d = 0, l = 0, s = 0 }
  end,
  decide = D.token_bucket,
  -- The steps below serve refunds.
  normalize = function(p, s, now)
    if now > s.l then
      -- elapsed * ups >= d  <=>  elapsed >= ceil(d / ups), without the product that
      -- may leave the exact range.
      local elapsed = now - s.l
      if elapsed >= tb_refill_time(p, s.d) then
        s.d = 0
      else
        s.d = s.d - elapsed * p.ups
      end
      s.l = now
    end
    -- A clock behind `l` stands still there: it refills nothing.
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
  save = function(keys, _, s, ttl)
    redis.call('SET', keys[1], string.format('%.0f %.0f %.0f', s.s, s.d, s.l), 'PX', ttl)
  end,
  touch = touch_string,
}
