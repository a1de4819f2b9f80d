//! Headers that say where the caller stands, over real TCP: a limit that a cached
//! denial kept from being evaluated is left out of the headers (it is not shown as
//! exhausted), on a Redis store with its denial cache on (the default).

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Policy, Quota, RateLimitLayer, key};

/// 2023-11-14T00:00:00Z: a minute starts here.
const BASE: Duration = Duration::from_secs(1_699_920_000);

#[tokio::test]
async fn a_limit_a_cached_denial_kept_from_being_evaluated_is_left_out()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("honest", clock.clone());
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("per-key", Quota::per_minute(1))?
                .algorithm(Algorithm::FixedWindow)
                .key(key::header("x-api-key")?),
        )
        .policy(Policy::new("global", Quota::per_minute(1000))?.algorithm(Algorithm::FixedWindow))
        .store(store)
        .build()?;
    let server = Server::start(
        Router::new()
            .route("/", get(|| async { "hi" }))
            .layer(layer),
    )
    .await;
    let call = || {
        Request::get("/")
            .header("x-api-key", "k1")
            .body(Full::default())
            .expect("a request")
    };
    let first = server.send(call()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("ratelimit"),
        r#""per-key";r=0;t=60, "global";r=999;t=60"#
    );
    // Redis denies: both limits evaluated, nothing charged.
    let denied = server.send(call()).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        denied.header("ratelimit"),
        r#""per-key";r=0;t=60, "global";r=999;t=60"#
    );
    // The denial cache answers: "global" was not evaluated, so it is not shown (not
    // as `r=0;t=0`, which reads as "the global limit is exhausted").
    let cached = server.send(call()).await;
    assert_eq!(cached.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(cached.header("ratelimit"), r#""per-key";r=0;t=60"#);
    assert!(
        !cached.header("ratelimit-policy").contains("global"),
        "{cached:?}"
    );
    Ok(())
}
