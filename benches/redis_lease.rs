//! Leases on a hot key: decisions per second and Redis calls per decision through a
//! plain `RedisStore` and through a `LeasedStore` over it, on the same server in the
//! same run.
//!
//! One private `redis-server` on 127.0.0.1 (started here, never the one on 6379); 64
//! tokio tasks (two worker threads) call `Limiter::check` on ONE key in a loop for a
//! fixed time, on the server's clock (`TIME`), default lease settings. Three kinds of
//! traffic:
//!
//! - `fixed_window`, a quota far above the traffic: every request admitted. Leases of
//!   a window algorithm last to the window's end (or 250 ms), so slices grow to the
//!   cap (64) and nearly every decision is local.
//! - `gcra`, a quota far above the traffic: every request admitted, but a GCRA lease
//!   lasts only while its holder spends at least the key's rate (its units stop
//!   counting as the key's debt is repaid), so below the rate leases shrink to slices
//!   of 1 and help nothing: honest, not a win.
//! - `gcra-over`, 10 000/s under more traffic than that: at its limit, each admission
//!   is a round trip (a slice would not fit); denials are repeated locally until their
//!   `retry_after`.
//!
//! Rounds interleave the plain and leased rows (alternating which goes first); each
//! row reports its median over the rounds and the per-round range. Redis calls come
//! from the server's `INFO commandstats` (script calls: `FCALL`, `EVALSHA`, …), reset
//! before each row.
//!
//! Run with `cargo bench --features redis --bench redis_lease` (`-- --secs 5` for
//! longer rows, `-- --rounds 7` for more rounds).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::redis_server::{RedisServer, script_calls};
use tollgate::store::LeasedStore;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

const TASKS: usize = 64;

/// One kind of traffic.
#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    algorithm: Algorithm,
    quota: fn() -> Quota,
}

const SCENARIOS: [Scenario; 3] = [
    Scenario {
        name: "fixed_window",
        algorithm: Algorithm::FixedWindow,
        quota: far_above,
    },
    Scenario {
        name: "gcra",
        algorithm: Algorithm::Gcra,
        quota: far_above,
    },
    Scenario {
        name: "gcra-over",
        algorithm: Algorithm::Gcra,
        quota: over,
    },
];

/// 10⁹ per hour: far more than a run spends.
fn far_above() -> Quota {
    Quota::per_hour(1_000_000_000)
}

/// 10 000 per second: less than the tasks ask for.
fn over() -> Quota {
    Quota::per_second(10_000)
}

/// One row of one round.
#[derive(Clone, Copy)]
struct Sample {
    per_second: f64,
    admitted_share: f64,
    calls_per_decision: f64,
}

fn limiter(url: &str, prefix: &str, scenario: Scenario, leased: bool) -> Limiter {
    let redis = RedisStore::from_url(url)
        .expect("a url")
        .prefix(prefix)
        .deadline(Duration::from_secs(5))
        .expect("a deadline");
    let limit = Limit::new("bench", (scenario.quota)())
        .expect("a limit")
        .algorithm(scenario.algorithm);
    let builder = Limiter::builder().limit(limit);
    let builder = if leased {
        builder.store(LeasedStore::new(redis))
    } else {
        builder.store(redis)
    };
    builder.build().expect("a limiter")
}

/// `TASKS` tasks checking the hot key for `secs`.
async fn run(server: &RedisServer, limiter: Limiter, secs: f64) -> Sample {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            let (decisions, admitted) = (decisions.clone(), admitted.clone());
            tokio::spawn(async move {
                let key = Key::from("hot");
                while !stop.load(Ordering::Relaxed) {
                    let decision = limiter.check("bench", &key, 1).await.expect("a decision");
                    decisions.fetch_add(1, Ordering::Relaxed);
                    if decision.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    // A decision from a lease does not yield: let the other tasks in.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a bench task panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let decisions = decisions.load(Ordering::Relaxed) as f64;
    Sample {
        per_second: decisions / elapsed,
        admitted_share: admitted.load(Ordering::Relaxed) as f64 / decisions.max(1.0),
        calls_per_decision: script_calls(server.port()) as f64 / decisions.max(1.0),
    }
}

fn median(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    let median = if values.len() % 2 == 1 {
        values[mid]
    } else {
        f64::midpoint(values[mid - 1], values[mid])
    };
    (median, values[0], values[values.len() - 1])
}

fn arg<T: std::str::FromStr>(flag: &str, default: T) -> T {
    std::env::args()
        .skip_while(|a| a != flag)
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let secs: f64 = arg("--secs", 2.0);
    let rounds: usize = arg("--rounds", 5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let server = RedisServer::start();
    let url = server.url();
    // samples[scenario][leased]
    let mut samples = vec![[Vec::new(), Vec::new()]; SCENARIOS.len()];
    runtime.block_on(async {
        for round in 0..rounds {
            for (i, &scenario) in SCENARIOS.iter().enumerate() {
                let order = if round % 2 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                for leased in order {
                    let prefix = format!("lease-bench:{round}:{}:{leased}", scenario.name);
                    let limiter = limiter(&url, &prefix, scenario, leased);
                    let sample = run(&server, limiter, secs).await;
                    samples[i][usize::from(leased)].push(sample);
                }
            }
        }
    });
    println!(
        "{TASKS} tasks on one key, {secs} s per row, {rounds} interleaved rounds; \
         median [min – max] over rounds\n"
    );
    println!(
        "| traffic | store | decisions/s | Redis calls per decision | admitted | speed-up | calls saved |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (i, scenario) in SCENARIOS.iter().enumerate() {
        let plain = median(samples[i][0].iter().map(|s| s.per_second).collect());
        let plain_calls = median(samples[i][0].iter().map(|s| s.calls_per_decision).collect());
        for (leased, rows) in samples[i].iter().enumerate() {
            let rate = median(rows.iter().map(|s| s.per_second).collect());
            let calls = median(rows.iter().map(|s| s.calls_per_decision).collect());
            let share = median(rows.iter().map(|s| s.admitted_share).collect());
            println!(
                "| {} | {} | {:.0} [{:.0} – {:.0}] | {:.4} [{:.4} – {:.4}] | {:.1}% | {:.1}× | {:.1}× |",
                scenario.name,
                if leased == 1 { "leased" } else { "plain" },
                rate.0,
                rate.1,
                rate.2,
                calls.0,
                calls.1,
                calls.2,
                share.0 * 100.0,
                rate.0 / plain.0,
                plain_calls.0 / calls.0.max(1e-9),
            );
        }
    }
    drop(server);
}
