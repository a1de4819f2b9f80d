//! What an on-call engineer reads, read back from `metrics`' own test recorder (the
//! `DebuggingRecorder` of `metrics-util`, installed once for this binary) while real
//! HTTP requests go through the layer: every metric of `tollgate::observe::METRICS` is
//! emitted, under both naming styles; outcomes, near-limit counts and gauges have the
//! exact values the requests make; the README's table lists exactly the catalogue;
//! each decision has a `tracing` span with its policy, outcome, remaining and
//! rejecting policy, and never the raw key.
//!
//! Metrics are process-wide: each test uses policy names of its own, and only the
//! unlabelled store metrics are shared (checked as present, never as exact values).

use std::collections::HashMap;
#[cfg(feature = "tracing")]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use support::http::{Reply, Server};
use tokio::sync::Notify;
use tollgate::clock::ManualClock;
use tollgate::layer::FailMode;
use tollgate::observe::{METRICS, MetricKind, MetricNames, set_metric_names};
use tollgate::store::{Charge, Fallback, LeasedStore, Store, StoreCall};
use tollgate::{
    Algorithm, Decision, Key, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, StoreError,
    StoreErrorKind, key,
};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Held for reading by every test, for writing by the span test: `tracing` decides
/// once per call site whether anyone listens, and a test on another thread can settle
/// that while the span test's subscriber (this thread's only) is not looking.
static TRACING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// One metric series: its name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the recorder has seen since the binary started: counters and gauges as they
/// are now, and every histogram sample. A snapshot of the `DebuggingRecorder` takes
/// what changed since the last one (counters and gauges are swapped to 0, histograms
/// drained), so the changes are added up here; the layer only ever moves gauges up and
/// down, never sets them.
#[derive(Default)]
struct Seen {
    values: HashMap<Series, f64>,
    /// The series whose value ever changed.
    moved: std::collections::HashSet<Series>,
    samples: HashMap<Series, Vec<f64>>,
}

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the binary's one recorder");
        snapshotter
    })
}

fn seen() -> std::sync::MutexGuard<'static, Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    let mut seen = SEEN
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let series = (key.name().to_owned(), labels);
        let change = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(xs) => {
                let xs = xs.into_iter().map(|x| x.0);
                seen.samples.entry(series).or_default().extend(xs);
                continue;
            }
        };
        if change != 0.0 {
            seen.moved.insert(series.clone());
        }
        *seen.values.entry(series).or_default() += change;
    }
    seen
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

/// A counter's or gauge's value now (0 if never emitted): a whole number, as every
/// one of them counts things.
fn value(name: &str, labels: &[(&str, &str)]) -> i64 {
    let value = seen()
        .values
        .get(&series(name, labels))
        .copied()
        .unwrap_or(0.0);
    value.round() as i64
}

/// The samples a histogram has had.
fn samples(name: &str, labels: &[(&str, &str)]) -> usize {
    seen()
        .samples
        .get(&series(name, labels))
        .map_or(0, Vec::len)
}

/// Whether any series named `name` ever had a value: a counter or gauge that moved,
/// a histogram's sample.
fn emitted(name: &str) -> bool {
    let seen = seen();
    seen.moved.iter().any(|(n, _)| n == name)
        || seen
            .samples
            .iter()
            .any(|((n, _), xs)| n == name && !xs.is_empty())
}

fn as_user(user: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", user)
        .body(Full::default())
        .expect("request")
}

fn per_user(name: &str, quota: Quota) -> Policy {
    Policy::new(name, quota)
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-user").expect("a header name"))
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

async fn send(server: &Server, user: &str) -> Reply {
    server.send(as_user(user)).await
}

/// Fails every decision: for the fail modes and store errors.
#[derive(Debug)]
struct Down;

impl Store for Down {
    fn decide<'a>(&'a self, _: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        StoreCall::future(async { Err(StoreError::new(StoreErrorKind::Timeout, "down")) })
    }

    fn refund<'a>(&'a self, _: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async { Ok(()) })
    }
}

