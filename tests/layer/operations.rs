//! Operators' calls seen over real HTTP: a caller the penalty box blocked gets 429
//! with `Retry-After` = the block's remaining seconds, rounded up, and `RateLimit`
//! headers saying nothing is left until the block ends; a block made through the
//! layer's limiter, and a reset, reach the next request.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::{Key, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, key};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// 1/min per peer IP; the 1st rejection blocks for 90.5 s.
fn layer(clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(1))
                .expect("policy")
                .key(key::peer_ip())
                .penalty(
                    Penalty::after(1)
                        .within(Duration::from_secs(60))
                        .block_for(Duration::from_millis(90_500)),
                ),
        )
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

#[tokio::test]
async fn a_penalised_caller_is_told_the_blocks_remaining_seconds_rounded_up() {
    let clock = ManualClock::new(BASE);
    let layer = layer(&clock);
    let server = Server::start(app(layer)).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);

    // The rejection trips the box: blocked 90.5 s → 91.
    let tripped = server.get("/").await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tripped.header("retry-after"), "91");
    assert_eq!(tripped.header("ratelimit"), r#""api";r=0;t=91"#);

    // 60 s later the quota is back, the block is not: 30.5 s → 31.
    clock.advance(Duration::from_secs(60));
    let blocked = server.get("/").await;
    assert_eq!(blocked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(blocked.header("retry-after"), "31");
    assert_eq!(blocked.header("ratelimit"), r#""api";r=0;t=31"#);

    // The block ends on time: served again.
    clock.advance(Duration::from_millis(30_500));
    assert_eq!(server.get("/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_block_and_a_reset_through_the_limiter_reach_the_next_request() {
    let clock = ManualClock::new(BASE);
    let layer = layer(&clock);
    let limiter = layer.limiter().clone();
    let server = Server::start(app(layer)).await;
    let caller = Key::from(server.addr.ip());

    limiter
        .block("api", &caller, Duration::from_millis(1_200))
        .await
        .expect("block");
    let blocked = server.get("/").await;
    assert_eq!(blocked.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(blocked.header("retry-after"), "2");
    assert_eq!(blocked.header("ratelimit"), r#""api";r=0;t=2"#);

    limiter.reset("api", &caller).await.expect("reset");
    let again = server.get("/").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.header("ratelimit"), r#""api";r=0;t=60"#);
}
