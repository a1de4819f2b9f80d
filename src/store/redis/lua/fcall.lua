-- tollgate: the entry point of the function library (Redis 7 and later; see
-- src/store/redis/function.rs). The library is prelude.lua, every algorithm's
-- `decide`, block.lua, clock.lua, lean.lua and this file, loaded once per server: a
-- call runs only this function, where `EVALSHA` runs a script's whole body (and
-- creates its closures) every time. It takes one charge, decided or dry-run ('a',
-- 'd'), with the KEYS and reply of evalsha.lua, its arguments read here: one packed
-- argument (lean.lua; two with an escalation), or as text in evalsha.lua's layout (args[1] the clock, args[2]
-- the mode, the charge from args[3]). Refunds, batches and operators' calls stay
-- scripts. The Rust side appends the registration under the library's versioned
-- name.

local function call(keys, args)
  if #args == 1 or #args == 2 then
    local reply = lean_call(keys, args[1], args[2])
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
      v[9] = now
      return packed_reply(v)
    end
  end
  return redis.error_reply('tollgate: the function takes one charge, decided')
end
