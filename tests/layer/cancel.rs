//! Cancel-safe holding and deciding, over real TCP to a real axum server with real
//! clients that go away (a raw TCP connection closed mid-request), on the memory store
//! and on a Redis store: a held request whose client leaves gives back the charge made
//! for its place, not only its place in the layer; a request whose client leaves while
//! its decision is on its way to Redis (a stall made with `CLIENT PAUSE`) gives back
//! what the decision took when the reply arrives; one caller cannot take every place
//! the layer has for held requests (`max_held_per_key`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use support::http::Server;
use support::redis_server::script_calls;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Policy, Quota, RateLimitLayer, key};
use tower::{Layer as _, Service as _, ServiceExt as _};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

/// Time for a background give-back, already sent (seen on the server), to land; the
/// assertions after it are exact.
const SETTLE: Duration = Duration::from_millis(300);

/// Waits until the Redis server at `port` has run at least `calls` script calls (the
/// proof that a give-back was sent: a store call that failed counts too), then lets it
/// land.
async fn given_back(port: u16, calls: u64) {
    wait_until("the give-back sent", async || script_calls(port) >= calls).await;
    tokio::time::sleep(SETTLE).await;
}

const DAY: Duration = Duration::from_secs(86_400);

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// A GCRA policy of `quota` (burst 1) keyed by `x-user`.
fn queue(quota: Quota) -> Policy {
    Policy::new("queue", quota)
        .expect("policy")
        .algorithm(Algorithm::Gcra)
        .key(key::header("x-user").expect("a header name"))
}

fn layer_of(policy: Policy, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer")
}

fn from(user: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", user)
        .body(Full::default())
        .expect("request")
}

/// The key the policy `name` gives `user`'s requests.
fn key_of(layer: &RateLimitLayer, name: &str, user: &str) -> Key {
    let (parts, ()) = Request::get("/")
        .header("x-user", user)
        .body(())
        .expect("request")
        .into_parts();
    layer
        .policy(name)
        .and_then(|p| p.key_of(&parts))
        .expect("a key")
}

