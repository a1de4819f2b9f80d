//! Decisions per second and latency percentiles through `RedisStore`, next to the
//! ceiling a raw redis-rs client reaches on the same server in the same run.
//!
//! One private `redis-server` on 127.0.0.1 (started here, never the one on 6379).
//! For each algorithm, 64 tokio tasks (two worker threads) each call
//! `Limiter::check` in a loop on their own key for a fixed time; every request is
//! admitted, so every decision runs the full script and writes state. The baseline
//! runs the same 64 tasks sending `EVALSHA` of a trivial script (`return 1` with one
//! key and nine arguments, the shape of a tollgate call) on one shared multiplexed
//! connection, the connection tollgate itself uses. Server time (`TIME`) is used, as
//! in production; the denial cache is off for these rows.
//!
//! Each tollgate algorithm runs twice: as the store runs it by default (single
//! decisions call the function library, `FCALL`) and on scripts (`functions(false)`,
//! `EVALSHA`). Three more rows split the distance to the ceiling: the same 64 tasks
//! checking a connection out of a deadpool pool for every call (the pool PINGs each
//! connection it hands out), and raw redis-rs calls of tollgate's own GCRA code with
//! the store's arguments, as a script and as the library's function (what the
//! server costs, without tollgate's client side).
//!
//! Each row also reports Redis's own cost of one call (`usec_per_call` of `EVALSHA`
//! or `FCALL` in `INFO commandstats`, reset before the row), the figure that bounds
//! throughput when Redis's single thread is the bottleneck, and the CPU time of
//! Redis's main thread over the row per decision (its schedstat; per call for the
//! raw rows, whose calls are one decision each): `usec_per_call` is wall
//! time and grows whenever other work on the machine takes Redis's core mid-call; the
//! CPU time does not, and also counts reading, parsing and answering each request.
//!
//! A last row runs a classic GCRA script (`benches/redis_profile/classic_gcra.lua`: the
//! textbook algorithm as widely deployed scripts write it, a float TAT in seconds, one
//! `GET` and one `SET … EX`) from the same raw loop with the same quota on keys of the
//! store's length: the baseline a GCRA decision is held to, doing the same three
//! commands with none of tollgate's exactness.
//!
//! The private `redis-server` is pinned to one core (`taskset`, core `REDIS_CPU`,
//! default 0) so that the scheduler does not move Redis's thread between the two cores
//! mid-row; the 64 tasks' two worker threads are left free on both.
//!
//! Then the denial cache: one task asks about a denied hot key in a loop, with
//! the cache on (answered in process) and off (a round trip to be denied).
//!
//! Then sliding-window-log denials of a key whose log is full: 64 tasks asking about
//! one key at a log of L entries (one per microsecond, charged through the store on
//! an injected clock that then stands still), cache off, at cost 1 and at cost L. A
//! denial reads only the entries its retry time needs, so Redis's µs per call
//! should not grow with L.
//!
//! Run with `cargo bench --features redis,deadpool --bench redis` (`-- --secs 5` for
//! longer runs, `-- --log-denials` for the log-denial rows alone, `-- --lone 10` for
//! ten pairs of the one-task rows alone and coalesced, each pair's p99 side by side).

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use support::redis_server::RedisServer;
use tollgate::{Algorithm, Key, Limit, Limiter, Policy, Quota, RedisStore};

const TASKS: usize = 64;

/// How many keys the rows draw from: `BENCH_KEYS` (default one per task, each task on
/// its own key, so every key is busy). With more, each call draws a key at random (a
/// multiplicative hash of a shared counter): most keys are then touched about once per
/// `BENCH_KEYS / rate` seconds, some for the first time.
fn key_count() -> usize {
    std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(TASKS)
}

/// The key index a call of `task` uses among `n` keys (see `key_count`).
fn pick(task: usize, n: usize) -> usize {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    if n == TASKS {
        return task;
    }
    let draw = NEXT
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        >> 32;
    usize::try_from(draw).unwrap_or(0) % n
}

const ALGORITHMS: [Algorithm; 7] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowCounters { buckets: 10 },
    Algorithm::SlidingWindowLog,
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

