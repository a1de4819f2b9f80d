-- (g) The same decision as gcra_pairs.lua with every instant and duration a whole
-- number of µs (exact when T and B·T are whole µs): plain arithmetic on locals.
-- call:
local now = 1732000000000000
local tat = now + 5000
local cost, cap = 1, 1000000
local t, bt = 1000, 1000000000
local st = math.max(tat, now)
local e = st + cost * t
local ok = e <= now + bt
local h = now + bt - e
local remaining = 0
if h > 0 then
  remaining = math.min((h - h % t) / t, cap)
end
local reset = e - now
return (ok and remaining > 0 and reset > 0) and 1 or 0
