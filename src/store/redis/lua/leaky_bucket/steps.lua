-- Leaky bucket: GCRA's steps (gcra/steps.lua); its decisions are its own `decide`
-- (leaky_bucket/decide.lua).

A.leaky_bucket = {}
for name, f in pairs(A.gcra) do
  A.leaky_bucket[name] = f
end