/// Throughput and latency of one row.
struct Row {
    name: String,
    per_second: f64,
    p50: Duration,
    p99: Duration,
    /// Decisions (calls of the row's loop) made.
    decisions: u64,
    /// Decisions per Redis call (above 1 when coalesced; 1 where not counted).
    per_call: f64,
    /// Server-side µs per `EVALSHA` or `FCALL` (`INFO commandstats`).
    script_us: f64,
    /// CPU µs of Redis's main thread per decision (see `on_cpu_ns`): per call where
    /// each call is one decision; a coalesced call carries several.
    cpu_us: f64,
    /// CPU µs of this process (the bench's client: every thread) per call, the loop's
    /// own timing included (the same in every row).
    client_us: f64,
}

/// Nanoseconds every thread of this process has spent on a CPU (schedstat).
fn client_cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task").map_or(0, |tasks| {
        tasks
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
            .filter_map(|line| line.split(' ').next()?.parse::<u64>().ok())
            .sum()
    })
}

/// The private server's pid, for `on_cpu_ns`.
static REDIS_PID: OnceLock<u32> = OnceLock::new();
/// `on_cpu_ns` when the current row's statistics were reset.
static ROW_START_NS: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds the server's main thread (the one that runs commands) has spent on a
/// CPU: the first field of its schedstat. `usec_per_call` is wall time, and on a
/// machine shared with other work it also counts the time Redis waited for its core;
/// this leaves that out (and includes reading, parsing and answering each request).
fn on_cpu_ns() -> u64 {
    let pid = REDIS_PID.get().copied().unwrap_or(0);
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Resets the server's command statistics before a row.
async fn reset_stats(admin: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .expect("CONFIG RESETSTAT");
    ROW_START_NS.store(on_cpu_ns(), Ordering::Relaxed);
}

/// Deletes every key, so that a row's Redis CPU does not include expiring the keys of
/// the rows before it (with `BENCH_KEYS` in the hundred thousands, GCRA's and the
/// buckets' keys expire within seconds, in Redis's background cycle, on the same
/// thread). The library and the scripts stay loaded.
async fn flush_keys(admin: &mut MultiplexedConnection) {
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(admin)
        .await
        .expect("FLUSHALL");
}

/// Since the last reset: `usec_per_call` of `command` (`evalsha`, `fcall`), and the
/// main thread's CPU µs per call of it.
async fn server_cost(admin: &mut MultiplexedConnection, command: &str) -> (f64, f64) {
    let (us, cpu_us, _) = server_calls(admin, command).await;
    (us, cpu_us)
}

/// [`server_cost`], with the number of calls of `command`.
async fn server_calls(admin: &mut MultiplexedConnection, command: &str) -> (f64, f64, f64) {
    let cpu_ns = on_cpu_ns().saturating_sub(ROW_START_NS.load(Ordering::Relaxed));
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else {
        return (f64::NAN, f64::NAN, f64::NAN);
    };
    let field = |name: &str| -> f64 {
        line.split([':', ','])
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    };
    let calls = field("calls=");
    (field("usec_per_call="), cpu_ns as f64 / 1e3 / calls, calls)
}

/// Runs `TASKS` copies of `call` for `secs`, timing every call.
async fn measure<F, Fut>(name: String, secs: f64, call: F) -> Row
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    measure_tasks(name, TASKS, secs, call).await
}

/// Runs `tasks` copies of `call` for `secs`, timing every call.
async fn measure_tasks<F, Fut>(name: String, tasks: usize, secs: f64, call: F) -> Row
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let client_before = client_cpu_ns();
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let call = call.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(100_000);
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    call(task).await;
                    latencies.push(t.elapsed());
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("a bench task panicked"));
    }
    let elapsed = started.elapsed();
    let client_ns = client_cpu_ns().saturating_sub(client_before);
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Row {
        name,
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        decisions: all.len() as u64,
        per_call: 1.0,
        script_us: f64::NAN,
        cpu_us: f64::NAN,
        client_us: client_ns as f64 / 1e3 / all.len() as f64,
    }
}

