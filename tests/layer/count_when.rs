//! `count_when` counts only what it says, under concurrency (issue 35, case 7), over
//! real TCP to a real axum server with real clients, on the memory store and on Redis.
//! The README recipe "5 failed logins a minute block the caller for 10 minutes", one
//! office behind one address: right-password logins at once are all served and never
//! box it (requests that only charges still awaiting their outcome kept out wait for
//! those outcomes instead of being refused as offences); wrong passwords at once still
//! reach the handler exactly five times and trip the box; a caller that leaves while it
//! waits takes nothing and leaves nothing behind; a wait that runs out refuses without
//! an offence; the table of pending outcomes ends with its requests.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, key};
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;

use crate::grpc_server::{GrpcServer, Ping};

/// 2023-11-14T00:00:00Z; the clock stands still: one window for the whole test.
const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

const TEN_MINUTES: &str = "600";

/// The login desk: counts who reached it, and answers once its gate is open and it
/// has thought for a while (so that requests overlap).
struct Desk {
    right: AtomicUsize,
    wrong: AtomicUsize,
    gate: watch::Sender<bool>,
    think: Duration,
}

impl Desk {
    fn new(open: bool) -> Arc<Self> {
        Arc::new(Self {
            right: AtomicUsize::new(0),
            wrong: AtomicUsize::new(0),
            gate: watch::Sender::new(open),
            think: Duration::from_millis(20),
        })
    }

    fn reached(&self) -> (usize, usize) {
        (
            self.right.load(Ordering::SeqCst),
            self.wrong.load(Ordering::SeqCst),
        )
    }

    fn open(&self) {
        self.gate.send_replace(true);
    }
}

/// `POST /login`: 200 for the password "right", 401 otherwise.
async fn login(State(desk): State<Arc<Desk>>, headers: HeaderMap) -> StatusCode {
    let right = headers.get("x-password").is_some_and(|p| p == "right");
    if right {
        desk.right.fetch_add(1, Ordering::SeqCst);
    } else {
        desk.wrong.fetch_add(1, Ordering::SeqCst);
    }
    let mut gate = desk.gate.subscribe();
    let _ = gate.wait_for(|open| *open).await;
    tokio::time::sleep(desk.think).await;
    if right {
        StatusCode::OK
    } else {
        StatusCode::UNAUTHORIZED
    }
}

/// The README recipe: 5 failed logins a minute per address, then 10 minutes in the box.
fn failed_logins() -> Policy {
    Policy::new("failed-logins", Quota::per_minute(5))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::peer_ip())
        .on_route(Method::POST, "/login")
        .expect("a route")
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
}

struct Office {
    server: Arc<Server>,
    layer: RateLimitLayer,
    desk: Arc<Desk>,
}

async fn office(policy: Policy, store: impl Store, desk: Arc<Desk>) -> Office {
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let app = Router::new()
        .route("/login", post(login))
        .with_state(desk.clone())
        .layer(layer.clone());
    Office {
        server: Arc::new(Server::start(app).await),
        layer,
        desk,
    }
}

fn attempt(password: &str) -> Request<Full<Bytes>> {
    Request::post("/login")
        .header("x-password", password)
        .body(Full::default())
        .expect("a request")
}

