//! `LeasedStore` under the layer's give-backs: `count_when` refunds and `Meter`
//! settles of lease-charged requests never let more through than the quota, at a
//! frozen instant, over real TCP.

use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Path};
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::layer::{Costs, Meter};
use tollgate::store::{LeasedStore, Store};
use tollgate::{Algorithm, Limit, Limiter, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{clock, redis};
use crate::desk::{Desk, attempt, serve};

fn leased<S: Store>(store: S, clock: &ManualClock) -> LeasedStore<S> {
    LeasedStore::builder(store).clock(clock.clone()).build()
}

/// 10 failed logins a minute through a lease; 60 logins alternating right and wrong,
/// one after another: exactly 10 wrong ones reach the desk, the 10 right ones before
/// the quota is spent are served, and the store behind the lease has nothing left.
async fn alternating_logins(backing: impl Store + Clone, c: &ManualClock) -> (usize, usize, u64) {
    let policy = Policy::new("failed-logins", Quota::per_minute(10))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-user").expect("header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let layer = RateLimitLayer::builder()
        .policy(policy.clone())
        .store(leased(backing.clone(), c))
        .build()
        .expect("layer");
    let desk = Desk::new();
    desk.open();
    let server = serve(&layer, &desk).await;
    let (mut right, mut wrong) = (0, 0);
    for n in 0..60 {
        let password = if n % 2 == 0 { "right" } else { "wrong" };
        match server.send(attempt("leaser", password, false)).await.status {
            StatusCode::OK => right += 1,
            StatusCode::UNAUTHORIZED => wrong += 1,
            StatusCode::TOO_MANY_REQUESTS => {}
            other => panic!("{other}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (parts, _) = attempt("leaser", "x", false).into_parts();
    let key = policy.key_of(&parts).expect("key");
    let behind = Limiter::builder()
        .limit(
            Limit::new("failed-logins", Quota::per_minute(10))
                .expect("l")
                .algorithm(Algorithm::FixedWindow),
        )
        .store(backing)
        .build()
        .expect("limiter");
    let left = behind
        .peek("failed-logins", &key)
        .await
        .expect("peek")
        .remaining;
    assert_eq!(desk.reached().1, wrong);
    (right, wrong, left)
}

#[tokio::test]
async fn count_when_refunds_through_a_lease_let_exactly_the_quota_of_failures_through() {
    let c = clock();
    let got = alternating_logins(MemoryStore::with_clock(c.clone()), &c).await;
    assert_eq!(
        (got.1, got.2),
        (10, 0),
        "(right, wrong, left behind) = {got:?}"
    );
    assert_eq!(got.0, 10, "right ones served: {got:?}");
}

#[tokio::test]
async fn count_when_refunds_through_a_lease_on_redis_let_exactly_the_quota_of_failures_through() {
    let c = clock();
    let got = alternating_logins(redis("lease-cw", c.clone()), &c).await;
    assert_eq!(
        (got.1, got.2),
        (10, 0),
        "(right, wrong, left behind) = {got:?}"
    );
    assert_eq!(got.0, 10, "right ones served: {got:?}");
}

fn estimate(parts: &http::request::Parts) -> u32 {
    parts
        .headers
        .get("x-estimate")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1_000)
}

/// 10,000 tokens a minute through a lease, each request admitted on 1,000 and settled
/// to 100: exactly 91 requests served (the 91st is admitted on the last 1,000, then
/// 900 are left, less than an estimate), as without the lease.
async fn metered_through_a_lease(backing: impl Store, c: &ManualClock) -> usize {
    let policy = Policy::new("tokens", Quota::per_minute(10_000))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-api-key").expect("header"))
        .costs(Costs::from_fn(estimate))
        .metered();
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(leased(backing, c))
        .build()
        .expect("layer");
    let routes = Router::new()
        .route(
            "/use/{n}",
            get(
                |Extension(meter): Extension<Meter>, Path(n): Path<u64>| async move {
                    meter.report(n);
                    "ok"
                },
            ),
        )
        .layer(layer);
    let server = Server::start(routes).await;
    let mut ok_count = 0;
    for _ in 0..130 {
        let request: Request<Full<Bytes>> = Request::get("/use/100")
            .header("x-api-key", "alice")
            .body(Full::default())
            .expect("request");
        if server.send(request).await.status == StatusCode::OK {
            ok_count += 1;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    ok_count
}

#[tokio::test]
async fn metered_settles_through_a_lease_serve_exactly_the_quota() {
    let c = clock();
    assert_eq!(
        metered_through_a_lease(MemoryStore::with_clock(c.clone()), &c).await,
        91
    );
}

#[tokio::test]
async fn metered_settles_through_a_lease_on_redis_serve_exactly_the_quota() {
    let c = clock();
    assert_eq!(
        metered_through_a_lease(redis("lease-meter", c.clone()), &c).await,
        91
    );
}

/// A debt through a lease: on 100 a minute, a request charged 1 and settled to 90
/// (more than a slice holds) leaves at most 9 more admitted, through the lease and on
/// the store behind it together.
async fn a_debt_through_a_lease(backing: impl Store + Clone, c: &ManualClock) -> (u64, u64) {
    let limit = || {
        Limit::new("api", Quota::per_minute(100))
            .expect("limit")
            .algorithm(Algorithm::SlidingWindowLog)
    };
    let leased = Limiter::builder()
        .limit(limit())
        .store(leased(backing.clone(), c))
        .build()
        .expect("limiter");
    let direct = Limiter::builder()
        .limit(limit())
        .store(backing)
        .build()
        .expect("limiter");
    let key = tollgate::Key::from("debtor");
    // Warm the key so that the lease leases.
    let mut first = None;
    for _ in 0..5 {
        let d = leased.check("api", &key, 1).await.expect("check");
        first.get_or_insert(d);
    }
    let first = first.expect("a decision");
    leased.settle(&first, &key, 90).await.expect("settle");
    let mut through_lease = 0;
    for _ in 0..20 {
        through_lease += u64::from(leased.check("api", &key, 1).await.expect("check").allowed);
    }
    let mut direct_after = 0;
    for _ in 0..20 {
        direct_after += u64::from(direct.check("api", &key, 1).await.expect("check").allowed);
    }
    (through_lease, direct_after)
}

#[tokio::test]
async fn a_debt_through_a_lease_is_paid_on_memory() {
    let c = clock();
    let (lease, direct) = a_debt_through_a_lease(MemoryStore::with_clock(c.clone()), &c).await;
    assert!(
        lease + direct <= 100 - 94,
        "{lease} through the lease + {direct} direct after 94 used of 100"
    );
}

#[tokio::test]
async fn a_debt_through_a_lease_is_paid_on_redis() {
    let c = clock();
    let (lease, direct) = a_debt_through_a_lease(redis("lease-debt", c.clone()), &c).await;
    assert!(
        lease + direct <= 100 - 94,
        "{lease} through the lease + {direct} direct after 94 used of 100"
    );
}

/// A box tripped under a basic plan through a lease reaches the caller's other plans
/// through the lease (one denial rule), on memory and Redis.
async fn plan_hop_through_a_lease(backing: impl Store, c: &ManualClock) -> Vec<bool> {
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_minute(100))
                .expect("limit")
                .penalty(tollgate::Penalty::after(1).block_for(Duration::from_secs(600))),
        )
        .store(leased(backing, c))
        .build()
        .expect("limiter");
    let key = tollgate::Key::from("plan-hopper");
    let basic = Quota::per_minute(3);
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .expect("check")
                .allowed,
        );
    }
    for quota in [Quota::per_minute(1_000), basic, Quota::per_minute(100)] {
        seen.push(
            limiter
                .check_with("api", &key, 1, quota)
                .await
                .expect("check")
                .allowed,
        );
    }
    seen.push(limiter.check("api", &key, 1).await.expect("check").allowed);
    seen
}

#[tokio::test]
async fn a_box_through_a_lease_reaches_the_callers_other_plans() {
    let expected = [true, true, true, false, false, false, false, false];
    let c = clock();
    assert_eq!(
        plan_hop_through_a_lease(MemoryStore::with_clock(c.clone()), &c).await,
        expected
    );
    let c = clock();
    assert_eq!(
        plan_hop_through_a_lease(redis("lease-hop", c.clone()), &c).await,
        expected
    );
}
