-- tollgate: blocks and the penalty box, the twin of src/penalty.rs (`Offences`) and of
-- the memory store's check before each decision (src/store/memory/shard.rs). Each
-- charge's last key, `<state key>:b`, holds "<blocked_until> <count> <first_at>" (µs)
-- with a TTL to the instant it says nothing any more. It shares the state's hash tag,
-- so it is read and written in the same call as the rate decision: a block or a
-- penalty costs no round trip of its own, and every process sees it.
--
-- A charge's penalty is its arguments i+10 .. i+12 (see evalsha.lua): the rejections
-- that trip the box (0: no box), the window and the block (µs).

local function pb_read(keys)
  local v = redis.call('GET', keys[#keys])
  if not v then
    return 0, 0, 0
  end
  local u, c, f = string.match(v, '^(%S+) (%S+) (%S+)$')
  return tonumber(u), tonumber(c), tonumber(f)
end

local function pb_write(keys, u, c, f, idle_at, now)
  redis.call('SET', keys[#keys], string.format('%.0f %.0f %.0f', u, c, f), 'PX',
    ttl_ms(idle_at, now))
end

-- A blocked key's verdict (Verdict::blocked): denied, nothing left, both waits the
-- block's end; then the block (µs left) and whether this call tripped it.
local function pb_blocked(left, tripped)
  return { 0, 0, left, left, 0, left, tripped and 1 or 0 }
end

-- Counts the rejection `v` of the charge at args[i..], whose record read (c, f)
-- (Offences::offend): the blocked verdict when it trips the box, else `v`.
local function pb_offend(keys, now, args, i, v, c, f)
  local n = tonumber(args[i + 10])
  if n == 0 or tonumber(args[i + 1]) == 0 then
    return v
  end
  local within, block = tonumber(args[i + 11]), tonumber(args[i + 12])
  if c == 0 or now >= f + within then
    c, f = 1, now
  else
    c = c + 1
  end
  if c < n then
    pb_write(keys, 0, c, f, f + within, now)
    return v
  end
  -- Tripped: blocked from now, and the count starts again.
  pb_write(keys, now + block, 0, 0, now + block, now)
  return pb_blocked(block, true)
end

-- One charge at args[i..] decided behind its block: a blocked key is denied without
-- reading its rate state (and charged nothing); with `count`, a rejection is counted
-- in the penalty box. Every reply carries the block fields.
local function guarded(keys, now, args, i, charge, count)
  local u, c, f = pb_read(keys)
  if u > now then
    return pb_blocked(u - now, false)
  end
  local v = D[args[i]](keys, now, args, i, charge)
  v[6], v[7] = -1, 0
  if count and v[1] == 0 then
    return pb_offend(keys, now, args, i, v, c, f)
  end
  return v
end
