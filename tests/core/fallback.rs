//! `Fallback` on memory stores: a failover never multiplies a limit in one process;
//! hysteresis; blocks re-asserted on a primary that comes back empty, and missed
//! blocks replayed in the background.

use std::time::{Duration, Instant};

use support::fallback::{HalfDown, Restartable, admitted_under_a_half_failing_primary};
use support::scenarios::BASE;
use tollgate::clock::ManualClock;
use tollgate::store::{Fallback, Store};
use tollgate::{Key, Limit, Limiter, MemoryStore, Quota};

/// At one frozen instant, a primary that fails half its calls (in runs of three) makes
/// the `Fallback` switch back and forth; the insurance store starts the key where the
/// primary left it, and the primary is charged on recovery what the insurance store
/// admitted: one process admits 10, one store's quota, not 20.
#[tokio::test]
async fn a_primary_failing_half_its_calls_admits_one_quota_at_one_instant() {
    let clock = ManualClock::new(BASE);
    let (admitted, switches, left) =
        admitted_under_a_half_failing_primary(MemoryStore::with_clock(clock.clone()), &clock).await;
    assert_eq!(admitted, 10, "one store's quota, after {switches} switches");
    assert!(switches >= 2, "it failed over and back: {switches}");
    assert_eq!(
        left, 0,
        "the primary was charged what the insurance admitted"
    );
}

/// A primary that fails in runs of 20 calls (every 5 ms a request, for 2 s): with the
/// default hysteresis (down at least 1 s, doubled while it flaps; back after two
/// probes in a row) it switches a handful of times, not at every run.
#[tokio::test]
async fn a_flapping_primary_switches_a_bounded_number_of_times() {
    let primary = HalfDown::new(MemoryStore::new(), 20);
    let store = Fallback::new(primary, MemoryStore::new());
    let global = Limit::new("global", Quota::per_minute(50)).expect("a limit");
    let limiter = limiter(vec![global], store.clone());
    let everyone = Key::from("everyone");
    let started = Instant::now();
    let (mut admitted, mut rejected) = (0, 0);
    while started.elapsed() < Duration::from_secs(2) {
        let decision = limiter
            .check("global", &everyone, 1)
            .await
            .expect("answered");
        if decision.allowed {
            admitted += 1;
        } else {
            rejected += 1;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let switches = store.switches();
    assert!(switches <= 4, "{switches} switches in 2 s");
    // The global limit still rejects: one quota (and what 2 s refill) in all.
    assert!(admitted <= 51, "{admitted} admitted on a limit of 50");
    assert!(rejected > 0);
}

/// A key blocked for ten minutes; the primary goes down and comes back empty. Before
/// it decides again, the block is re-asserted there.
#[tokio::test]
async fn a_block_holds_on_a_primary_that_comes_back_empty() {
    let primary = Restartable::new();
    let store = Fallback::new(primary.clone(), MemoryStore::new())
        .min_down(Duration::from_millis(20))
        .probe_interval(Duration::from_millis(10));
    let api = || Limit::new("api", Quota::per_minute(100)).expect("a limit");
    let limiter = limiter(vec![api()], store.clone());
    let mallory = Key::from("mallory");
    limiter
        .block("api", &mallory, Duration::from_secs(600))
        .await
        .expect("blocked");
    primary.go_down();
    assert!(
        !limiter
            .check("api", &mallory, 1)
            .await
            .expect("answered")
            .allowed
    );
    assert!(!store.serving_primary());
    primary.come_back_empty();
    until_primary(&store).await;
    let direct = self::limiter(vec![api()], primary.inner());
    let left = direct
        .check("api", &mallory, 0)
        .await
        .expect("answered")
        .blocked_for
        .expect("blocked on the primary");
    assert!(left > Duration::from_secs(590), "{left:?}");
}

/// 2,000 operators' blocks made while the primary is down (one for an hour); it comes
/// back empty. They are replayed in the background before it decides again: no
/// request waits for the replay, and the key blocked for an hour is never admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_blocks_are_replayed_in_the_background_before_the_primary_decides_again() {
    let primary = Restartable::new();
    let store = Fallback::new(primary.clone(), MemoryStore::new())
        .min_down(Duration::from_millis(20))
        .probe_interval(Duration::from_millis(10));
    let api = || Limit::new("api", Quota::per_minute(1_000)).expect("a limit");
    let limiter = limiter(vec![api()], store.clone());
    let hour = Key::from("blocked-for-an-hour");
    primary.go_down();
    assert!(
        limiter
            .check("api", &hour, 1)
            .await
            .expect("answered")
            .allowed
    );
    limiter
        .block("api", &hour, Duration::from_secs(3_600))
        .await
        .expect("blocked");
    for i in 0..2_000 {
        let key = Key::from(format!("abuser-{i}").as_str());
        limiter
            .block("api", &key, Duration::from_secs(600))
            .await
            .expect("blocked");
    }
    primary.come_back_empty();
    let started = Instant::now();
    let (mut slowest, mut admitted) = (Duration::ZERO, 0);
    while !store.serving_primary() || started.elapsed() < Duration::from_millis(100) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never recovered"
        );
        let sent = Instant::now();
        if limiter
            .check("api", &hour, 1)
            .await
            .expect("answered")
            .allowed
        {
            admitted += 1;
        }
        slowest = slowest.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(admitted, 0, "the hour's block held through the replay");
    assert!(
        slowest < Duration::from_millis(50),
        "a request waited {slowest:?}"
    );
    let direct = self::limiter(vec![api()], primary.inner());
    for key in [hour, Key::from("abuser-0"), Key::from("abuser-1999")] {
        let decision = direct.check("api", &key, 0).await.expect("answered");
        assert!(decision.blocked_for.is_some());
    }
}

