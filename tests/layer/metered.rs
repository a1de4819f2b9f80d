//! Costs from the response (`Policy::metered`, `Policy::settle_from_response`, the
//! request's `Meter`), over real TCP to a real axum server on the memory store (and
//! one test on Redis): a request admitted on its estimate is settled to what the
//! handler reports or the response head says, when the body ends or is dropped; the
//! headers show the settle when it is made before they are written. The attacker's
//! cases, with numbers: estimates of 1, many requests at once, disconnects
//! mid-stream, an inner service that reports twice, after the end or never.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Path};
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use support::http::{Reply, Server};
use tokio::sync::{Notify, mpsc};
use tollgate::clock::ManualClock;
use tollgate::layer::{Costs, Meter};
use tollgate::store::{Charge, Store, StoreCall};
use tollgate::{
    Decision, Key, Limit, MemoryStore, Policy, Quota, RateLimitLayer, StoreError, StoreErrorKind,
    key,
};

use crate::streaming::{ChannelBody, event};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Tokens a minute per API key: GCRA, so one token is 3 ms of refill.
const TOKENS_PER_MINUTE: u64 = 20_000;

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

/// The estimate: the request's `x-max-tokens` (what a layer in front would read from
/// the JSON body's `max_tokens`), 1,000 when absent.
fn max_tokens(parts: &http::request::Parts) -> u32 {
    parts
        .headers
        .get("x-max-tokens")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(1_000)
}

/// "tokens": 20,000 a minute per API key, admitted on `max_tokens`, metered.
fn tokens() -> Policy {
    Policy::new("tokens", Quota::per_minute(TOKENS_PER_MINUTE))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"))
        .costs(Costs::from_fn(max_tokens))
        .metered()
}

/// A server with `policy` in front of `routes`, on a memory store at a frozen clock.
struct App {
    server: Arc<Server>,
    layer: RateLimitLayer,
    clock: ManualClock,
}

impl App {
    async fn start(policy: Policy, routes: Router) -> Self {
        let clock = ManualClock::new(BASE);
        Self::on(
            policy,
            routes,
            MemoryStore::with_clock(clock.clone()),
            clock,
        )
        .await
    }

    async fn on(policy: Policy, routes: Router, store: impl Store, clock: ManualClock) -> Self {
        let layer = RateLimitLayer::builder()
            .policy(policy)
            .store(store)
            .build()
            .expect("layer");
        let server = Arc::new(Server::start(routes.layer(layer.clone())).await);
        Self {
            server,
            layer,
            clock,
        }
    }

    /// `GET path` for the caller `api_key`, estimating `max_tokens`.
    async fn call(&self, path: &str, api_key: &str, max_tokens: u64) -> Reply {
        self.server.send(request(path, api_key, max_tokens)).await
    }

    /// Where `api_key` stands under "tokens", charging nothing.
    async fn remaining(&self, api_key: &str) -> u64 {
        self.peek(api_key).await.remaining
    }

    async fn peek(&self, api_key: &str) -> Decision {
        let (parts, ()) = request(api_key_path(), api_key, 0).map(|_| ()).into_parts();
        let key: Key = self
            .layer
            .policy("tokens")
            .and_then(|p| p.key_of(&parts))
            .expect("a key");
        self.layer
            .limiter()
            .peek("tokens", &key)
            .await
            .expect("a peek")
    }
}

fn api_key_path() -> &'static str {
    "/"
}

fn request(path: &str, api_key: &str, max_tokens: u64) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("x-api-key", api_key)
        .header("x-max-tokens", max_tokens.to_string())
        .body(Full::default())
        .expect("request")
}

/// Polls `done` until it holds; fails after [`HANG`].
async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done().await {
        assert!(started.elapsed() < HANG, "still waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Handlers that report in every way the tests need.
fn reporting_routes() -> Router {
    Router::new()
        .route(
            "/report/{n}",
            get(
                |Extension(meter): Extension<Meter>, Path(n): Path<u64>| async move {
                    assert!(meter.report(n));
                    "ok"
                },
            ),
        )
        .route(
            "/twice",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.report(300);
                meter.report(500);
                "ok"
            }),
        )
        .route(
            "/add",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.add(300);
                meter.add(200);
                "ok"
            }),
        )
        .route("/never", get(|| async { "ok" }))
        .route(
            "/fail",
            get(|Extension(meter): Extension<Meter>| async move {
                meter.report(10);
                (StatusCode::INTERNAL_SERVER_ERROR, "failed")
            }),
        )
}

