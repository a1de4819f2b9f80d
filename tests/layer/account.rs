//! One account per request (issue 35): whatever paths a request's give-backs take,
//! each charge comes back at most once and only the policy that asked for it gives
//! back. Over real TCP to a real axum server, on the memory store and on Redis, at a
//! frozen instant so that every count is exact. (The byte and `Meter` cases live in
//! `bytes.rs` and `metered.rs`; the one budget of held requests in `in_flight.rs`.)

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Policy, Quota, RateLimitLayer, key};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(30);

/// The enforced policy: 10 a minute per caller, all of them at once (GCRA, burst 10).
fn per_caller() -> Policy {
    Policy::new("per-caller", Quota::per_minute(10))
        .expect("policy")
        .key(key::header("x-user").expect("a header name"))
}

/// The shadowed one: one queue for everyone, a place every 100 ms, 100 places.
fn shadowed_queue() -> Policy {
    Policy::new(
        "queue",
        Quota::per_second(10).with_burst(100).expect("a burst"),
    )
    .expect("policy")
    .algorithm(Algorithm::LeakyBucket)
    .max_delay(Duration::from_secs(60))
    .key(key::global())
    .shadow(true)
}

fn from(user: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", user)
        .body(Full::default())
        .expect("request")
}

fn user_key(user: &str) -> Key {
    let (parts, ()) = from(user).map(|_| ()).into_parts();
    per_caller().key_of(&parts).expect("a key")
}

/// One caller sends 30 requests at once through an enforced 10/min beside a shadowed
/// queue that delays all but the first, with room for 2 held requests: the ones past
/// the cap give back their place in the queue alone, and the enforced policy keeps
/// counting them. Exactly 10 served (held or not), 20 refused, the caller's quota
/// spent.
async fn past_the_hold_cap_the_enforced_policy_keeps_counting(store: impl Store) {
    let layer = RateLimitLayer::builder()
        .policy(per_caller())
        .policy(shadowed_queue())
        .store(store)
        .build()
        .expect("layer")
        .max_held(2);
    let routes = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    let server = Arc::new(Server::start(routes).await);
    let requests: Vec<_> = (0..30)
        .map(|_| {
            let server = Arc::clone(&server);
            tokio::spawn(async move { server.send(from("mallory")).await.status })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for request in requests {
        let status = tokio::time::timeout(HANG, request)
            .await
            .expect("answered")
            .expect("a reply");
        match status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((ok, refused), (10, 20));
    assert_eq!(layer.held(), 0);
    let left = layer
        .limiter()
        .peek("per-caller", &user_key("mallory"))
        .await
        .expect("a peek");
    assert_eq!(left.remaining, 0, "every request served was counted");
}

#[tokio::test]
async fn past_the_hold_cap_only_the_shadowed_policy_gives_back_and_the_enforced_one_keeps_counting()
{
    past_the_hold_cap_the_enforced_policy_keeps_counting(MemoryStore::with_clock(
        ManualClock::new(BASE),
    ))
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_past_the_hold_cap_only_the_shadowed_policy_gives_back_and_the_enforced_one_keeps_counting()
 {
    let store = crate::shared_redis::redis_store("account-hold-cap", ManualClock::new(BASE));
    past_the_hold_cap_the_enforced_policy_keeps_counting(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_the_cluster_past_the_hold_cap_only_the_shadowed_policy_gives_back_and_the_enforced_one_keeps_counting()
 {
    let store = crate::shared_redis::cluster_store("account-hold-cap", ManualClock::new(BASE));
    past_the_hold_cap_the_enforced_policy_keeps_counting(store).await;
}