/// How the store sends single decisions: alone (`coalesce(0)`, the rows named
/// "(FCALL)" and "(EVALSHA)"), or coalesced with at most this many calls in flight.
#[derive(Clone, Copy)]
enum Sending {
    Alone,
    Coalesced(usize),
}

fn limiter(
    url: &str,
    algorithm: Algorithm,
    quota: Quota,
    cache: usize,
    functions: bool,
) -> Limiter {
    limiter_sending(url, algorithm, quota, cache, functions, Sending::Alone)
}

fn limiter_sending(
    url: &str,
    algorithm: Algorithm,
    quota: Quota,
    cache: usize,
    functions: bool,
    sending: Sending,
) -> Limiter {
    let (coalesce, tag) = match sending {
        Sending::Alone => (0, String::new()),
        Sending::Coalesced(n) => (n, format!("-c{n}")),
    };
    let store = RedisStore::from_url(url)
        .expect("a url")
        .functions(functions)
        .coalesce(coalesce)
        .prefix(&format!("{}-{functions}{tag}", algorithm.name()))
        .denial_cache(cache)
        .deadline(Duration::from_secs(5))
        .expect("a deadline");
    Limiter::builder()
        .limit(
            Limit::new("bench", quota)
                .expect("a limit")
                .algorithm(algorithm),
        )
        .store(store)
        .build()
        .expect("a limiter")
}

/// Every request admitted: 10⁶ per 1000 s per key, far more than a run spends.
fn bench_quota() -> Quota {
    Quota::new(1_000_000, Duration::from_secs(1_000)).expect("a quota")
}

/// `TASKS` tasks calling `script` on their own keys with `args` through one shared
/// multiplexed connection; every reply must be or start with 1.
async fn raw_script(
    name: &str,
    secs: f64,
    conn: &MultiplexedConnection,
    script: redis::Script,
    keys: Arc<Vec<String>>,
    args: &'static [&'static str],
) -> Row {
    let (script, shared) = (Arc::new(script), conn.clone());
    measure(name.into(), secs, move |task| {
        let mut conn = shared.clone();
        let script = script.clone();
        let keys = keys.clone();
        async move {
            let reply: redis::Value = script
                .key(&keys[pick(task, keys.len())])
                .arg(args)
                .invoke_async(&mut conn)
                .await
                .expect("a reply");
            assert_eq!(first_int(&reply), Some(1));
        }
    })
    .await
}

/// The reply itself when it is an integer, else its first element: `return 1` and
/// tollgate's verdicts (allowed first) both start with 1 when admitted.
fn first_int(reply: &redis::Value) -> Option<i64> {
    match reply {
        redis::Value::Int(n) => Some(*n),
        redis::Value::Array(items) => items.first().and_then(first_int),
        _ => None,
    }
}

/// Keys named as the store names its GCRA keys in `tollgate_rows` (same length, so
/// Redis hashes and stores as much), under a prefix of their own (as long as the
/// store rows' `gcra-true`).
fn store_like_keys(url: &str, prefix: &str) -> Arc<Vec<String>> {
    let store = RedisStore::from_url(url).expect("a url").prefix(prefix);
    let policy = Policy::new("bench", bench_quota()).expect("a policy");
    Arc::new(
        (0..key_count() as u64)
            .map(|i| store.state_key(&policy, &Key::from(i)))
            .collect(),
    )
}

/// Keys of the raw rows, one per task, each on a slot of its own.
fn raw_keys(prefix: &str) -> Arc<Vec<String>> {
    Arc::new(
        (0..TASKS)
            .map(|i| format!("{prefix}:{{{i:032x}}}"))
            .collect(),
    )
}

