//! Settling (`Limiter::settle`) on a real Redis, with an injected clock: the
//! attacker's extremes, chains and resets as on the memory store (the shared bodies
//! of `support::settle`), many tasks settling one key at once (the key's usage comes
//! out as the sum of their actuals, one script call per settle), through leases, and
//! the denial cache, which forgets a key a settle gave back to. The hand-computed
//! tables run in `scenarios`.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{RedisServer, shared_server, unique_prefix};
use support::settle::{
    ALGORITHMS, BASE, a_charge_under_a_changed_limit_gives_nothing_back,
    a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended,
    a_settle_up_counts_in_full_under_a_larger_quota, chains_never_give_back_another_charge,
    concurrent_settles, each_receipt_moves_its_charge_once,
    each_receipt_moves_its_charge_once_through_a_lease, extremes_saturate,
    receipts_from_before_a_reset_give_nothing_back,
};
use tollgate::clock::ManualClock;
use tollgate::store::{LeasedStore, SliceSizing};
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore, StoreErrorKind};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A store on the shared server under a prefix of its own, deciding on `clock`.
fn store(clock: ManualClock) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(&unique_prefix("settle"))
        // Many tasks on two cores: answers are checked here, not speed.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
        .with_clock(clock)
}

#[tokio::test]
async fn a_chain_of_settles_never_gives_back_another_requests_charge_on_redis() -> TestResult {
    chains_never_give_back_another_charge(store).await
}

#[tokio::test]
async fn an_estimate_of_1_settled_to_u64_max_saturates_on_redis() -> TestResult {
    extremes_saturate(store).await
}

#[tokio::test]
async fn a_settle_up_under_a_small_quota_counts_in_full_under_a_larger_quota_of_the_key_on_redis()
-> TestResult {
    a_settle_up_counts_in_full_under_a_larger_quota(store).await
}

#[tokio::test]
async fn a_receipt_from_before_a_reset_gives_nothing_back_on_redis() -> TestResult {
    receipts_from_before_a_reset_give_nothing_back(store).await
}

#[tokio::test]
async fn a_decision_settled_or_refunded_twice_gives_back_once_on_redis() -> TestResult {
    each_receipt_moves_its_charge_once(store).await
}

/// Slices of 25 (one process): every request of the scenario is spent from one lease
/// and every move is made in it, where only the lease's record can refuse a repeat.
#[tokio::test]
async fn a_decision_settled_or_refunded_twice_through_a_lease_gives_back_once_on_redis()
-> TestResult {
    each_receipt_moves_its_charge_once_through_a_lease(|clock: ManualClock| {
        LeasedStore::builder(store(clock.clone()))
            .clock(clock)
            .processes(1)
            .and_then(|b| b.sizing(SliceSizing::Fixed(25)))
            .expect("one process, slices of 25")
            .build()
    })
    .await
}

#[tokio::test]
async fn a_decision_settled_in_a_lease_moves_nothing_when_settled_again_after_the_lease_ended_on_redis()
-> TestResult {
    a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended(|clock: ManualClock| {
        LeasedStore::builder(store(clock.clone()))
            .clock(clock)
            .processes(1)
            .and_then(|b| b.sizing(SliceSizing::Fixed(8)))
            .expect("one process, slices of 8")
            .build()
    })
    .await
}

