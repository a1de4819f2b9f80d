//! A request never gets back more than it paid, through the limiter's own give-backs:
//! `settle` and `refund_charge` of one receipt, retried or mixed, on every store, and
//! after a reload to another algorithm.

use std::time::Duration;

use tollgate::store::{Fallback, LeasedStore, Store};
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

use crate::common::{clock, cluster, redis};

fn limiter(store: impl Store, algorithm: Algorithm) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_minute(10))
                .expect("limit")
                .algorithm(algorithm),
        )
        .store(store)
        .build()
        .expect("limiter")
}

/// Two charges of 5 spend 10/min; the first settled to 0 twice (a retry after a
/// timeout whose first try ran) gives back 5 once: 5 left, not 10.
async fn settled_twice_gives_back_once(limiter: &Limiter) -> (u64, u64) {
    let key = Key::from("retry");
    let first = limiter.check("api", &key, 5).await.expect("check");
    let second = limiter.check("api", &key, 5).await.expect("check");
    assert!(first.allowed && second.allowed);
    limiter.settle(&first, &key, 0).await.expect("settle");
    let once = limiter.check("api", &key, 0).await.expect("peek").remaining;
    limiter.settle(&first, &key, 0).await.expect("settle again");
    let twice = limiter.check("api", &key, 0).await.expect("peek").remaining;
    (once, twice)
}

/// A charge of 5 settled to 0 and then refunded by the same receipt: 5 back once.
async fn settle_then_refund_gives_back_once(limiter: &Limiter) -> u64 {
    let key = Key::from("mixed");
    let first = limiter.check("api", &key, 5).await.expect("check");
    let _second = limiter.check("api", &key, 5).await.expect("check");
    limiter.settle(&first, &key, 0).await.expect("settle");
    limiter
        .refund_charge(&first, &key, 5)
        .await
        .expect("refund");
    limiter.check("api", &key, 0).await.expect("peek").remaining
}

/// A refund of one receipt retried: 5 back once.
async fn refunded_twice_gives_back_once(limiter: &Limiter) -> u64 {
    let key = Key::from("refund-retry");
    let first = limiter.check("api", &key, 5).await.expect("check");
    let _second = limiter.check("api", &key, 5).await.expect("check");
    limiter
        .refund_charge(&first, &key, 5)
        .await
        .expect("refund");
    limiter
        .refund_charge(&first, &key, 5)
        .await
        .expect("refund again");
    limiter.check("api", &key, 0).await.expect("peek").remaining
}

#[tokio::test]
async fn a_settle_retried_gives_back_once_on_memory() {
    let limiter = limiter(MemoryStore::with_clock(clock()), Algorithm::FixedWindow);
    assert_eq!(settled_twice_gives_back_once(&limiter).await, (5, 5));
}

#[tokio::test]
async fn a_settle_retried_gives_back_once_on_redis() {
    let limiter = limiter(redis("settle-retry", clock()), Algorithm::FixedWindow);
    assert_eq!(settled_twice_gives_back_once(&limiter).await, (5, 5));
}

#[tokio::test]
async fn a_settle_retried_gives_back_once_through_a_lease() {
    let store = LeasedStore::new(MemoryStore::with_clock(clock()));
    let limiter = limiter(store, Algorithm::FixedWindow);
    assert_eq!(settled_twice_gives_back_once(&limiter).await, (5, 5));
}

#[tokio::test]
async fn a_settle_retried_gives_back_once_through_a_fallback() {
    let store = Fallback::new(
        redis("settle-retry-fallback", clock()),
        MemoryStore::with_clock(clock()),
    );
    let limiter = limiter(store, Algorithm::FixedWindow);
    assert_eq!(settled_twice_gives_back_once(&limiter).await, (5, 5));
}

