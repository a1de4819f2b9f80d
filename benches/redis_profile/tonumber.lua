-- (a) What tollgate's entry point and GCRA decide do with their arguments before any
-- command: check the count and the mode, find the algorithm, try ARGV[1] as a number,
-- parse the floor after its 'f', and convert the six numbers GCRA reads.
-- call:
local mode = ARGV[2]
if #ARGV ~= 12 or (mode ~= 'a' and mode ~= 'd') or ARGV[3] ~= 'gcra' then
  return redis.error_reply('12 arguments')
end
local now = tonumber(ARGV[1])
local floor = tonumber(string.sub(ARGV[1], 2))
local cost, cap = tonumber(ARGV[4]), tonumber(ARGV[7])
local t_us, t_ns = tonumber(ARGV[8]), tonumber(ARGV[9])
local b_us, b_ns = tonumber(ARGV[10]), tonumber(ARGV[11])
if now or not (floor and cost and cap and t_us and t_ns and b_us and b_ns) then
  return 0
end
return 1
