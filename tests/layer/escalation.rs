//! Escalating penalties seen over real HTTP: a caller who trips the penalty box again
//! and again is told an ever longer `Retry-After` (2, 5, then 10 minutes), until it
//! has kept quiet for `remember`; on the memory store and on Redis alike. A reload of
//! the layer that changes the escalation reaches the caller's next trip, and a
//! caller tripping as fast as its blocks let it stays at the cap.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Key, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, key};

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn min(m: u64) -> Duration {
    Duration::from_secs(60 * m)
}

/// 2 min, then 5, then 10 for every later trip within an hour of the one before.
fn two_five_ten() -> Penalty {
    Penalty::after(1)
        .block_for(min(2))
        .escalate(&[min(5), min(10)])
        .remember(min(60))
}

/// 1/day per peer IP (every request after the first is rejected by the quota, so
/// with `after(1)` each one made while not blocked trips the box).
fn policy(penalty: Penalty) -> Policy {
    Policy::new("login", Quota::per_day(1))
        .expect("policy")
        .key(key::peer_ip())
        .penalty(penalty)
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// A server whose layer counts `penalty` on `store`.
async fn serve(penalty: Penalty, store: impl Store) -> (Server, RateLimitLayer) {
    let layer = RateLimitLayer::builder()
        .policy(policy(penalty))
        .store(store)
        .build()
        .expect("layer");
    (Server::start(app(layer.clone())).await, layer)
}

/// A rejected request: 429 with this `Retry-After` (seconds).
async fn refused(server: &Server, retry_after_secs: u64) {
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), retry_after_secs.to_string());
}

/// The story of a repeat offender, on the store `store` makes on `clock`.
async fn repeat_offender(clock: &ManualClock, store: impl Store) {
    let (server, layer) = serve(two_five_ten(), store).await;
    let caller = Key::from(server.addr.ip());
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    // Each trip as soon as the block before ends: 2, 5, 10, then 10 minutes again.
    for block in [2, 5, 10, 10] {
        refused(&server, 60 * block).await;
        clock.advance(min(block));
    }
    let offences = layer
        .limiter()
        .offences("login", &caller)
        .await
        .expect("offences");
    assert_eq!(
        (offences.trips, offences.blocked_for, offences.next_block),
        (4, None, Some(min(10)))
    );
    // Quiet for the hour after the latest trip: forgotten, the first block again.
    clock.advance(min(50));
    refused(&server, 120).await;
}

#[tokio::test]
async fn a_repeat_offender_is_told_ever_longer_retry_after_on_the_memory_store() {
    let clock = ManualClock::new(BASE);
    repeat_offender(&clock, MemoryStore::with_clock(clock.clone())).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_repeat_offender_is_told_ever_longer_retry_after_on_redis() {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("escalation", clock.clone());
    repeat_offender(&clock, store).await;
}

#[tokio::test]
async fn a_reload_that_changes_the_escalation_reaches_the_next_trip() {
    let clock = ManualClock::new(BASE);
    let (server, layer) = serve(two_five_ten(), MemoryStore::with_clock(clock.clone())).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    refused(&server, 120).await;
    clock.advance(min(2));
    // Blocked 5 min by the 2nd trip; meanwhile the steps become 3, 7 and 30 min.
    refused(&server, 300).await;
    let harsher = Penalty::after(1)
        .block_for(min(3))
        .escalate(&[min(7), min(30)])
        .remember(min(120));
    layer.reload([policy(harsher)]).expect("reload");
    // Still blocked as it was; its 3rd trip gets the new 3rd block.
    refused(&server, 300).await;
    clock.advance(min(5));
    refused(&server, 30 * 60).await;
}

#[tokio::test]
async fn a_caller_tripping_as_fast_as_it_can_stays_at_the_cap() {
    let clock = ManualClock::new(BASE);
    // From 1 s, doubling, at most 64 s; remembered 10 min.
    let doubling = Penalty::after(1)
        .block_for(Duration::from_secs(1))
        .escalate_by(2, Duration::from_secs(64))
        .remember(min(10));
    let (server, layer) = serve(doubling, MemoryStore::with_clock(clock.clone())).await;
    let caller = Key::from(server.addr.ip());
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    for trip in 0..200_u32 {
        let block = 1_u64 << trip.min(6);
        // Every request while blocked is refused with the time left, and not counted.
        refused(&server, block).await;
        refused(&server, block).await;
        clock.advance(Duration::from_secs(block));
    }
    let offences = layer
        .limiter()
        .offences("login", &caller)
        .await
        .expect("offences");
    assert_eq!(offences.trips, 200);
    assert_eq!(offences.next_block, Some(Duration::from_secs(64)));
}