/// Drives every metric of the catalogue, with policies whose names start with
/// `prefix`.
#[allow(clippy::too_many_lines)] // one scenario per metric, in the table's order
async fn every_metric(prefix: &'static str) {
    let name = |what: &str| -> &'static str { Box::leak(format!("{prefix}-{what}").into()) };
    let clock = ManualClock::new(BASE);

    // Decisions: allowed, near the limit, rejected, blocked, shadow-rejected, penalties.
    let store = MemoryStore::with_clock(clock.clone());
    let penalty = Penalty::after(1)
        .within(Duration::from_secs(60))
        .block_for(Duration::from_secs(60));
    let layer = RateLimitLayer::builder()
        .policy(per_user(name("api"), Quota::per_minute(2)).penalty(penalty))
        .policy(per_user(name("watch"), Quota::per_minute(1)).shadow(true))
        .store(store)
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    assert_eq!(send(&server, "alice").await.status, StatusCode::OK);
    // Over "watch" (shadowed: served), and "api" near its limit.
    assert_eq!(send(&server, "alice").await.status, StatusCode::OK);
    // Over: rejected, trips the penalty box; then blocked.
    for _ in 0..2 {
        let reply = send(&server, "alice").await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
    }

    // Waited and held: a leaky bucket holds the second request for its turn (half a
    // second), seen in the gauge meanwhile.
    let queue_name = name("queue");
    let queue = Policy::new(queue_name, Quota::per_second(2))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket)
        .key(key::global());
    let held = RateLimitLayer::builder()
        .policy(queue.clone())
        .build()
        .expect("layer");
    let server = Arc::new(Server::start(app(held.clone())).await);
    let requests: Vec<_> = (0..2)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.get("/").await.status })
        })
        .collect();
    while value("tollgate_held", &[("policy", queue_name)]) < 1 {
        assert!(!requests.iter().all(tokio::task::JoinHandle::is_finished));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for request in requests {
        assert_eq!(request.await.expect("a request"), StatusCode::OK);
    }
    // Queue full: no place to hold a delayed request.
    let full = RateLimitLayer::builder()
        .policy(queue.clone())
        .build()
        .expect("layer")
        .max_held(0);
    let server = Server::start(app(full)).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    assert_eq!(server.get("/").await.status, StatusCode::TOO_MANY_REQUESTS);

    // Wait mode: a reservation ("reserve" store calls).
    let waiting = RateLimitLayer::builder()
        .policy(per_user(name("wait"), Quota::per_minute(10)).wait(Duration::from_secs(1)))
        .build()
        .expect("layer");
    let server = Server::start(app(waiting)).await;
    assert_eq!(send(&server, "carol").await.status, StatusCode::OK);

    // In flight: the gauge while a request runs, and "in_flight" store calls.
    let gate = Arc::new(Notify::new());
    let entered = Arc::new(Notify::new());
    let slow = {
        let (gate, entered) = (gate.clone(), entered.clone());
        Router::new().route(
            "/",
            get(move || {
                let (gate, entered) = (gate.clone(), entered.clone());
                async move {
                    entered.notify_one();
                    gate.notified().await;
                    "done"
                }
            }),
        )
    };
    let running = name("running");
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new(running, Quota::per_minute(100))
                .expect("policy")
                .in_flight(5)
                .expect("in flight"),
        )
        .build()
        .expect("layer");
    let server = Arc::new(Server::start(slow.layer(layer)).await);
    let request = {
        let server = server.clone();
        tokio::spawn(async move { server.get("/").await })
    };
    entered.notified().await;
    assert_eq!(value("tollgate_in_flight", &[("policy", running)]), 1);
    gate.notify_one();
    assert_eq!(request.await.expect("a request").body, "done");

    // The store fails: open, then closed; errors counted by kind.
    for mode in [FailMode::Open, FailMode::Closed] {
        let layer = RateLimitLayer::builder()
            .policy(per_user(name("down"), Quota::per_minute(10)))
            .store(Down)
            .build()
            .expect("layer")
            .on_store_error(mode);
        let server = Server::start(app(layer)).await;
        let expected = match mode {
            FailMode::Open => StatusCode::OK,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        assert_eq!(send(&server, "dave").await.status, expected);
    }

    // A `Fallback` whose primary is down: the insurance store answers, the gauge moves
    // to it, and the call is labelled with the store that answered.
    let fallback = Fallback::new(Down, MemoryStore::new());
    let layer = RateLimitLayer::builder()
        .policy(per_user(name("fallback"), Quota::per_minute(10)))
        .store(fallback.clone())
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    for _ in 0..2 {
        assert_eq!(send(&server, "gina").await.status, StatusCode::OK);
    }
    assert!(!fallback.serving_primary());
    let gauge = if prefix == "prom" {
        "tollgate_fallback_serving"
    } else {
        "rate_limit.fallback.serving"
    };
    assert!(value(gauge, &[("store", "insurance")]) >= 1);

    // The memory store: keys, bytes, evictions at its key bound and at its byte bound.
    let small = MemoryStore::with_clock(clock.clone())
        .max_keys(2)
        .expect("a bound");
    let layer = RateLimitLayer::builder()
        .policy(per_user(name("small"), Quota::per_minute(10)))
        .store(small)
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    for user in ["a", "b", "c", "d"] {
        assert_eq!(send(&server, user).await.status, StatusCode::OK);
    }
    // One shard (256 keys) of 1 200 bytes: a dozen logs of three entries outgrow it.
    let tight = MemoryStore::with_clock(clock.clone())
        .max_bytes(1_200)
        .expect("a bound")
        .max_keys(256)
        .expect("a bound");
    let log = Policy::new(name("log"), Quota::per_minute(4))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("a header name"));
    let layer = RateLimitLayer::builder()
        .policy(log)
        .store(tight)
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    for user in 0..12 {
        for _ in 0..3 {
            clock.advance(Duration::from_millis(1));
            send(&server, &format!("log-{user}")).await;
        }
    }

    // A policy that applies to nothing (its one route is a typo): reported once its
    // first 1,000 requests have passed it by.
    let typo = name("typo");
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new(typo, Quota::per_minute(5))
                .expect("policy")
                .on_route(http::Method::POST, "/logni")
                .expect("a route"),
        )
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    for _ in 0..1_000 {
        assert_eq!(server.get("/").await.status, StatusCode::OK);
    }
    // Read while the layer lives: its set replaced or dropped ends the report.
    assert_eq!(value("tollgate_policy_unapplied", &[("policy", typo)]), 1);

    // Leases: slices charged, requests answered from them, units given back.
    let leased = LeasedStore::new(MemoryStore::new());
    let layer = RateLimitLayer::builder()
        .policy(per_user(name("leased"), Quota::per_minute(1_000)))
        .store(leased.clone())
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    for _ in 0..5 {
        assert_eq!(send(&server, "erin").await.status, StatusCode::OK);
    }
    leased.release_all().await.expect("released");

    #[cfg(feature = "redis")]
    denial_cache_hits(name("cached")).await;
}

