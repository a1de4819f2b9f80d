-- (b) tollgate's reply: five integers of the verdict and the instant decided at.
-- call:
return { 1, 999999, 1000, -1, 0, 1732000000000000 }