/// Sends every password at once, each from its own task (and connection).
fn at_once(server: &Arc<Server>, passwords: &[&'static str]) -> JoinSet<Reply> {
    let mut replies = JoinSet::new();
    for &password in passwords {
        let server = server.clone();
        replies.spawn(async move { server.send(attempt(password)).await });
    }
    replies
}

/// The status of every reply, counted: (200, 401, 429).
async fn tally(mut replies: JoinSet<Reply>) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    while let Some(reply) = replies.join_next().await {
        match reply.expect("a reply").status {
            StatusCode::OK => counts.0 += 1,
            StatusCode::UNAUTHORIZED => counts.1 += 1,
            StatusCode::TOO_MANY_REQUESTS => counts.2 += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    counts
}

/// Polls `done` until it holds; fails after [`HANG`].
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "still waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The office's address as the policy keys it.
fn office_key() -> Key {
    Key::from(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// Five failures use the quota; the next attempt, even with the right password, is
/// the rejection that trips the box for ten minutes.
async fn quota_and_box_are_exact(office: &Office) {
    for i in 0..5 {
        let reply = office.server.send(attempt("wrong")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "failure {i}");
    }
    let tripped = office.server.send(attempt("right")).await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tripped.header("retry-after"), TEN_MINUTES);
}

async fn thirty_right_passwords_at_once(store: impl Store) {
    let office = office(failed_logins(), store, Desk::new(true)).await;
    let replies = at_once(&office.server, &["right"; 30]);
    assert_eq!(tally(replies).await, (30, 0, 0));
    assert_eq!(office.desk.reached(), (30, 0));
    // Nothing counted, nothing boxed; refunds on a remote store land in the background.
    wait_until("the outcomes known", || {
        office.layer.awaiting_outcomes() == 0
    })
    .await;
    let offences = office
        .layer
        .limiter()
        .offences("failed-logins", &office_key())
        .await
        .expect("offences");
    assert_eq!((offences.trips, offences.blocked_for), (0, None));
    quota_and_box_are_exact(&office).await;
}

/// Before: 5 served, 25 × 429 and the office boxed for ten minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_right_passwords_at_once_are_all_served_and_box_no_one_on_memory() {
    thirty_right_passwords_at_once(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_right_passwords_at_once_are_all_served_and_box_no_one_on_redis() {
    let store = crate::shared_redis::redis_store("cw-right", ManualClock::new(BASE));
    thirty_right_passwords_at_once(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_right_passwords_at_once_are_all_served_and_box_no_one_on_the_cluster() {
    let store = crate::shared_redis::cluster_store("cw-right", ManualClock::new(BASE));
    thirty_right_passwords_at_once(store).await;
}

async fn thirty_wrong_passwords_at_once(store: impl Store) {
    let office = office(failed_logins(), store, Desk::new(true)).await;
    let replies = at_once(&office.server, &["wrong"; 30]);
    assert_eq!(tally(replies).await, (0, 5, 25));
    assert_eq!(
        office.desk.reached(),
        (0, 5),
        "guesses reach the desk 5 times"
    );
    let boxed = office.server.send(attempt("right")).await;
    assert_eq!(boxed.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(boxed.header("retry-after"), TEN_MINUTES);
    assert_eq!(office.desk.reached(), (0, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_wrong_passwords_at_once_reach_the_handler_five_times_and_trip_the_box_on_memory() {
    thirty_wrong_passwords_at_once(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_wrong_passwords_at_once_reach_the_handler_five_times_and_trip_the_box_on_redis() {
    let store = crate::shared_redis::redis_store("cw-wrong", ManualClock::new(BASE));
    thirty_wrong_passwords_at_once(store).await;
}

async fn right_and_wrong_at_once(store: impl Store) {
    let office = office(failed_logins(), store, Desk::new(true)).await;
    let mut passwords = vec!["right"; 20];
    passwords.extend(["wrong"; 4]);
    let replies = at_once(&office.server, &passwords);
    assert_eq!(tally(replies).await, (20, 4, 0));
    assert_eq!(office.desk.reached(), (20, 4));
    // Four failures counted: one left, then the box.
    assert_eq!(
        office.server.send(attempt("wrong")).await.status,
        StatusCode::UNAUTHORIZED
    );
    let tripped = office.server.send(attempt("right")).await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tripped.header("retry-after"), TEN_MINUTES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_and_wrong_passwords_at_once_count_only_the_failures_on_memory() {
    right_and_wrong_at_once(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_and_wrong_passwords_at_once_count_only_the_failures_on_redis() {
    let store = crate::shared_redis::redis_store("cw-mixed", ManualClock::new(BASE));
    right_and_wrong_at_once(store).await;
}

/// A raw client whose login waits; gone, unanswered, when dropped.
async fn waiting_client(server: &Server) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr).await.expect("connect");
    let request = "POST /login HTTP/1.1\r\nhost: localhost\r\nx-password: right\r\n\
                   content-length: 0\r\n\r\n";
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    stream
}

async fn callers_leave_while_waiting(store: impl Store) {
    let office = office(failed_logins(), store, Desk::new(false)).await;
    // Five guesses in the handler, their outcome pending.
    let guesses = at_once(&office.server, &["wrong"; 5]);
    wait_until("five guesses at the desk", || {
        office.desk.reached() == (0, 5)
    })
    .await;
    // Ten logins wait for those outcomes, held by the layer; their callers leave.
    let mut waiting = Vec::new();
    for _ in 0..10 {
        waiting.push(waiting_client(&office.server).await);
    }
    wait_until("ten logins held", || office.layer.held() == 10).await;
    drop(waiting);
    wait_until("the held logins gone", || office.layer.held() == 0).await;
    office.desk.open();
    assert_eq!(tally(guesses).await, (0, 5, 0));
    assert_eq!(
        office.desk.reached(),
        (0, 5),
        "nothing extra reached the desk"
    );
    wait_until("no pending entry left", || {
        office.layer.awaiting_outcomes() == 0
    })
    .await;
    // Nothing pending was left behind: the next attempt is a real rejection, at once
    // an offence (a leaked pending charge would have it refused without one).
    let tripped = office.server.send(attempt("right")).await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tripped.header("retry-after"), TEN_MINUTES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_while_waiting_for_outcomes_takes_nothing_and_leaves_nothing_on_memory()
 {
    callers_leave_while_waiting(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_while_waiting_for_outcomes_takes_nothing_and_leaves_nothing_on_redis()
{
    let store = crate::shared_redis::redis_store("cw-leave", ManualClock::new(BASE));
    callers_leave_while_waiting(store).await;
}

async fn wait_runs_out(store: impl Store) {
    let policy = failed_logins().wait_for_outcomes(Duration::from_millis(300));
    let office = office(policy, store, Desk::new(false)).await;
    let guesses = at_once(&office.server, &["wrong"; 5]);
    wait_until("five guesses at the desk", || {
        office.desk.reached() == (0, 5)
    })
    .await;
    // Their outcomes are not known within the wait: refused, but not boxed.
    let refused = office.server.send(attempt("right")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), "1");
    let offences = office
        .layer
        .limiter()
        .offences("failed-logins", &office_key())
        .await
        .expect("offences");
    assert_eq!((offences.trips, offences.blocked_for), (0, None));
    office.desk.open();
    assert_eq!(tally(guesses).await, (0, 5, 0));
    // Five failures known: now a refusal is real, and trips the box.
    let tripped = office.server.send(attempt("right")).await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tripped.header("retry-after"), TEN_MINUTES);
    assert_eq!(office.desk.reached(), (0, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_whose_wait_for_outcomes_runs_out_is_refused_without_an_offence_on_memory() {
    wait_runs_out(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_whose_wait_for_outcomes_runs_out_is_refused_without_an_offence_on_redis() {
    let store = crate::shared_redis::redis_store("cw-runs-out", ManualClock::new(BASE));
    wait_runs_out(store).await;
}

/// Every login, right or wrong: 5 a minute per address, no box of its own.
fn logins() -> Policy {
    Policy::new("logins", Quota::per_minute(5))
        .expect("policy")
        .key(key::peer_ip())
        .on_route(Method::POST, "/login")
        .expect("a route")
}

async fn another_policy_refuses(store: impl Store) {
    let layer = RateLimitLayer::builder()
        .policy(logins())
        .policy(failed_logins())
        .store(store)
        .build()
        .expect("layer");
    let desk = Desk::new(false);
    let app = Router::new()
        .route("/login", post(login))
        .with_state(desk.clone())
        .layer(layer.clone());
    let server = Arc::new(Server::start(app).await);
    let right = at_once(&server, &["right"; 5]);
    wait_until("five logins at the desk", || desk.reached() == (5, 0)).await;
    // "logins" is spent for real; "failed-logins" only by the five still at the desk.
    let refused = server.send(attempt("right")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_ne!(refused.header("retry-after"), TEN_MINUTES);
    let offences = layer
        .limiter()
        .offences("failed-logins", &office_key())
        .await
        .expect("offences");
    assert_eq!((offences.trips, offences.blocked_for), (0, None));
    desk.open();
    assert_eq!(tally(right).await, (5, 0, 0));
    wait_until("the outcomes known", || layer.awaiting_outcomes() == 0).await;
    let offences = layer
        .limiter()
        .offences("failed-logins", &office_key())
        .await
        .expect("offences");
    assert_eq!((offences.trips, offences.blocked_for), (0, None));
    assert_eq!(desk.reached(), (5, 0));
}

/// Before: the sixth login, refused by "logins", counted as an offence of
/// "failed-logins" too (no failure at all) and boxed the office for ten minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_another_policy_refuses_is_no_offence_of_the_failures_it_awaits_on_memory() {
    another_policy_refuses(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_another_policy_refuses_is_no_offence_of_the_failures_it_awaits_on_redis() {
    let store = crate::shared_redis::redis_store("cw-other-refuses", ManualClock::new(BASE));
    another_policy_refuses(store).await;
}

/// Per user (a header), so that each request is a caller of its own.
fn failed_logins_per_user() -> Policy {
    failed_logins().key(key::header("x-user").expect("a header name"))
}

async fn a_flood_of_callers(store: impl Store) {
    let office = office(failed_logins_per_user(), store, Desk::new(false)).await;
    let mut replies = JoinSet::new();
    for user in 0..200 {
        let server = office.server.clone();
        replies.spawn(async move {
            let request = Request::post("/login")
                .header("x-user", user.to_string())
                .body(Full::default())
                .expect("a request");
            server.send(request).await
        });
    }
    wait_until("every caller at the desk", || {
        office.desk.reached() == (0, 200)
    })
    .await;
    // One entry per caller with an outcome pending, and only while it is.
    assert_eq!(office.layer.awaiting_outcomes(), 200);
    office.desk.open();
    assert_eq!(tally(replies).await, (0, 200, 0));
    wait_until("every entry gone", || office.layer.awaiting_outcomes() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_callers_leaves_no_entry_behind_on_memory() {
    a_flood_of_callers(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_callers_leaves_no_entry_behind_on_redis() {
    let store = crate::shared_redis::redis_store("cw-flood", ManualClock::new(BASE));
    a_flood_of_callers(store).await;
}

/// gRPC calls whose status comes in the trailers: `count_when` learns each outcome at
/// the end of the response body. Ten uploads at once on 2 a minute, each stream held
/// open until a gate opens: two run, eight wait for their outcomes, and all ten are
/// served (before: two served, eight `RESOURCE_EXHAUSTED` and a box).
async fn grpc_uploads_at_once(store: impl Store) {
    let logins = Policy::new("uploads", Quota::per_minute(2))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let layer = RateLimitLayer::builder()
        .policy(logins)
        .store(store)
        .build()
        .expect("layer");
    let server = GrpcServer::start(layer.clone()).await;
    let client = server.client().await;
    let mut gates = Vec::new();
    let mut calls = JoinSet::new();
    for _ in 0..10 {
        let (gate, messages) = tokio::sync::mpsc::channel(1);
        gates.push(gate);
        let mut client = client.clone();
        calls.spawn(async move { client.upload(ReceiverStream::new(messages)).await });
    }
    wait_until("two uploads running", || server.counts.calls() == 2).await;
    wait_until("eight uploads held", || layer.held() == 8).await;
    // The streams end: each upload answers OK in its trailers, and is given back.
    for gate in gates {
        let ping = Ping {
            text: "chunk".to_string(),
        };
        // A call still held reads nothing yet: its one message waits in the channel.
        gate.send(ping).await.expect("a stream open");
    }
    let mut answered = 0;
    while let Some(call) = calls.join_next().await {
        let pong = call.expect("a call").expect("served");
        assert_eq!(pong.get_ref().messages, 1);
        answered += 1;
    }
    assert_eq!((answered, server.counts.calls()), (10, 10));
    wait_until("the outcomes known", || layer.awaiting_outcomes() == 0).await;
    let offences = layer
        .limiter()
        .offences("uploads", &everyone())
        .await
        .expect("offences");
    assert_eq!((offences.trips, offences.blocked_for), (0, None));
}

/// The one key of a policy without a key rule.
fn everyone() -> Key {
    let (parts, ()) = Request::new(()).into_parts();
    key::global().extract(&parts).expect("the global key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_at_once_wait_for_the_outcomes_in_their_trailers_on_memory() {
    grpc_uploads_at_once(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_at_once_wait_for_the_outcomes_in_their_trailers_on_redis() {
    let store = crate::shared_redis::redis_store("cw-grpc", ManualClock::new(BASE));
    grpc_uploads_at_once(store).await;
}

/// A clock that runs ten times faster than real time, from [`BASE`]: a Redis denial
/// cache ages by the store's clock (a frozen one never lets a cached denial go, which
/// no deployment sees), while the minute's window outlives the test.
fn racing_clock() -> ManualClock {
    let clock = ManualClock::new(BASE);
    let ticking = clock.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            ticking.advance(Duration::from_millis(50));
        }
    });
    clock
}

/// Two processes (two layers, each with its own server) on one store, each polling
/// for the other's outcomes.
async fn two_processes(store: impl Store + Clone, wait: Duration) -> (Office, Office) {
    let policy = || {
        failed_logins()
            .wait_for_outcomes(wait)
            .poll_other_processes(Duration::from_millis(10))
    };
    let desk = Desk::new(true);
    let one = office(policy(), store.clone(), desk.clone()).await;
    let other = office(policy(), store, desk).await;
    (one, other)
}

/// Both processes' replies, tallied together.
async fn both(one: JoinSet<Reply>, other: JoinSet<Reply>) -> (usize, usize, usize) {
    let (a, b) = tokio::join!(tally(one), tally(other));
    (a.0 + b.0, a.1 + b.1, a.2 + b.2)
}

async fn right_passwords_over_two_processes(store: impl Store + Clone) {
    let (one, other) = two_processes(store, Duration::from_secs(2)).await;
    let replies = both(
        at_once(&one.server, &["right"; 15]),
        at_once(&other.server, &["right"; 15]),
    )
    .await;
    assert_eq!(replies, (30, 0, 0));
    assert_eq!(one.desk.reached(), (30, 0));
    let offences = one
        .layer
        .limiter()
        .offences("failed-logins", &office_key())
        .await
        .expect("offences");
    assert_eq!((offences.trips, offences.blocked_for), (0, None));
    quota_and_box_are_exact(&other).await;
}

/// Before (or without `poll_other_processes`): 5–15 of 30 served and the box tripped
/// in 10 of 10 runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_spread_over_two_processes_are_all_served_when_they_poll_on_memory() {
    let store = MemoryStore::with_clock(racing_clock());
    right_passwords_over_two_processes(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_spread_over_two_processes_are_all_served_when_they_poll_on_redis() {
    let store = crate::shared_redis::redis_store("cw-two-right", racing_clock());
    right_passwords_over_two_processes(store).await;
}

async fn wrong_passwords_over_two_processes(store: impl Store + Clone) {
    let (one, other) = two_processes(store, Duration::from_millis(500)).await;
    let replies = both(
        at_once(&one.server, &["wrong"; 15]),
        at_once(&other.server, &["wrong"; 15]),
    )
    .await;
    assert_eq!(replies, (0, 5, 25));
    assert_eq!(
        one.desk.reached(),
        (0, 5),
        "guesses reach the desks 5 times"
    );
    for office in [&one, &other] {
        let boxed = office.server.send(attempt("right")).await;
        assert_eq!(boxed.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(boxed.header("retry-after"), TEN_MINUTES);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_spread_over_two_processes_reach_the_handlers_five_times_and_trip_the_box_on_memory()
 {
    let store = MemoryStore::with_clock(racing_clock());
    wrong_passwords_over_two_processes(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_spread_over_two_processes_reach_the_handlers_five_times_and_trip_the_box_on_redis()
 {
    let store = crate::shared_redis::redis_store("cw-two-wrong", racing_clock());
    wrong_passwords_over_two_processes(store).await;
}