/// A key Redis denied is denied again from the denial cache.
#[cfg(feature = "redis")]
async fn denial_cache_hits(name: &'static str) {
    use support::redis_server::{shared_server, unique_prefix};
    let store = tollgate::RedisStore::from_url(&shared_server().url())
        .expect("a url")
        .prefix(&unique_prefix(name))
        .deadline(Duration::from_secs(5))
        .expect("a deadline");
    let layer = RateLimitLayer::builder()
        .policy(per_user(name, Quota::per_minute(1)))
        .store(store)
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    assert_eq!(send(&server, "frank").await.status, StatusCode::OK);
    for _ in 0..3 {
        assert_eq!(
            send(&server, "frank").await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
}

/// The metrics the scenario cannot reach in this build.
fn unreachable_here() -> &'static [&'static str] {
    if cfg!(feature = "redis") {
        &[]
    } else {
        &["tollgate_denial_cache_hits_total"]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_table_is_emitted_under_both_names() {
    let _tracing = TRACING.read().await;
    snapshotter();
    every_metric("prom").await;
    let missing: Vec<&str> = METRICS
        .iter()
        .map(|m| m.name)
        .filter(|name| !unreachable_here().contains(name) && !emitted(name))
        .collect();
    assert!(missing.is_empty(), "never emitted: {missing:?}");
    // Gauges that end at zero were non-zero while it ran: held, in flight.
    assert!(samples("tollgate_held_seconds", &[("policy", "prom-queue")]) >= 1);
    assert!(
        samples(
            "tollgate_store_duration_seconds",
            &[("store", "MemoryStore"), ("operation", "decide")]
        ) >= 1
    );
    assert!(
        samples(
            "tollgate_store_duration_seconds",
            &[("store", "insurance"), ("operation", "decide")]
        ) >= 1
    );
    assert_eq!(value("tollgate_held", &[("policy", "prom-queue")]), 0);
    assert_eq!(
        value("tollgate_in_flight", &[("policy", "prom-running")]),
        0
    );

    // Both names at once (other tests, which read the Prometheus names, still find
    // them): every OpenTelemetry name is emitted too.
    set_metric_names(MetricNames::Both);
    every_metric("otel").await;
    set_metric_names(MetricNames::Prometheus);
    let missing: Vec<&str> = METRICS
        .iter()
        .filter(|m| !unreachable_here().contains(&m.name))
        .map(|m| m.open_telemetry_name)
        .filter(|name| !emitted(name))
        .collect();
    assert!(missing.is_empty(), "never emitted: {missing:?}");
    // The rejection that trips the penalty box is answered with the block already.
    assert_eq!(
        value(
            "rate_limit.requests",
            &[("policy", "otel-api"), ("outcome", "blocked")]
        ),
        2
    );
}

#[tokio::test]
async fn each_outcome_and_near_limit_count_is_exact() {
    let _tracing = TRACING.read().await;
    snapshotter();
    // Capacity 4, near below 50 %: remaining 3, 2 are not near; 1, 0 are.
    let layer = RateLimitLayer::builder()
        .policy(per_user("exact", Quota::per_minute(4)))
        .policy(per_user("exact-shadow", Quota::per_minute(1)).shadow(true))
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer")
        .near_limit(0.5)
        .expect("a share");
    let server = Server::start(app(layer)).await;
    for _ in 0..6 {
        send(&server, "grace").await;
    }
    let requests = |policy, outcome| {
        value(
            "tollgate_requests_total",
            &[("policy", policy), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("exact", "allowed"), 4);
    assert_eq!(requests("exact", "rejected"), 2);
    assert_eq!(
        value("tollgate_near_limit_total", &[("policy", "exact")]),
        2
    );
    // The shadowed policy admits the first and would reject every later one (the two
    // that "exact" rejects too): never "rejected", as it rejects nothing.
    assert_eq!(requests("exact-shadow", "allowed"), 1);
    assert_eq!(requests("exact-shadow", "shadow_rejected"), 5);
    assert_eq!(requests("exact-shadow", "rejected"), 0);
}

/// The README's "Operating limits" table: its rows, `(name, type, labels)`.
fn readme_rows() -> Vec<(String, String, String)> {
    let readme = include_str!("../README.md");
    let section = readme
        .split("\n## Operating limits")
        .nth(1)
        .expect("an Operating limits section");
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|line| line.starts_with("| `tollgate_"))
        .map(|line| {
            let cells: Vec<String> = line
                .split('|')
                .map(|c| c.trim().trim_matches('`').to_owned())
                .collect();
            (cells[1].clone(), cells[3].clone(), cells[4].clone())
        })
        .collect()
}

#[test]
fn the_readme_table_lists_exactly_the_catalogue() {
    let expected: Vec<(String, String, String)> = METRICS
        .iter()
        .map(|m| {
            let kind = match m.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            let labels = if m.labels.is_empty() {
                "—".to_owned()
            } else {
                m.labels.join(", ")
            };
            (m.name.to_owned(), kind.to_owned(), labels)
        })
        .collect();
    assert_eq!(readme_rows(), expected);
}

/// Records every span's and event's fields, as text.
#[cfg(feature = "tracing")]
#[derive(Default)]
struct Spans {
    next: AtomicUsize,
    spans: Mutex<Vec<(String, HashMap<String, String>)>>,
}

#[cfg(feature = "tracing")]
struct Fields<'a>(&'a mut HashMap<String, String>);

#[cfg(feature = "tracing")]
impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").replace('"', ""),
        );
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

#[cfg(feature = "tracing")]
impl tracing::Subscriber for Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = HashMap::new();
        span.record(&mut Fields(&mut fields));
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((span.metadata().name().to_owned(), fields));
        tracing::span::Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) as u64 + 1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = HashMap::new();
        event.record(&mut Fields(&mut fields));
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(("event".to_owned(), fields));
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[cfg(feature = "tracing")]
#[test]
fn each_decision_has_a_span_naming_policy_outcome_and_rejecter_never_the_key() {
    let _alone = TRACING.blocking_write();
    let spans = Arc::new(Spans::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let layer = RateLimitLayer::builder()
                .policy(per_user("traced", Quota::per_minute(1)))
                .store(MemoryStore::with_clock(ManualClock::new(BASE)))
                .build()
                .expect("layer");
            let server = Server::start(app(layer)).await;
            assert_eq!(send(&server, "heidi-secret").await.status, StatusCode::OK);
            assert_eq!(
                send(&server, "heidi-secret").await.status,
                StatusCode::TOO_MANY_REQUESTS
            );
        });
    });
    let recorded = spans.spans.lock().unwrap_or_else(PoisonError::into_inner);
    let decisions: Vec<&HashMap<String, String>> = recorded
        .iter()
        .filter(|(name, _)| name == "rate_limit.decision")
        .map(|(_, fields)| fields)
        .collect();
    assert_eq!(decisions.len(), 2, "{recorded:?}");
    let fingerprint = format!("{:x}", Key::from("heidi-secret"));
    let field = |i: usize, name: &str| decisions[i].get(name).map(String::as_str);
    assert_eq!(field(0, "policy"), Some("traced"));
    assert_eq!(field(0, "outcome"), Some("allowed"));
    assert_eq!(field(0, "remaining"), Some("0"));
    assert_eq!(field(0, "rejected_by"), None);
    assert_eq!(field(1, "outcome"), Some("rejected"));
    assert_eq!(field(1, "rejected_by"), Some("traced"));
    assert_eq!(field(1, "key.fingerprint"), Some(fingerprint.as_str()));
    for (_, fields) in recorded.iter() {
        for value in fields.values() {
            assert!(!value.contains("heidi-secret"), "the raw key: {fields:?}");
        }
    }
}