// ---------------------------------------------------------------------------------------
// Settled to what was reported, and the headers say so.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_report_before_the_head_settles_and_the_headers_show_where_the_caller_stands() {
    let app = App::start(tokens(), reporting_routes()).await;
    let reply = app.call("/report/240", "alice", 1_000).await;
    assert_eq!(reply.status, StatusCode::OK);
    // Admitted on 1,000, settled to 240 before the headers: 19,760 left, the 240
    // tokens repaid in 720 ms (rounded up to 1 s).
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19760;t=1"#);
    assert_eq!(app.remaining("alice").await, 19_760);
    // More than the estimate: a debt the headers show too.
    let reply = app.call("/report/25000", "bob", 100).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=0;t=75"#);
    assert_eq!(app.remaining("bob").await, 0);
    assert_eq!(
        app.call("/never", "bob", 1).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn settle_from_response_reads_the_actual_from_the_head_before_the_headers() {
    let policy = tokens().settle_from_response(|head: &http::response::Parts| {
        head.headers
            .get("x-usage-tokens")?
            .to_str()
            .ok()?
            .parse()
            .ok()
    });
    let routes = Router::new().route(
        "/",
        get(|Extension(meter): Extension<Meter>| async move {
            // The head's figure is final: this report, made after, is ignored.
            let meter = meter.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                meter.report(9_999)
            });
            ([("x-usage-tokens", "240")], "ok")
        }),
    );
    let app = App::start(policy, routes).await;
    let reply = app.call("/", "alice", 1_000).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19760;t=1"#);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.remaining("alice").await, 19_760);
}

#[tokio::test]
async fn a_response_head_without_the_figure_leaves_the_actual_to_the_meter() {
    let policy = tokens()
        .settle_from_response(|head: &http::response::Parts| {
            head.headers
                .get("x-usage-tokens")?
                .to_str()
                .ok()?
                .parse()
                .ok()
        })
        .max_actual(5_000);
    let app = App::start(policy, reporting_routes()).await;
    app.call("/report/300", "alice", 1_000).await;
    assert_eq!(app.remaining("alice").await, 19_700);
}

#[tokio::test]
async fn reported_twice_the_last_report_wins_and_adds_sum() {
    let app = App::start(tokens(), reporting_routes()).await;
    let reply = app.call("/twice", "alice", 1_000).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19500;t=2"#);
    assert_eq!(app.remaining("alice").await, 19_500);
    app.call("/add", "bob", 1_000).await;
    assert_eq!(app.remaining("bob").await, 19_500);
}

#[tokio::test]
async fn never_reported_the_estimate_stands() {
    let app = App::start(tokens(), reporting_routes()).await;
    let reply = app.call("/never", "alice", 1_000).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19000;t=3"#);
    assert_eq!(app.remaining("alice").await, 19_000);
}

#[tokio::test]
async fn a_policy_that_is_not_metered_is_never_settled() {
    // A request policy beside the metered one: the report moves only "tokens".
    let requests = Policy::new("requests", Quota::per_minute(60))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"));
    let layer = RateLimitLayer::builder()
        .policy(requests)
        .policy(tokens())
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer");
    let server = Server::start(reporting_routes().layer(layer.clone())).await;
    let reply = server.send(request("/report/240", "alice", 1_000)).await;
    assert_eq!(
        reply.header("ratelimit"),
        r#""requests";r=59;t=1, "tokens";r=19760;t=1"#
    );
}

// ---------------------------------------------------------------------------------------
// Streams: settled when the body ends, or when the client leaves mid-stream.
// ---------------------------------------------------------------------------------------

/// An SSE endpoint: `events` events of 10 tokens each, the meter counting each before
/// it is sent, then a last event with the usage (`report`); the stream pauses before
/// each event until `step` is notified, when `paced`.
fn sse_routes(events: u64, paced: Option<Arc<Notify>>, meters: Arc<Mutex<Vec<Meter>>>) -> Router {
    Router::new().route(
        "/sse",
        get(move |Extension(meter): Extension<Meter>| {
            let (paced, meters) = (paced.clone(), meters.clone());
            async move {
                meters.lock().expect("meters").push(meter.clone());
                let (frames, body) = ChannelBody::new(1);
                tokio::spawn(async move {
                    for i in 0..events {
                        if let Some(step) = &paced {
                            step.notified().await;
                        }
                        meter.add(10);
                        if frames.send(event(&format!("token {i}"))).await.is_err() {
                            return; // the client left: the body was dropped
                        }
                    }
                    let usage = events * 10;
                    meter.report(usage);
                    let _ = frames.send(event(&format!("{{\"usage\":{usage}}}"))).await;
                });
                (
                    [("content-type", "text/event-stream")],
                    axum::body::Body::new(body),
                )
            }
        }),
    )
}