/// A real client that sends `user`'s request and keeps the connection open until it
/// is dropped: then it is gone, its request unanswered.
async fn client(server: &Server, user: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let request = format!("GET / HTTP/1.1\r\nhost: localhost\r\nx-user: {user}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    stream
}

/// Polls `done` until it holds; fails after [`HANG`].
async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done().await {
        assert!(started.elapsed() < HANG, "still waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How far `user`'s next place is under "queue" (GCRA: its TAT, less now).
async fn next_place(layer: &RateLimitLayer, user: &str) -> Duration {
    let key = key_of(layer, "queue", user);
    layer
        .limiter()
        .peek("queue", &key)
        .await
        .expect("a peek")
        .reset_after
}

/// `n` held requests (wait mode, GCRA burst 1, a clock that stands still) whose
/// clients leave: every charge made for their places is given back, by receipt (the
/// key's TAT, as the store counts it, is one period away again); returns the next
/// place a reservation gets afterwards.
///
/// `redis_port`: the private Redis server the store is on, whose script calls show
/// when the background give-backs have arrived (one per dropped request, and nothing
/// else meanwhile); `None` for the memory store, which gives back at once.
async fn dropped_held_requests(
    store: impl Store,
    quota: Quota,
    n: usize,
    redis_port: Option<u16>,
) -> Duration {
    let period = quota.period() / u32::try_from(quota.limit()).expect("small");
    let layer = layer_of(queue(quota), store);
    let layer = layer.wait(DAY);
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    assert_eq!(next_place(&layer, "alice").await, period);

    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(client(&server, "alice").await);
    }
    wait_until("the requests held", async || layer.held() == n).await;
    let held = u32::try_from(n).expect("small");
    assert_eq!(next_place(&layer, "alice").await, period * (held + 1));

    let calls = redis_port.map(script_calls);
    drop(clients);
    wait_until("the held requests dropped", async || layer.held() == 0).await;
    if let (Some(port), Some(calls)) = (redis_port, calls) {
        given_back(port, calls + u64::from(held)).await;
    } else {
        // Given back at once, as the store counts it: the TAT is one period away.
        assert_eq!(next_place(&layer, "alice").await, period);
    }
    let key = key_of(&layer, "queue", "alice");
    let next = layer
        .limiter()
        .reserve("queue", &key, 1, DAY)
        .await
        .expect("a reservation");
    assert!(next.allowed);
    next.delay
}

/// One held request whose client leaves: the next place is one period away, as
/// before it came (before the fix: two periods, its place still charged).
#[tokio::test]
async fn a_dropped_held_request_gives_its_place_back_on_memory() {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let next = dropped_held_requests(store, Quota::per_minute(1), 1, None).await;
    assert_eq!(next, Duration::from_secs(60));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_dropped_held_request_gives_its_place_back_on_redis() {
    let (redis, store) = private_redis(ManualClock::new(BASE));
    let next = dropped_held_requests(store, Quota::per_minute(1), 1, Some(redis.port())).await;
    assert_eq!(next, Duration::from_secs(60));
}

/// Ten held requests whose clients leave: every charge comes back (the TAT, above),
/// and the next place is one period away, as before they came (the figure;
/// before the fix: eleven periods).
///
/// The clients leave in whatever order their connections close: a place given back
/// while a later one is still reserved waits in the key's record until those after
/// it are back too (see `Limiter::refund_charge`), on either store.
#[tokio::test]
async fn ten_dropped_held_requests_leave_the_next_place_one_period_away_on_memory() {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let next = dropped_held_requests(store, Quota::per_second(1), 10, None).await;
    assert_eq!(next, Duration::from_secs(1));
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn ten_dropped_held_requests_leave_the_next_place_one_period_away_on_redis() {
    let (redis, store) = private_redis(ManualClock::new(BASE));
    let next = dropped_held_requests(store, Quota::per_minute(1), 10, Some(redis.port())).await;
    assert_eq!(next, Duration::from_secs(60));
}

/// A request held for its leaky-bucket turn (not wait mode) whose client leaves gives
/// its charge back too: the bucket is as it was. Leaky bucket 1/h, burst 10.
async fn a_dropped_leaky_bucket_hold_gives_its_charge_back(
    store: impl Store,
    redis_port: Option<u16>,
) {
    let policy = Policy::new("slow", Quota::per_hour(1).with_burst(10).expect("burst"))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket)
        .max_delay(DAY)
        .key(key::header("x-user").expect("a header name"));
    let layer = layer_of(policy, store);
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    let key = key_of(&layer, "slow", "alice");
    let remaining = async || {
        layer
            .limiter()
            .peek("slow", &key)
            .await
            .expect("peek")
            .remaining
    };
    assert_eq!(remaining().await, 9);
    // Held an hour for its turn.
    let gone = client(&server, "alice").await;
    wait_until("held", async || layer.held() == 1).await;
    assert_eq!(remaining().await, 8);
    let calls = redis_port.map(script_calls);
    drop(gone);
    wait_until("dropped", async || layer.held() == 0).await;
    if let (Some(port), Some(calls)) = (redis_port, calls) {
        given_back(port, calls + 1).await;
    }
    assert_eq!(remaining().await, 9);
}

#[tokio::test]
async fn a_dropped_leaky_bucket_hold_gives_its_charge_back_on_memory() {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    a_dropped_leaky_bucket_hold_gives_its_charge_back(store, None).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_dropped_leaky_bucket_hold_gives_its_charge_back_on_redis() {
    let (redis, store) = private_redis(ManualClock::new(BASE));
    a_dropped_leaky_bucket_hold_gives_its_charge_back(store, Some(redis.port())).await;
}

/// One caller in wait mode holds at most `max_held_per_key`; past it, its delayed
/// requests are 429s with their charges given back, and other callers still find
/// places under `max_held`.
#[tokio::test]
async fn one_caller_cannot_take_every_held_place() {
    // One place every 6 minutes: nothing held is served while the test runs.
    let layer = layer_of(
        queue(Quota::per_hour(10).with_burst(1).expect("burst")),
        MemoryStore::with_clock(ManualClock::new(BASE)),
    );
    let layer = layer.wait(DAY).max_held(10).max_held_per_key(3);
    let server = Arc::new(Server::start(app(layer.clone())).await);
    // Each caller's burst of 1 at once.
    for user in ["mallory", "alice"] {
        assert_eq!(server.send(from(user)).await.status, StatusCode::OK);
    }
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(client(&server, "mallory").await);
    }
    wait_until("three of mallory's held", async || layer.held() == 3).await;
    for _ in 0..5 {
        let refused = server.send(from("mallory")).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        // Its place would have been the fourth: 4 × 6 min away.
        assert_eq!(refused.header("retry-after"), "1440");
    }
    assert_eq!(layer.held(), 3);
    // Refused places were given back: mallory's next place is still the fourth.
    let minutes = |n: u64| Duration::from_secs(60 * n);
    assert_eq!(next_place(&layer, "mallory").await, minutes(24));
    // Alice is held, not refused.
    held.push(client(&server, "alice").await);
    wait_until("alice held", async || layer.held() == 4).await;
    assert_eq!(next_place(&layer, "alice").await, minutes(12));
    drop(held);
    wait_until("all dropped", async || layer.held() == 0).await;
}

/// By default one key holds at most `DEFAULT_MAX_HELD_PER_KEY` (128) of the layer's
/// `DEFAULT_MAX_HELD` (1 024) places.
#[tokio::test]
async fn by_default_one_key_holds_at_most_an_eighth_of_the_places() {
    let layer = layer_of(
        queue(Quota::per_second(1)),
        MemoryStore::with_clock(ManualClock::new(BASE)),
    );
    let layer = layer.wait(DAY);
    let mut service = layer.layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let first = service
        .ready()
        .await
        .expect("ready")
        .call(from("mallory"))
        .await;
    assert_eq!(first.expect("infallible").status(), StatusCode::OK);
    let mut held = Vec::new();
    for _ in 0..RateLimitLayer::DEFAULT_MAX_HELD_PER_KEY {
        held.push(service.ready().await.expect("ready").call(from("mallory")));
    }
    assert_eq!(layer.held(), 128);
    let refused = service
        .ready()
        .await
        .expect("ready")
        .call(from("mallory"))
        .await
        .expect("infallible");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another key still gets a place.
    let other = service.ready().await.expect("ready").call(from("alice"));
    let first = tokio::time::timeout(HANG, other).await.expect("at once");
    assert_eq!(first.expect("infallible").status(), StatusCode::OK);
    let other = service.ready().await.expect("ready").call(from("alice"));
    assert_eq!(layer.held(), 129);
    drop((held, other));
    assert_eq!(layer.held(), 0);
}

/// The decisions `layer` makes under "api" for `user`'s next request, charging
/// nothing.
#[cfg(feature = "redis")]
async fn peek_api(layer: &RateLimitLayer, user: &str) -> tollgate::Decision {
    let key = key_of(layer, "api", user);
    layer.limiter().peek("api", &key).await.expect("a peek")
}

/// A Redis server of its own (a stall pauses every client of it; its script calls
/// are this test's alone) and a store on it at `clock`'s instants.
#[cfg(feature = "redis")]
fn private_redis(clock: ManualClock) -> (support::redis_server::RedisServer, tollgate::RedisStore) {
    let server = support::redis_server::RedisServer::start();
    let store = tollgate::RedisStore::from_url(&server.url())
        .expect("a valid url")
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .denial_cache(0)
        .with_clock(clock);
    (server, store)
}

/// A client that leaves 100 ms into a 600 ms stall of Redis, its request's decision
/// on the wire: when the reply arrives, what the decision took goes back. Plain
/// checks (fixed window 2/min) and wait mode (GCRA 1/min) alike.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_request_whose_client_leaves_while_its_decision_is_on_the_wire_takes_nothing() {
    // Plain checks: the left request's admission is given back.
    let (redis, store) = private_redis(ManualClock::new(BASE));
    let policy = Policy::new("api", Quota::per_minute(2))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-user").expect("a header name"));
    let layer = layer_of(policy, store);
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    let calls = script_calls(redis.port());
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "600", "ALL"]), "OK");
    let gone = client(&server, "alice").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(gone);
    // The decision and its give-back both reach Redis.
    given_back(redis.port(), calls + 2).await;
    assert_eq!(peek_api(&layer, "alice").await.remaining, 1);
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    assert_eq!(
        server.send(from("alice")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Wait mode: the left request's place is given back.
    let (redis, store) = private_redis(ManualClock::new(BASE));
    let layer = layer_for_queue(store);
    let layer = layer.wait(DAY);
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(server.send(from("alice")).await.status, StatusCode::OK);
    let calls = script_calls(redis.port());
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "600", "ALL"]), "OK");
    let gone = client(&server, "alice").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(gone);
    let minute = Duration::from_secs(60);
    given_back(redis.port(), calls + 2).await;
    assert_eq!(layer.held(), 0);
    let key = key_of(&layer, "queue", "alice");
    let next = layer
        .limiter()
        .reserve("queue", &key, 1, DAY)
        .await
        .expect("a reservation");
    // Before the fix: 120 s, one period lost per cancellation.
    assert_eq!((next.allowed, next.delay), (true, minute));
}