/// The log of a tripped penalty box names the key by its fingerprint (what an
/// operator passes to `reset`), never the raw key.
#[cfg(feature = "tracing")]
#[test]
fn a_tripped_penalty_box_is_logged_with_the_keys_fingerprint() {
    let _alone = TRACING.blocking_write();
    let spans = Arc::new(Spans::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let policy = per_user("boxed", Quota::per_minute(1)).penalty(
                tollgate::Penalty::after(1).block_for(std::time::Duration::from_secs(600)),
            );
            let layer = RateLimitLayer::builder()
                .policy(policy)
                .store(MemoryStore::with_clock(ManualClock::new(BASE)))
                .build()
                .expect("layer");
            let server = Server::start(app(layer)).await;
            assert_eq!(send(&server, "mallory-secret").await.status, StatusCode::OK);
            assert_eq!(
                send(&server, "mallory-secret").await.status,
                StatusCode::TOO_MANY_REQUESTS
            );
        });
    });
    let recorded = spans.spans.lock().unwrap_or_else(PoisonError::into_inner);
    let fingerprint = format!("{:x}", Key::from("mallory-secret"));
    let trips: Vec<&HashMap<String, String>> = recorded
        .iter()
        .filter(|(name, fields)| {
            name == "event"
                && fields
                    .get("message")
                    .is_some_and(|m| m.contains("penalty box tripped"))
        })
        .map(|(_, fields)| fields)
        .collect();
    assert_eq!(trips.len(), 1, "{recorded:?}");
    assert_eq!(
        trips[0].get("key.fingerprint").map(String::as_str),
        Some(fingerprint.as_str())
    );
    for (_, fields) in recorded.iter() {
        for value in fields.values() {
            assert!(!value.contains("mallory-secret"), "the raw key: {fields:?}");
        }
    }
}