#[tokio::test]
async fn an_sse_stream_whose_last_event_reports_the_usage_is_settled_at_its_end() {
    let meters = Arc::default();
    let app = App::start(tokens(), sse_routes(24, None, Arc::clone(&meters))).await;
    let reply = app.call("/sse", "alice", 1_000).await;
    // The headers went out before the stream: they show the estimate's charge.
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19000;t=3"#);
    assert!(
        reply.body.ends_with("data: {\"usage\":240}\n\n"),
        "{}",
        reply.body
    );
    assert_eq!(app.remaining("alice").await, 19_760);
    let meter = meters.lock().expect("meters")[0].clone();
    assert!(!meter.is_open());
    assert!(!meter.report(1), "a report after the end is ignored");
    assert_eq!(app.remaining("alice").await, 19_760);
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_is_settled_with_what_was_reported_so_far() {
    let (step, meters) = (Arc::new(Notify::new()), Arc::default());
    let routes = sse_routes(1_000, Some(step.clone()), Arc::clone(&meters));
    let app = App::start(tokens(), routes).await;
    let response = app
        .server
        .open(request("/sse", "alice", 5_000))
        .await
        .expect("response");
    let mut body = response.into_body();
    for _ in 0..7 {
        step.notify_one();
        let frame = body.frame().await.expect("a frame").expect("data");
        assert!(frame.is_data());
    }
    drop(body); // the client leaves after 7 events: 70 tokens reported
    let meter = meters.lock().expect("meters")[0].clone();
    wait_until("the settle", async || !meter.is_open()).await;
    let reported = meter.reported("tokens").expect("reported");
    // The producer may have counted one more event before it saw the client leave.
    assert!((70..=80).contains(&reported), "{reported}");
    step.notify_waiters();
    assert_eq!(app.remaining("alice").await, TOKENS_PER_MINUTE - reported);
}

#[tokio::test]
async fn a_client_that_leaves_before_anything_is_reported_pays_the_estimate() {
    let (step, meters) = (Arc::new(Notify::new()), Arc::default());
    let routes = sse_routes(1_000, Some(step.clone()), Arc::clone(&meters));
    let app = App::start(tokens(), routes).await;
    let response = app
        .server
        .open(request("/sse", "alice", 5_000))
        .await
        .expect("response");
    drop(response);
    let meter = meters.lock().expect("meters")[0].clone();
    wait_until("the settle", async || !meter.is_open()).await;
    assert_eq!(meter.reported("tokens"), None);
    assert_eq!(app.remaining("alice").await, TOKENS_PER_MINUTE - 5_000);
}

#[tokio::test]
async fn a_report_after_the_body_ended_is_ignored() {
    let meters: Arc<Mutex<Vec<Meter>>> = Arc::default();
    let kept = Arc::clone(&meters);
    let routes = Router::new().route(
        "/",
        get(move |Extension(meter): Extension<Meter>| {
            let kept = kept.clone();
            async move {
                kept.lock().expect("meters").push(meter);
                "ok"
            }
        }),
    );
    let app = App::start(tokens(), routes).await;
    app.call("/", "alice", 1_000).await;
    let meter = meters.lock().expect("meters")[0].clone();
    assert!(!meter.is_open());
    assert!(!meter.report(1));
    assert!(!meter.add(1));
    assert_eq!(meter.reported("tokens"), None);
    assert_eq!(app.remaining("alice").await, 19_000);
}

// ---------------------------------------------------------------------------------------
// Refunds and failures.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_count_when_refund_shows_in_the_headers_and_settles_nothing_more() {
    // Failures are refunded whatever was reported; the headers show the refund.
    let policy = tokens().count_when(|status| status.is_success());
    let app = App::start(policy, reporting_routes()).await;
    app.call("/report/500", "alice", 1_000).await;
    let reply = app.call("/fail", "alice", 1_000).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19500;t=2"#);
    assert_eq!(app.remaining("alice").await, 19_500);
}

