//! The layer's edges that a hostile caller or a failing store reaches, each over real
//! TCP to a real axum server with a real HTTP client (a Redis server where the store
//! is Redis): `count_when` refunds only what the store charged, only a `POST` gets the
//! gRPC answer, leaky-bucket waits have a bound per policy and the layer holds a
//! bounded number of requests, and a limiter refuses policies whose rate-limit headers
//! could outgrow a proxy's buffer.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use tokio::sync::watch;
use tollgate::clock::ManualClock;
use tollgate::layer::FailMode;
use tollgate::layer::headers::MAX_HEADERS_LEN;
use tollgate::store::Store;
use tollgate::{
    Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Policy, Quota, RateLimitLayer, key,
};
use tower::{Layer as _, Service as _, ServiceExt as _};

use crate::outage_store::OutageStore;

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

/// Time for background refunds to land, so that a test of "no refund" sees one if the
/// layer sent it; the assertion never depends on it when the layer sends none.
const SETTLE: Duration = Duration::from_millis(300);

const HOUR: Duration = Duration::from_secs(3_600);

fn layer_of(policy: Policy, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer")
}

/// What `layer` says about `policy` for the request `parts` would make, charging
/// nothing.
async fn peek(layer: &RateLimitLayer, policy: &str, request: Request<()>) -> Decision {
    let (parts, ()) = request.into_parts();
    let key: Key = layer
        .policy(policy)
        .and_then(|p| p.key_of(&parts))
        .expect("a key");
    layer
        .limiter()
        .check(policy, &key, 0)
        .await
        .expect("a peek")
}

