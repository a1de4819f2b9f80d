//! The hold caps (`max_held`, `max_held_per_key`) and wait mode where they meet shadow
//! policies, reloads and clients that leave while held: over real TCP, at a frozen
//! instant (held requests wait in real time for the delay the store gives).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::store::Store;
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{clock, redis, wait_until};

fn per_caller() -> Policy {
    Policy::new("per-caller", Quota::per_minute(10))
        .expect("policy")
        .key(key::header("x-user").expect("header"))
}

fn shadowed_queue() -> Policy {
    Policy::new(
        "queue",
        Quota::per_second(1).with_burst(100).expect("burst"),
    )
    .expect("policy")
    .algorithm(Algorithm::LeakyBucket)
    .max_delay(Duration::from_secs(600))
    .key(key::global())
    .shadow(true)
}

fn from(user: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", user)
        .body(Full::default())
        .expect("request")
}

async fn app(layer: &RateLimitLayer) -> Arc<Server> {
    let routes = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    Arc::new(Server::start(routes).await)
}

/// 30 requests of one caller at once; (served, refused) once the held ones are done.
async fn thirty_at_once(server: &Arc<Server>) -> (usize, usize) {
    let replies: Vec<_> = (0..30)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.send(from("mallory")).await.status })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for reply in replies {
        match tokio::time::timeout(Duration::from_secs(120), reply).await {
            Ok(Ok(StatusCode::OK)) => ok += 1,
            Ok(Ok(StatusCode::TOO_MANY_REQUESTS)) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    (ok, refused)
}

/// Past `max_held_per_key` (not `max_held`) a shadowed queue's delay gives its place
/// back and the enforced policy keeps counting: exactly 10 served.
async fn per_key_cap(store: impl Store) -> (usize, usize) {
    let layer = RateLimitLayer::builder()
        .policy(per_caller())
        .policy(shadowed_queue())
        .store(store)
        .build()
        .expect("layer")
        .max_held_per_key(1);
    let server = app(&layer).await;
    thirty_at_once(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_per_key_hold_cap_the_enforced_policy_keeps_counting_on_memory() {
    assert_eq!(
        per_key_cap(MemoryStore::with_clock(clock())).await,
        (10, 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_per_key_hold_cap_the_enforced_policy_keeps_counting_on_redis() {
    assert_eq!(per_key_cap(redis("per-key-cap", clock())).await, (10, 20));
}

/// In wait mode (the enforced policy would hold what fits within 2 s: nothing more
/// at a frozen instant) beside the shadowed queue, holding nothing: exactly 10.
async fn wait_mode_cap(store: impl Store) -> (usize, usize) {
    let layer = RateLimitLayer::builder()
        .policy(per_caller())
        .policy(shadowed_queue())
        .store(store)
        .build()
        .expect("layer")
        .wait(Duration::from_secs(2))
        .max_held(0);
    let server = app(&layer).await;
    thirty_at_once(&server).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_wait_mode_past_the_hold_cap_the_enforced_policy_keeps_counting_on_memory() {
    assert_eq!(
        wait_mode_cap(MemoryStore::with_clock(clock())).await,
        (10, 20)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_wait_mode_past_the_hold_cap_the_enforced_policy_keeps_counting_on_redis() {
    assert_eq!(wait_mode_cap(redis("wait-cap", clock())).await, (10, 20));
}

/// A request held for its leaky-bucket turn when a reload makes the limit a fixed
/// window; the new window is spent (10 of 10); the held client leaves: its give-back
/// reaches nothing of the new state, so nothing more is admitted.
async fn leaving_after_a_reload(store: impl Store) -> (usize, usize) {
    let queue = |algorithm: Algorithm| {
        Policy::new("queue", Quota::per_minute(10))
            .expect("policy")
            .algorithm(algorithm)
            .max_delay(Duration::from_secs(60))
            .key(key::header("x-user").expect("header"))
    };
    let layer = RateLimitLayer::builder()
        .policy(queue(Algorithm::LeakyBucket))
        .store(store)
        .build()
        .expect("layer");
    let server = app(&layer).await;
    assert_eq!(server.send(from("held")).await.status, StatusCode::OK);
    let held = {
        let server = server.clone();
        tokio::spawn(async move { server.send(from("held")).await.status })
    };
    wait_until("held", || layer.held() == 1).await;
    layer
        .reload([queue(Algorithm::FixedWindow)])
        .expect("reload");
    let mut new_window = 0;
    for _ in 0..10 {
        new_window += usize::from(server.send(from("held")).await.status == StatusCode::OK);
    }
    held.abort();
    let _ = held.await;
    wait_until("nobody held", || layer.held() == 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut after = 0;
    for _ in 0..5 {
        after += usize::from(server.send(from("held")).await.status == StatusCode::OK);
    }
    (new_window, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_client_leaving_after_a_reload_gives_nothing_to_the_new_state_on_memory() {
    assert_eq!(
        leaving_after_a_reload(MemoryStore::with_clock(clock())).await,
        (10, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_client_leaving_after_a_reload_gives_nothing_to_the_new_state_on_redis() {
    assert_eq!(
        leaving_after_a_reload(redis("held-reload", clock())).await,
        (10, 0)
    );
}

/// One budget for every kind of holding: logins waiting for a pending outcome and
/// requests held for their leaky-bucket turn, under `max_held(3)`: `held()` never says
/// more than 3, and every request past it is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_waiters_and_turns_share_one_hold_budget() {
    use crate::desk::{Desk, attempt};
    let login = Policy::new("failed-logins", Quota::per_minute(1))
        .expect("policy")
        .key(key::header("x-user").expect("header"))
        .on_route(http::Method::POST, "/login")
        .expect("route")
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let queue = Policy::new(
        "queue",
        Quota::per_second(1).with_burst(100).expect("burst"),
    )
    .expect("policy")
    .algorithm(Algorithm::LeakyBucket)
    .max_delay(Duration::from_secs(600))
    .key(key::global())
    .on_route(http::Method::GET, "/")
    .expect("route");
    let layer = RateLimitLayer::builder()
        .policy(login)
        .policy(queue)
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer")
        .max_held(3);
    let desk = Desk::new();
    let routes = Router::new()
        .route("/", get(|| async { "ok" }))
        .merge(crate::desk::routes(&desk))
        .layer(layer.clone());
    let server = Arc::new(Server::start(routes).await);
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("u", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let mut all = tokio::task::JoinSet::new();
    for i in 0..12 {
        let server = server.clone();
        all.spawn(async move {
            if i % 2 == 0 {
                server.send(attempt("u", "right", false)).await.status
            } else {
                server.send(from("q")).await.status
            }
        });
    }
    let mut most = 0;
    for _ in 0..150 {
        most = most.max(layer.held());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let (mut answered_at_once, mut served_at_once) = (0, 0);
    while let Some(status) = all.try_join_next() {
        match status.expect("status") {
            StatusCode::TOO_MANY_REQUESTS => answered_at_once += 1,
            StatusCode::OK => served_at_once += 1,
            other => panic!("{other}"),
        }
    }
    // Only the first queue request (place 0) is served at once.
    assert!(
        served_at_once <= 1,
        "{served_at_once} served while the login was pending"
    );
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    all.abort_all();
    assert!(most <= 3, "held() said {most} under max_held(3)");
    // The first queue request is served at once (place 0): 11 held or refused.
    assert!(
        answered_at_once >= 12 - 1 - 3,
        "{answered_at_once} answered at once"
    );
}

/// In-flight slots and waiting for outcomes together (1 failed login a minute, 2 at
/// once): a login that waits for another's outcome holds its slot; its client
/// leaves; the slot is free again: later, one login pending and one waiting for it
/// are both let in (no in-flight refusal).
async fn slot_of_a_leaving_waiter(store: impl Store) -> (StatusCode, StatusCode) {
    use crate::desk::{Desk, attempt, serve};
    let policy = Policy::new("failed-logins", Quota::per_minute(1))
        .expect("policy")
        .in_flight(2)
        .expect("slots")
        .key(key::header("x-user").expect("header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let first = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("s", "right", true)).await.status })
    };
    wait_until("first pending", || desk.reached() == (1, 0)).await;
    let leaver = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("s", "right", false)).await.status })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    leaver.abort();
    let _ = leaver.await;
    desk.open();
    assert_eq!(first.await.expect("first"), StatusCode::OK);
    wait_until("nothing pending", || {
        layer.awaiting_outcomes() == 0 && layer.held() == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    desk.close();
    let third = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("s", "right", true)).await.status })
    };
    wait_until("third pending", || desk.reached() == (2, 0)).await;
    let fourth = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("s", "right", false)).await.status })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    desk.open();
    (third.await.expect("third"), fourth.await.expect("fourth"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_outcomes_that_leaves_frees_its_slot_on_memory() {
    assert_eq!(
        slot_of_a_leaving_waiter(MemoryStore::with_clock(clock())).await,
        (StatusCode::OK, StatusCode::OK)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_outcomes_that_leaves_frees_its_slot_on_redis() {
    assert_eq!(
        slot_of_a_leaving_waiter(redis("leaving-slot", clock())).await,
        (StatusCode::OK, StatusCode::OK)
    );
}
