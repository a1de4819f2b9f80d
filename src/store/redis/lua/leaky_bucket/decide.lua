-- Leaky bucket as a queue: the Lua twin of src/algorithm/leaky_bucket.rs. GCRA's
-- state and admission rule; an admitted request is served when the queue ahead of
-- it has drained, which must be within the policy's max_delay (the charge's fifth
-- algorithm parameter, µs): gcra_decide applies the bound when `queue` is set.

D.leaky_bucket = function(keys, now, args, i, charge, force, v, mark)
  return gcra_decide(keys, now, args, i, charge, force, v, mark, true)
end
