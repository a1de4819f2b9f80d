//! One account per request, where metering, `count_when`, rollout shares and the hold
//! cap meet: over real TCP to a real axum server, at a frozen instant.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Path};
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::layer::{Costs, Meter, Rejection};
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{HANG, clock, redis};

fn estimate(parts: &http::request::Parts) -> u32 {
    parts
        .headers
        .get("x-estimate")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1_000)
}

/// 10,000 tokens a minute per API key, admitted on the estimate, metered, counting
/// only responses that are not server errors.
fn tokens() -> Policy {
    Policy::new("tokens", Quota::per_minute(10_000))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"))
        .costs(Costs::from_fn(estimate))
        .metered()
        .count_when(|status| !status.is_server_error())
}

fn routes() -> Router {
    Router::new()
        .route(
            "/ok/{n}",
            get(
                |Extension(meter): Extension<Meter>, Path(n): Path<u64>| async move {
                    meter.report(n);
                    "ok"
                },
            ),
        )
        .route("/plain", get(|| async { "ok" }))
        .route(
            "/fail/{n}",
            get(
                |Extension(meter): Extension<Meter>, Path(n): Path<u64>| async move {
                    meter.report(n);
                    (StatusCode::INTERNAL_SERVER_ERROR, "failed")
                },
            ),
        )
}

fn call(path: &str, api_key: &str, estimate: u32) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("x-api-key", api_key)
        .header("x-estimate", estimate.to_string())
        .body(Full::default())
        .expect("request")
}

fn key_of(policy: &Policy, api_key: &str) -> Key {
    let (parts, _) = call("/", api_key, 0).into_parts();
    policy.key_of(&parts).expect("a key")
}

