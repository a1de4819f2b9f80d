//! Waiting instead of rejecting on the memory store: `until_ready` on tokio's paused
//! clock, for every algorithm. The shared waiting tables run in the conformance suite
//! (`tests/core/conformance.rs`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Key, Limit, Limiter, MemoryStore, Quota};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// `n` tasks wait with `until_ready` for cost 1 of `key` under `policy`, each spawned
/// once the one before has reserved (the order they ask in); returns, by that order,
/// how long after the first asked each one proceeded, on tokio's clock.
async fn waiters(
    limiter: &Limiter,
    policy: &'static str,
    key: &'static str,
    n: usize,
) -> Vec<Duration> {
    let started = tokio::time::Instant::now();
    let proceeded = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (limiter, proceeded) = (limiter.clone(), proceeded.clone());
        tasks.push(tokio::spawn(async move {
            let decision = limiter
                .until_ready(policy, &Key::from(key), 1, Duration::from_secs(10))
                .await
                .expect("a decision");
            assert!(decision.allowed);
            proceeded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((i, started.elapsed()));
        }));
        tokio::task::yield_now().await;
    }
    for task in tasks {
        task.await.expect("no panic");
    }
    let mut seen = proceeded
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    seen.sort_by_key(|&(i, _)| i);
    seen.into_iter().map(|(_, at)| at).collect()
}

/// 50 tasks wait with `until_ready`; the instants they proceed at, on tokio's paused
/// clock, are the places the limiter gave them (10 at once, then one every 100 ms), in
/// the order they asked; a waiter cancelled before its turn gives its place back to
/// the next one.
#[tokio::test(start_paused = true)]
async fn until_ready_proceeds_on_schedule_and_a_cancelled_waiter_gives_its_place_back() {
    let limiter = Limiter::builder()
        .limit(Limit::new("upstream", Quota::per_second(10)).expect("limit"))
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("limiter");
    let seen = waiters(&limiter, "upstream", "host", 50).await;
    for (i, at) in seen.into_iter().enumerate() {
        let turn = Duration::from_millis(100 * u64::try_from(i.saturating_sub(9)).expect("small"));
        assert_eq!(at, turn, "waiter {i} proceeds at its place");
    }

    // The queue has drained on the tokio clock, but the limiter's clock stands still:
    // its next place is 4.2 s away. A waiter cancelled there gives it back.
    let key = Key::from("host");
    let cancelled = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            limiter
                .until_ready("upstream", &key, 1, Duration::from_secs(10))
                .await
        })
    };
    tokio::task::yield_now().await;
    cancelled.abort();
    assert!(cancelled.await.is_err(), "the waiter was cancelled");
    let next = limiter
        .reserve("upstream", &key, 1, Duration::from_secs(10))
        .await
        .expect("a decision");
    assert_eq!(
        next.delay,
        Duration::from_millis(4_100),
        "the cancelled place is taken again"
    );
}

/// On every algorithm, 50 tasks waiting with `until_ready` proceed, on tokio's paused
/// clock, at the rule's admission schedule, in the order they asked.
#[tokio::test(start_paused = true)]
async fn until_ready_follows_the_admission_schedule_on_every_algorithm() {
    use support::scenarios::BASE as START_OF_DAY;
    use support::waiting::{ALGORITHMS, START, limiter, schedule};
    for algorithm in ALGORITHMS {
        // The schedule on a store of its own (a shard remembers the latest instant).
        let expected = {
            let clock = ManualClock::new(START_OF_DAY + START);
            let limiter =
                limiter(algorithm, MemoryStore::with_clock(clock.clone())).expect("limiter");
            schedule(&limiter, &clock, 50).await.expect("a schedule")
        };
        let clock = ManualClock::new(START_OF_DAY + START);
        let limiter = limiter(algorithm, MemoryStore::with_clock(clock)).expect("limiter");
        let seen = waiters(&limiter, "wait", "waiters", 50).await;
        let instants: Vec<u64> = seen
            .iter()
            .map(|at| u64::try_from(at.as_micros()).expect("small"))
            .collect();
        // tokio's timer wakes at whole milliseconds: each waiter proceeds at its place,
        // rounded up to the next one.
        for (i, (&at, &place)) in instants.iter().zip(&expected).enumerate() {
            assert!(
                at >= place && at < place + 1_000,
                "{algorithm}: waiter {i} proceeds at {at} µs, its place is {place} µs"
            );
        }
    }
}