/// The events `spans` recorded whose message contains `text`, for `policy`.
#[cfg(feature = "tracing")]
fn events(spans: &Spans, text: &str, policy: &str) -> Vec<HashMap<String, String>> {
    spans
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter(|(name, fields)| {
            name == "event"
                && fields.get("message").is_some_and(|m| m.contains(text))
                && fields.get("policy").is_some_and(|p| p == policy)
        })
        .map(|(_, fields)| fields.clone())
        .collect()
}

/// What the warning of a policy that applies to nothing says.
#[cfg(feature = "tracing")]
const UNAPPLIED: &str = "applied to none of its first 1000 requests";

/// Runs `test` on a current-thread runtime (the server's tasks too) with `spans` as
/// the thread's subscriber, alone among the tests that read tracing.
#[cfg(feature = "tracing")]
fn traced<F: std::future::Future<Output = ()>>(spans: &Arc<Spans>, test: impl FnOnce() -> F) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(spans.clone(), || runtime.block_on(test()));
}

/// `POST /login`, answered 401 by the app: the route a typo in the file misses.
fn login() -> Request<Full<Bytes>> {
    Request::post("/login")
        .body(Full::default())
        .expect("request")
}

fn login_app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route(
            "/login",
            axum::routing::post(|| async { StatusCode::UNAUTHORIZED }),
        )
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// `routes = ["POST /logni"]` for an app with `/login`: the login box is off. Before,
/// nothing said so; now each policy's routes are logged at build, and after its first
/// 1,000 requests a warning (once) and the gauge say it limits nothing.
#[cfg(feature = "tracing")]
#[test]
fn a_policy_whose_routes_match_nothing_warns_once_and_shows_in_the_gauge() {
    let _alone = TRACING.blocking_write();
    snapshotter();
    let spans = Arc::new(Spans::default());
    traced(&spans, || async {
        let typo = Policy::new("typo-login", Quota::per_minute(5))
            .expect("policy")
            .key(key::peer_ip())
            .on_route(http::Method::POST, "/logni")
            .expect("a route");
        let layer = RateLimitLayer::builder()
            .policy(typo)
            .store(MemoryStore::with_clock(ManualClock::new(BASE)))
            .build()
            .expect("layer");
        let server = Server::start(login_app(layer)).await;
        for i in 0..1_000 {
            // Every attempt reaches the handler: nothing limits them.
            assert_eq!(server.send(login()).await.status, StatusCode::UNAUTHORIZED);
            if i == 998 {
                assert!(events(&spans, UNAPPLIED, "typo-login").is_empty());
                assert_eq!(
                    value("tollgate_policy_unapplied", &[("policy", "typo-login")]),
                    0
                );
            }
        }
        assert_eq!(
            value("tollgate_policy_unapplied", &[("policy", "typo-login")]),
            1
        );
        for _ in 0..200 {
            assert_eq!(server.send(login()).await.status, StatusCode::UNAUTHORIZED);
        }
        assert_eq!(
            value("tollgate_policy_unapplied", &[("policy", "typo-login")]),
            1
        );
    });
    let warnings = events(&spans, UNAPPLIED, "typo-login");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        warnings[0].get("routes").map(String::as_str),
        Some("POST /logni")
    );
    assert_eq!(
        warnings[0].get("outside_routes").map(String::as_str),
        Some("1000")
    );
    assert_eq!(
        warnings[0].get("without_key").map(String::as_str),
        Some("0")
    );
    // The routes were logged when the layer was built.
    let installed = events(&spans, "rate-limit policy installed", "typo-login");
    assert_eq!(installed.len(), 1, "{installed:?}");
    assert_eq!(
        installed[0].get("routes").map(String::as_str),
        Some("POST /logni")
    );
    // The layer is gone: so is the report.
    assert_eq!(
        value("tollgate_policy_unapplied", &[("policy", "typo-login")]),
        0
    );
}