#[tokio::test]
async fn a_plain_count_when_refund_shows_in_the_headers_on_the_memory_store() {
    // Issue 28: a refunded response shows where the caller stands after it.
    let login = Policy::new("tokens", Quota::per_minute(5))
        .expect("policy")
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let routes = Router::new()
        .route("/ok", get(|| async { "welcome" }))
        .route("/no", get(|| async { (StatusCode::UNAUTHORIZED, "no") }));
    let app = App::start(login, routes).await;
    assert_eq!(
        app.server.get("/no").await.header("ratelimit"),
        r#""tokens";r=4;t=12"#
    );
    // Refunded: the headers say 4 left, not 3.
    assert_eq!(
        app.server.get("/ok").await.header("ratelimit"),
        r#""tokens";r=4;t=12"#
    );
}

/// A gRPC response body: one message, then the trailers with `grpc-status`.
struct GrpcBody {
    message: Option<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl http_body::Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let frame = match self.message.take() {
            Some(message) => Some(http_body::Frame::data(message)),
            None => self.trailers.take().map(http_body::Frame::trailers),
        };
        std::task::Poll::Ready(frame.map(Ok))
    }
}

/// A metered gRPC call reporting 500 tokens on an estimate of 1,000, answering
/// `grpc_status` in its trailers; returns the headers and what "alice" has left.
async fn grpc_call(grpc_status: &'static str) -> (http::HeaderMap, u64) {
    use tower::{Service, ServiceExt};
    // NOT_FOUND (5) is given back; any other status counts.
    let policy = tokens().count_when(|status| status != StatusCode::NOT_FOUND);
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer");
    let limiter = layer.limiter().clone();
    let mut service = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .service(tower::service_fn(move |request: Request<()>| async move {
            request
                .extensions()
                .get::<Meter>()
                .expect("a meter")
                .report(500);
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static(grpc_status));
            let body = GrpcBody {
                message: Some(Bytes::from_static(b"\0\0\0\0\0")),
                trailers: Some(trailers),
            };
            Ok::<_, Infallible>(http::Response::new(body))
        }));
    let request = Request::post("/pkg.Service/Method")
        .header("content-type", "application/grpc")
        .header("x-api-key", "alice")
        .header("x-max-tokens", "1000")
        .body(())
        .expect("request");
    let response = service
        .ready()
        .await
        .expect("ready")
        .call(request)
        .await
        .expect("response");
    let (head, body) = response.into_parts();
    body.collect().await.expect("the body");
    let (parts, ()) = Request::get("/")
        .header("x-api-key", "alice")
        .body(())
        .expect("request")
        .into_parts();
    let key = layer
        .policy("tokens")
        .and_then(|p| p.key_of(&parts))
        .expect("a key");
    let left = limiter.peek("tokens", &key).await.expect("peek").remaining;
    (head.headers, left)
}

#[tokio::test]
async fn a_grpc_status_in_the_trailers_refunds_or_settles_never_both() {
    // The refund waits for the trailers: no settle before the headers.
    let (headers, left) = grpc_call("5").await;
    assert_eq!(headers["ratelimit"], r#""tokens";r=19000;t=3"#);
    assert_eq!(
        left, TOKENS_PER_MINUTE,
        "NOT_FOUND: the charge given back, once"
    );
    let (_, left) = grpc_call("0").await;
    assert_eq!(
        left,
        TOKENS_PER_MINUTE - 500,
        "OK: settled to the 500 reported"
    );
}

/// A memory store whose settles fail: every other call is the memory store's.
#[derive(Debug, Clone)]
struct SettlesFail(MemoryStore);

impl Store for SettlesFail {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.0.decide(charges)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.0.refund(charge)
    }

    fn settle<'a>(&'a self, _: Charge<'a>, _: tollgate::store::Receipt) -> StoreCall<'a, Decision> {
        StoreCall::ready(Err(StoreError::new(
            StoreErrorKind::Connection,
            "down for the test",
        )))
    }
}

#[tokio::test]
async fn a_settle_the_store_fails_leaves_the_response_untouched_and_the_estimate_standing() {
    let clock = ManualClock::new(BASE);
    let store = SettlesFail(MemoryStore::with_clock(clock.clone()));
    let app = App::on(tokens(), reporting_routes(), store, clock).await;
    let reply = app.call("/report/240", "alice", 1_000).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19000;t=3"#);
    assert_eq!(app.remaining("alice").await, 19_000);
}

