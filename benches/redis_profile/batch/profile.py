#!/usr/bin/env python3
"""Where a coalesced decision's Redis CPU goes: the store's batch function and the steps
of benches/redis_profile/batch/steps.lua, in batches of N decisions, on fresh keys and on
keys with state, against the classic GCRA script alone and in the same batch loop.

    scripts/bench-redis-profile batch [decisions per row, default 64000] [rounds, default 3]
    BATCH_SIZES=1,8,21,64 ONLY='<regex>' scripts/bench-redis-profile batch ...

One private redis-server on 127.0.0.1 (a free port from 16479 up, never 6379), pinned to
core REDIS_CPU (default 0) with taskset; the load, `redis-cli --pipe` fed a file of
ready-made calls (binary arguments, as the store sends them, which redis-benchmark cannot
send), on the other core. Every row starts from FLUSHALL; a row on keys with state first
writes every key's state (not measured): tollgate's GCRA state ('.', unmarked, then
s, TAT, 0, T as packed doubles, the TAT ten seconds past: the decision charges from now
and writes SET ... PX, as a key idle for a while does), or the classic script's TAT as
text. A row's figure is the CPU time of Redis's main thread over the row
(/proc/<pid>/task/<pid>/schedstat, on-CPU time only: reading, parsing, running and
answering each call, and nothing the machine's other load does to wall time) divided by
the decisions; each round runs every row once, the rows' order rotated from round to
round; a warm-up pass (a quarter of the decisions per row) goes first. The summary gives
each row's median and range over the rounds, and each step's cost as the median and
range of the per-round differences with the step before it (same round, same N, same
keys).
"""
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
LUA = os.path.join(ROOT, "src", "store", "redis", "lua")
HERE = os.path.join(ROOT, "benches", "redis_profile", "batch")
CLASSIC = os.path.join(ROOT, "benches", "redis_profile", "classic_gcra.lua")

DECISIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 64000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SIZES = [int(x) for x in os.environ.get("BATCH_SIZES", "1,8,21,64").split(",")]
ONLY = os.environ.get("ONLY")
REDIS_CPU = int(os.environ.get("REDIS_CPU", "0"))
LOAD_CPU = (1 - REDIS_CPU % 2) if os.cpu_count() > 1 else 0

# benches/redis.rs's gcra_args(): server time with a floor of 1 (kind 2), acquire, GCRA
# (6th algorithm), cost 1, limit 10⁶, period 10⁹ µs, capacity 10⁶, T = (1000 µs, 0 ns),
# B·T = (10⁹ µs, 0 ns), the leaky bucket's bound 0. Head byte: 13 numbers, no escalation.
GCRA = [2.0, 1.0, 0.0, 6.0, 1.0, 1e6, 1e9, 1e6, 1000.0, 0.0, 1e9, 0.0, 0.0]
DECISION = bytes([13]) + struct.pack("<13d", *GCRA)
# pb_min's decision: the clock's kind and value, cost, capacity, T and B·T (µs).
DECISION_MIN = struct.pack("<6d", 2.0, 1.0, 1.0, 1e6, 1000.0, 1e9)
CLASSIC_ARGS = [b"1000000", b"1000000", b"1000", b"1"]


def state_key(i):
    # The store's GCRA key for this quota (keys.rs `state_key`: prefix, limit, {key}, algorithm, period µs).
    return b"tg:bench:{%x}:gcra:1000000000" % i


def record_key(i):
    return b"tg:bench:{%x}:b" % i


def classic_key(i):
    return b"classic:bench:{%x}:gcra:1000000000" % i


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def read(name):
    with open(name) as f:
        return f.read()


def library_body():
    """tollgate's library as src/store/redis/function.rs joins it, without its registrations."""
    algorithms = re.findall(r"'([a-z_]+)'", re.search(r"local LEAN_ALGORITHMS = \{[^}]*\}", read(os.path.join(LUA, "lean.lua"))).group(0))
    body = read(os.path.join(LUA, "prelude.lua"))
    for a in algorithms:
        body += read(os.path.join(LUA, a, "decide.lua"))
    for part in ["block.lua", "clock.lua", "lean.lua", "fcall.lua", "fcall_batch.lua"]:
        body += read(os.path.join(LUA, part))
    return body