#[cfg(feature = "redis")]
fn layer_for_queue(store: impl Store) -> RateLimitLayer {
    layer_of(queue(Quota::per_minute(1)), store)
}

/// Requests waiting for an in-flight slot of one key (wait mode) get it in the order
/// they came: one that arrives at the instant a slot frees, while others wait, joins
/// the line behind them instead of taking the slot first.
async fn waiters_for_an_in_flight_slot_are_served_in_arrival_order(store: impl Store) {
    let policy = Policy::in_flight_only("reports", 1)
        .expect("policy")
        .wait(Duration::from_secs(30));
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let service = layer.layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
    }));
    let get = || Request::get("/").body(Full::default()).expect("request");
    // Its slot is held while its body lives.
    let holder = service.clone().oneshot(get()).await.expect("infallible");
    let (done, mut served) = tokio::sync::mpsc::unbounded_channel();
    let send = |name: &'static str| {
        let (service, done) = (service.clone(), done.clone());
        tokio::spawn(async move {
            let response = service.oneshot(get()).await.expect("infallible");
            let _ = done.send((name, response));
        })
    };
    let first = send("first");
    // The first has waited long enough to poll every 25 ms.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = send("second");
    tokio::task::yield_now().await;
    drop(holder);
    // Arrives as the slot frees, before the first's next try.
    let late = send("late");
    let mut order = Vec::new();
    for _ in 0..3 {
        let (name, response) = tokio::time::timeout(HANG, served.recv())
            .await
            .expect("served")
            .expect("a response");
        assert_eq!(response.status(), StatusCode::OK);
        order.push(name);
        // The next is served only once this one's body ends.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(served.try_recv().is_err(), "one slot, one at a time");
        drop(response);
    }
    assert_eq!(order, ["first", "second", "late"]);
    for task in [first, second, late] {
        task.await.expect("task");
    }
}