#[tokio::test]
async fn any_report_is_safe_and_max_actual_caps_it() {
    let app = App::start(tokens(), reporting_routes()).await;
    let reply = app.call(&format!("/report/{}", u64::MAX), "alice", 1).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(app.remaining("alice").await, 0);
    let capped = App::start(tokens().max_actual(4_000), reporting_routes()).await;
    capped
        .call(&format!("/report/{}", u64::MAX), "alice", 1)
        .await;
    assert_eq!(capped.remaining("alice").await, 16_000);
}

#[tokio::test]
async fn settling_to_nothing_gives_back_the_estimate_and_never_more() {
    let app = App::start(tokens(), reporting_routes()).await;
    app.call("/never", "alice", 3_000).await; // 3,000 stand
    app.call("/report/0", "alice", 5_000).await; // 5,000 given back, no more
    assert_eq!(app.remaining("alice").await, 17_000);
    app.call("/report/0", "bob", 20_000).await;
    assert_eq!(app.remaining("bob").await, TOKENS_PER_MINUTE);
}

#[tokio::test]
async fn metering_rules_that_cannot_work_together_are_refused_at_build() {
    let build = |policy: Policy| RateLimitLayer::builder().policy(policy).build().map(drop);
    let both = tokens().meter_request_bytes();
    assert!(
        build(both)
            .expect_err("refused")
            .to_string()
            .contains("choose one")
    );
    let cap = Policy::new("tokens", Quota::per_minute(5))
        .expect("policy")
        .max_actual(3);
    assert!(
        build(cap)
            .expect_err("refused")
            .to_string()
            .contains("not metered")
    );
    let slots = Policy::in_flight_only("slots", 2)
        .expect("policy")
        .metered();
    assert!(
        build(slots)
            .expect_err("refused")
            .to_string()
            .contains("no quota")
    );
    let limit = Limit::new("x", Quota::per_second(1)).expect("limit");
    assert!(build(Policy::from(limit).metered()).is_ok());
}

#[tokio::test]
async fn an_estimate_of_0_is_charged_1_and_settled_like_any_other() {
    // A cost of 0 is free (never sent to the store): for a metered policy that would
    // buy any work uncounted.
    let app = App::start(tokens(), reporting_routes()).await;
    let reply = app.call("/report/5000", "mallory", 0).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=15000;t=15"#);
    assert_eq!(app.remaining("mallory").await, 15_000);
}

#[tokio::test]
async fn a_request_the_store_failed_open_for_still_finds_a_meter_that_settles_nothing() {
    let clock = ManualClock::new(BASE);
    let store = crate::outage_store::OutageStore::new(MemoryStore::with_clock(clock.clone()));
    let app = App::on(tokens(), reporting_routes(), store.clone(), clock).await;
    store.go_down();
    let reply = app.call("/report/240", "alice", 1_000).await;
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "ok"));
    assert_eq!(reply.header("ratelimit"), "");
    store.come_back();
    assert_eq!(app.remaining("alice").await, TOKENS_PER_MINUTE);
}

// ---------------------------------------------------------------------------------------
// The attacker: estimates of 1, many requests at once.
// ---------------------------------------------------------------------------------------

/// A handler that does `work` tokens of work (reports it) once `release` is notified,
/// and says on `entered` that it is running.
fn gated_routes(work: u64, entered: mpsc::UnboundedSender<()>, release: Arc<Notify>) -> Router {
    Router::new()
        .route(
            "/work",
            get(move |Extension(meter): Extension<Meter>| {
                let (entered, release) = (entered.clone(), release.clone());
                async move {
                    let released = release.notified();
                    tokio::pin!(released);
                    released.as_mut().enable();
                    let _ = entered.send(());
                    released.await;
                    meter.report(work);
                    Ok::<_, Infallible>("done")
                }
            }),
        )
        .route("/never", get(|| async { "ok" }))
}

/// Fires requests estimating 1 token until one is refused or `most` run at once;
/// returns how many were admitted (now running) and their replies to come.
async fn fire_until_refused(
    app: &App,
    entered: &mut mpsc::UnboundedReceiver<()>,
    most: usize,
) -> (Vec<tokio::task::JoinHandle<Reply>>, usize) {
    let mut running = Vec::new();
    let mut refused = 0;
    while running.len() < most {
        let server = app.server.clone();
        let mut call =
            tokio::spawn(async move { server.send(request("/work", "mallory", 1)).await });
        tokio::select! {
            _ = entered.recv() => running.push(call),
            reply = &mut call => {
                assert_eq!(reply.expect("reply").status, StatusCode::TOO_MANY_REQUESTS);
                refused += 1;
                break;
            }
        }
    }
    (running, refused)
}