/// A key extractor that finds no key in any request (`peer_ip` on a server that
/// records no peer address, as a tonic server built without the `tonic` feature):
/// 9 requests of cost 3 on a burst of 5 all pass, and the policy is reported.
#[cfg(feature = "tracing")]
#[test]
fn a_policy_whose_key_is_never_found_warns_once_and_shows_in_the_gauge() {
    let _alone = TRACING.blocking_write();
    snapshotter();
    let spans = Arc::new(Spans::default());
    traced(&spans, || async {
        let peerless = Policy::new("peerless", Quota::per_minute(5))
            .expect("policy")
            .key(key::peer_ip())
            .costs(tollgate::layer::Costs::new().default(3));
        let layer = RateLimitLayer::builder()
            .policy(peerless)
            .store(MemoryStore::with_clock(ManualClock::new(BASE)))
            .build()
            .expect("layer");
        // Served without `ConnectInfo`: no request carries its peer's address.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("an address");
        let serving = tokio::spawn(async move {
            axum::serve(listener, app(layer)).await.expect("serve");
        });
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        for _ in 0..1_000 {
            let request = Request::get(format!("http://{addr}/"))
                .body(Full::default())
                .expect("request");
            let response = client.request(request).await.expect("a response");
            assert_eq!(response.status(), StatusCode::OK);
        }
        assert_eq!(
            value("tollgate_policy_unapplied", &[("policy", "peerless")]),
            1
        );
        serving.abort();
    });
    let warnings = events(&spans, UNAPPLIED, "peerless");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(
        warnings[0].get("without_key").map(String::as_str),
        Some("1000")
    );
    assert_eq!(
        warnings[0].get("outside_routes").map(String::as_str),
        Some("0")
    );
    assert!(
        warnings[0]
            .get("message")
            .is_some_and(|m| m.contains("found no key")),
        "{warnings:?}"
    );
}