def library():
    """tollgate's library as function.rs joins it, then the steps; then the same body with
    `redis.call` wrapped (SET dropped; passed through), and with the candidate's record
    read, each in a block of its own."""
    body = library_body()
    guard = "  if not state or mark_byte == MARK_BYTE or args[i + 13] + 0 > 0 then\n"
    assert body.count(guard) == 1, "block.lua's guarded no longer reads the record as this profile expects"
    skip = body.replace(guard, "  if mark_byte == MARK_BYTE or args[i + 13] + 0 > 0 then\n")
    classic = read(CLASSIC)
    wrap = """-- The global `redis` as a call sees it (a library's load sees another, partial one).
local function real_redis()
  return redis
end
local redis = {
  call = %s,
  error_reply = function(message) return real_redis().error_reply(message) end,
  register_function = redis.register_function,
}
"""
    drop_set = "function(command, ...) if command == 'SET' then return true end return real_redis().call(command, ...) end"
    through = "function(...) return real_redis().call(...) end"
    return "\n".join([
        "#!lua name=profbatch",
        "do", body, "redis.register_function('pb_real', call_batch)",
        read(os.path.join(HERE, "steps.lua")),
        "local function classic_one(KEYS, ARGV)", classic, "end",
        "redis.register_function('pb_classic_one', classic_one)",
        "end",
        "do", wrap % drop_set, body, "redis.register_function('pb_real_noset', call_batch)", "end",
        "do", wrap % through, body, "redis.register_function('pb_real_wrapped', call_batch)", "end",
        "do", skip, "redis.register_function('pb_real_skip', call_batch)", "end",
    ])


# A row: (label, function, key layout, which keys it runs on, reference row label or None).
# Layout 'tg': each decision's state and record keys and packed numbers; 'classic_batch':
# 'tg1': the state keys alone; 'min': the state keys alone and pb_min's six numbers; 'classic_batch': one classic key per decision, the same packed numbers; 'classic_one' / 'classic_evalsha':
# classic_gcra.lua alone, one decision per call, its four arguments as text.
STEPS = [
    ("(0) return 1 (the call alone)", "pb_ret1", "tg", "any", None),
    ("(a) loop + 72-byte reply each", "pb_a", "tg", "any", "(0) return 1 (the call alone)"),
    ("(b) + unpack the 13 numbers", "pb_b", "tg", "any", "(a) loop + 72-byte reply each"),
    ("(c) + clock (one TIME per batch)", "pb_c", "tg", "any", "(b) + unpack the 13 numbers"),
    ("(d) + GET state", "pb_d", "tg", "state", "(c) + clock (one TIME per batch)"),
    ("(e) + GET record (state missing or marked)", "pb_e", "tg", "state", "(d) + GET state"),
    ("(f) + GCRA rule + packed reply", "pb_f", "tg", "state", "(e) + GET record (state missing or marked)"),
    ("(g) + SET … PX: whole decision, inline", "pb_g", "tg", "state", "(f) + GCRA rule + packed reply"),
    ("store's batch, SET dropped (redis.call wrapped)", "pb_real_noset", "tg", "state", "(f) + GCRA rule + packed reply"),
    ("store's batch, redis.call wrapped", "pb_real_wrapped", "tg", "state", "store's batch, SET dropped (redis.call wrapped)"),
    ("store's batch (fcall_batch.lua, as loaded)", "pb_real", "tg", "state", "(g) + SET … PX: whole decision, inline"),
    ("candidate: store's batch, no record GET on a missing state", "pb_real_skip", "tg", "state", "store's batch (fcall_batch.lua, as loaded)"),
    ("candidate: (g) with no record GET on a missing state", "pb_g_skip", "tg", "state", "(g) + SET … PX: whole decision, inline"),
    ("candidate: (g), no record GET on a missing state, state key alone sent", "pb_g_skip1", "tg1", "state", "candidate: (g) with no record GET on a missing state"),
    ("candidate: all at once (steps.lua's lean_min)", "pb_min", "min", "state", "(g) + SET … PX: whole decision, inline"),
    ("(0) return 1, state key alone sent", "pb_ret1_1", "tg1", "any", "(0) return 1 (the call alone)"),
    ("classic GCRA in the same batch loop", "pb_classic_batch", "classic_batch", "state", None),
]
SINGLES = [
    ("classic GCRA script alone, EVALSHA", None, "classic_evalsha", "state", None),
    ("classic GCRA script alone, FCALL", "pb_classic_one", "classic_one", "state", None),
]


def rows():
    out = []
    for label, fn, layout, keys, ref in STEPS:
        for n in SIZES:
            for kind in (["any"] if keys == "any" else ["fresh", "existing"]):
                out.append(dict(label=label, fn=fn, layout=layout, n=n, kind=kind, ref=ref))
    for label, fn, layout, keys, ref in SINGLES:
        for kind in ["fresh", "existing"]:
            out.append(dict(label=label, fn=fn, layout=layout, n=1, kind=kind, ref=ref))
    if ONLY:
        keep = {r["label"] for r in out if re.search(ONLY, r["label"])}
        keep |= {r["ref"] for r in out if r["label"] in keep and r["ref"]}
        out = [r for r in out if r["label"] in keep]
    return out


