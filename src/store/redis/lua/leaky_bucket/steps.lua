-- Leaky bucket: GCRA's steps (gcra/steps.lua) with its own `decide`
-- (leaky_bucket.lua).

A.leaky_bucket = {}
for name, f in pairs(A.gcra) do
  A.leaky_bucket[name] = f
end
A.leaky_bucket.decide = D.leaky_bucket
