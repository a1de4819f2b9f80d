#!/usr/bin/env python3
"""The Lua work of the store's batch path, piece by piece, Redis's commands stubbed
(micro.lua): Redis main thread's CPU ns per piece (per decision for the batch rows),
median and range over rounds, the empty loop's cost taken off.

    scripts/bench-redis-profile micro [rounds, default 5]
"""
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import profile as p  # noqa: E402  (this directory's profile.py, ahead of the standard module)

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
N = 64
STUB = """local stub_state = false
local STUBBED = {}
local real_redis_register = redis.register_function
local function real_redis()
  return redis
end
local redis = {
  call = function(command, key)
    if command == 'TIME' then
      return { '1732000000', '1000' }
    elseif command == 'GET' then
      if string.sub(key, -2) == ':b' then
        return false
      end
      return stub_state
    end
    return true
  end,
  error_reply = function(message) return real_redis().error_reply(message) end,
  register_function = function(name, f)
    if name == 'pb_micro' then
      real_redis_register(name, f)
    else
      STUBBED[name] = f
    end
  end,
}
"""
# (piece, iterations, divided by): the batch rows run a batch of N per iteration.
PIECES = [
    ("empty", 2000000, 1),
    ("unpack", 300000, 1),
    ("unpack_grow", 300000, 1),
    ("unpack_locals", 300000, 1),
    ("own", 1000000, 1),
    ("call", 2000000, 1),
    ("pcall", 2000000, 1),
    ("verdict", 1000000, 1),
    ("packed_reply", 500000, 1),
    ("packed_reply_d", 500000, 1),
    ("packed_reply_5d", 500000, 1),
    ("gcra_pack", 500000, 1),
    ("ttl_ms", 1000000, 1),
    ("ttl_ceil", 1000000, 1),
    ("stub_call", 1000000, 1),
    ("loop_batch", 5000, N),
    ("inline_batch", 3000, N),
    ("inline_batch_existing", 3000, N),
    ("store_batch", 2000, N),
    ("store_batch_existing", 2000, N),
]


def main():
    lib = "\n".join(["#!lua name=profmicro", "do", STUB, p.library_body(), p.read(os.path.join(p.HERE, "steps.lua")),
                     p.read(os.path.join(p.HERE, "micro.lua")), "end"])
    keys = []
    for i in range(N):
        keys += [p.state_key(i).decode(), p.record_key(i).decode()]
    packed = p.DECISION * N
    with tempfile.TemporaryDirectory() as work:
        server = p.Server(work)
        try:
            out = server.cli("-x", "FUNCTION", "LOAD", "REPLACE", stdin=lib.encode())
            if out != "profmicro":
                raise RuntimeError("loading: " + out)
            ns = {}
            for rnd in range(ROUNDS + 1):
                for piece, count, per in PIECES:
                    before = server.on_cpu_ns()
                    out = server.cli("-x", "FCALL", "pb_micro", str(2 * N), *keys, piece, str(count), stdin=packed)
                    after = server.on_cpu_ns()
                    if out != "1":
                        raise RuntimeError(piece + ": " + out)
                    if rnd > 0:  # the first pass warms up
                        ns.setdefault(piece, []).append(((after - before) / count, per))
        finally:
            server.stop()
    empty = ns["empty"]
    print("Lua work per piece, Redis's commands stubbed: ns of Redis CPU, empty loop off; median (range) over %d rounds" % ROUNDS)
    print()
    print("| piece | ns | per |")
    print("|---|---:|---|")
    for piece, count, per in PIECES[1:]:
        xs = [(x - e[0]) / per for (x, per), e in zip(ns[piece], empty)]
        print("| %s | %.0f (%.0f–%.0f) | %s |" % (piece, p.median(xs), min(xs), max(xs), "decision" if per > 1 else "iteration"))


if __name__ == "__main__":
    main()
