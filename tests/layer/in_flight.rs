//! In-flight limits (`Policy::in_flight`, `Policy::in_flight_only`) on the memory
//! store: over real TCP, every way a request can end gives its slot back; a request
//! refused for a slot is charged nothing, a request the rate denies gives its slot
//! back; inner-service errors, gRPC answers, fail modes, shadow mode, a store without
//! slots, and a flood of distinct keys. The same HTTP scenario runs on Redis and on a
//! cluster in their binaries (`tests/support/in_flight.rs`).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use support::http::Server;
use support::in_flight::{App, every_way_a_request_ends};
use tokio::sync::Notify;
use tollgate::clock::ManualClock;
use tollgate::layer::FailMode;
use tollgate::store::{Charge, Store};
use tollgate::{
    Algorithm, ConfigError, Decision, Key, Limit, MemoryStore, Policy, Quota, RateLimitLayer, key,
    store::StoreCall,
};
use tower::{Layer, Service, ServiceExt};

use crate::broken_store::broken_layer;

type Body = Full<Bytes>;

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn layer(policy: Policy, store: MemoryStore) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer")
}

#[tokio::test]
async fn every_way_a_request_ends_gives_its_slot_back() {
    let store = MemoryStore::new();
    let policy = Policy::in_flight_only("slow", 2).expect("policy");
    let layer = layer(policy, store.clone());
    every_way_a_request_ends(2, |router| router.layer(layer)).await;
    assert_eq!(store.in_flight_keys(), 0);
}

#[tokio::test]
async fn a_policy_with_a_quota_limits_both_and_its_headers_show_both() {
    let policy = Policy::new("api", Quota::per_minute(1000))
        .expect("policy")
        .in_flight(3)
        .expect("in flight");
    let layer = layer(policy, MemoryStore::new());
    let app = App::start(|router| router.layer(layer)).await;
    let running = app.fill(3).await;
    app.assert_refused().await;
    for reply in app.finish(running).await {
        // The quota, then the in-flight bound (draft-11's `qu="concurrent-requests"`);
        // only the quota has a `RateLimit` member (no store says how many slots are free).
        assert_eq!(
            reply.header("ratelimit-policy"),
            r#""api";q=1000;w=60, "api";q=3;qu="concurrent-requests""#
        );
        assert!(
            reply.header("ratelimit").starts_with(r#""api";r=99"#),
            "{reply:?}"
        );
    }
}

#[tokio::test]
async fn a_request_refused_for_a_slot_is_charged_by_no_rate_policy() {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(100))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .in_flight(1)
        .expect("in flight");
    let layer = layer(policy, MemoryStore::with_clock(clock));
    let app = App::start(|router| router.layer(layer)).await;

    let running = app.fill(1).await;
    for _ in 0..5 {
        app.assert_refused().await;
    }
    let first = app.finish(running).await;
    assert_eq!(first[0].header("ratelimit"), r#""api";r=99;t=60"#);
    let running = app.fill(1).await;
    let second = app.finish(running).await;
    // Two charged: the five refused requests were not.
    assert_eq!(second[0].header("ratelimit"), r#""api";r=98;t=60"#);
}

#[tokio::test]
async fn a_request_the_rate_denies_gives_its_slot_back_at_once() {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let policy = Policy::new("api", Quota::per_minute(1))
        .expect("policy")
        .in_flight(1)
        .expect("in flight");
    let server = Server::start(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer(policy, store.clone())),
    )
    .await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    let denied = server.get("/").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.body, "rate limit exceeded: retry after 60 s\n");
    assert_eq!(store.in_flight_keys(), 0);
}

#[tokio::test]
async fn an_inner_service_error_gives_the_slot_back() {
    let store = MemoryStore::new();
    let policy = Policy::in_flight_only("api", 1).expect("policy");
    let mut service =
        layer(policy, store.clone()).layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
            Err::<Response<Full<Bytes>>, _>("inner failure")
        }));
    for _ in 0..3 {
        let result = service
            .ready()
            .await
            .expect("ready")
            .call(Request::new(Full::default()))
            .await;
        assert_eq!(result.expect_err("the inner error"), "inner failure");
        assert_eq!(store.in_flight_keys(), 0);
    }
}

