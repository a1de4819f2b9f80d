//! Coalesced calls (`RedisStore::coalesce`): decisions in flight together go to Redis
//! in shared calls, each answered exactly as alone. The scenario tables through
//! batches (every step asked of twelve copies at once, all held to the table), exact
//! admissions under many tasks and several stores, the server's own count of calls
//! (shared under concurrency, one per decision at one task), and faults: a stopped
//! server times each decision out at its own deadline, a batch whose one decision
//! fails fails only that one, a killed server fails the decisions in flight and the
//! next ones succeed once it is back.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::redis_server::{RedisServer, cli, server_version, shared_server};
use tollgate::store::Store;
use tollgate::{Key, Limit, Limiter, Quota, RedisStore, StoreErrorKind};

#[path = "coalesced_exact.rs"]
mod exact;
#[path = "coalesced_fanned.rs"]
mod fanned;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The store-conformance suite through batches: every question asked of twelve
/// copies of one store at once, on the shared server.
mod tables {
    use support::redis_server::shared_server;
    use tollgate::RedisStore;
    use tollgate::clock::ManualClock;

    use super::fanned::Fanned;

    fn store(clock: ManualClock) -> Fanned {
        let base = RedisStore::from_url(&shared_server().url())
            .expect("a valid url")
            .denial_cache(0)
            .deadline(std::time::Duration::from_secs(5))
            .expect("a deadline");
        Fanned::new(&base, clock)
    }

    support::store_conformance!(store);
}

