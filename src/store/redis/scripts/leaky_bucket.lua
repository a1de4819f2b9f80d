-- Leaky bucket as a queue: the Lua twin of src/algorithm/leaky_bucket.rs. GCRA's
-- state and admission rule; an admitted request is served when the queue ahead of
-- it has drained.

A.leaky_bucket = {}
for name, f in pairs(A.gcra) do
  A.leaky_bucket[name] = f
end

A.leaky_bucket.charge = function(p, s, now, cost)
  local served = ns_ceil_us(gcra_start(s, now))
  A.gcra.charge(p, s, now, cost)
  return served
end