/// A policy that applies to one of its first 1,000 requests (the last of them) is
/// never reported, however many requests pass it by after; nor is a fallback whose
/// requests all carry the key of the policy it stands in for (they are that
/// policy's, not a sign of a mistake).
#[cfg(feature = "tracing")]
#[test]
fn a_policy_that_applies_never_warns() {
    let _alone = TRACING.blocking_write();
    snapshotter();
    let spans = Arc::new(Spans::default());
    traced(&spans, || async {
        let logins = Policy::new("applies-login", Quota::per_minute(10_000))
            .expect("policy")
            .on_route(http::Method::POST, "/login")
            .expect("a route");
        let keyed = per_user("applies-keyed", Quota::per_minute(10_000));
        let anonymous = Policy::new("applies-anonymous", Quota::per_minute(10_000))
            .expect("policy")
            .unless_key(key::header("x-user").expect("a header name"));
        let layer = RateLimitLayer::builder()
            .policy(logins)
            .policy(keyed)
            .policy(anonymous)
            .store(MemoryStore::with_clock(ManualClock::new(BASE)))
            .build()
            .expect("layer");
        let server = Server::start(login_app(layer)).await;
        for _ in 0..999 {
            assert_eq!(send(&server, "ivan").await.status, StatusCode::OK);
        }
        let mut last = login();
        last.headers_mut()
            .insert("x-user", http::HeaderValue::from_static("ivan"));
        assert_eq!(server.send(last).await.status, StatusCode::UNAUTHORIZED);
        for _ in 0..1_100 {
            assert_eq!(send(&server, "ivan").await.status, StatusCode::OK);
        }
        for policy in ["applies-login", "applies-keyed", "applies-anonymous"] {
            assert_eq!(value("tollgate_policy_unapplied", &[("policy", policy)]), 0);
        }
    });
    for policy in ["applies-login", "applies-keyed", "applies-anonymous"] {
        assert!(events(&spans, UNAPPLIED, policy).is_empty(), "{policy}");
    }
}