def free_port():
    port = 16479
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return port
        port += 1


class Server:
    def __init__(self, work):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(REDIS_CPU), "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", work, "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if self.cli("PING", check=False) == "PONG":
                break
            time.sleep(0.1)

    def cli(self, *args, stdin=None, check=True):
        out = subprocess.run(["redis-cli", "-p", str(self.port), *args], input=stdin, capture_output=True, timeout=300)
        if check and out.returncode != 0:
            raise RuntimeError(out.stderr.decode())
        return out.stdout.decode().strip()

    def pipe(self, path):
        with open(path, "rb") as f:
            out = subprocess.run(["taskset", "-c", str(LOAD_CPU), "redis-cli", "-p", str(self.port), "--pipe"],
                                 stdin=f, capture_output=True, timeout=600)
        m = re.search(rb"errors: (\d+), replies: (\d+)", out.stdout)
        if not m or m.group(1) != b"0":
            raise RuntimeError("redis-cli --pipe: %r %r" % (out.stdout[-400:], out.stderr[-400:]))
        return int(m.group(2))

    def on_cpu_ns(self):
        with open("/proc/%d/task/%d/schedstat" % (self.proc.pid, self.proc.pid)) as f:
            return int(f.read().split()[0])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def calls_file(path, row, decisions, sha):
    n = row["n"]
    calls = decisions // n
    with open(path, "wb") as f:
        for c in range(calls):
            first = c * n
            if row["layout"] == "tg":
                keys = []
                for i in range(first, first + n):
                    keys += [state_key(i), record_key(i)]
                f.write(command(b"FCALL", row["fn"], b"%d" % (2 * n), *keys, DECISION * n))
            elif row["layout"] == "tg1":
                keys = [state_key(i) for i in range(first, first + n)]
                f.write(command(b"FCALL", row["fn"], b"%d" % n, *keys, DECISION * n))
            elif row["layout"] == "min":
                keys = [state_key(i) for i in range(first, first + n)]
                f.write(command(b"FCALL", row["fn"], b"%d" % n, *keys, DECISION_MIN * n))
            elif row["layout"] == "classic_batch":
                keys = [classic_key(i) for i in range(first, first + n)]
                f.write(command(b"FCALL", row["fn"], b"%d" % n, *keys, DECISION * n))
            elif row["layout"] == "classic_one":
                f.write(command(b"FCALL", row["fn"], b"1", classic_key(first), *CLASSIC_ARGS))
            else:
                f.write(command(b"EVALSHA", sha, b"1", classic_key(first), *CLASSIC_ARGS))
    return calls * n, calls


def states_file(path, row, decisions):
    """Every key's state, as a key idle for ten seconds holds it."""
    past_us = (time.time() - 10) * 1e6
    past_us = float(int(past_us))
    with open(path, "wb") as f:
        for i in range(decisions):
            if row["layout"] in ("tg", "tg1", "min"):
                value = b"." + struct.pack("<dddd", past_us, past_us, 0.0, 1e6)
                f.write(command(b"SET", state_key(i), value, b"PX", b"600000"))
            else:
                f.write(command(b"SET", classic_key(i), repr(past_us / 1e6).encode(), b"EX", b"600"))


def run_row(server, work, row, decisions, sha):
    calls_path = os.path.join(work, "calls")
    decided, calls = calls_file(calls_path, row, decisions, sha)
    server.cli("FLUSHALL", "SYNC")
    if row["kind"] == "existing":
        states_path = os.path.join(work, "states")
        states_file(states_path, row, decisions)
        server.pipe(states_path)
    server.cli("CONFIG", "RESETSTAT")
    before = server.on_cpu_ns()
    start = time.monotonic()
    replies = server.pipe(calls_path)
    wall = time.monotonic() - start
    after = server.on_cpu_ns()
    assert replies == calls, (replies, calls)
    return (after - before) / 1000 / decided, decided / wall


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt(xs):
    return "%.2f (%.2f–%.2f)" % (median(xs), min(xs), max(xs))


