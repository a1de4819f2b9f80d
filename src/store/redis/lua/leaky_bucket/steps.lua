-- Leaky bucket: GCRA's steps (gcra/steps.lua); its decisions are its own `decide`
-- (leaky_bucket/decide.lua).

A.leaky_bucket = {}
for name, f in pairs(A.gcra) do
  A.leaky_bucket[name] = f
end
-- A queued request's place is its share of the TAT, as GCRA's; places are ahead once
-- the TAT is past the request being served (one T): gcra_refund_charge.
A.leaky_bucket.refund_charge = function(p, s, t, amount, r)
  gcra_refund_charge(p, s, t, amount, r, p.t_us, p.t_ns)
end
A.leaky_bucket.refund_place = function(keys, p, s, amount, r, v)
  gcra_refund_place(keys, p, s, amount, r, p.t_us, p.t_ns, v)
end