/// The report of a policy that applied to nothing ends when it applies after all,
/// and when a reload replaces its set (the typo fixed): the gauge goes back to 0.
#[tokio::test]
async fn the_unapplied_report_ends_when_the_policy_applies_or_is_replaced() {
    let _tracing = TRACING.read().await;
    snapshotter();
    let gauge = |policy| value("tollgate_policy_unapplied", &[("policy", policy)]);
    let on = |name: &'static str, route: &str| {
        Policy::new(name, Quota::per_minute(10_000))
            .expect("policy")
            .algorithm(Algorithm::FixedWindow)
            .on_route(http::Method::POST, route)
            .expect("a route")
    };
    let layer = RateLimitLayer::builder()
        .policy(on("late-login", "/login"))
        .policy(on("typo-fixed", "/logni"))
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer");
    let server = Server::start(login_app(layer.clone())).await;
    for _ in 0..1_000 {
        assert_eq!(server.get("/").await.status, StatusCode::OK);
    }
    assert_eq!((gauge("late-login"), gauge("typo-fixed")), (1, 1));
    // The first login, after 1,000 other requests: "late-login" applies after all.
    assert_eq!(server.send(login()).await.status, StatusCode::UNAUTHORIZED);
    assert_eq!((gauge("late-login"), gauge("typo-fixed")), (0, 1));
    // The typo fixed by a reload: the next request is decided under the new set, and
    // the old set's report ends with it.
    layer
        .reload([on("late-login", "/login"), on("typo-fixed", "/login")])
        .expect("a reload");
    let reply = server.send(login()).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert!(
        reply.header("ratelimit-policy").contains("\"typo-fixed\""),
        "{reply:?}"
    );
    assert_eq!((gauge("late-login"), gauge("typo-fixed")), (0, 0));
}

/// A `Fallback` whose primary never answered says so when it first fails: a warning
/// that the primary is unreachable since startup, once, with the error; and when it
/// had answered before, a plain "failed" warning.
#[cfg(feature = "tracing")]
#[test]
fn a_primary_unreachable_at_startup_is_logged_as_such() {
    let _alone = TRACING.blocking_write();
    let spans = Arc::new(Spans::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let fallback = Fallback::new(Down, MemoryStore::new());
            let layer = RateLimitLayer::builder()
                .policy(per_user("unreachable", Quota::per_minute(10)))
                .store(fallback.clone())
                .build()
                .expect("layer");
            let server = Server::start(app(layer)).await;
            for _ in 0..3 {
                assert_eq!(send(&server, "hank").await.status, StatusCode::OK);
            }
            assert!(!fallback.serving_primary());
        });
    });
    let recorded = spans.spans.lock().unwrap_or_else(PoisonError::into_inner);
    let warnings: Vec<&HashMap<String, String>> = recorded
        .iter()
        .filter(|(name, fields)| {
            name == "event"
                && fields
                    .get("message")
                    .is_some_and(|m| m.contains("primary store unreachable since startup"))
        })
        .map(|(_, fields)| fields)
        .collect();
    assert_eq!(warnings.len(), 1, "{recorded:?}");
    assert!(
        warnings[0].get("error").is_some_and(|e| e.contains("down")),
        "{warnings:?}"
    );
}


/// A `Fallback` built in a runtime whose primary no call reaches: once its minimum
/// down time has passed it probes the primary, and warns that it is unreachable at
/// startup, before any request.
#[cfg(feature = "tracing")]
#[test]
fn a_primary_unreachable_at_startup_is_logged_before_any_request() {
    let _alone = TRACING.blocking_write();
    let spans = Arc::new(Spans::default());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    tracing::subscriber::with_default(spans.clone(), || {
        runtime.block_on(async {
            let fallback =
                Fallback::new(Down, MemoryStore::new()).min_down(Duration::from_millis(10));
            tokio::time::sleep(Duration::from_millis(200)).await;
            assert!(fallback.serving_primary(), "a probe does not switch");
        });
    });
    let recorded = spans.spans.lock().unwrap_or_else(PoisonError::into_inner);
    let warned = recorded.iter().any(|(name, fields)| {
        name == "event"
            && fields
                .get("message")
                .is_some_and(|m| m.contains("primary store unreachable at startup"))
    });
    assert!(warned, "{recorded:?}");
}
