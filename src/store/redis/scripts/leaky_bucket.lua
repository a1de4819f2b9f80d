-- Leaky bucket as a queue: the Lua twin of src/algorithm/leaky_bucket.rs. GCRA's
-- state and admission rule; an admitted request is served when the queue ahead of
-- it has drained.

A.leaky_bucket = {}
for name, f in pairs(A.gcra) do
  A.leaky_bucket[name] = f
end

A.leaky_bucket.decide = function(keys, now, args, i, charge)
  return gcra_decide(keys, now, args, i, charge, true)
end
