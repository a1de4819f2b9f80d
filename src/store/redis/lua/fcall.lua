-- tollgate: the entry point of the function library (Redis 7 and later; see
-- src/store/redis/function.rs). The library is the prelude and every algorithm's
-- `decide`, loaded once per server: a call runs only this function, where `EVALSHA`
-- runs a script's whole body (and creates its closures) every time. It takes one
-- charge, decided or dry-run, packed as lean.lua reads it (or as text, evalsha.lua's
-- layout), with the KEYS and reply of evalsha.lua; refunds and batches stay scripts. The Rust side appends the registration under the
-- library's versioned name.

local function call(keys, args)
  if #args == 1 then
    local reply = lean_call(keys, args[1])
    if reply then
      return reply
    end
  else
    -- The same call with its arguments as text (evalsha.lua's layout): what a tool
    -- that cannot send binary arguments (redis-benchmark) calls.
    local decide = D[args[3]]
    if decide and (args[2] == 'a' or args[2] == 'd') then
      local now = decision_clock(args[1])
      local acquire = args[2] == 'a'
      local v = guarded(keys, now, args, 3, acquire, acquire)
      v[8] = now
      return packed_reply(v)
    end
  end
  return redis.error_reply('tollgate: the function takes one charge, decided')
end