/// Calls of `command` (lower case, e.g. "zrem") the Redis server at `port` has run.
#[cfg(feature = "redis")]
fn command_calls(port: u16, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    support::redis_server::cli(port, &["INFO", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

/// A request whose client leaves 100 ms into a 600 ms stall of Redis, its in-flight
/// slot's call on the wire: when the reply arrives, the slot it took is given back at
/// once (before the fix: kept until its slot record expired, 10 s by default, every request
/// meanwhile a 429).
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_request_whose_client_leaves_while_its_slot_call_is_on_the_wire_leaves_the_slot_free() {
    let (redis, store) = private_redis(ManualClock::new(BASE));
    let layer = RateLimitLayer::builder()
        .policy(Policy::in_flight_only("reports", 1).expect("policy"))
        .store(store)
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    let port = redis.port();
    wait_until("its slot given back", async || {
        command_calls(port, "zrem") == 1
    })
    .await;
    let calls = script_calls(port);
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "600", "ALL"]), "OK");
    let gone = client(&server, "alice").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(gone);
    // Its slot taken when the stall ends, then given back.
    wait_until("the slot taken and given back", async || {
        script_calls(port) > calls && command_calls(port, "zrem") == 2
    })
    .await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn waiters_for_an_in_flight_slot_are_served_in_arrival_order_on_memory() {
    waiters_for_an_in_flight_slot_are_served_in_arrival_order(MemoryStore::new()).await;
}

/// The same within one process on Redis (real time: each waiter first in line asks
/// Redis again within 25 ms; the others wait their turn here).
#[cfg(feature = "redis")]
#[tokio::test]
async fn waiters_for_an_in_flight_slot_are_served_in_arrival_order_on_redis() {
    let store = crate::shared_redis::redis_store("slot-line", ManualClock::new(BASE));
    waiters_for_an_in_flight_slot_are_served_in_arrival_order(store).await;
}