#[tokio::test]
async fn a_settle_then_a_refund_of_one_receipt_give_back_once_on_memory() {
    let mut left = Vec::new();
    for algorithm in Algorithm::ALL {
        let limiter = limiter(MemoryStore::with_clock(clock()), algorithm);
        left.push((
            algorithm,
            settle_then_refund_gives_back_once(&limiter).await,
        ));
    }
    assert!(
        left.iter()
            .all(|(a, l)| *l == 5 || (*a == Algorithm::LeakyBucket && *l <= 5)),
        "left (5 is right): {left:?}"
    );
}

#[tokio::test]
async fn a_settle_then_a_refund_of_one_receipt_give_back_once_on_redis() {
    let mut left = Vec::new();
    for algorithm in Algorithm::ALL {
        let limiter = limiter(redis(&format!("mix-{algorithm}"), clock()), algorithm);
        left.push((
            algorithm,
            settle_then_refund_gives_back_once(&limiter).await,
        ));
    }
    assert!(
        left.iter()
            .all(|(a, l)| *l == 5 || (*a == Algorithm::LeakyBucket && *l <= 5)),
        "left (5 is right): {left:?}"
    );
}

#[tokio::test]
async fn a_refund_retried_gives_back_once_on_memory_and_redis() {
    let mut left = Vec::new();
    for algorithm in Algorithm::ALL {
        let memory = limiter(MemoryStore::with_clock(clock()), algorithm);
        let redis = limiter(
            redis(&format!("refund-retry-{algorithm}"), clock()),
            algorithm,
        );
        left.push((
            algorithm,
            refunded_twice_gives_back_once(&memory).await,
            refunded_twice_gives_back_once(&redis).await,
        ));
    }
    assert!(
        left.iter()
            .all(|(a, m, r)| (*m, *r) == (5, 5)
                || (*a == Algorithm::LeakyBucket && *m <= 5 && *r <= 5)),
        "left on memory, Redis (5 is right): {left:?}"
    );
}

