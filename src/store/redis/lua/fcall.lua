-- tollgate: the entry point of the function library (Redis 7 and later; see
-- src/store/redis/function.rs). The library is the prelude and every algorithm's
-- `decide`, loaded once per server: a call runs only this function, where `EVALSHA`
-- runs a script's whole body (and creates its closures) every time. It takes one
-- charge, decided or dry-run, with the KEYS, ARGV (its numbers packed) and reply of
-- evalsha.lua; refunds and batches stay scripts. The Rust side appends the registration under the
-- library's versioned name.

local function call(keys, args)
  local decide = D[args[3]]
  if #args == 4 then
    args = lean_args(args)
  end
  if not args or (args[2] ~= 'a' and args[2] ~= 'd') or not decide then
    return redis.error_reply('tollgate: the function takes one charge, decided')
  end
  local now = decision_clock(args[1])
  local acquire = args[2] == 'a'
  local v = guarded(keys, now, args, 3, acquire, acquire)
  v[8] = now
  return packed_reply(v)
end
