//! Settling (`Limiter::settle`) on a real Redis, with an injected clock: the
//! attacker's extremes, chains and resets as on the memory store (the shared bodies
//! of `support::settle`), many tasks settling one key at once (the key's usage comes
//! out as the sum of their actuals, one script call per settle), through leases, and
//! the denial cache, which forgets a key a settle gave back to. The hand-computed
//! tables run in `scenarios`.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{shared_server, unique_prefix};
use support::settle::{
    ALGORITHMS, BASE, chains_never_give_back_another_charge, concurrent_settles, extremes_saturate,
    receipts_from_before_a_reset_give_nothing_back,
};
use tollgate::clock::ManualClock;
use tollgate::store::LeasedStore;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

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
async fn a_receipt_from_before_a_reset_gives_nothing_back_on_redis() -> TestResult {
    receipts_from_before_a_reset_give_nothing_back(store).await
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
    let estimate = limiter.check("api", &key, 10).await?;
    // Denied, and cached until the window ends.
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    // A settle that only adds debt may leave the denial cached: still denied.
    let up = limiter.settle(&estimate, &key, 12).await?;
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    // One that gives back frees the key at once, in this process.
    let down = limiter.settle(&up, &key, 0).await?;
    assert_eq!(
        down.remaining, 0,
        "the estimate (10) stays: the receipt names the extra"
    );
    let estimate_back = limiter.settle(&estimate, &key, 4).await?;
    assert_eq!(estimate_back.remaining, 6);
    assert!(limiter.check("api", &key, 1).await?.allowed);
    Ok(())
}