#[tokio::test]
async fn a_charge_made_before_a_reload_to_another_algorithm_gives_nothing_back_on_redis()
-> TestResult {
    a_charge_under_a_changed_limit_gives_nothing_back(store).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_settling_one_key_leave_exactly_the_sum_of_their_actuals_on_redis() {
    for algorithm in ALGORITHMS {
        let store = store(ManualClock::new(BASE));
        let (used, settled) = concurrent_settles(store, algorithm, 16, 20).await;
        if algorithm == Algorithm::LeakyBucket {
            // A place queued behind a later one is not given back (never over).
            assert!(
                used >= settled,
                "{algorithm}: {used} used, {settled} settled"
            );
        } else {
            assert_eq!(used, settled, "{algorithm}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_settling_through_leases_on_redis_leave_exactly_their_actuals() -> TestResult {
    let algorithm = Algorithm::FixedWindow;
    let clock = ManualClock::new(BASE);
    let redis = store(clock.clone());
    let leased = LeasedStore::builder(redis.clone())
        .clock(clock.clone())
        .build();
    let (_, settled) = concurrent_settles(leased.clone(), algorithm, 16, 20).await;
    leased.release_all().await?;
    let limit = Limit::new(algorithm.name(), Quota::per_hour(100_000))?.algorithm(algorithm);
    let limiter = Limiter::builder().limit(limit).store(redis).build()?;
    let peek = limiter.peek(algorithm.name(), &Key::from("shared")).await?;
    assert_eq!(peek.capacity - peek.remaining, settled);
    Ok(())
}

#[tokio::test]
async fn a_settle_that_gives_back_frees_a_key_the_denial_cache_holds() -> TestResult {
    let clock = ManualClock::new(BASE);
    let cached = RedisStore::from_url(&shared_server().url())?
        .prefix(&unique_prefix("settle-cache"))
        .with_clock(clock.clone());
    let limit = Limit::new("api", Quota::per_minute(10))?.algorithm(Algorithm::FixedWindow);
    let limiter = Limiter::builder().limit(limit).store(cached).build()?;
    let key = Key::from("alice");
    let raised = limiter.check("api", &key, 4).await?;
    let estimate = limiter.check("api", &key, 6).await?;
    // Denied, and cached until the window ends.
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    // A settle that only adds debt may leave the denial cached: still denied.
    let up = limiter.settle(&raised, &key, 6).await?;
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    // Its extra back: the estimate before it (4) stays (the receipt names the extra).
    let down = limiter.settle(&up, &key, 0).await?;
    assert_eq!(down.remaining, 0, "4 + 6 stand");
    // One that gives back frees the key at once, in this process.
    let estimate_back = limiter.settle(&estimate, &key, 2).await?;
    assert_eq!(estimate_back.remaining, 4);
    assert!(limiter.check("api", &key, 1).await?.allowed);
    Ok(())
}

/// What `key` has used of `limiter`'s "api" (capacity less remaining).
async fn used(limiter: &Limiter, key: &Key) -> Result<u64, tollgate::StoreError> {
    let peek = limiter.peek("api", key).await?;
    Ok(peek.capacity - peek.remaining)
}

#[tokio::test]
async fn a_settle_retried_after_a_timeout_whose_first_try_ran_moves_its_charge_once_on_redis()
-> TestResult {
    let server = RedisServer::start();
    let store = RedisStore::from_url(&server.url())?
        .prefix(&unique_prefix("settle-retry"))
        .deadline(Duration::from_millis(100))?
        .with_clock(ManualClock::new(BASE));
    let limit = Limit::new("api", Quota::per_minute(100))?.algorithm(Algorithm::FixedWindow);
    let limiter = Limiter::builder().limit(limit).store(store).build()?;
    let key = Key::from("alice");
    // The scripts a settle and a refund run, loaded before the server stops (a call
    // that finds its script missing runs nothing).
    let warm = limiter.check("api", &Key::from("warm"), 2).await?;
    limiter.settle(&warm, &Key::from("warm"), 1).await?;
    limiter.refund_charge(&warm, &Key::from("warm"), 1).await?;
    limiter.check("api", &key, 1).await?;
    let down = limiter.check("api", &key, 6).await?;
    let up = limiter.check("api", &key, 2).await?;
    let refunded = limiter.check("api", &key, 3).await?;
    assert_eq!(used(&limiter, &key).await?, 12);
    // Each move: sent to a stopped server, timed out unanswered, run once the server
    // wakes; then tried again by the caller, who saw only the timeout.
    for (step, after) in [(0, 8), (1, 11), (2, 8)] {
        let first = || async {
            match step {
                0 => limiter.settle(&down, &key, 2).await.map(drop),
                1 => limiter.settle(&up, &key, 5).await.map(drop),
                _ => limiter.refund_charge(&refunded, &key, 3).await,
            }
        };
        server.pause();
        let timed_out = first().await;
        assert_eq!(
            timed_out.map_err(|e| e.kind()),
            Err(StoreErrorKind::Timeout)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.resume();
        let woken = std::time::Instant::now();
        let mut first_try = used(&limiter, &key).await;
        while first_try.is_err() && woken.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            first_try = used(&limiter, &key).await;
        }
        assert_eq!(first_try?, after, "step {step}: the first try ran");
        first().await?;
        assert_eq!(used(&limiter, &key).await?, after, "step {step}: retried");
    }
    Ok(())
}
