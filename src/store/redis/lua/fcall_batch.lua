-- tollgate: the function library's second entry point, a batch of single decisions
-- (src/store/redis/coalesce.rs): the decisions that requests made while the
-- store's previous call was in flight, sent together in one FCALL so that Redis
-- parses, dispatches and answers one command for all of them. Each is decided as if
-- it had come alone (lean.lua's `lean_decide`, the code of the single call), in the
-- order sent, each with its own clock, its own keys and its own reply; one that
-- fails fails alone. There is no all-or-nothing between them: they are different
-- requests.
--
-- KEYS: each decision's keys in order, as its single call passes them: its state,
-- the log's sorted set for sliding_window_log, the base state when it reads the
-- record always marking it (reads 2), then the caller's record.
-- ARGV[1]: the decisions, each one byte, how many numbers it packs (13, or 16 with a
-- penalty box) plus 128 when its escalation follows among ARGV[2..], then those
-- numbers as little-endian doubles, in lean.lua's order.
-- ARGV[2..]: the escalations of the decisions that have one, in order.
--
-- Returns each decision's reply (`packed_reply`: its verdict's eight integers and the
-- instant it was decided at) joined in one string; when one failed, an array of
-- strings instead, each decision's reply or its error as the error reply's text after
-- a '-' (a reply starts with its verdict's `allowed`, 0 or 1: never '-'). Not RESP
-- errors inside the array: a client reads an array holding an error as a failed call,
-- and the other decisions' replies would be lost with it.

-- Where a sliding_window_log charge keeps its log: the one algorithm with a second
-- key (its place in `LEAN_ALGORITHMS`).
local LOG_PLACE = 4

local function call_batch(keys, args)
  local packed = args[1]
  local pos, next_key, next_escalation = 1, 1, 2
  local time = nil
  local replies = {}
  local failed = false
  -- One argument table for every decision in turn (`lean_unpack` fills it anew; the
  -- decisions run one after the other and keep nothing of it).
  local a = lean_args()
  -- And one keys table: a decision has 2 to 4 keys; the slots past its own are nil, so
  -- `#keys` (the record's, last: block.lua) counts its own only. Allocated at its
  -- size, where a table built key by key would grow twice for every decision.
  local own = { false, false, false, false }
  while pos <= #packed do
    local head = string.byte(packed, pos)
    local n = head % 128
    if not LEAN_FORMATS[n] then
      return redis.error_reply('tollgate: a batched decision packs 13 or 16 numbers')
    end
    pos = lean_unpack(a, n, packed, pos + 1)
    local escalation = nil
    if head >= 128 then
      escalation = args[next_escalation]
      next_escalation = next_escalation + 1
    end
    -- Its keys: the record's and the state's, the log's, and the base state's when
    -- it reads the record always marking it (the mode number's 2 × reads).
    local count = 2
    if a[4] == LOG_PLACE then
      count = count + 1
    end
    if a[3] >= 4 then
      count = count + 1
    end
    own[3], own[4] = nil, nil
    for j = 1, count do
      own[j] = keys[next_key]
      next_key = next_key + 1
    end
    if a[1] ~= 0 and not time then
      time = server_time()
    end
    local ok, v = pcall(lean_decide, own, a, escalation, time)
    if ok and v then
      replies[#replies + 1] = packed_reply(v)
    else
      failed = true
      local message = 'ERR tollgate: the batched decision names no algorithm here'
      if not ok then
        message = v
        if type(v) == 'table' then
          message = v.err
        elseif not string.match(tostring(v), '^%u+ ') then
          message = 'ERR ' .. tostring(v)
        end
      end
      replies[#replies + 1] = '-' .. message
    end
  end
  if failed then
    return replies
  end
  return table.concat(replies)
end
