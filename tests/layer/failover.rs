//! Redis killed mid-run, over real TCP to a real axum server: with
//! `Fallback::new(redis, MemoryStore::new())`, a caller the Redis penalty box blocked
//! stays blocked while the memory store serves (this process saw the block), and
//! usage carries over: another caller starts on the memory store where Redis left her.

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use support::redis_server::RedisServer;
use tollgate::store::Fallback;
use tollgate::{Algorithm, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, RedisStore, key};

async fn login(headers: HeaderMap) -> StatusCode {
    if headers.get("x-password").is_some_and(|p| p == "right") {
        StatusCode::OK
    } else {
        StatusCode::UNAUTHORIZED
    }
}

async fn attempt(server: &Server, user: &str, password: &str) -> Reply {
    let request = Request::post("/login")
        .header("x-user", user)
        .header("x-password", password)
        .body(Full::default())
        .expect("a request");
    server.send(request).await
}

fn seconds(reply: &Reply, header: &str) -> u64 {
    reply
        .header(header)
        .parse()
        .unwrap_or_else(|_| panic!("{header}: {reply:?}"))
}

#[tokio::test]
async fn a_caller_blocked_on_redis_stays_blocked_when_redis_dies()
-> Result<(), Box<dyn std::error::Error>> {
    let mut server = RedisServer::start();
    let redis = RedisStore::from_url(&server.url())?
        .deadline(Duration::from_millis(500))?
        .denial_cache(0);
    let store = Fallback::new(redis, MemoryStore::new()).probe_interval(Duration::from_secs(60));
    let policy = Policy::new("failed-logins", Quota::per_minute(5))?
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user")?)
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store.clone())
        .build()?;
    let server_http = Server::start(Router::new().route("/login", post(login)).layer(layer)).await;

    // On Redis: mallory fails five times and trips the box; alice fails three times.
    for _ in 0..5 {
        assert_eq!(
            attempt(&server_http, "mallory", "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    let tripped = attempt(&server_http, "mallory", "right").await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(seconds(&tripped, "retry-after") > 590, "{tripped:?}");
    for _ in 0..3 {
        assert_eq!(
            attempt(&server_http, "alice", "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }

    server.kill();
    // The memory store serves now. Mallory is still blocked, for what is left of the
    // ten minutes, and says so in the headers.
    let still = attempt(&server_http, "mallory", "right").await;
    assert!(!store.serving_primary(), "the primary failed");
    assert_eq!(still.status, StatusCode::TOO_MANY_REQUESTS, "{still:?}");
    let left = seconds(&still, "retry-after");
    assert!((590..=600).contains(&left), "{left}");
    assert!(still.header("ratelimit").contains("r=0"), "{still:?}");
    for _ in 0..5 {
        let again = attempt(&server_http, "mallory", "wrong").await;
        assert_eq!(
            again.status,
            StatusCode::TOO_MANY_REQUESTS,
            "no fresh tries"
        );
    }
    // Alice's three failures were on Redis: the memory store starts her where Redis
    // left her (three used of five), so two more, not five.
    for i in 0..2 {
        let reply = attempt(&server_http, "alice", "wrong").await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "alice's failure {i}"
        );
    }
    assert_eq!(
        attempt(&server_http, "alice", "wrong").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    Ok(())
}
