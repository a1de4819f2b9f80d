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
//! in production; the blocked-key cache is off for these rows.
//!
//! Each row also reports Redis's own cost of one script call (`usec_per_call` of
//! `EVALSHA` in `INFO commandstats`, reset before the row), the figure that bounds
//! throughput when Redis's single thread is the bottleneck.
//!
//! Then the blocked-key cache: one task asks about a denied hot key in a loop, with
//! the cache on (answered in process) and off (a round trip to be denied).
//!
//! Run with `cargo bench --features redis --bench redis` (`-- --secs 5` for longer runs).

#[path = "../tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis_server::RedisServer;
use tollgate::{Algorithm, Key, Limiter, Policy, Quota, RedisStore};

const TASKS: usize = 64;

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
    /// Server-side µs per `EVALSHA` (`INFO commandstats`).
    script_us: f64,
}

/// Resets the server's command statistics before a row.
async fn reset_stats(admin: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .expect("CONFIG RESETSTAT");
}

/// `usec_per_call` of `EVALSHA` since the last reset.
async fn script_usec(admin: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .expect("INFO commandstats");
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split(',').find_map(|f| f.strip_prefix("usec_per_call=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Runs `TASKS` copies of `call` for `secs`, timing every call.
async fn measure<F, Fut>(name: String, secs: f64, call: F) -> Row
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
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
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Row {
        name,
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        script_us: f64::NAN,
    }
}

fn limiter(url: &str, algorithm: Algorithm, quota: Quota, cache: usize) -> Limiter {
    let store = RedisStore::from_url(url)
        .expect("a url")
        .prefix(algorithm.name())
        .block_cache(cache)
        .deadline(Duration::from_secs(5))
        .expect("a deadline");
    Limiter::builder()
        .policy(
            Policy::new("bench", quota)
                .expect("a policy")
                .algorithm(algorithm),
        )
        .store(store)
        .build()
        .expect("a limiter")
}

/// The raw ceiling, then every algorithm.
async fn throughput(url: &str, secs: f64) -> Vec<Row> {
    let mut rows = Vec::new();

    // The ceiling: a trivial script through the same kind of connection.
    let client = redis::Client::open(url).expect("a client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let mut admin = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection");
    let script = Arc::new(redis::Script::new("return 1"));
    let keys: Arc<Vec<String>> =
        Arc::new((0..TASKS).map(|i| format!("raw:{{{i:032x}}}")).collect());
    reset_stats(&mut admin).await;
    let mut row = measure(
        "raw redis-rs EVALSHA (`return 1`)".into(),
        secs,
        move |task| {
            let mut conn = conn.clone();
            let script = script.clone();
            let keys = keys.clone();
            async move {
                let _: i64 = script
                    .key(&keys[task])
                    .arg(&[0_u64; 9][..])
                    .invoke_async(&mut conn)
                    .await
                    .expect("a reply");
            }
        },
    )
    .await;
    row.script_us = script_usec(&mut admin).await;
    rows.push(row);

    // Every request admitted: 10⁶ per 1000 s per key, far more than a run spends.
    let quota = Quota::new(1_000_000, Duration::from_secs(1_000)).expect("a quota");
    for algorithm in ALGORITHMS {
        let limiter = limiter(url, algorithm, quota, 0);
        let keys: Arc<Vec<Key>> = Arc::new((0..TASKS as u64).map(Key::from).collect());
        reset_stats(&mut admin).await;
        let mut row = measure(format!("tollgate {algorithm}"), secs, move |task| {
            let limiter = limiter.clone();
            let keys = keys.clone();
            async move {
                let d = limiter
                    .check("bench", &keys[task], 1)
                    .await
                    .expect("a decision");
                assert!(d.allowed);
            }
        })
        .await;
        row.script_us = script_usec(&mut admin).await;
        rows.push(row);
    }
    rows
}

fn print_rows(rows: &[Row]) {
    println!(
        "| calls (64 tasks, 1 redis-server) | decisions/s | vs raw | p50 | p99 | script µs/call |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let raw = rows[0].per_second;
    for row in rows {
        println!(
            "| {} | {:.0} | {:.2}× | {:.0} µs | {:.0} µs | {:.1} |",
            row.name,
            row.per_second,
            row.per_second / raw,
            row.p50.as_secs_f64() * 1e6,
            row.p99.as_secs_f64() * 1e6,
            row.script_us
        );
    }
}

/// The blocked-key cache: a denied hot key, asked by one task in a loop.
async fn block_cache(url: &str) {
    println!();
    println!("| denied hot key (1 task) | mean per decision |");
    println!("|---|---:|");
    let mut means = Vec::new();
    for (label, cache) in [
        ("blocked-key cache on (local answer)", 10_000),
        ("cache off (round trip)", 0),
    ] {
        let limiter = limiter(url, Algorithm::Gcra, Quota::per_day(1), cache);
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
        "blocked-key cache speed-up: {:.0}×",
        means[1].as_secs_f64() / means[0].as_secs_f64()
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
    let server = RedisServer::start();
    let url = server.url();
    runtime.block_on(async {
        print_rows(&throughput(&url, secs).await);
        block_cache(&url).await;
    });
    drop(server);
}