/// The ceiling: a trivial script through the same kind of connection tollgate uses;
/// then the same through a pool with a connection per task, checked out for every
/// call (deadpool-redis PINGs each connection it hands out).
async fn ceiling_rows(
    url: &str,
    secs: f64,
    conn: &MultiplexedConnection,
    admin: &mut MultiplexedConnection,
) -> Vec<Row> {
    const NINE: &[&str] = &["0"; 9];
    let trivial = || redis::Script::new("return 1");
    reset_stats(admin).await;
    let mut shared = raw_script(
        "raw redis-rs EVALSHA (`return 1`)",
        secs,
        conn,
        trivial(),
        raw_keys("raw"),
        NINE,
    )
    .await;
    (shared.script_us, shared.cpu_us) = server_cost(admin, "evalsha").await;

    let pool = deadpool_redis::Config::from_url(url)
        .builder()
        .expect("a pool config")
        .max_size(TASKS)
        .runtime(deadpool_redis::Runtime::Tokio1)
        .build()
        .expect("a pool");
    let (script, keys) = (Arc::new(trivial()), raw_keys("raw"));
    reset_stats(admin).await;
    let mut pooled = measure(
        "raw redis-rs EVALSHA (`return 1`), deadpool checkout per call".into(),
        secs,
        move |task| {
            let pool = pool.clone();
            let script = script.clone();
            let keys = keys.clone();
            async move {
                let mut conn = pool.get().await.expect("a pooled connection");
                let reply: i64 = script
                    .key(&keys[task])
                    .arg(NINE)
                    .invoke_async(&mut *conn)
                    .await
                    .expect("a reply");
                assert_eq!(reply, 1);
            }
        },
    )
    .await;
    (pooled.script_us, pooled.cpu_us) = server_cost(admin, "evalsha").await;
    vec![shared, pooled]
}

/// Every algorithm through `RedisStore`: on the function library and on scripts, each
/// decision alone (`coalesce(0)`), then coalesced as the store does by default; for
/// GCRA also with other bounds on the coalesced calls in flight.
async fn tollgate_rows(url: &str, secs: f64, admin: &mut MultiplexedConnection) -> Vec<Row> {
    let mut rows = Vec::new();
    for algorithm in ALGORITHMS {
        let mut ways = vec![
            (true, Sending::Alone, "FCALL".to_owned()),
            (false, Sending::Alone, "EVALSHA".to_owned()),
            (
                true,
                Sending::Coalesced(RedisStore::DEFAULT_COALESCE),
                "FCALL, coalesced".to_owned(),
            ),
        ];
        if algorithm == Algorithm::Gcra {
            for n in [1, 4] {
                ways.push((
                    true,
                    Sending::Coalesced(n),
                    format!("FCALL, coalesced, {n} in flight"),
                ));
            }
        }
        for (functions, sending, how) in ways {
            rows.push(
                store_row(url, secs, admin, algorithm, functions, sending, &how, TASKS).await,
            );
        }
    }
    rows
}

/// One row: `tasks` tasks checking through the store, each decision admitted.
#[allow(clippy::too_many_arguments)]
async fn store_row(
    url: &str,
    secs: f64,
    admin: &mut MultiplexedConnection,
    algorithm: Algorithm,
    functions: bool,
    sending: Sending,
    how: &str,
    tasks: usize,
) -> Row {
    let limiter = limiter_sending(url, algorithm, bench_quota(), 0, functions, sending);
    let keys: Arc<Vec<Key>> = Arc::new((0..key_count() as u64).map(Key::from).collect());
    flush_keys(admin).await;
    reset_stats(admin).await;
    let name = if tasks == TASKS {
        format!("tollgate {algorithm} ({how})")
    } else {
        format!("{tasks} task: tollgate {algorithm} ({how})")
    };
    let mut row = measure_tasks(name, tasks, secs, move |task| {
        let limiter = limiter.clone();
        let keys = keys.clone();
        async move {
            let d = limiter
                .check("bench", &keys[pick(task, keys.len())], 1)
                .await
                .expect("a decision");
            assert!(d.allowed);
        }
    })
    .await;
    let command = if functions { "fcall" } else { "evalsha" };
    let (us, cpu_us, calls) = server_calls(admin, command).await;
    row.script_us = us;
    // Per decision: a coalesced call carries several.
    row.cpu_us = cpu_us * calls / row.decisions as f64;
    row.per_call = row.decisions as f64 / calls;
    row
}

