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
//! before each row. CPU per decision, less sensitive to a busy machine than
//! decisions/s: the server's main thread (its schedstat: reading, running and
//! answering every call) and this process (every thread's schedstat: the client, the
//! tasks' loop included, the same in both rows).
//!
//! Run with `cargo bench --features redis --bench redis_lease` (`-- --secs 5` for
//! longer rows, `-- --rounds 7` for more rounds, `-- --only gcra` for one traffic).
//! For a profile, `-- --only gcra --store leased --decisions 200000 --rounds 1` runs
//! that many decisions of one row and no other (e.g. under
//! `valgrind --tool=callgrind`: instructions per decision, client side only).

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
    /// CPU µs of the server's main thread per decision.
    redis_us: f64,
    /// CPU µs of this process (every thread) per decision.
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

/// Nanoseconds the server's main thread (the one that runs commands) has spent on a
/// CPU: the first field of its schedstat.
fn server_cpu_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// How long a row runs.
#[derive(Clone, Copy)]
enum Length {
    Secs(f64),
    /// Exactly this many decisions (a profile).
    Decisions(u64),
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

/// `TASKS` tasks checking the hot key for `length`.
async fn run(server: &RedisServer, limiter: Limiter, length: Length) -> Sample {
    server.cli(&["CONFIG", "RESETSTAT"]);
    let stop = Arc::new(AtomicBool::new(false));
    let decisions = Arc::new(AtomicU64::new(0));
    let admitted = Arc::new(AtomicU64::new(0));
    let budget = match length {
        Length::Secs(_) => u64::MAX,
        Length::Decisions(n) => n,
    };
    let (server_start, client_start) = (server_cpu_ns(server.pid()), client_cpu_ns());
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (limiter, stop) = (limiter.clone(), stop.clone());
            let (decisions, admitted) = (decisions.clone(), admitted.clone());
            tokio::spawn(async move {
                let key = Key::from("hot");
                while !stop.load(Ordering::Relaxed) {
                    let decision = limiter.check("bench", &key, 1).await.expect("a decision");
                    if decisions.fetch_add(1, Ordering::Relaxed) + 1 >= budget {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if decision.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    // A decision from a lease does not yield: let the other tasks in.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    if let Length::Secs(secs) = length {
        tokio::time::sleep(Duration::from_secs_f64(secs)).await;
        stop.store(true, Ordering::Relaxed);
    }
    for task in tasks {
        task.await.expect("a bench task panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let server_us = server_cpu_ns(server.pid()).saturating_sub(server_start) as f64 / 1_000.0;
    let client_us = client_cpu_ns().saturating_sub(client_start) as f64 / 1_000.0;
    let decisions = decisions.load(Ordering::Relaxed) as f64;
    Sample {
        per_second: decisions / elapsed,
        admitted_share: admitted.load(Ordering::Relaxed) as f64 / decisions.max(1.0),
        calls_per_decision: script_calls(server.port()) as f64 / decisions.max(1.0),
        redis_us: server_us / decisions.max(1.0),
        client_us: client_us / decisions.max(1.0),
    }
}

fn median(mut values: Vec<f64>) -> (f64, f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
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
    let profiled: u64 = arg("--decisions", 0);
    let length = if profiled > 0 {
        Length::Decisions(profiled)
    } else {
        Length::Secs(secs)
    };
    let only: String = arg("--only", String::new());
    let stores: String = arg("--store", String::new());
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
                if !only.is_empty() && scenario.name != only {
                    continue;
                }
                let order = if round % 2 == 0 {
                    [false, true]
                } else {
                    [true, false]
                };
                for leased in order {
                    let name = if leased { "leased" } else { "plain" };
                    if !stores.is_empty() && name != stores {
                        continue;
                    }
                    let prefix = format!("lease-bench:{round}:{}:{leased}", scenario.name);
                    let limiter = limiter(&url, &prefix, scenario, leased);
                    let sample = run(&server, limiter, length).await;
                    samples[i][usize::from(leased)].push(sample);
                }
            }
        }
    });
    report(&samples, length, rounds);
    drop(server);
}

/// Prints the table: per row, the median over rounds and the range.
fn report(samples: &[[Vec<Sample>; 2]], length: Length, rounds: usize) {
    let length = match length {
        Length::Secs(secs) => format!("{secs} s per row"),
        Length::Decisions(n) => format!("{n} decisions per row"),
    };
    println!(
        "{TASKS} tasks on one key, {length}, {rounds} interleaved rounds; \
         median [min – max] over rounds\n"
    );
    println!(
        "| traffic | store | decisions/s | Redis calls per decision | Redis CPU µs per decision | client CPU µs per decision | admitted | speed-up | calls saved |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, scenario) in SCENARIOS.iter().enumerate() {
        if samples[i].iter().all(Vec::is_empty) {
            continue;
        }
        let plain = median(samples[i][0].iter().map(|s| s.per_second).collect());
        let plain_calls = median(samples[i][0].iter().map(|s| s.calls_per_decision).collect());
        for (leased, rows) in samples[i].iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let rate = median(rows.iter().map(|s| s.per_second).collect());
            let calls = median(rows.iter().map(|s| s.calls_per_decision).collect());
            let redis = median(rows.iter().map(|s| s.redis_us).collect());
            let client = median(rows.iter().map(|s| s.client_us).collect());
            let share = median(rows.iter().map(|s| s.admitted_share).collect());
            println!(
                "| {} | {} | {:.0} [{:.0} – {:.0}] | {:.4} [{:.4} – {:.4}] | {:.2} [{:.2} – {:.2}] | {:.2} [{:.2} – {:.2}] | {:.1}% | {:.2}× | {:.1}× |",
                scenario.name,
                if leased == 1 { "leased" } else { "plain" },
                rate.0,
                rate.1,
                rate.2,
                calls.0,
                calls.1,
                calls.2,
                redis.0,
                redis.1,
                redis.2,
                client.0,
                client.1,
                client.2,
                share.0 * 100.0,
                rate.0 / plain.0,
                plain_calls.0 / calls.0.max(1e-9),
            );
        }
        // The ratio per round (the rows of a round ran back to back).
        let ratios: Vec<String> = samples[i][0]
            .iter()
            .zip(&samples[i][1])
            .map(|(plain, leased)| format!("{:.2}", leased.per_second / plain.per_second))
            .collect();
        if !ratios.is_empty() {
            println!(
                "|   | leased ÷ plain per round: {} | | | | | | | |",
                ratios.join(", ")
            );
        }
    }
}
