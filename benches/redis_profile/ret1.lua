-- The floor: a call that does nothing, run with 12, 4 and no arguments (the shapes of
-- tollgate's and the classic script's calls): what dispatch and argument count cost.
-- call:
return 1