/// One task deciding in a loop, alone and coalesced, interleaved `rounds` times: a
/// lone caller finds no call in flight, so coalescing must cost it nothing (the p99
/// of each).
async fn lone_rows(url: &str, secs: f64, admin: &mut MultiplexedConnection) -> Vec<Row> {
    let mut rows = Vec::new();
    for (sending, how) in [
        (Sending::Alone, "FCALL"),
        (
            Sending::Coalesced(RedisStore::DEFAULT_COALESCE),
            "FCALL, coalesced",
        ),
    ] {
        rows.push(store_row(url, secs, admin, Algorithm::Gcra, true, sending, how, 1).await);
    }
    rows
}

/// The argument the store sends for one GCRA charge under `bench_quota()` without a
/// penalty box, every number packed as a little-endian double (see
/// `src/store/redis/lua/lean.lua`): server time with a floor (kind 2; the store sends
/// the latest server time it has seen, a floor of 1 costs the script the same and
/// never leads the clock), acquire (0), GCRA (the 6th algorithm), then cost 1, limit,
/// period µs, capacity, T and B·T as (µs, ns), and the bound on delays that only the
/// leaky bucket reads.
fn gcra_args() -> Vec<u8> {
    let numbers: [f64; 13] = [
        2.0, 1.0, 0.0, 6.0, 1.0, 1e6, 1e9, 1e6, 1000.0, 0.0, 1e9, 0.0, 0.0,
    ];
    numbers.iter().flat_map(|n| n.to_le_bytes()).collect()
}

/// tollgate's GCRA from the library the store loaded, called from the same raw
/// redis-rs loop as the classic script below, with the store's keys (state and block
/// record) and arguments: the server's side of a decision without tollgate's client,
/// the like-for-like comparison with a script called raw.
async fn raw_gcra_row(
    server: &RedisServer,
    secs: f64,
    conn: &MultiplexedConnection,
    admin: &mut MultiplexedConnection,
) -> Row {
    let listing = server.cli(&["FUNCTION", "LIST"]);
    let function: Arc<str> = listing
        .split_whitespace()
        .find(|w| w.starts_with("tollgate_"))
        .expect("the store loaded its library")
        .into();
    let keys = store_like_keys(&server.url(), "gcra-raw_");
    let args = Arc::new(gcra_args());
    let shared = conn.clone();
    flush_keys(admin).await;
    reset_stats(admin).await;
    let mut row = measure(
        "raw redis-rs FCALL of tollgate's library, gcra".into(),
        secs,
        move |task| {
            let mut conn = shared.clone();
            let keys = keys.clone();
            let function = function.clone();
            let args = args.clone();
            async move {
                let state = &keys[pick(task, keys.len())];
                // One charge decided: the verdict packed, little-endian i64s.
                let reply: Vec<u8> = redis::cmd("FCALL")
                    .arg(&*function)
                    .arg(2)
                    .arg(state)
                    .arg(format!("{state}:b"))
                    .arg(&args[..])
                    .query_async(&mut conn)
                    .await
                    .expect("a reply");
                assert_eq!(reply.get(..8), Some(&1_i64.to_le_bytes()[..]));
            }
        },
    )
    .await;
    (row.script_us, row.cpu_us) = server_cost(admin, "fcall").await;
    row
}

/// The classic GCRA script's arguments for `bench_quota()`: burst, rate, period (s),
/// cost.
const CLASSIC_ARGS: [&str; 4] = ["1000000", "1000000", "1000", "1"];

/// The classic GCRA script from the same raw loop as tollgate's own code above, on
/// keys of the store's length: every call admitted (`[1, …]`), so every call runs
/// `TIME`, `GET` and `SET … EX`.
async fn classic_gcra_row(
    url: &str,
    secs: f64,
    conn: &MultiplexedConnection,
    admin: &mut MultiplexedConnection,
) -> Row {
    let classic = redis::Script::new(include_str!("redis_profile/classic_gcra.lua"));
    flush_keys(admin).await;
    reset_stats(admin).await;
    let mut row = raw_script(
        "raw redis-rs EVALSHA of a classic GCRA script (float TAT)",
        secs,
        conn,
        classic,
        store_like_keys(url, "classicgc"),
        &CLASSIC_ARGS,
    )
    .await;
    (row.script_us, row.cpu_us) = server_cost(admin, "evalsha").await;
    row
}