/// What the key has left, once nothing more moves (settles on Redis land in the
/// background): the last of several looks 100 ms apart that agree.
async fn settled_remaining(layer: &RateLimitLayer, name: &str, key: &Key) -> u64 {
    let started = std::time::Instant::now();
    let mut last = u64::MAX;
    loop {
        let now = layer
            .limiter()
            .check(name, key, 0)
            .await
            .expect("peek")
            .remaining;
        if now == last {
            return now;
        }
        assert!(started.elapsed() < HANG, "never settled");
        last = now;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// 1,000 used by a success; then failures (not counted) that reported 0 each give
/// their estimate back once: 9,000 left, not 10,000. One that reported more than its
/// estimate gives back no more than it paid.
async fn failures_after_usage(store: impl Store) -> (u64, u64) {
    let layer = RateLimitLayer::builder()
        .policy(tokens())
        .store(store)
        .build()
        .expect("layer");
    let server = Server::start(routes().layer(layer.clone())).await;
    let key = key_of(&tokens(), "alice");
    assert_eq!(
        server.send(call("/ok/1000", "alice", 1_000)).await.status,
        StatusCode::OK
    );
    for _ in 0..3 {
        let reply = server.send(call("/fail/0", "alice", 1_000)).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    let after_zero = settled_remaining(&layer, "tokens", &key).await;
    let reply = server.send(call("/fail/5000", "alice", 500)).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    let after_big = settled_remaining(&layer, "tokens", &key).await;
    (after_zero, after_big)
}

#[tokio::test]
async fn an_uncounted_metered_failure_gives_its_estimate_back_once_on_memory() {
    let (zero, big) = failures_after_usage(MemoryStore::with_clock(clock())).await;
    assert_eq!(zero, 9_000);
    assert!(
        big <= 9_000,
        "{big} left after a failure that reported 5,000 on 500"
    );
}

#[tokio::test]
async fn an_uncounted_metered_failure_gives_its_estimate_back_once_on_redis() {
    let (zero, big) = failures_after_usage(redis("metered-fail", clock())).await;
    assert_eq!(zero, 9_000);
    assert!(
        big <= 9_000,
        "{big} left after a failure that reported 5,000 on 500"
    );
}

/// An enforced 10/min per caller beside a leaky-bucket queue whose enforcement share
/// is 0 (shadow for every caller, by rollout rather than `shadow(true)`), holding
/// nothing: 30 requests of one caller, exactly 10 served.
async fn rollout_past_the_hold_cap(store: impl Store) -> (usize, usize) {
    let per_caller = Policy::new("per-caller", Quota::per_minute(10))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"));
    let queue = Policy::new(
        "queue",
        Quota::per_second(1).with_burst(100).expect("burst"),
    )
    .expect("policy")
    .algorithm(Algorithm::LeakyBucket)
    .max_delay(Duration::from_secs(600))
    .key(key::global())
    .enforce(0.0)
    .expect("a share");
    let layer = RateLimitLayer::builder()
        .policy(per_caller)
        .policy(queue)
        .store(store)
        .build()
        .expect("layer")
        .max_held(0);
    let server = Server::start(routes().layer(layer)).await;
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..30 {
        match server.send(call("/plain", "mallory", 1)).await.status {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("{other}"),
        }
    }
    (ok, refused)
}

#[tokio::test]
async fn past_the_hold_cap_a_zero_share_queue_does_not_free_the_enforced_policy_on_memory() {
    assert_eq!(
        rollout_past_the_hold_cap(MemoryStore::with_clock(clock())).await,
        (10, 20)
    );
}

#[tokio::test]
async fn past_the_hold_cap_a_zero_share_queue_does_not_free_the_enforced_policy_on_redis() {
    assert_eq!(
        rollout_past_the_hold_cap(redis("rollout-cap", clock())).await,
        (10, 20)
    );
}

/// A policy not enforced for this caller (share 0), blocked by an operator, beside an
/// enforced one that denies: the 429's problem names only the enforced policy, with
/// the plain quota type.
#[tokio::test]
async fn a_policy_not_enforced_for_the_caller_is_absent_from_the_problem() {
    let c: ManualClock = clock();
    let per_caller = Policy::new("per-caller", Quota::per_minute(1))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"));
    let trial = Policy::new("trial", Quota::per_minute(1))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"))
        .enforce(0.0)
        .expect("share");
    let layer = RateLimitLayer::builder()
        .policy(per_caller)
        .policy(trial.clone())
        .store(MemoryStore::with_clock(c))
        .build()
        .expect("layer")
        .rejection(Rejection::Problem);
    let server = Arc::new(Server::start(routes().layer(layer.clone())).await);
    layer
        .limiter()
        .block("trial", &key_of(&trial, "bob"), Duration::from_secs(3600))
        .await
        .expect("block");
    assert_eq!(
        server.send(call("/plain", "bob", 1)).await.status,
        StatusCode::OK
    );
    let denied = server.send(call("/plain", "bob", 1)).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(!denied.body.contains("trial"), "{}", denied.body);
    assert!(!denied.body.contains("abnormal-usage"), "{}", denied.body);
    assert!(denied.body.contains("per-caller"), "{}", denied.body);
}

/// A failed (uncounted) streamed answer whose client leaves mid-stream, having
/// reported 0: its charge comes back once (refund and settle do not both give back).
/// 1,000 used before by a success: 9,000 left after, not 10,000.
async fn a_failed_stream_left_mid_way(store: impl Store) -> u64 {
    let layer = RateLimitLayer::builder()
        .policy(tokens())
        .store(store)
        .build()
        .expect("layer");
    let streaming = Router::new().route(
        "/stream-fail",
        get(|Extension(meter): Extension<Meter>| async move {
            meter.report(0);
            let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
            tokio::spawn(async move {
                let _ = sender.send(Ok(Bytes::from_static(b"data: part\n\n"))).await;
                // Never ends: the client leaves first.
                sender.closed().await;
            });
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::body::Body::from_stream(
                    tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(receiver),
                ),
            )
        }),
    );
    let server = Server::start(routes().merge(streaming).layer(layer.clone())).await;
    let key = key_of(&tokens(), "alice");
    assert_eq!(
        server.send(call("/ok/1000", "alice", 1_000)).await.status,
        StatusCode::OK
    );
    for _ in 0..3 {
        let response = server
            .open(call("/stream-fail", "alice", 1_000))
            .await
            .expect("a head");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        drop(response);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    settled_remaining(&layer, "tokens", &key).await
}

#[tokio::test]
async fn a_failed_stream_whose_client_leaves_gives_its_charge_back_once_on_memory() {
    assert_eq!(
        a_failed_stream_left_mid_way(MemoryStore::with_clock(clock())).await,
        9_000
    );
}

#[tokio::test]
async fn a_failed_stream_whose_client_leaves_gives_its_charge_back_once_on_redis() {
    assert_eq!(
        a_failed_stream_left_mid_way(redis("stream-fail", clock())).await,
        9_000
    );
}

/// A metered request in its handler when a reload changes the limit's period (10,000
/// a minute to 10,000 per 30 s); the new window is spent; the request then reports 0:
/// its settle gives nothing to the new state, and the next request is refused.
async fn a_settle_across_a_period_reload(store: impl Store) -> (usize, StatusCode) {
    let policy = |period: u64| {
        Policy::new(
            "tokens",
            Quota::new(10_000, Duration::from_secs(period)).expect("quota"),
        )
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-api-key").expect("header"))
        .costs(Costs::from_fn(estimate))
        .metered()
    };
    let layer = RateLimitLayer::builder()
        .policy(policy(60))
        .store(store)
        .build()
        .expect("layer");
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let entered = std::sync::Arc::new(tokio::sync::Notify::new());
    let held = {
        let (gate, entered) = (gate.clone(), entered.clone());
        Router::new().route(
            "/held",
            get(move |Extension(meter): Extension<Meter>| {
                let (gate, entered) = (gate.clone(), entered.clone());
                async move {
                    entered.notify_one();
                    gate.notified().await;
                    meter.report(0);
                    "ok"
                }
            }),
        )
    };
    let server = Arc::new(Server::start(routes().merge(held).layer(layer.clone())).await);
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(call("/held", "alice", 5_000)).await.status })
    };
    entered.notified().await;
    layer.reload([policy(30)]).expect("reload");
    let mut ok_count = 0;
    for _ in 0..12 {
        if server.send(call("/ok/1000", "alice", 1_000)).await.status == StatusCode::OK {
            ok_count += 1;
        }
    }
    gate.notify_one();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = server.send(call("/ok/1000", "alice", 1_000)).await.status;
    (ok_count, next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metered_settle_across_a_period_reload_gives_nothing_on_memory() {
    assert_eq!(
        a_settle_across_a_period_reload(MemoryStore::with_clock(clock())).await,
        (10, StatusCode::TOO_MANY_REQUESTS)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metered_settle_across_a_period_reload_gives_nothing_on_redis() {
    assert_eq!(
        a_settle_across_a_period_reload(redis("period-reload", clock())).await,
        (10, StatusCode::TOO_MANY_REQUESTS)
    );
}