def main():
    with tempfile.TemporaryDirectory() as work:
        server = Server(work)
        try:
            version = server.cli("INFO", "server")
            version = re.search(r"redis_version:(\S+)", version).group(1)
            print("redis-server %s on port %d, pinned to core %d; redis-cli --pipe on core %d; %d decisions per row, %d rounds"
                  % (version, server.port, REDIS_CPU, LOAD_CPU, DECISIONS, ROUNDS), flush=True)
            out = server.cli("-x", "FUNCTION", "LOAD", "REPLACE", stdin=library().encode())
            if out != "profbatch":
                raise RuntimeError("loading the profile library: " + out)
            sha = server.cli("-x", "SCRIPT", "LOAD", stdin=read(CLASSIC).encode()).encode()
            all_rows = rows()
            print("warm-up (every row once, %d decisions)" % (DECISIONS // 4), file=sys.stderr, flush=True)
            for row in all_rows:
                run_row(server, work, row, DECISIONS // 4, sha)
            cpu = {}
            rate = {}
            for rnd in range(ROUNDS):
                with open("/proc/loadavg") as f:
                    load = " ".join(f.read().split()[:3])
                print("round %d of %d (%s load)" % (rnd + 1, ROUNDS, load), file=sys.stderr, flush=True)
                shift = rnd * len(all_rows) // max(ROUNDS, 1)
                for row in all_rows[shift:] + all_rows[:shift]:
                    key = (row["label"], row["n"], row["kind"])
                    c, r = run_row(server, work, row, DECISIONS, sha)
                    cpu.setdefault(key, [None] * ROUNDS)[rnd] = c
                    rate.setdefault(key, [None] * ROUNDS)[rnd] = r
        finally:
            server.stop()

    kinds = ["fresh", "existing"]
    print()
    print("Redis main thread's CPU µs per decision (schedstat), median (range) over %d rounds of %d decisions per row;"
          % (ROUNDS, DECISIONS))
    print("'any': the row reads no key. Step: the row minus its reference row, per round (same N, same keys).")
    labels = []
    for r in all_rows:
        if r["label"] not in labels:
            labels.append(r["label"])
    refs = {r["label"]: r["ref"] for r in all_rows}
    for kind in kinds:
        print()
        print("### %s keys" % kind)
        print()
        print("| row | " + " | ".join("N = %d" % n for n in SIZES) + " |")
        print("|---|" + "---:|" * len(SIZES))
        for label in labels:
            cells = []
            for n in SIZES:
                key = next(((label, n, k) for k in (kind, "any") if (label, n, k) in cpu), None)
                if key is None:
                    cells.append("")
                    continue
                cells.append(fmt(cpu[key]))
            if any(cells):
                print("| %s | %s |" % (label, " | ".join(cells)))
        print()
        print("| step (row − reference, per round) | " + " | ".join("N = %d" % n for n in SIZES) + " |")
        print("|---|" + "---:|" * len(SIZES))
        for label in labels:
            ref = refs[label]
            if not ref:
                continue
            cells = []
            for n in SIZES:
                a = next(((label, n, k) for k in (kind, "any") if (label, n, k) in cpu), None)
                b = next(((ref, n, k) for k in (kind, "any") if (ref, n, k) in cpu), None)
                if a is None or b is None:
                    cells.append("")
                    continue
                d = [x - y for x, y in zip(cpu[a], cpu[b])]
                cells.append("%+.2f (%+.2f to %+.2f)" % (median(d), min(d), max(d)))
            print("| %s − %s | %s |" % (label, ref.split(" ")[0] if ref.startswith("(") else ref, " | ".join(cells)))
        # The batched decision against the classic script alone (EVALSHA), per round.
        base = ("classic GCRA script alone, EVALSHA", 1, kind)
        if base in cpu:
            print()
            print("| against the classic script alone (EVALSHA), CPU per decision, per round | "
                  + " | ".join("N = %d" % n for n in SIZES) + " |")
            print("|---|" + "---:|" * len(SIZES))
            for label in ["store's batch (fcall_batch.lua, as loaded)", "(g) + SET … PX: whole decision, inline",
                          "candidate: all at once (steps.lua's lean_min)",
                          "candidate: store's batch, no record GET on a missing state",
                          "classic GCRA in the same batch loop"]:
                cells = []
                for n in SIZES:
                    k = (label, n, kind)
                    if k not in cpu:
                        cells.append("")
                        continue
                    d = [x / y for x, y in zip(cpu[k], cpu[base])]
                    cells.append("%.2f× (%.2f–%.2f)" % (median(d), min(d), max(d)))
                print("| %s | %s |" % (label, " | ".join(cells)))
    print()
    print("decisions/s through redis-cli --pipe (wall time; noisy on a shared machine), median over the rounds")
    print()
    print("| row | keys | " + " | ".join("N = %d" % n for n in SIZES) + " |")
    print("|---|---|" + "---:|" * len(SIZES))
    for label in labels:
        for kind in ["any"] + kinds:
            cells = ["%.0f" % median(rate[(label, n, kind)]) if (label, n, kind) in rate else "" for n in SIZES]
            if any(cells):
                print("| %s | %s | %s |" % (label, kind, " | ".join(cells)))


if __name__ == "__main__":
    main()