#[tokio::test]
async fn under_estimates_are_bounded_by_the_work_running_at_once_and_repaid() {
    // 4 at once, each settled to at most 1,500: the stated bound.
    const IN_FLIGHT: u64 = 4;
    const WORK: u64 = 50_000; // reported; capped at MAX_ACTUAL
    const MAX_ACTUAL: u64 = 1_500;
    const STEPS: u64 = 120; // seconds
    let policy = tokens()
        .in_flight(IN_FLIGHT as u32)
        .expect("in flight")
        .max_actual(MAX_ACTUAL);
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let app = App::start(policy, gated_routes(WORK, entered_tx, release.clone())).await;
    let (mut served, mut refused, mut most_ahead) = (0, 0, 0_i128);
    for step in 1..=STEPS {
        let (running, refusals) = fire_until_refused(&app, &mut entered, 64).await;
        refused += refusals;
        served += running.len() as u64 * MAX_ACTUAL;
        assert!(running.len() as u64 <= IN_FLIGHT);
        release.notify_waiters();
        for call in running {
            assert_eq!(call.await.expect("reply").status, StatusCode::OK);
        }
        // Served work against the quota up to now: the bound, exactly as stated.
        let quota_so_far = TOKENS_PER_MINUTE + TOKENS_PER_MINUTE * step / 60;
        let bound = quota_so_far + IN_FLIGHT * (MAX_ACTUAL - 1);
        assert!(served <= bound, "step {step}: served {served} > {bound}");
        most_ahead = most_ahead.max(i128::from(served) - i128::from(quota_so_far));
        app.clock.advance(Duration::from_secs(1));
    }
    // The attack did run ahead of its quota, close to the bound (5,996 here), and was
    // refused until it had repaid.
    assert!(
        most_ahead > i128::from(3 * (MAX_ACTUAL - 1)),
        "{most_ahead}"
    );
    assert!(refused as u64 >= STEPS - 4, "{refused}");
    // Everything served was charged: the key, never idle, counts the work served
    // less what two minutes repaid, to the token (3 ms each).
    let repaid = TOKENS_PER_MINUTE * STEPS / 60;
    let peek = app.peek("mallory").await;
    assert_eq!(
        peek.reset_after,
        Duration::from_millis(3 * (served - repaid))
    );
}

#[tokio::test]
async fn many_requests_at_once_on_estimates_of_1_go_into_debt_and_are_refused_until_repaid() {
    const AT_ONCE: u64 = 50;
    const WORK: u64 = 1_000;
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let app = App::start(tokens(), gated_routes(WORK, entered_tx, release.clone())).await;
    let (running, refused) = fire_until_refused(&app, &mut entered, AT_ONCE as usize).await;
    assert_eq!((running.len() as u64, refused), (AT_ONCE, 0));
    release.notify_waiters();
    for call in running {
        assert_eq!(call.await.expect("reply").status, StatusCode::OK);
    }
    // 50,000 tokens served on a 20,000 capacity: ahead by 50 × (1,000 − 1) − 19,950,
    // within the bound (the capacity plus the work of those running at once beyond
    // their estimates). The debt: 30,000 tokens, 90 s of refill.
    let debt = AT_ONCE * WORK - TOKENS_PER_MINUTE;
    const { assert!(AT_ONCE * WORK <= TOKENS_PER_MINUTE + AT_ONCE * (WORK - 1)) };
    let peek = app.peek("mallory").await;
    assert_eq!(peek.remaining, 0);
    assert_eq!(
        peek.reset_after,
        Duration::from_millis(3 * (debt + TOKENS_PER_MINUTE))
    );
    app.clock.advance(Duration::from_millis(3 * debt));
    let reply = app.call("/never", "mallory", 1).await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "repaid to 0, not to 1"
    );
    app.clock.advance(Duration::from_millis(3));
    assert_eq!(
        app.call("/never", "mallory", 1).await.status,
        StatusCode::OK
    );
}

