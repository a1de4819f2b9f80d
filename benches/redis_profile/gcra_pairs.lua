-- (g) A GCRA decision's arithmetic with every instant and duration a (µs, ns) pair,
-- through tollgate's own pair helpers (ns_norm, ns_add, ns_sub, ns_le, ns_mul,
-- ns_ceil_us, gcra_fits of src/store/redis/lua/gcra/decide.lua, which the line below
-- makes scripts/bench-redis-profile load ahead of this file): the admit test, the new
-- TAT, `remaining` with an exact check of its estimate and the reset, the pair work
-- tollgate's GCRA does, on a state given as constants: no command, no parsing.
-- with: tollgate's gcra helpers
-- call:
local now = 1732000000000000
local tat_us, tat_ns = now + 5000, 0
local cost, cap = 1, 1000000
local t_us, t_ns, b_us, b_ns = 1000, 0, 1000000000, 0
local st_us, st_ns = tat_us, tat_ns
if ns_le(tat_us, tat_ns, now, 0) then
  st_us, st_ns = now, 0
end
local c_us, c_ns = ns_mul(cost, t_us, t_ns)
local e_us, e_ns = ns_add(st_us, st_ns, c_us, c_ns)
local ok = ns_le(e_us, e_ns, now + b_us, b_ns)
st_us, st_ns = e_us, e_ns
local lim_us, lim_ns = ns_norm(now + b_us, b_ns)
local remaining = 0
if not ns_le(lim_us, lim_ns, st_us, st_ns) then
  local h_us, h_ns = ns_sub(lim_us, lim_ns, st_us, st_ns)
  -- A double estimate, then one exact check each way (what the correction costs when
  -- the estimate is right, as it is here).
  local q = math.floor((h_us * 1000 + h_ns) / (t_us * 1000 + t_ns))
  if q > 0 and not gcra_fits(q, t_us, t_ns, h_us, h_ns) then
    q = q - 1
  elseif gcra_fits(q + 1, t_us, t_ns, h_us, h_ns) then
    q = q + 1
  end
  remaining = math.min(q, cap)
end
local reset = ns_ceil_us(st_us, st_ns) - now
return (ok and remaining > 0 and reset > 0) and 1 or 0