/// Pins the server's threads to core `REDIS_CPU` (default 0) when `taskset` can; says
/// which, since the figures depend on it.
fn pin_to_one_core(server: &RedisServer) {
    let cpu = std::env::var("REDIS_CPU").unwrap_or_else(|_| "0".into());
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu, &server.pid().to_string()])
        .output()
        .is_ok_and(|out| out.status.success());
    if pinned {
        println!("redis-server pinned to core {cpu} (taskset)");
    } else {
        println!("redis-server not pinned (taskset failed or is missing)");
    }
    println!();
}

/// A multiplexed connection set up as the store sets up its own: without redis-rs's
/// timeouts (a timer per call, and a 500 ms limit a loaded row could hit).
async fn connection(client: &redis::Client) -> MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a connection")
}

/// The raw ceiling, every algorithm through the store, tollgate's GCRA called raw,
/// then the classic GCRA script.
async fn throughput(server: &RedisServer, secs: f64) -> Vec<Row> {
    let url = server.url();
    let client = redis::Client::open(url.as_str()).expect("a client");
    let conn = connection(&client).await;
    let mut admin = connection(&client).await;
    let mut rows = ceiling_rows(&url, secs, &conn, &mut admin).await;
    rows.extend(tollgate_rows(&url, secs, &mut admin).await);
    rows.push(raw_gcra_row(server, secs, &conn, &mut admin).await);
    rows.push(classic_gcra_row(&url, secs, &conn, &mut admin).await);
    rows.extend(lone_rows(&url, secs, &mut admin).await);
    rows
}

fn print_rows(rows: &[Row]) {
    println!(
        "| calls (64 tasks unless said, 1 redis-server) | decisions/s | vs raw | p50 | p99 | Redis µs/call | Redis CPU µs/decision | client CPU µs/decision | decisions/call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let raw = rows[0].per_second;
    for row in rows {
        println!(
            "| {} | {:.0} | {:.2}× | {:.0} µs | {:.0} µs | {:.1} | {:.2} | {:.2} | {:.1} |",
            row.name,
            row.per_second,
            row.per_second / raw,
            row.p50.as_secs_f64() * 1e6,
            row.p99.as_secs_f64() * 1e6,
            row.script_us,
            row.cpu_us,
            row.client_us,
            row.per_call
        );
    }
}

/// The denial cache: a denied hot key, asked by one task in a loop.
async fn denial_cache(url: &str) {
    println!();
    println!("| denied hot key (1 task) | mean per decision |");
    println!("|---|---:|");
    let mut means = Vec::new();
    for (label, cache) in [
        ("denial cache on (local answer)", 10_000),
        ("cache off (round trip)", 0),
    ] {
        let limiter = limiter(url, Algorithm::Gcra, Quota::per_day(1), cache, true);
        let key = Key::from(format!("hot-{cache}"));
        assert!(
            limiter
                .check("bench", &key, 1)
                .await
                .expect("a decision")
                .allowed
        );
        let rounds = if cache > 0 { 200_000 } else { 5_000 };
        let started = Instant::now();
        for _ in 0..rounds {
            let d = limiter.check("bench", &key, 1).await.expect("a decision");
            assert!(!d.allowed);
        }
        let mean = started.elapsed() / rounds;
        means.push(mean);
        println!("| {label} | {:.2} µs |", mean.as_secs_f64() * 1e6);
    }
    println!();
    println!(
        "denial cache speed-up: {:.0}×",
        means[1].as_secs_f64() / means[0].as_secs_f64()
    );
}

/// Sliding-window-log denials at a full log of `limit` entries, at `cost`.
async fn log_denial_row(
    url: &str,
    secs: f64,
    limit: u64,
    cost: u32,
    admin: &mut MultiplexedConnection,
) -> Row {
    let clock = tollgate::clock::ManualClock::new(Duration::from_secs(1_700_000_000));
    let store = RedisStore::from_url(url)
        .expect("a url")
        .prefix(&format!("log-denial-{limit}-{cost}"))
        .denial_cache(0)
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock.clone());
    let quota = Quota::new(limit, Duration::from_secs(100_000)).expect("a quota");
    let limiter = Limiter::builder()
        .limit(
            Limit::new("log", quota)
                .expect("a limit")
                .algorithm(Algorithm::SlidingWindowLog),
        )
        .store(store)
        .build()
        .expect("a limiter");
    let key = Key::from("full");
    for _ in 0..limit {
        clock.advance(Duration::from_micros(1));
        assert!(
            limiter
                .check("log", &key, 1)
                .await
                .expect("a decision")
                .allowed
        );
    }
    reset_stats(admin).await;
    let name = format!("log denial, L = {limit}, cost {cost}");
    let mut row = measure(name, secs, move |_| {
        let limiter = limiter.clone();
        async move {
            let d = limiter.check("log", &key, cost).await.expect("a decision");
            assert!(!d.allowed && d.retry_after.is_some());
        }
    })
    .await;
    (row.script_us, row.cpu_us) = server_cost(admin, "fcall").await;
    row
}