// ---------------------------------------------------------------------------------------
// On Redis: the settle runs in the background; the headers show the estimate.
// ---------------------------------------------------------------------------------------

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_stream_is_settled_in_the_background_and_its_headers_show_the_estimate() {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("metered-sse", clock.clone());
    let meters = Arc::default();
    let routes = sse_routes(24, None, Arc::clone(&meters)).merge(reporting_routes());
    let app = App::on(tokens(), routes, store, clock).await;
    let reply = app.call("/sse", "alice", 1_000).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19000;t=3"#);
    assert!(
        reply.body.ends_with("data: {\"usage\":240}\n\n"),
        "{}",
        reply.body
    );
    wait_until("the settle on Redis", async || {
        app.remaining("alice").await == TOKENS_PER_MINUTE - 240
    })
    .await;
    // A report before the head is settled in the background too: on a remote store
    // the headers show the standing after the estimate.
    let reply = app.call("/report/25000", "bob", 100).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19900;t=1"#);
    wait_until("bob's debt", async || {
        app.peek("bob").await.reset_after == Duration::from_secs(75)
    })
    .await;
    assert_eq!(
        app.call("/never", "bob", 1).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_client_that_leaves_mid_stream_is_settled_with_what_was_reported() {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("metered-leave", clock.clone());
    let (step, meters) = (Arc::new(Notify::new()), Arc::default());
    let routes = sse_routes(1_000, Some(step.clone()), Arc::clone(&meters));
    let app = App::on(tokens(), routes, store, clock).await;
    let response = app
        .server
        .open(request("/sse", "alice", 5_000))
        .await
        .expect("response");
    let mut body = response.into_body();
    for _ in 0..3 {
        step.notify_one();
        body.frame().await.expect("a frame").expect("data");
    }
    drop(body);
    let meter = meters.lock().expect("meters")[0].clone();
    wait_until("the meter closes", async || !meter.is_open()).await;
    let reported = meter.reported("tokens").expect("reported");
    assert!((30..=40).contains(&reported), "{reported}");
    step.notify_waiters();
    wait_until("the settle on Redis", async || {
        app.remaining("alice").await == TOKENS_PER_MINUTE - reported
    })
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_count_when_refund_leaves_the_headers_showing_the_charge() {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("metered-refund", clock.clone());
    let policy = tokens().count_when(|status| status.is_success());
    let app = App::on(policy, reporting_routes(), store, clock).await;
    let reply = app.call("/fail", "alice", 1_000).await;
    assert_eq!(reply.header("ratelimit"), r#""tokens";r=19000;t=3"#);
    wait_until("the refund on Redis", async || {
        app.remaining("alice").await == TOKENS_PER_MINUTE
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// One account per request: a charge given back at the hold cap is never settled again.
// ---------------------------------------------------------------------------------------

/// "tokens", 100,000 a minute per API key, admitted on `max_tokens`, metered.
fn hundred_thousand_tokens() -> Policy {
    Policy::new("tokens", Quota::per_minute(100_000))
        .expect("policy")
        .key(key::header("x-api-key").expect("header"))
        .costs(Costs::from_fn(max_tokens))
        .metered()
}

/// A queue for everyone in shadow mode: a place a second, ten of them.
fn shadowed_queue() -> Policy {
    Policy::new("queue", Quota::per_second(1).with_burst(10).expect("burst"))
        .expect("policy")
        .algorithm(tollgate::Algorithm::LeakyBucket)
        .max_delay(Duration::from_secs(60))
        .key(key::global())
        .shadow(true)
}

/// `policies` in front of the reporting routes on `store`, holding nothing
/// (`max_held(0)`): a request some policy would delay is past the hold cap.
async fn holding_nothing(policies: Vec<Policy>, store: impl Store, clock: ManualClock) -> App {
    let layer = RateLimitLayer::builder()
        .policies(policies)
        .store(store)
        .build()
        .expect("layer")
        .max_held(0);
    let server = Arc::new(Server::start(reporting_routes().layer(layer.clone())).await);
    App {
        server,
        layer,
        clock,
    }
}

/// Waits until alice has `left` tokens, then makes sure nothing more comes back.
async fn tokens_settle_at(app: &App, left: u64) {
    wait_until("the settles", async || app.remaining("alice").await == left).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.remaining("alice").await, left, "given back again");
}

/// The metered policy is the shadowed one whose delay would hold the request past
/// the cap: it gives its charge back there, and its meter settles nothing after.
async fn a_metered_charge_given_back_at_the_hold_cap_is_not_settled_again(
    store: impl Store,
    clock: ManualClock,
) {
    let queue = hundred_thousand_tokens()
        .algorithm(tollgate::Algorithm::LeakyBucket)
        .max_delay(Duration::from_secs(60))
        .shadow(true);
    let app = holding_nothing(vec![queue], store, clock).await;
    // Served at once, and it used what it estimated.
    let first = app.call("/report/1000", "alice", 1_000).await;
    assert_eq!(first.status, StatusCode::OK);
    // Its place 600 ms away: past the cap, given back, passed on; it reports 10.
    let second = app.call("/report/10", "alice", 1_000).await;
    assert_eq!(second.status, StatusCode::OK);
    tokens_settle_at(&app, 99_000).await;
}

/// Beside a shadowed queue that would delay it past the cap, an enforced metered
/// policy keeps its charge and settles it once, to what was reported.
async fn past_the_hold_cap_an_enforced_meter_settles_its_charge_once(
    store: impl Store,
    clock: ManualClock,
) {
    let app = holding_nothing(
        vec![hundred_thousand_tokens(), shadowed_queue()],
        store,
        clock,
    )
    .await;
    let first = app.call("/report/1000", "alice", 1_000).await;
    assert_eq!(first.status, StatusCode::OK);
    let second = app.call("/report/10", "alice", 1_000).await;
    assert_eq!(second.status, StatusCode::OK);
    tokens_settle_at(&app, 98_990).await;
}

#[tokio::test]
async fn a_metered_request_given_back_at_the_hold_cap_is_not_settled_again() {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone());
    a_metered_charge_given_back_at_the_hold_cap_is_not_settled_again(store, clock).await;
}

#[tokio::test]
async fn past_the_hold_cap_an_enforced_metered_policy_keeps_its_charge_and_settles_it_once() {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone());
    past_the_hold_cap_an_enforced_meter_settles_its_charge_once(store, clock).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_metered_request_given_back_at_the_hold_cap_is_not_settled_again() {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("metered-hold-cap", clock.clone());
    a_metered_charge_given_back_at_the_hold_cap_is_not_settled_again(store, clock).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_past_the_hold_cap_an_enforced_metered_policy_keeps_its_charge_and_settles_it_once()
 {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("metered-hold-cap-enforced", clock.clone());
    past_the_hold_cap_an_enforced_meter_settles_its_charge_once(store, clock).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_the_cluster_past_the_hold_cap_an_enforced_metered_policy_keeps_its_charge_and_settles_it_once()
 {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::cluster_store("metered-hold-cap-enforced", clock.clone());
    past_the_hold_cap_an_enforced_meter_settles_its_charge_once(store, clock).await;
}

/// A metered request admitted under a fixed window, settled to 0 after a reload made
/// the limit GCRA: its receipt names nothing in the fresh GCRA state, so nothing comes
/// back, and the burst of 10 stays 10 (before: 15).
async fn a_settle_after_a_reload_to_another_algorithm_gives_nothing_back_on(
    store: impl Store,
    clock: ManualClock,
) {
    let (entered_tx, mut entered) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let policy = Policy::new("tokens", Quota::per_minute(10))
        .expect("policy")
        .algorithm(tollgate::Algorithm::FixedWindow)
        .key(key::header("x-api-key").expect("header"))
        .costs(Costs::from_fn(max_tokens))
        .metered();
    let app = App::on(
        policy,
        gated_routes(0, entered_tx, release.clone()),
        store,
        clock,
    )
    .await;
    let server = app.server.clone();
    let running = tokio::spawn(async move { server.send(request("/work", "mallory", 5)).await });
    tokio::time::timeout(HANG, entered.recv())
        .await
        .expect("the handler runs");
    let gcra = Limit::new("tokens", Quota::per_minute(10))
        .expect("limit")
        .algorithm(tollgate::Algorithm::Gcra);
    app.layer.limiter().reload([gcra]).expect("a reload");
    let mut admitted = 0;
    for _ in 0..10 {
        if app.call("/never", "mallory", 1).await.status == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10, "a fresh GCRA state admits its burst");
    // The work used nothing: settled to 0 under a limit that is GCRA now.
    release.notify_one();
    let reply = tokio::time::timeout(HANG, running)
        .await
        .expect("answered")
        .expect("a reply");
    assert_eq!(reply.status, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.remaining("mallory").await, 0, "nothing came back");
    assert_eq!(
        app.call("/never", "mallory", 1).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_settle_after_a_reload_to_another_algorithm_gives_nothing_back() {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone());
    a_settle_after_a_reload_to_another_algorithm_gives_nothing_back_on(store, clock).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_settle_after_a_reload_to_another_algorithm_gives_nothing_back() {
    let clock = ManualClock::new(BASE);
    let store = crate::shared_redis::redis_store("metered-reload", clock.clone());
    a_settle_after_a_reload_to_another_algorithm_gives_nothing_back_on(store, clock).await;
}
