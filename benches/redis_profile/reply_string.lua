-- (b) tollgate's six integers as one bulk string (the client would split it).
-- call:
return '1 999999 1000 -1 0 1732000000000000'