/// Log denials at a small and a large L.
async fn log_denials(url: &str, secs: f64) {
    let client = redis::Client::open(url).expect("a client");
    let mut admin = connection(&client).await;
    println!();
    println!(
        "| sliding window log denials (64 tasks, one key) | decisions/s | p50 | p99 | Redis µs/call |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (limit, cost) in [(10, 1), (10_000, 1), (10_000, 10_000)] {
        let row = log_denial_row(url, secs, limit, cost, &mut admin).await;
        println!(
            "| {} | {:.0} | {:.0} µs | {:.0} µs | {:.1} |",
            row.name,
            row.per_second,
            row.p50.as_secs_f64() * 1e6,
            row.p99.as_secs_f64() * 1e6,
            row.script_us
        );
    }
}

/// `--lone N`: one task deciding alone and coalesced, alternated `n` times (`secs`
/// each), each pair's p99 side by side: the latency a lone caller sees, finely
/// interleaved so that a burst of other load on the machine lands on both.
async fn lone_pairs(url: &str, secs: f64, n: usize) {
    let client = redis::Client::open(url).expect("a client");
    let mut admin = connection(&client).await;
    println!(
        "| pair | p50 alone | p50 coalesced | p99 alone | p99 coalesced | p99 coalesced / alone |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for pair in 1..=n {
        let rows = lone_rows(url, secs, &mut admin).await;
        let (alone, coalesced) = (&rows[0], &rows[1]);
        let ratio = coalesced.p99.as_secs_f64() / alone.p99.as_secs_f64();
        ratios.push(ratio);
        println!(
            "| {pair} | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs | {ratio:.2}× |",
            alone.p50.as_secs_f64() * 1e6,
            coalesced.p50.as_secs_f64() * 1e6,
            alone.p99.as_secs_f64() * 1e6,
            coalesced.p99.as_secs_f64() * 1e6,
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "\n1 task, p99 coalesced / alone: median {:.2}× ({:.2}–{:.2}×) over {n} pairs",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
}

fn main() {
    let secs: f64 = std::env::args()
        .skip_while(|a| a != "--secs")
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let log_only = std::env::args().any(|a| a == "--log-denials");
    let lone: Option<usize> = std::env::args()
        .skip_while(|a| a != "--lone")
        .nth(1)
        .and_then(|s| s.parse().ok());
    let server = RedisServer::start();
    REDIS_PID.set(server.pid()).expect("one server");
    let keys = key_count();
    if keys == TASKS {
        println!("keys: {keys}, one per task");
    } else {
        println!("keys: {keys}, drawn at random per call (BENCH_KEYS)");
    }
    pin_to_one_core(&server);
    let url = server.url();
    runtime.block_on(async {
        if let Some(n) = lone {
            lone_pairs(&url, secs, n).await;
            return;
        }
        if !log_only {
            print_rows(&throughput(&server, secs).await);
            denial_cache(&url).await;
        }
        log_denials(&url, secs).await;
    });
    drop(server);
}