/// An inner service that counts the requests entering it and holds each one until
/// `release` is notified: the count of entered requests, the release, the service.
fn held_service() -> (
    Arc<AtomicUsize>,
    Arc<Notify>,
    impl Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future: Send>
    + Clone
    + Send
    + 'static,
) {
    let (entered, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
    let inner = {
        let (entered, release) = (entered.clone(), release.clone());
        tower::service_fn(move |_: Request<Full<Bytes>>| {
            let (entered, release) = (entered.clone(), release.clone());
            async move {
                entered.fetch_add(1, Ordering::SeqCst);
                release.notified().await;
                Ok::<_, Infallible>(Response::new(Body::default()))
            }
        })
    };
    (entered, release, inner)
}

fn grpc_call() -> Request<Full<Bytes>> {
    Request::post("/pkg.Service/Method")
        .header("content-type", "application/grpc")
        .body(Full::default())
        .expect("request")
}

#[tokio::test]
async fn a_grpc_call_over_the_bound_gets_resource_exhausted_with_a_pushback() {
    let policy = Policy::in_flight_only("calls", 1).expect("policy");
    let (entered, release, inner) = held_service();
    let service = layer(policy, MemoryStore::new()).layer(inner);
    let running = tokio::spawn(service.clone().oneshot(grpc_call()));
    while entered.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let refused = service.clone().oneshot(grpc_call()).await.expect("answer");
    assert_eq!(refused.status(), StatusCode::OK);
    assert_eq!(refused.headers()["grpc-status"], "8");
    assert_eq!(refused.headers()["grpc-retry-pushback-ms"], "1000");
    assert!(!refused.headers().contains_key("ratelimit"));
    release.notify_one();
    running.await.expect("task").expect("answer");
}

#[tokio::test]
async fn shadow_mode_passes_a_request_over_the_bound() {
    let policy = Policy::in_flight_only("api", 1).expect("policy");
    let layer = layer(policy, MemoryStore::new()).shadow(true);
    let app = App::start(|router| router.layer(layer)).await;
    let running = app.fill(2).await;
    assert_eq!(app.finish(running).await.len(), 2);
}

#[tokio::test]
async fn a_failing_store_fails_open_or_closed_as_the_layer_says() {
    let calls = Arc::new(AtomicUsize::new(0));
    let broken = || broken_layer(Policy::in_flight_only("api", 1).expect("policy"), &calls);
    let app = |mode| {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(broken().on_store_error(mode))
    };
    let open = Server::start(app(FailMode::Open)).await;
    assert_eq!(open.get("/").await.status, StatusCode::OK);
    let closed = Server::start(app(FailMode::Closed)).await;
    let reply = closed.get("/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), "1");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

/// A store that keeps rate state (in memory) but no in-flight slots.
#[derive(Debug)]
pub(crate) struct NoSlots(pub(crate) MemoryStore);

impl Store for NoSlots {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.0.decide(charges)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.0.refund(charge)
    }
}

#[test]
fn a_store_without_slots_is_refused_at_build_time_and_zero_is_a_config_error() {
    let err = RateLimitLayer::builder()
        .policy(Policy::in_flight_only("uploads", 2).expect("policy"))
        .store(NoSlots(MemoryStore::new()))
        .build()
        .expect_err("no slots");
    assert!(err.to_string().contains("\"uploads\""), "{err}");
    assert!(
        RateLimitLayer::builder()
            .policy(Policy::new("api", Quota::per_second(1)).expect("policy"))
            .store(NoSlots(MemoryStore::new()))
            .build()
            .is_ok()
    );
    let zero: Result<Policy, ConfigError> = Policy::in_flight_only("uploads", 0);
    assert!(zero.expect_err("zero").to_string().contains("in_flight 0"));
}

#[tokio::test]
async fn a_flood_of_distinct_keys_holds_only_the_requests_running() {
    let store = MemoryStore::new();
    let policy = Policy::in_flight_only("per-user", 1)
        .expect("policy")
        .key(key::header("x-user").expect("a header name"));
    let server = Server::start(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer(policy, store.clone())),
    )
    .await;
    for user in 0..500 {
        let request = Request::get("/")
            .header("x-user", user.to_string())
            .body(Full::default())
            .expect("request");
        assert_eq!(server.send(request).await.status, StatusCode::OK);
        // Each ended before its answer was read: no key stays behind.
        assert_eq!(store.in_flight_keys(), 0);
    }

    // Held slots are the only entries: one per running request.
    let limit = Limit::new("per-user", Quota::per_second(1)).expect("limit");
    let keys: Vec<Key> = (0..1000_u64).map(Key::from).collect();
    let mut slots = Vec::new();
    for key in &keys {
        slots.push(
            store
                .acquire_in_flight(&limit, key, 1)
                .await
                .expect("memory"),
        );
    }
    assert_eq!(store.in_flight_keys(), 1000);
    drop(slots);
    assert_eq!(store.in_flight_keys(), 0);
}

/// Wait mode: a request that finds no slot free waits for one (within its wait)
/// instead of getting a 429; past its wait it gets the 429.
#[tokio::test]
async fn in_wait_mode_a_request_waits_for_a_free_slot() {
    let (entered, release, inner) = held_service();
    let get = || {
        Request::get("/")
            .body(Full::<Bytes>::default())
            .expect("request")
    };
    let waits = Policy::in_flight_only("reports", 1)
        .expect("policy")
        .wait(Duration::from_secs(30));
    let service = layer(waits, MemoryStore::new()).layer(inner.clone());
    let first = tokio::spawn(service.clone().oneshot(get()));
    while entered.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // The second finds the slot taken and waits; it is not answered meanwhile.
    let second = tokio::spawn(service.clone().oneshot(get()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!second.is_finished(), "a waiting request is not answered");
    assert_eq!(
        entered.load(Ordering::SeqCst),
        1,
        "nor served while the slot is taken"
    );
    // The first ends: its slot goes to the waiting one.
    release.notify_one();
    let first = first.await.expect("task").expect("answer");
    assert_eq!(first.status(), StatusCode::OK);
    drop(first);
    while entered.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    release.notify_one();
    let second = second.await.expect("task").expect("answer");
    assert_eq!(second.status(), StatusCode::OK);

    // A request whose wait is shorter than the slot stays taken gets the 429.
    let short = Policy::in_flight_only("reports", 1)
        .expect("policy")
        .wait(Duration::from_millis(20));
    let service = layer(short, MemoryStore::new()).layer(inner);
    let holder = tokio::spawn(service.clone().oneshot(get()));
    while entered.load(Ordering::SeqCst) < 3 {
        tokio::task::yield_now().await;
    }
    let refused = service.clone().oneshot(get()).await.expect("answer");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    release.notify_one();
    holder.await.expect("task").expect("answer");
}

/// Polls `done` until it holds; fails after 30 s (a hang, never a timing assertion).
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `max_held` is one budget: requests waiting in line for an in-flight slot and
/// requests held for their leaky-bucket turn take places in it alike, `held()`
/// counts both, and past it either kind is refused at once.
#[tokio::test]
async fn max_held_is_one_budget_for_slot_waiters_and_held_turns() {
    // One request of each `x-slot` caller at a time, the others waiting for it (an hour).
    let busy = Policy::in_flight_only("busy", 1)
        .expect("policy")
        .key(key::header("x-slot").expect("a header name"))
        .wait(Duration::from_secs(3_600));
    // One place an hour per `x-queue` caller, ten queued: the second waits an hour.
    let queue = Policy::new("queue", Quota::per_hour(1).with_burst(10).expect("burst"))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket)
        .max_delay(Duration::from_secs(36_000))
        .key(key::header("x-queue").expect("a header name"));
    let layer = RateLimitLayer::builder()
        .policy(busy)
        .policy(queue)
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer")
        .max_held(4);
    let routes = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/hang", get(std::future::pending::<&'static str>))
        .layer(layer.clone());
    let server = Arc::new(Server::start(routes).await);
    let send = |header: &'static str, path: &'static str| {
        let server = Arc::clone(&server);
        let request = Request::get(path)
            .header(header, "mallory")
            .body(Body::default())
            .expect("request");
        tokio::spawn(async move { server.send(request).await.status })
    };
    // Running, not held: it has its slot.
    let running = send("x-slot", "/hang");
    let mut waiting = Vec::new();
    for n in 1..=3 {
        waiting.push(send("x-slot", "/hang"));
        wait_until("a slot waiter counted", || layer.held() == n).await;
    }
    // Served at once: the first place of the queue.
    assert_eq!(send("x-queue", "/").await.expect("a reply"), StatusCode::OK);
    // Held for its turn an hour away: the fourth place of the one budget.
    let held = send("x-queue", "/");
    wait_until("the turn held", || layer.held() == 4).await;
    // The budget is spent, whatever the kind of the next one.
    assert_eq!(
        send("x-queue", "/").await.expect("a reply"),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        send("x-slot", "/hang").await.expect("a reply"),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(layer.held(), 4);
    for request in waiting.into_iter().chain([running, held]) {
        request.abort();
    }
    wait_until("every place given back", || layer.held() == 0).await;
}