/// `FCALL`s the server at `port` has run since its statistics were reset.
fn fcalls(port: u16) -> u64 {
    cli(port, &["INFO", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

fn patient(url: &str) -> RedisStore {
    RedisStore::from_url(url)
        .expect("a valid url")
        .denial_cache(0)
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
}

fn limiter_on(store: impl Store, limit: Limit) -> Limiter {
    Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("a limiter")
}

/// `tasks` tasks each checking `per_task` distinct keys of their own; all admitted.
async fn admit_all(limiter: &Limiter, tasks: u64, per_task: u64) {
    let handles: Vec<_> = (0..tasks)
        .map(|task| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                for i in 0..per_task {
                    let key = Key::from(task * 1_000_000 + i);
                    let d = limiter.check("api", &key, 1).await.expect("a decision");
                    assert!(d.allowed);
                    assert!(
                        d.receipt().is_some(),
                        "an admitted decision has its receipt"
                    );
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("a task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_decisions_share_calls_and_a_lone_decision_has_its_own() -> TestResult {
    if !server_version().has_functions() {
        return Ok(()); // Batches ride the function library (Redis 7 and later).
    }
    let server = RedisServer::start();
    let limit = || Limit::new("api", Quota::per_hour(1_000)).expect("a limit");
    let limiter = limiter_on(patient(&server.url()), limit());
    // The library is loaded by the first call.
    admit_all(&limiter, 1, 1).await;

    cli(server.port(), &["CONFIG", "RESETSTAT"]);
    admit_all(&limiter, 1, 200).await;
    assert_eq!(
        fcalls(server.port()),
        200,
        "one call per decision at one task"
    );

    cli(server.port(), &["CONFIG", "RESETSTAT"]);
    admit_all(&limiter, 64, 50).await;
    let shared = fcalls(server.port());
    assert!(
        shared * 2 < 64 * 50,
        "{shared} calls for {} decisions under concurrency",
        64 * 50
    );

    // Coalescing off: one call per decision again, however many tasks.
    let alone = limiter_on(patient(&server.url()).prefix("alone").coalesce(0), limit());
    admit_all(&alone, 1, 1).await;
    cli(server.port(), &["CONFIG", "RESETSTAT"]);
    admit_all(&alone, 64, 50).await;
    assert_eq!(fcalls(server.port()), 64 * 50);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tables_through_batches_really_share_calls() -> TestResult {
    if !server_version().has_functions() {
        return Ok(());
    }
    let server = RedisServer::start();
    let base = patient(&server.url());
    support::scenarios::run(&support::scenarios::GCRA_EDGES, |clock| {
        fanned::Fanned::new(&base, clock)
    })
    .await?;
    cli(server.port(), &["CONFIG", "RESETSTAT"]);
    let steps = support::scenarios::SLIDING_WINDOW_LOG_EDGES.steps.len() as u64;
    support::scenarios::run(&support::scenarios::SLIDING_WINDOW_LOG_EDGES, |clock| {
        fanned::Fanned::new(&base, clock)
    })
    .await?;
    let calls = fcalls(server.port());
    let decisions = steps * fanned::WIDTH as u64;
    assert!(
        calls * 2 < decisions,
        "{calls} calls for up to {decisions} decisions"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_several_stores_admit_exactly_what_memory_admits() {
    exact::admissions_are_exact(|clock, prefix| {
        patient(&shared_server().url())
            .prefix(prefix)
            .with_clock(clock.clone())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_times_each_decision_out_at_its_own_deadline() -> TestResult {
    let server = RedisServer::start();
    let deadline = Duration::from_millis(1_500);
    let store = RedisStore::from_url(&server.url())?
        .denial_cache(0)
        .deadline(deadline)?;
    let limiter = limiter_on(store, Limit::new("api", Quota::per_hour(1_000))?);
    admit_all(&limiter, 1, 1).await;
    server.pause();
    let ask = |key: u64| {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let result = limiter.check("api", &Key::from(key), 1).await;
            (Instant::now(), result.map(|_| ()).map_err(|e| e.kind()))
        })
    };
    let first: Vec<_> = (0..8).map(ask).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Queued behind the first, in the next batch: their deadlines are a second later.
    let later: Vec<_> = (100..116).map(ask).collect();
    let mut first_done = Vec::new();
    for call in first {
        let (at, result) = call.await?;
        assert_eq!(result, Err(StoreErrorKind::Timeout));
        first_done.push(at);
    }
    let mut later_done = Vec::new();
    for call in later {
        let (at, result) = call.await?;
        assert_eq!(result, Err(StoreErrorKind::Timeout));
        later_done.push(at);
    }
    server.resume();
    let last_first = first_done.iter().max().ok_or("first")?;
    let first_later = later_done.iter().min().ok_or("later")?;
    assert!(
        last_first < first_later,
        "each decision answers at its own deadline, not at its batch's"
    );
    // Resumed: answers come back.
    let resumed = Instant::now();
    while limiter.check("api", &Key::from("after"), 1).await.is_err() {
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "no answer after SIGCONT"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_that_fails_in_a_batch_fails_alone() -> TestResult {
    if !server_version().has_functions() {
        return Ok(());
    }
    let server = RedisServer::start();
    let store = patient(&server.url());
    let limit = Limit::new("api", Quota::per_hour(1_000))?;
    let limiter = limiter_on(store.clone(), limit.clone());
    admit_all(&limiter, 1, 1).await;
    // A value tollgate did not write under one key's state: its decision fails.
    let bad = Key::from(7_u64);
    cli(
        server.port(),
        &["SET", &store.state_key(&limit, &bad), "garbage"],
    );
    cli(server.port(), &["CONFIG", "RESETSTAT"]);
    let limiter = Arc::new(limiter);
    let asks: Vec<_> = (0..32_u64)
        .map(|k| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let result = limiter.check("api", &Key::from(k), 1).await;
                (k, result.map(|d| d.allowed).map_err(|e| e.kind()))
            })
        })
        .collect();
    for ask in asks {
        let (k, result) = ask.await?;
        if k == 7 {
            assert_eq!(
                result,
                Err(StoreErrorKind::Protocol),
                "the bad key's own error"
            );
        } else {
            assert_eq!(result, Ok(true), "key {k} is decided as if alone");
        }
    }
    assert!(fcalls(server.port()) < 32, "the decisions shared calls");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_fails_the_decisions_in_flight_and_the_next_succeed_once_back() -> TestResult
{
    let mut server = RedisServer::start();
    let store = RedisStore::from_url(&server.url())?
        .denial_cache(0)
        .deadline(Duration::from_secs(2))?;
    let limiter = limiter_on(store, Limit::new("api", Quota::per_hour(1_000))?);
    admit_all(&limiter, 1, 1).await;
    // Stopped, so that the decisions are in flight and queued when it dies.
    server.pause();
    let asks: Vec<_> = (0..32_u64)
        .map(|k| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &Key::from(k), 1).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.kill();
    for ask in asks {
        let err = ask.await?.expect_err("the server died");
        assert!(
            matches!(
                err.kind(),
                StoreErrorKind::Connection | StoreErrorKind::Timeout
            ),
            "{err}"
        );
    }
    server.restart();
    let restarted = Instant::now();
    loop {
        if limiter.check("api", &Key::from("after"), 1).await.is_ok() {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(5),
            "no decision after restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Everything concurrent succeeds again.
    admit_all(&limiter, 32, 5).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_dropped_mid_call_hand_their_queue_on() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter_on(
        patient(&server.url()),
        Limit::new("api", Quota::per_hour(1_000))?,
    );
    admit_all(&limiter, 1, 1).await;
    server.pause();
    // These take the calls in flight (`DEFAULT_COALESCE` of them), then are dropped.
    let senders: Vec<_> = (0..RedisStore::DEFAULT_COALESCE as u64)
        .map(|k| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &Key::from(k), 1).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // These queue behind them.
    let queued: Vec<_> = (100..120_u64)
        .map(|k| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &Key::from(k), 1).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for sender in &senders {
        sender.abort();
    }
    server.resume();
    for call in queued {
        assert!(
            call.await??.allowed,
            "a queued decision outlives its sender"
        );
    }
    Ok(())
}

/// Decisions with different numbers of keys and of numbers in one batch (the log's
/// three keys and no penalty box, GCRA's two and a penalty box) each run on their own:
/// `fcall_batch.lua` hands each its keys and its numbers in tables it reuses, the slots
/// past a decision's own cleared. Many tasks ask a log limit and a GCRA limit at once,
/// on one key each and a clock that stands still: each admits exactly what the memory
/// store admits, the calls were shared, and the one caller's record written is GCRA's
/// (a stale third key would put GCRA's trip in the log's record; stale penalty numbers
/// would trip the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_with_different_key_counts_share_batches_each_on_its_own_keys() -> TestResult {
    use tollgate::clock::ManualClock;
    use tollgate::{Algorithm, MemoryStore, Penalty};
    if !server_version().has_functions() {
        return Ok(());
    }
    let server = RedisServer::start();
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let limits = || {
        let log = Limit::new("log", Quota::per_hour(7))
            .expect("a limit")
            .algorithm(Algorithm::SlidingWindowLog);
        let gcra = Limit::new("gcra", Quota::per_hour(7))
            .expect("a limit")
            .algorithm(Algorithm::Gcra)
            .penalty(
                Penalty::after(1)
                    .within(Duration::from_secs(3600))
                    .block_for(Duration::from_secs(3600)),
            );
        [log, gcra]
    };
    let on = |store: RedisStore| {
        let [log, gcra] = limits();
        Limiter::builder()
            .limit(log)
            .limit(gcra)
            .store(store.with_clock(clock.clone()))
            .build()
            .expect("a limiter")
    };
    let limiter = on(patient(&server.url()));
    let (tasks, rounds) = (16_u64, 12_u64);
    cli(server.port(), &["CONFIG", "RESETSTAT"]);
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let (mut log, mut gcra) = (0_u64, 0_u64);
                for _ in 0..rounds {
                    let key = Key::from("hot");
                    let (a, b) = tokio::join!(
                        limiter.check("log", &key, 1),
                        limiter.check("gcra", &key, 1)
                    );
                    log += u64::from(a.expect("a log decision").allowed);
                    gcra += u64::from(b.expect("a gcra decision").allowed);
                }
                (log, gcra)
            })
        })
        .collect();
    let (mut log, mut gcra) = (0, 0);
    for handle in handles {
        let (l, g) = handle.await?;
        log += l;
        gcra += g;
    }
    let calls = fcalls(server.port());
    assert!(
        calls * 2 < tasks * rounds * 2,
        "{calls} calls for {} decisions",
        tasks * rounds * 2
    );
    let records = cli(server.port(), &["KEYS", "*:b"]);
    let records: Vec<&str> = records.lines().collect();
    assert_eq!(records.len(), 1, "one caller's record: {records:?}");
    assert!(records[0].contains("gcra"), "GCRA's record: {records:?}");
    let [log_limit, gcra_limit] = limits();
    let memory = Limiter::builder()
        .limit(log_limit)
        .limit(gcra_limit)
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("a limiter");
    let (mut want_log, mut want_gcra) = (0, 0);
    for _ in 0..tasks * rounds {
        let key = Key::from("hot");
        want_log += u64::from(memory.check("log", &key, 1).await?.allowed);
        want_gcra += u64::from(memory.check("gcra", &key, 1).await?.allowed);
    }
    assert_eq!((log, gcra), (want_log, want_gcra));
    assert_eq!(want_log, 7, "the quota, on a clock that stands still");
    Ok(())
}