/// Polls `done` until it holds; fails after [`HANG`].
async fn wait_until(what: &str, done: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "still waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A request that the server will answer some day, in the background.
fn spawn_send(
    server: &Arc<Server>,
    request: Request<Full<Bytes>>,
) -> tokio::task::JoinHandle<Reply> {
    let server = server.clone();
    tokio::spawn(async move { server.send(request).await })
}

// ---------------------------------------------------------------------------------------
// count_when refunds only what the store charged.
// ---------------------------------------------------------------------------------------

/// "login": 3 an hour, counting only failed logins (401), as in the issue.
fn login_policy() -> Policy {
    Policy::new("login", Quota::per_hour(3))
        .expect("policy")
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
}

fn attempt(password: &'static str) -> Request<Full<Bytes>> {
    Request::post("/login")
        .body(Full::new(Bytes::from_static(password.as_bytes())))
        .expect("request")
}

/// A login endpoint: "wrong" fails at once (401); "right" counts its arrival, then
/// succeeds (200) once `gate` opens, so that a test can end an outage while successful
/// logins are inside the handler.
fn login_app(
    layer: RateLimitLayer,
    arrived: Arc<AtomicUsize>,
    gate: watch::Receiver<bool>,
) -> Router {
    Router::new()
        .route(
            "/login",
            post(move |body: String| {
                let (arrived, mut gate) = (arrived.clone(), gate.clone());
                async move {
                    if body != "right" {
                        return (StatusCode::UNAUTHORIZED, "no");
                    }
                    arrived.fetch_add(1, Ordering::SeqCst);
                    let _ = gate.wait_for(|open| *open).await;
                    (StatusCode::OK, "welcome")
                }
            }),
        )
        .layer(layer)
}

/// The issue's repro: 3 failed logins; a store outage during which 3 successful logins
/// are served uncounted (fail open), the outage ending while they are in the handler;
/// then failed logins until one is refused. Returns how many failed logins got through.
async fn failed_logins_around_an_outage(
    layer: RateLimitLayer,
    begin_outage: impl FnOnce(),
    end_outage: impl FnOnce(),
) -> usize {
    let (gate, gate_rx) = watch::channel(false);
    let arrived = Arc::new(AtomicUsize::new(0));
    let app = login_app(layer, arrived.clone(), gate_rx);
    let server = Arc::new(Server::start(app).await);
    let mut failed = 0;
    for _ in 0..3 {
        assert_eq!(
            server.send(attempt("wrong")).await.status,
            StatusCode::UNAUTHORIZED
        );
        failed += 1;
    }
    begin_outage();
    let successes: Vec<_> = (0..3)
        .map(|_| spawn_send(&server, attempt("right")))
        .collect();
    wait_until("successful logins served during the outage", || {
        arrived.load(Ordering::SeqCst) == 3
    })
    .await;
    end_outage();
    gate.send_replace(true);
    for success in successes {
        assert_eq!(success.await.expect("task").status, StatusCode::OK);
    }
    tokio::time::sleep(SETTLE).await;
    loop {
        let status = server.send(attempt("wrong")).await.status;
        if status == StatusCode::TOO_MANY_REQUESTS {
            return failed;
        }
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        failed += 1;
        assert!(failed < 100, "failed logins are never refused");
    }
}

#[tokio::test]
async fn logins_served_during_a_store_outage_refund_nothing_they_were_never_charged() {
    let store = OutageStore::new(MemoryStore::with_clock(ManualClock::new(BASE)));
    let layer = layer_of(login_policy(), store.clone());
    let failed =
        failed_logins_around_an_outage(layer, || store.go_down(), || store.come_back()).await;
    assert_eq!(failed, 3, "failed logins through one window of 3");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn logins_served_while_redis_is_stopped_refund_nothing_they_were_never_charged() {
    use support::redis_server::RedisServer;
    let server = RedisServer::start();
    let store = tollgate::RedisStore::from_url(&server.url())
        .expect("a valid url")
        .denial_cache(0)
        // Long enough for a busy machine's healthy calls; the outage's calls wait it out.
        .deadline(Duration::from_secs(1))
        .expect("a deadline")
        .with_clock(ManualClock::new(BASE));
    let failed = failed_logins_around_an_outage(
        layer_of(login_policy(), store),
        || server.pause(),
        || server.resume(),
    )
    .await;
    assert_eq!(failed, 3, "failed logins through one window of 3");
}

#[tokio::test]
async fn a_request_shadow_mode_let_through_uncharged_is_not_refunded() {
    let clock = ManualClock::new(BASE);
    let layer = layer_of(
        Policy::new("login", Quota::per_minute(1))
            .expect("policy")
            .algorithm(Algorithm::FixedWindow)
            .count_when(|status| status == StatusCode::UNAUTHORIZED),
        MemoryStore::with_clock(clock),
    );
    let (_gate, gate_rx) = watch::channel(true);
    let layer = layer.shadow(true);
    let server = Server::start(login_app(layer.clone(), Arc::default(), gate_rx)).await;
    let wrong = server.send(attempt("wrong")).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.header("ratelimit"), r#""login";r=0;t=60"#);
    // Denied (in shadow), passed on, answered 200: a response that does not count,
    // for a request that was never charged.
    let right = server.send(attempt("right")).await;
    assert_eq!(right.status, StatusCode::OK);
    assert_eq!(right.header("ratelimit"), r#""login";r=0;t=60"#);
    tokio::time::sleep(SETTLE).await;
    let now = peek(
        &layer,
        "login",
        Request::post("/login").body(()).expect("request"),
    )
    .await;
    assert_eq!(now.remaining, 0, "the failed login is still counted");
}

// ---------------------------------------------------------------------------------------
// Only a POST gets the gRPC answer.
// ---------------------------------------------------------------------------------------

fn plain_app(layer: RateLimitLayer) -> Router {
    let ok = || async { "ok" };
    Router::new()
        .route("/", get(ok).put(ok).post(ok))
        .layer(layer)
}

fn claiming_grpc(method: Method, content_type: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri("/")
        .header("content-type", content_type)
        .body(Full::default())
        .expect("request")
}

/// A plain HTTP answer: the status itself, no gRPC status anywhere.
fn assert_plain(reply: &Reply, status: StatusCode) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert!(!reply.headers.contains_key("grpc-status"), "{reply:?}");
    assert!(
        !reply.header("content-type").starts_with("application/grpc"),
        "{reply:?}"
    );
}

#[tokio::test]
async fn a_request_claiming_grpc_without_post_gets_a_plain_429() {
    let policy = Policy::new("api", Quota::per_minute(1))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow);
    let layer = layer_of(policy, MemoryStore::with_clock(ManualClock::new(BASE)));
    let server = Server::start(plain_app(layer)).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    for method in [Method::GET, Method::HEAD, Method::PUT] {
        for content_type in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC-Web",
        ] {
            let reply = server
                .send(claiming_grpc(method.clone(), content_type))
                .await;
            assert_plain(&reply, StatusCode::TOO_MANY_REQUESTS);
            assert_eq!(reply.header("retry-after"), "60", "{method} {content_type}");
            assert_eq!(reply.header("ratelimit"), r#""api";r=0;t=60"#);
        }
    }
    // A POST with a gRPC content type, in any case, is a gRPC call: trailers-only.
    let grpc = server
        .send(claiming_grpc(Method::POST, "Application/GRPC"))
        .await;
    assert_eq!(grpc.status, StatusCode::OK);
    assert_eq!(grpc.header("grpc-status"), "8");
    assert_eq!(grpc.header("content-type"), "application/grpc");
}

#[tokio::test]
async fn a_request_claiming_grpc_without_post_gets_plain_403_and_503() {
    let policy = || Policy::new("api", Quota::per_minute(100)).expect("policy");
    let denying = layer_of(policy(), MemoryStore::new())
        .deny(|parts: &http::request::Parts| parts.headers.contains_key("x-banned"));
    let server = Server::start(plain_app(denying)).await;
    let mut banned = claiming_grpc(Method::GET, "application/grpc");
    banned
        .headers_mut()
        .insert("x-banned", http::HeaderValue::from_static("1"));
    assert_plain(&server.send(banned).await, StatusCode::FORBIDDEN);

    let down = OutageStore::new(MemoryStore::new());
    down.go_down();
    let closed = layer_of(policy(), down).on_store_error(FailMode::Closed);
    let server = Server::start(plain_app(closed)).await;
    for method in [Method::GET, Method::HEAD, Method::PUT] {
        let reply = server.send(claiming_grpc(method, "application/grpc")).await;
        assert_plain(&reply, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(reply.header("retry-after"), "1");
    }
    let grpc = server
        .send(claiming_grpc(Method::POST, "application/grpc"))
        .await;
    assert_eq!(
        (grpc.status, grpc.header("grpc-status")),
        (StatusCode::OK, "14")
    );
}

// ---------------------------------------------------------------------------------------
// Leaky-bucket waits: a bound per policy, a cap on held requests across the layer.
// ---------------------------------------------------------------------------------------

/// 10/s with burst 100 (T = 100 ms), held at most 200 ms.
fn short_queue() -> Policy {
    Policy::new(
        "queue",
        Quota::per_second(10).with_burst(100).expect("burst"),
    )
    .expect("policy")
    .algorithm(Algorithm::LeakyBucket)
    .max_delay(Duration::from_millis(200))
}

/// On a store whose clock stands still: places at 0, 100 and 200 ms are given (and
/// held for real), the fourth would wait 300 ms and is refused with 429, charging
/// nothing, however often it is asked.
async fn a_place_beyond_max_delay_is_refused(store: impl Store) {
    let layer = layer_of(short_queue(), store);
    let server = Server::start(plain_app(layer.clone())).await;
    for remaining in [99, 98, 97] {
        let reply = server.get("/").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply.header("ratelimit"),
            format!(r#""queue";r={remaining};t=1"#)
        );
    }
    for _ in 0..3 {
        let refused = server.get("/").await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        // The place at 300 ms is within 200 ms of now + 100 ms.
        assert_eq!(refused.header("retry-after"), "1");
        assert_eq!(refused.body, "rate limit exceeded: retry after 1 s\n");
        assert_eq!(refused.header("ratelimit"), r#""queue";r=97;t=1"#);
    }
    let after = peek(
        &layer,
        "queue",
        Request::get("/").body(()).expect("request"),
    )
    .await;
    // Three charged, none by the refusals: the queue drains at 300 ms.
    assert_eq!(after.reset_after, Duration::from_millis(300));
    assert_eq!(after.retry_after, None);
}

#[tokio::test]
async fn a_leaky_bucket_place_beyond_max_delay_is_a_429_that_charges_nothing() {
    a_place_beyond_max_delay_is_refused(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_leaky_bucket_place_beyond_max_delay_is_a_429_that_charges_nothing_on_redis() {
    let store = crate::shared_redis::redis_store("max-delay", ManualClock::new(BASE));
    a_place_beyond_max_delay_is_refused(store).await;
}

/// With its default `max_delay`, a leaky bucket whose burst is its limit queues a
/// whole burst at one instant, also where `T = P/L` rounds up so that the `L`-th place
/// waits longer than one period (3000 per ms: `T` = 334 ns, the last place 1001.666 µs).
async fn the_default_bound_queues_a_whole_burst(store: impl Store) {
    let quotas = [
        Quota::per_second(10),
        "7 per 3 seconds".parse().expect("a quota"),
        Quota::new(3_000, Duration::from_millis(1)).expect("a quota"),
        Quota::per_hour(2),
    ];
    let mut builder = Limiter::builder().store(store);
    for (i, quota) in quotas.iter().enumerate() {
        let limit = Limit::new(format!("burst-{i}"), *quota).expect("a limit");
        builder = builder.limit(limit.algorithm(Algorithm::LeakyBucket));
    }
    let limiter = builder.build().expect("a limiter");
    let key = Key::from("everyone");
    for (i, quota) in quotas.iter().enumerate() {
        let name = format!("burst-{i}");
        let mut last = Duration::ZERO;
        for place in 0..quota.limit() {
            let d = limiter.check(&name, &key, 1).await.expect("a decision");
            assert!(d.allowed, "{quota}: place {place} refused: {d:?}");
            last = d.delay;
        }
        assert!(
            last >= quota.period() / 2,
            "{quota}: last place waits {last:?}"
        );
        assert!(
            !limiter
                .check(&name, &key, 1)
                .await
                .expect("a decision")
                .allowed
        );
    }
}

#[tokio::test]
async fn the_default_max_delay_queues_a_whole_burst_of_the_limit() {
    the_default_bound_queues_a_whole_burst(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_default_max_delay_queues_a_whole_burst_of_the_limit_on_redis() {
    let store =
        crate::shared_redis::redis_store("default-bound", ManualClock::new(BASE)).denial_cache(0);
    the_default_bound_queues_a_whole_burst(store).await;
}

/// 1 an hour with burst 10, held up to 10 h: every place after the first is held for
/// hours (real time), far longer than any test runs; keyed by `x-user`.
fn slow_queue() -> Policy {
    Policy::new("slow", Quota::per_hour(1).with_burst(10).expect("burst"))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket)
        .max_delay(10 * HOUR)
        .key(key::header("x-user").expect("a header name"))
}

fn from(user: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", user)
        .body(Full::default())
        .expect("request")
}

async fn slow_remaining(layer: &RateLimitLayer, user: &str) -> u64 {
    let request = Request::get("/")
        .header("x-user", user)
        .body(())
        .expect("request");
    peek(layer, "slow", request).await.remaining
}

#[tokio::test]
async fn a_delayed_request_past_the_held_cap_is_a_429_and_gets_its_charge_back() {
    let layer = layer_of(
        slow_queue(),
        MemoryStore::with_clock(ManualClock::new(BASE)),
    );
    let layer = layer.max_held(2);
    let server = Arc::new(Server::start(plain_app(layer.clone())).await);
    assert_eq!(server.send(from("mallory")).await.status, StatusCode::OK);
    let held: Vec<_> = (0..2)
        .map(|_| spawn_send(&server, from("mallory")))
        .collect();
    wait_until("two requests held", || layer.held() == 2).await;
    // Charged 3: min(10 − 3, floor((10 h + 1 h − 3 h)/1 h)) = 7 left.
    assert_eq!(slow_remaining(&layer, "mallory").await, 7);

    // Its place would be served in 3 h: refused, refunded, told when its turn was.
    let refused = server.send(from("mallory")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), "10800");
    assert_eq!(
        refused.body,
        "too many requests waiting: retry after 10800 s\n"
    );
    // The headers describe the state with its charge, before the refund.
    assert_eq!(refused.header("ratelimit"), r#""slow";r=6;t=14400"#);
    tokio::time::sleep(SETTLE).await;
    assert_eq!(slow_remaining(&layer, "mallory").await, 7);
    assert_eq!(layer.held(), 2);
    // A request served at once is not held, so the cap never refuses it.
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    for request in held {
        request.abort();
    }
}

#[tokio::test]
async fn callers_choosing_their_keys_cannot_hold_more_than_the_cap() {
    let layer = layer_of(
        slow_queue(),
        MemoryStore::with_clock(ManualClock::new(BASE)),
    );
    let layer = layer.max_held(3);
    let server = Arc::new(Server::start(plain_app(layer.clone())).await);
    let users: Vec<String> = (0..8).map(|i| format!("sybil-{i}")).collect();
    for user in &users {
        assert_eq!(server.send(from(user)).await.status, StatusCode::OK);
    }
    // Each key's second request would be held an hour.
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
    let requests: Vec<_> = users
        .iter()
        .map(|user| {
            let (server, done, user) = (server.clone(), done.clone(), user.clone());
            tokio::spawn(async move {
                let reply = server.send(from(&user)).await;
                let _ = done.send((user, reply.status));
            })
        })
        .collect();
    let mut refused = Vec::new();
    for _ in 0..5 {
        let (user, status) = tokio::time::timeout(HANG, finished.recv())
            .await
            .expect("five answered at once")
            .expect("an answer");
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{user}");
        refused.push(user);
    }
    assert_eq!(layer.held(), 3);
    tokio::time::sleep(SETTLE).await;
    for user in &users {
        // One charge each, and a second for the three held.
        let expected = if refused.contains(user) { 9 } else { 8 };
        assert_eq!(slow_remaining(&layer, user).await, expected, "{user}");
    }
    for request in requests {
        request.abort();
    }
}

#[tokio::test]
async fn a_held_request_gives_its_place_back_once_served() {
    // 10/s with burst 3 on a clock that stands still: places at 0, 100 and 200 ms.
    let policy = Policy::new("queue", Quota::per_second(10).with_burst(3).expect("burst"))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket);
    let layer = layer_of(policy, MemoryStore::with_clock(ManualClock::new(BASE)));
    let layer = layer.max_held(1);
    let server = Server::start(plain_app(layer.clone())).await;
    for _ in 0..3 {
        // Served at once, then held 100 ms, then held 200 ms: each in the one place,
        // which the one before gave back.
        assert_eq!(server.get("/").await.status, StatusCode::OK);
        assert_eq!(layer.held(), 0);
    }
}

#[tokio::test]
async fn a_held_request_whose_caller_leaves_gives_its_place_back() {
    let layer = layer_of(
        slow_queue(),
        MemoryStore::with_clock(ManualClock::new(BASE)),
    );
    let layer = layer.max_held(1);
    let mut service = layer.layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let request = || from("alice");
    let first = service.ready().await.expect("ready").call(request()).await;
    assert_eq!(first.expect("infallible").status(), StatusCode::OK);
    // The memory store decides in `call`: the request is held from then on.
    let held = service.ready().await.expect("ready").call(request());
    assert_eq!(layer.held(), 1);
    drop(held);
    assert_eq!(layer.held(), 0);
    let next = service.ready().await.expect("ready").call(request());
    assert_eq!(layer.held(), 1, "the place was free again");
    drop(next);
}

#[tokio::test]
async fn shadow_mode_passes_a_request_past_the_held_cap_on_at_once_uncharged() {
    let layer = layer_of(
        slow_queue(),
        MemoryStore::with_clock(ManualClock::new(BASE)),
    );
    let layer = layer.shadow(true).max_held(0);
    let server = Server::start(plain_app(layer.clone())).await;
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    // Its place would be an hour away and nothing may be held: passed on now.
    let reply = tokio::time::timeout(HANG, server.send(from("alice")))
        .await
        .expect("answered at once");
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(layer.held(), 0);
    tokio::time::sleep(SETTLE).await;
    assert_eq!(slow_remaining(&layer, "alice").await, 9);
}

#[tokio::test]
async fn the_layer_holds_no_request_longer_than_max_delay_when_the_clock_is_behind() {
    let clock = ManualClock::new(BASE + HOUR);
    let layer = layer_of(short_queue(), MemoryStore::with_clock(clock.clone()));
    let server = Server::start(plain_app(layer)).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    // The clock steps an hour back: the store computes at the latest instant it saw,
    // where the place is 100 ms away, and reports the delay on the caller's clock,
    // an hour and 100 ms. The layer holds it 200 ms at most, not an hour.
    clock.set(BASE);
    let reply = tokio::time::timeout(HANG, server.get("/"))
        .await
        .expect("held no longer than max_delay");
    assert_eq!(reply.status, StatusCode::OK);
}

// ---------------------------------------------------------------------------------------
// Rate-limit headers fit a proxy's buffer.
// ---------------------------------------------------------------------------------------

/// `n` policies named with 64 characters, 100 a minute each.
fn long_named_policies(n: usize) -> Vec<Policy> {
    (0..n)
        .map(|i| Policy::new(format!("{i:0>64}"), Quota::per_minute(100)).expect("policy"))
        .collect()
}

fn build(policies: Vec<Policy>) -> Result<RateLimitLayer, tollgate::ConfigError> {
    RateLimitLayer::builder().policies(policies).build()
}

#[test]
fn policies_whose_headers_could_outgrow_a_proxy_buffer_are_a_build_error_naming_them() {
    // Per policy, `"<64>";q=100;w=60` (77 bytes) and `"<64>";r=<20 digits>;t=<20 digits>`
    // (112), 2 more each for ", " after the first; the lines add
    // "ratelimit-policy: \r\n" and "ratelimit: \r\n" (33): 29 + 193·n bytes.
    assert!(build(long_named_policies(10)).is_ok(), "1959 bytes fit");
    let err = build(long_named_policies(11)).expect_err("2152 bytes do not");
    let message = err.to_string();
    assert!(message.contains("2152 bytes"), "{message}");
    assert!(message.contains(&MAX_HEADERS_LEN.to_string()), "{message}");
    for i in 0..11 {
        assert!(message.contains(&format!("\"{i:0>64}\"")), "{message}");
    }
}

#[tokio::test]
async fn the_largest_accepted_policies_write_headers_within_the_bound() {
    let layer = build(long_named_policies(10)).expect("they fit");
    let server = Server::start(plain_app(layer)).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::OK);
    let line = |name: &str| name.len() + ": \r\n".len() + reply.header(name).len();
    let len = line("ratelimit-policy") + line("ratelimit");
    assert_eq!(reply.header("ratelimit").matches(";r=").count(), 10);
    assert!(len <= MAX_HEADERS_LEN, "{len} bytes");
}