/// A `FixedWindow` charge of 5 made before a reload to GCRA, refunded by receipt after
/// the GCRA state spent its 10: nothing comes back (the case 4, by refund
/// rather than settle).
async fn a_refund_across_a_reload_gives_nothing(store: impl Store) -> u64 {
    let limiter = limiter(store, Algorithm::FixedWindow);
    let key = Key::from("reloaded");
    let old = limiter.check("api", &key, 5).await.expect("check");
    assert!(old.allowed);
    limiter
        .reload([Limit::new("api", Quota::per_minute(10))
            .expect("limit")
            .algorithm(Algorithm::Gcra)])
        .expect("reload");
    let mut admitted = 0;
    for _ in 0..10 {
        admitted += u64::from(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    assert_eq!(admitted, 10);
    limiter.refund_charge(&old, &key, 5).await.expect("refund");
    let mut more = 0;
    for _ in 0..10 {
        more += u64::from(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    more
}

#[tokio::test]
async fn a_refund_across_a_reload_to_another_algorithm_gives_nothing_on_memory() {
    assert_eq!(
        a_refund_across_a_reload_gives_nothing(MemoryStore::with_clock(clock())).await,
        0
    );
}

#[tokio::test]
async fn a_refund_across_a_reload_to_another_algorithm_gives_nothing_on_redis() {
    assert_eq!(
        a_refund_across_a_reload_gives_nothing(redis("refund-reload", clock())).await,
        0
    );
}

/// The same with a settle made after a reload that changed only the period (10/min
/// to 10 per 30 s): another limit identity, nothing back.
async fn a_settle_across_a_period_change_gives_nothing(store: impl Store) -> u64 {
    let limiter = limiter(store, Algorithm::SlidingWindowLog);
    let key = Key::from("period");
    let old = limiter.check("api", &key, 5).await.expect("check");
    limiter
        .reload([Limit::new(
            "api",
            Quota::new(10, Duration::from_secs(30)).expect("quota"),
        )
        .expect("limit")
        .algorithm(Algorithm::SlidingWindowLog)])
        .expect("reload");
    for _ in 0..10 {
        assert!(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    limiter.settle(&old, &key, 0).await.expect("settle");
    let mut more = 0;
    for _ in 0..10 {
        more += u64::from(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    more
}

#[tokio::test]
async fn a_settle_across_a_period_change_gives_nothing_on_memory() {
    assert_eq!(
        a_settle_across_a_period_change_gives_nothing(MemoryStore::with_clock(clock())).await,
        0
    );
}

#[tokio::test]
async fn a_settle_across_a_period_change_gives_nothing_on_redis() {
    assert_eq!(
        a_settle_across_a_period_change_gives_nothing(redis("settle-period", clock())).await,
        0
    );
}

/// The case 4 exactly, through `Limiter::settle`: a `FixedWindow` charge of 5
/// settled to 0 after a reload made the limit GCRA gives nothing to the new state.
async fn a_settle_across_a_reload_gives_nothing(store: impl Store) -> u64 {
    let limiter = limiter(store, Algorithm::FixedWindow);
    let key = Key::from("case-4");
    let old = limiter.check("api", &key, 5).await.expect("check");
    limiter
        .reload([Limit::new("api", Quota::per_minute(10))
            .expect("limit")
            .algorithm(Algorithm::Gcra)])
        .expect("reload");
    for _ in 0..10 {
        assert!(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    limiter.settle(&old, &key, 0).await.expect("settle");
    let mut more = 0;
    for _ in 0..10 {
        more += u64::from(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    more
}

#[tokio::test]
async fn a_settle_across_a_reload_to_another_algorithm_gives_nothing_on_memory() {
    assert_eq!(
        a_settle_across_a_reload_gives_nothing(MemoryStore::with_clock(clock())).await,
        0
    );
}

#[tokio::test]
async fn a_settle_across_a_reload_to_another_algorithm_gives_nothing_on_redis() {
    assert_eq!(
        a_settle_across_a_reload_gives_nothing(redis("settle-reload", clock())).await,
        0
    );
}

/// A refund by receipt of more than the charge gives back the charge, no more: two
/// charges of 5 spend 10/min; the first refunded with 50 leaves 5, not 10.
async fn refund_more_than_charged(store: impl Store, algorithm: Algorithm) -> u64 {
    let limiter = limiter(store, algorithm);
    let key = Key::from("greedy-refund");
    let first = limiter.check("api", &key, 5).await.expect("check");
    let _second = limiter.check("api", &key, 5).await.expect("check");
    limiter
        .refund_charge(&first, &key, 50)
        .await
        .expect("refund");
    limiter.check("api", &key, 0).await.expect("peek").remaining
}

#[tokio::test]
async fn a_refund_of_more_than_the_charge_gives_back_the_charge_on_memory_redis_and_leases() {
    let mut left = Vec::new();
    for algorithm in Algorithm::ALL {
        if algorithm == Algorithm::LeakyBucket {
            continue; // the first of two turns comes back only with the second
        }
        let c = clock();
        left.push((
            algorithm,
            refund_more_than_charged(MemoryStore::with_clock(c.clone()), algorithm).await,
            refund_more_than_charged(redis(&format!("more-{algorithm}"), c.clone()), algorithm)
                .await,
            refund_more_than_charged(
                LeasedStore::builder(MemoryStore::with_clock(c.clone()))
                    .clock(c.clone())
                    .build(),
                algorithm,
            )
            .await,
        ));
    }
    assert!(
        left.iter().all(|(_, m, r, l)| (*m, *r, *l) == (5, 5, 5)),
        "left on memory, Redis, a lease (5 is right): {left:?}"
    );
}

#[tokio::test]
async fn a_settle_retried_gives_back_once_on_the_cluster() {
    let limiter = limiter(cluster("settle-retry", clock()), Algorithm::FixedWindow);
    assert_eq!(settled_twice_gives_back_once(&limiter).await, (5, 5));
}

#[tokio::test]
async fn a_settle_across_a_reload_to_another_algorithm_gives_nothing_on_the_cluster() {
    assert_eq!(
        a_settle_across_a_reload_gives_nothing(cluster("settle-reload", clock())).await,
        0
    );
}