fn limiter(limits: Vec<Limit>, store: impl Store) -> Limiter {
    Limiter::builder()
        .limits(limits)
        .store(store)
        .build()
        .expect("a limiter")
}

/// Waits (bounded) until the fallback serves from its primary again.
async fn until_primary<P: Store, I: Store>(store: &Fallback<P, I>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !store.serving_primary() {
        assert!(Instant::now() < deadline, "the primary never came back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A `Fallback` whose prober's runtime shut down (a test's runtime, an application's
/// first one) is not left waiting on it: on the next runtime, calls bring the primary
/// back.
#[test]
fn a_fallback_outlives_the_runtime_of_its_prober() {
    let primary = Restartable::new();
    let store = Fallback::new(primary.clone(), MemoryStore::new())
        .min_down(Duration::from_millis(10))
        .probe_interval(Duration::from_millis(10));
    let limiter = limiter(
        vec![Limit::new("api", Quota::per_minute(100)).expect("a limit")],
        store.clone(),
    );
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime")
    };
    let key = Key::from("alice");
    let first = runtime();
    first.block_on(async {
        primary.go_down();
        assert!(
            limiter
                .check("api", &key, 1)
                .await
                .expect("answered")
                .allowed
        );
        assert!(!store.serving_primary());
    });
    drop(first);
    primary.come_back_empty();
    runtime().block_on(async {
        let started = Instant::now();
        while !store.serving_primary() {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "still on the insurance"
            );
            limiter.check("api", &key, 1).await.expect("answered");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}

/// Fifty requests of one key at once, the first ones the insurance store serves in an
/// outage: each waits for the key's seed (the primary's 6 of 10 used) rather than be
/// decided without it, so exactly 4 are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_on_the_insurance_wait_for_the_keys_seed() {
    let primary = Restartable::new();
    let store = Fallback::new(primary.clone(), MemoryStore::new());
    let limiter = std::sync::Arc::new(limiter(
        vec![Limit::new("api", Quota::per_minute(10)).expect("a limit")],
        store.clone(),
    ));
    let key = Key::from("alice");
    for _ in 0..6 {
        assert!(
            limiter
                .check("api", &key, 1)
                .await
                .expect("answered")
                .allowed
        );
    }
    primary.go_down();
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &key, 1).await })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        if task.await.expect("no panic").expect("answered").allowed {
            admitted += 1;
        }
    }
    assert!(!store.serving_primary());
    assert_eq!(admitted, 4);
}
