//! The Redis denial cache against the give-backs and quota changes around it: a denial
//! cached under one quota must not answer a caller whose quota changed, and a caller
//! given its charge back is not still refused. Memory is the reference.

use std::time::Duration;

use tollgate::store::Store;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Penalty, Quota};

use crate::common::{clock, cluster, redis};

fn limiter(store: impl Store) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_minute(5))
                .expect("limit")
                .algorithm(Algorithm::SlidingWindowLog),
        )
        .store(store)
        .build()
        .expect("limiter")
}

/// 5 of 5 used under a plan of 5/min, a sixth denied (and cached on Redis); the
/// caller is upgraded to 100/min: usage carries, 95 left, the next request is
/// admitted.
async fn upgrade_after_a_denial(store: impl Store) -> (bool, u64) {
    let limiter = limiter(store);
    let key = Key::from("upgraded");
    let basic = Quota::per_minute(5);
    for _ in 0..5 {
        assert!(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .expect("check")
                .allowed
        );
    }
    assert!(
        !limiter
            .check_with("api", &key, 1, basic)
            .await
            .expect("check")
            .allowed
    );
    assert!(
        !limiter
            .check_with("api", &key, 1, basic)
            .await
            .expect("check")
            .allowed
    );
    let pro = Quota::per_minute(100);
    let after = limiter
        .check_with("api", &key, 1, pro)
        .await
        .expect("check");
    (after.allowed, after.remaining)
}

#[tokio::test]
async fn a_plan_upgrade_is_not_answered_by_a_denial_cached_under_the_old_plan() {
    let memory = upgrade_after_a_denial(MemoryStore::with_clock(clock())).await;
    let redis = upgrade_after_a_denial(redis("upgrade-denied", clock())).await;
    assert_eq!(memory, (true, 94));
    assert_eq!(redis, memory);
}

/// The same through a reload that raises the limit's quota.
async fn reload_after_a_denial(store: impl Store) -> (bool, u64) {
    let limiter = limiter(store);
    let key = Key::from("reloaded");
    for _ in 0..5 {
        assert!(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    assert!(!limiter.check("api", &key, 1).await.expect("check").allowed);
    assert!(!limiter.check("api", &key, 1).await.expect("check").allowed);
    limiter
        .reload([Limit::new("api", Quota::per_minute(100))
            .expect("limit")
            .algorithm(Algorithm::SlidingWindowLog)])
        .expect("reload");
    let after = limiter.check("api", &key, 1).await.expect("check");
    (after.allowed, after.remaining)
}

#[tokio::test]
async fn a_reload_raising_the_quota_is_not_answered_by_a_cached_denial() {
    let memory = reload_after_a_denial(MemoryStore::with_clock(clock())).await;
    let redis = reload_after_a_denial(redis("reload-denied", clock())).await;
    assert_eq!(memory, (true, 94));
    assert_eq!(redis, memory);
}

/// A denied key (cached on Redis) given one charge back by receipt is admitted once
/// more, as on memory.
async fn refund_after_a_denial(store: impl Store) -> (bool, bool) {
    let limiter = limiter(store);
    let key = Key::from("refunded");
    let first = limiter.check("api", &key, 1).await.expect("check");
    for _ in 0..4 {
        assert!(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    assert!(!limiter.check("api", &key, 1).await.expect("check").allowed);
    limiter
        .refund_charge(&first, &key, 1)
        .await
        .expect("refund");
    let again = limiter.check("api", &key, 1).await.expect("check").allowed;
    let beyond = limiter.check("api", &key, 1).await.expect("check").allowed;
    (again, beyond)
}

#[tokio::test]
async fn a_refund_after_a_cached_denial_admits_exactly_one_more() {
    let memory = refund_after_a_denial(MemoryStore::with_clock(clock())).await;
    let redis = refund_after_a_denial(redis("refund-denied", clock())).await;
    assert_eq!(memory, (true, false));
    assert_eq!(redis, memory);
}

/// An operator's reset after a cached denial: a fresh quota, 5 admitted, on both.
async fn reset_after_a_denial(store: impl Store) -> u64 {
    let limiter = limiter(store);
    let key = Key::from("reset");
    for _ in 0..7 {
        let _ = limiter.check("api", &key, 1).await.expect("check");
    }
    limiter.reset("api", &key).await.expect("reset");
    let mut admitted = 0;
    for _ in 0..8 {
        admitted += u64::from(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    admitted
}

#[tokio::test]
async fn a_reset_after_a_cached_denial_admits_exactly_a_fresh_quota() {
    assert_eq!(
        reset_after_a_denial(MemoryStore::with_clock(clock())).await,
        5
    );
    assert_eq!(
        reset_after_a_denial(redis("reset-denied", clock())).await,
        5
    );
}

/// A penalty box (after 3 rejections within 1 s, 10 min) on a plan caller: every
/// rejection counts though the denial cache could answer the repeats, and the box
/// holds after the window refills; a plan upgrade does not let the boxed caller out.
async fn boxed_plan_caller(store: impl Store, clock: &tollgate::clock::ManualClock) -> Vec<bool> {
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_minute(5))
                .expect("limit")
                .penalty(
                    Penalty::after(3)
                        .within(Duration::from_secs(1))
                        .block_for(Duration::from_secs(600)),
                ),
        )
        .store(store)
        .build()
        .expect("limiter");
    let key = Key::from("boxed");
    let basic = Quota::per_minute(5);
    let mut seen = Vec::new();
    for _ in 0..8 {
        seen.push(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .expect("check")
                .allowed,
        );
        clock.advance(Duration::from_millis(10));
    }
    clock.advance(Duration::from_secs(120));
    let pro = Quota::per_minute(1000);
    seen.push(
        limiter
            .check_with("api", &key, 1, pro)
            .await
            .expect("check")
            .allowed,
    );
    seen.push(
        limiter
            .check_with("api", &key, 1, basic)
            .await
            .expect("check")
            .allowed,
    );
    seen
}

#[tokio::test]
async fn a_boxed_plan_caller_stays_boxed_through_the_denial_cache_and_an_upgrade() {
    let c = clock();
    let memory = boxed_plan_caller(MemoryStore::with_clock(c.clone()), &c).await;
    let c = clock();
    let redis = boxed_plan_caller(redis("boxed-plan", c.clone()), &c).await;
    let expected = [
        true, true, true, true, true, false, false, false, false, false,
    ];
    assert_eq!(memory, expected);
    assert_eq!(redis, expected);
}

#[tokio::test]
async fn on_the_cluster_a_plan_upgrade_or_a_reload_is_not_answered_by_a_cached_denial() {
    let upgraded = upgrade_after_a_denial(cluster("upgrade-denied", clock())).await;
    let reloaded = reload_after_a_denial(cluster("reload-denied", clock())).await;
    let refunded = refund_after_a_denial(cluster("refund-denied", clock())).await;
    assert_eq!(
        (upgraded, reloaded, refunded),
        ((true, 94), (true, 94), (true, false))
    );
}
