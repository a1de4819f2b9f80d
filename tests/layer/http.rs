//! The layer in a real axum server over real TCP, with a real HTTP client: status
//! codes, exact header bytes, shared quota, all-or-nothing, refunds, shadow mode and
//! failure modes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::layer::Decisions;
use tollgate::layer::{FailMode, HeaderStyle, Rejection, ResetFormat};
use tollgate::{Algorithm, Decision, Key, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::broken_store::{BrokenStore, broken_layer};

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn layer(policies: Vec<Policy>, clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policies(policies)
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
}

fn fixed_window(name: &str, quota: Quota) -> Policy {
    Policy::new(name, quota)
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/users", post(|| async { "created" }))
        .layer(layer)
}

#[tokio::test]
async fn admits_then_rejects_with_exact_draft11_headers() {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(2))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow);
    let server = Server::start(app(layer(vec![policy], &clock))).await;

    let first = server.get("/").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "ok");
    assert_eq!(first.header("ratelimit-policy"), r#""api";q=2;w=60"#);
    assert_eq!(first.header("ratelimit"), r#""api";r=1;t=60"#);
    assert!(!first.headers.contains_key("retry-after"));

    clock.advance(Duration::from_millis(30_500));
    let second = server.get("/").await;
    assert_eq!(second.header("ratelimit"), r#""api";r=0;t=30"#);

    let third = server.get("/").await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.header("retry-after"), "30");
    assert_eq!(third.header("ratelimit"), r#""api";r=0;t=30"#);
    assert_eq!(third.header("ratelimit-policy"), r#""api";q=2;w=60"#);
    assert_eq!(third.header("content-type"), "text/plain; charset=utf-8");
    assert_eq!(third.body, "rate limit exceeded: retry after 30 s\n");
}

#[tokio::test]
async fn sub_second_waits_round_retry_after_up_to_one() {
    let clock = ManualClock::new(BASE);
    let policy =
        Policy::new("fast", Quota::per_second(10).with_burst(1).expect("burst")).expect("policy");
    let server = Server::start(app(layer(vec![policy], &clock))).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    let rejected = server.get("/").await;
    assert_eq!(rejected.status, StatusCode::TOO_MANY_REQUESTS);
    // 100 ms to wait: never "Retry-After: 0".
    assert_eq!(rejected.header("retry-after"), "1");
    assert_eq!(rejected.header("ratelimit"), r#""fast";r=0;t=1"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_share_one_quota_under_concurrency() {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(25)).expect("policy");
    let server = Arc::new(Server::start(app(layer(vec![policy], &clock))).await);
    let tasks: Vec<_> = (0..100)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.get("/").await.status })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        let status = task.await.expect("task");
        assert!(status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS);
        ok += usize::from(status == StatusCode::OK);
    }
    assert_eq!(ok, 25);
}

#[tokio::test]
async fn route_layer_leaves_404s_unmetered_and_layer_does_not() {
    let clock = ManualClock::new(BASE);
    let policy = || Policy::new("api", Quota::per_minute(1)).expect("policy");
    let routed = Router::new()
        .route("/", get(|| async { "ok" }))
        .route_layer(layer(vec![policy()], &clock));
    let server = Server::start(routed).await;
    for _ in 0..3 {
        assert_eq!(server.get("/missing").await.status, StatusCode::NOT_FOUND);
    }
    assert_eq!(server.get("/").await.status, StatusCode::OK);

    let layered = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer(vec![policy()], &clock));
    let server = Server::start(layered).await;
    assert_eq!(server.get("/missing").await.status, StatusCode::NOT_FOUND);
    assert_eq!(server.get("/").await.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_denial_by_one_policy_charges_no_other() {
    let clock = ManualClock::new(BASE);
    let per_user = Policy::new("user", Quota::per_minute(1))
        .expect("policy")
        .key(key::header("x-user").expect("header name"));
    let global = Policy::new("global", Quota::per_minute(3)).expect("policy");
    let server = Server::start(app(layer(vec![per_user, global], &clock))).await;
    let as_user = |user: &str| {
        Request::get("/")
            .header("x-user", user)
            .body(Full::default())
            .expect("request")
    };

    let first = server.send(as_user("alice")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.header("ratelimit-policy"),
        r#""user";q=1;w=60, "global";q=3;w=60"#
    );
    // "global" is GCRA: one request is 20 s of its 60 s window.
    assert_eq!(
        first.header("ratelimit"),
        r#""user";r=0;t=60, "global";r=2;t=20"#
    );
    for _ in 0..3 {
        let denied = server.send(as_user("alice")).await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
        // The global policy had room and was not charged.
        assert_eq!(
            denied.header("ratelimit"),
            r#""user";r=0;t=60, "global";r=2;t=20"#
        );
    }
    assert_eq!(server.send(as_user("bob")).await.status, StatusCode::OK);
    assert_eq!(server.send(as_user("carol")).await.status, StatusCode::OK);
    let exhausted = server.send(as_user("dave")).await;
    assert_eq!(exhausted.status, StatusCode::TOO_MANY_REQUESTS);
    // On a denial, `t` is the wait until this request would fit: Retry-After's value.
    assert_eq!(
        exhausted.header("ratelimit"),
        r#""user";r=1;t=0, "global";r=0;t=20"#
    );
    assert_eq!(exhausted.header("retry-after"), "20");
}

#[tokio::test]
async fn count_when_refunds_responses_that_do_not_count() {
    let clock = ManualClock::new(BASE);
    let login = Policy::new("login", Quota::per_minute(2))
        .expect("policy")
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let app = Router::new()
        .route(
            "/login",
            post(|body: String| async move {
                if body == "right" {
                    (StatusCode::OK, "welcome")
                } else {
                    (StatusCode::UNAUTHORIZED, "no")
                }
            }),
        )
        .layer(layer(vec![login], &clock));
    let server = Server::start(app).await;
    let attempt = |password: &'static str| {
        Request::post("/login")
            .body(Full::new(Bytes::from_static(password.as_bytes())))
            .expect("request")
    };
    for _ in 0..5 {
        assert_eq!(server.send(attempt("right")).await.status, StatusCode::OK);
    }
    assert_eq!(
        server.send(attempt("wrong")).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        server.send(attempt("wrong")).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        server.send(attempt("right")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn shadow_mode_decides_and_reports_but_never_rejects() {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(1))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow);
    let server = Server::start(app(layer(vec![policy], &clock).shadow(true))).await;
    assert_eq!(
        server.get("/").await.header("ratelimit"),
        r#""api";r=0;t=60"#
    );
    let over = server.get("/").await;
    assert_eq!(over.status, StatusCode::OK);
    assert_eq!(over.header("ratelimit"), r#""api";r=0;t=60"#);
    assert!(!over.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn handlers_see_every_decision_in_the_request_extensions() {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(5)).expect("policy");
    let app = Router::new()
        .route(
            "/",
            get(
                |axum::Extension(decisions): axum::Extension<Decisions>| async move {
                    let d: &Decision = decisions.get("api").expect("api decision");
                    format!("{} left", d.remaining)
                },
            ),
        )
        .layer(layer(vec![policy], &clock));
    let server = Server::start(app).await;
    assert_eq!(server.get("/").await.body, "4 left");
    assert_eq!(server.get("/").await.body, "3 left");
}

#[tokio::test]
async fn without_the_decisions_extension_headers_and_rejections_are_unchanged() {
    let clock = ManualClock::new(BASE);
    let policies = || {
        vec![
            fixed_window("api", Quota::per_minute(2)),
            fixed_window("daily", Quota::per_day(100)),
        ]
    };
    let handler = |request: axum::extract::Request| async move {
        match request.extensions().get::<Decisions>() {
            Some(decisions) => format!("{} decisions", decisions.len()),
            None => "no decisions".to_string(),
        }
    };
    let with = Server::start(
        Router::new()
            .route("/", get(handler))
            .layer(layer(policies(), &clock)),
    )
    .await;
    let without_extension = layer(policies(), &clock).decisions_extension(false);
    let without = Server::start(
        Router::new()
            .route("/", get(handler))
            .layer(without_extension),
    )
    .await;

    let mut seen = Vec::new();
    for server in [&with, &without] {
        let replies = [
            server.get("/").await,
            server.get("/").await,
            server.get("/").await,
        ];
        seen.push(replies.map(|reply| {
            let header = |name| reply.headers.get(name).cloned();
            (
                reply.status,
                header("ratelimit-policy"),
                header("ratelimit"),
                header("retry-after"),
                reply.body,
            )
        }));
    }
    assert_eq!(seen[0][0].4, "2 decisions");
    assert_eq!(seen[1][0].4, "no decisions");
    assert_eq!(seen[1][1].0, StatusCode::OK);
    assert_eq!(
        seen[1][1].2.as_ref().map(|v| v.to_str().expect("ascii")),
        Some(r#""api";r=0;t=60, "daily";r=98;t=86400"#)
    );
    assert_eq!(seen[1][2].0, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(seen[1][2].4, "rate limit exceeded: retry after 60 s\n");
    // Everything but the handler's own answer is the same with and without it.
    for (a, b) in seen[0].iter().zip(&seen[1]) {
        assert_eq!((a.0, &a.1, &a.2, &a.3), (b.0, &b.1, &b.2, &b.3));
    }
    assert_eq!(seen[0][2].4, seen[1][2].4);
}

#[tokio::test]
async fn draft06_and_legacy_styles_describe_the_tightest_policy() {
    let clock = ManualClock::new(BASE);
    let policies = || {
        vec![
            fixed_window("minute", Quota::per_minute(10)),
            fixed_window("second", Quota::per_second(2)),
        ]
    };
    let server = Server::start(app(layer(policies(), &clock).headers(HeaderStyle::Draft06))).await;
    let reply = server.get("/").await;
    assert_eq!(reply.header("ratelimit-limit"), "2");
    assert_eq!(reply.header("ratelimit-remaining"), "1");
    assert_eq!(reply.header("ratelimit-reset"), "1");
    assert_eq!(reply.header("ratelimit-policy"), "10;w=60, 2;w=1");
    assert!(!reply.headers.contains_key("ratelimit"));

    let server = Server::start(app(
        layer(policies(), &clock).headers(HeaderStyle::Legacy(ResetFormat::Seconds))
    ))
    .await;
    let reply = server.get("/").await;
    assert_eq!(reply.header("x-ratelimit-limit"), "2");
    assert_eq!(reply.header("x-ratelimit-remaining"), "1");
    assert_eq!(reply.header("x-ratelimit-reset"), "1");

    let server = Server::start(app(
        layer(policies(), &clock).headers(HeaderStyle::Legacy(ResetFormat::UnixEpoch))
    ))
    .await;
    let reset: u64 = server
        .get("/")
        .await
        .header("x-ratelimit-reset")
        .parse()
        .expect("epoch seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs();
    assert!(
        reset > now && reset <= now + 2,
        "reset {reset} vs now {now}"
    );

    let server = Server::start(app(layer(policies(), &clock).headers(HeaderStyle::None))).await;
    let reply = server.get("/").await;
    assert!(
        reply
            .headers
            .keys()
            .all(|name| !name.as_str().contains("ratelimit"))
    );
}

#[tokio::test]
async fn json_and_problem_rejections() {
    let clock = ManualClock::new(BASE);
    let policy = || {
        Policy::new("api", Quota::per_minute(1))
            .expect("policy")
            .algorithm(Algorithm::FixedWindow)
    };
    let server = Server::start(app(layer(vec![policy()], &clock).rejection(Rejection::Json))).await;
    server.get("/").await;
    let reply = server.get("/").await;
    assert_eq!(reply.header("content-type"), "application/json");
    let json: serde_json::Value = serde_json::from_str(&reply.body).expect("json");
    assert_eq!(json["error"], "rate_limited");
    assert_eq!(json["retry_after"], 60);
    assert_eq!(json["policies"][0], "api");

    let server = Server::start(app(
        layer(vec![policy()], &clock).rejection(Rejection::Problem)
    ))
    .await;
    server.get("/").await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("content-type"), "application/problem+json");
    let problem: serde_json::Value = serde_json::from_str(&reply.body).expect("json");
    assert_eq!(problem["status"], 429);
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["title"], "Quota Exceeded");
    assert_eq!(problem["violated-policies"][0], "api");
    assert_eq!(reply.header("retry-after"), "60");

    let custom =
        layer(vec![policy()], &clock).rejection(|info: &tollgate::layer::RejectionInfo| {
            http::Response::builder()
                .status(StatusCode::SERVICE_UNAVAILABLE)
                .body(Bytes::from(format!(
                    "busy: {}",
                    info.denied_by().collect::<Vec<_>>().join(",")
                )))
                .expect("response")
        });
    let server = Server::start(app(custom)).await;
    server.get("/").await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.body, "busy: api");
    assert_eq!(reply.header("retry-after"), "60");
    assert_eq!(reply.header("ratelimit"), r#""api";r=0;t=60"#);
}

#[tokio::test]
async fn allow_and_deny_lists_bypass_the_policies() {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(1)).expect("policy");
    let layer = layer(vec![policy], &clock)
        .allow(|parts: &http::request::Parts| parts.headers.contains_key("x-internal"))
        .deny(|parts: &http::request::Parts| parts.headers.contains_key("x-banned"));
    let server = Server::start(app(layer)).await;
    let internal = || {
        Request::get("/")
            .header("x-internal", "1")
            .body(Full::default())
            .expect("request")
    };
    for _ in 0..3 {
        let reply = server.send(internal()).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert!(!reply.headers.contains_key("ratelimit"));
    }
    let banned = server
        .send(
            Request::get("/")
                .header("x-banned", "1")
                .header("x-internal", "1")
                .body(Full::default())
                .expect("request"),
        )
        .await;
    assert_eq!(banned.status, StatusCode::FORBIDDEN);
    assert_eq!(server.get("/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn leaky_bucket_holds_requests_for_their_turn() {
    let policy = Policy::new("queue", Quota::per_second(20).with_burst(3).expect("burst"))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket);
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .build()
        .expect("layer");
    let server = Arc::new(Server::start(app(layer)).await);
    let started = tokio::time::Instant::now();
    let replies = futures_join(&server, 3).await;
    assert!(replies.iter().all(|s| *s == StatusCode::OK));
    // Three requests at once: served at 0, 50 and 100 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "the queue was not held"
    );
}

async fn futures_join(server: &Arc<Server>, n: usize) -> Vec<StatusCode> {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.get("/").await.status })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.expect("task"));
    }
    statuses
}

#[tokio::test]
async fn store_failures_fail_open_or_closed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let broken = || {
        broken_layer(
            Policy::new("api", Quota::per_minute(1)).expect("policy"),
            &calls,
        )
    };
    let server = Server::start(app(broken())).await;
    for _ in 0..3 {
        let reply = server.get("/").await;
        assert_eq!(
            reply.status,
            StatusCode::OK,
            "fail open lets requests through"
        );
        assert!(!reply.headers.contains_key("ratelimit"));
    }
    let server = Server::start(app(broken().on_store_error(FailMode::Closed))).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), "1");
    assert_eq!(calls.load(Ordering::Relaxed), 4);
}

/// In wait mode a request's place is reserved in the store: when the store fails, the
/// layer's fail mode decides, as for a plain check (and nothing is held).
#[tokio::test]
async fn a_store_failure_in_wait_mode_fails_open_or_closed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let broken = || {
        broken_layer(
            Policy::new("api", Quota::per_minute(1)).expect("policy"),
            &calls,
        )
    };
    let wait = Duration::from_secs(30);
    let layer = broken().wait(wait);
    let server = Server::start(app(layer.clone())).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::OK, "fail open lets it through");
    assert!(!reply.headers.contains_key("ratelimit"));
    assert_eq!(layer.held(), 0, "nothing is held for a store that failed");
    let server = Server::start(app(broken().wait(wait).on_store_error(FailMode::Closed))).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("retry-after"), "1");
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn missing_keys_skip_or_reject_the_policy() {
    let clock = ManualClock::new(BASE);
    let by_user = || {
        Policy::new("user", Quota::per_minute(1))
            .expect("policy")
            .key(key::header("x-user").expect("name"))
    };
    let server = Server::start(app(layer(vec![by_user()], &clock))).await;
    for _ in 0..3 {
        let reply = server.get("/").await;
        assert_eq!(reply.status, StatusCode::OK, "no key, no limit");
        assert!(!reply.headers.contains_key("ratelimit"));
    }
    let strict = by_user().on_missing_key(tollgate::layer::MissingKey::Reject);
    let server = Server::start(app(layer(vec![strict], &clock))).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(reply.header("retry-after"), "60");
}

#[tokio::test]
async fn free_requests_skip_the_store() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("writes", Quota::per_minute(1))
                .expect("policy")
                .costs(|parts: &http::request::Parts| {
                    u32::from(parts.method == http::Method::POST)
                }),
        )
        .store(BrokenStore(calls.clone()))
        .build()
        .expect("layer");
    let server = Server::start(app(layer)).await;
    for _ in 0..3 {
        assert_eq!(server.get("/").await.status, StatusCode::OK);
    }
    assert_eq!(
        calls.load(Ordering::Relaxed),
        0,
        "GETs are free: no store trip"
    );
    let _ = Key::from("unused");
}

#[tokio::test]
async fn spoofed_forwarded_headers_from_an_untrusted_peer_do_not_change_the_key() {
    let clock = ManualClock::new(BASE);
    let by_client = |proxies: tollgate::key::TrustedProxies| {
        Policy::new("client", Quota::per_minute(2))
            .expect("policy")
            .key(key::client_ip(proxies))
    };
    let spoofed = |ip: &str| {
        Request::get("/")
            .header("x-forwarded-for", ip)
            .header("x-real-ip", ip)
            .header("forwarded", format!("for={ip}"))
            .body(Full::default())
            .expect("request")
    };
    // The test client connects from 127.0.0.1, which nobody trusts here: every
    // spoofed address lands in the peer's one bucket.
    let server = Server::start(app(layer(
        vec![by_client(tollgate::key::TrustedProxies::none())],
        &clock,
    )))
    .await;
    let statuses: Vec<StatusCode> = {
        let mut statuses = Vec::new();
        for ip in ["203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"] {
            statuses.push(server.send(spoofed(ip)).await.status);
        }
        statuses
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );

    // Trusting 127.0.0.1 as a proxy, its forwarded client addresses become the keys.
    let trusted = tollgate::key::TrustedProxies::new(["127.0.0.1/32"]).expect("cidr");
    let server = Server::start(app(layer(vec![by_client(trusted)], &clock))).await;
    for ip in ["203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4"] {
        assert_eq!(
            server.send(spoofed(ip)).await.status,
            StatusCode::OK,
            "{ip}"
        );
    }
}

#[tokio::test]
async fn route_costs_follow_axums_matched_path() {
    let clock = ManualClock::new(BASE);
    let costs = tollgate::layer::Costs::new()
        .route(http::Method::GET, "/users/{id}", 3)
        .expect("route")
        .route(http::Method::GET, "/health", 0)
        .expect("route");
    let policy = Policy::new("api", Quota::per_minute(10))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .costs(costs);
    let app = Router::new()
        .route("/users/{id}", get(|| async { "user" }))
        .route("/health", get(|| async { "ok" }))
        .route("/", get(|| async { "home" }))
        .layer(layer(vec![policy], &clock));
    let server = Server::start(app).await;
    assert_eq!(
        server.get("/users/42").await.header("ratelimit"),
        r#""api";r=7;t=60"#
    );
    assert_eq!(
        server.get("/users/abc").await.header("ratelimit"),
        r#""api";r=4;t=60"#
    );
    assert!(
        !server
            .get("/health")
            .await
            .headers
            .contains_key("ratelimit"),
        "free"
    );
    assert_eq!(
        server.get("/").await.header("ratelimit"),
        r#""api";r=3;t=60"#
    );
    let expensive = server.get("/users/7").await;
    assert_eq!(expensive.status, StatusCode::OK);
    assert_eq!(expensive.header("ratelimit"), r#""api";r=0;t=60"#);
    assert_eq!(
        server.get("/users/8").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_cost_above_capacity_is_a_build_error_naming_the_route() {
    let costs = tollgate::layer::Costs::new()
        .route(http::Method::POST, "/upload", 50)
        .expect("route");
    let err = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(20))
                .expect("policy")
                .costs(costs),
        )
        .build()
        .expect_err("cost 50 > capacity 20");
    let message = err.to_string();
    assert!(
        message.contains("/upload") && message.contains("\"api\""),
        "{message}"
    );
}

#[tokio::test]
async fn a_cost_that_can_never_fit_is_not_told_to_retry() {
    for cost in [5, u32::MAX] {
        a_cost_that_can_never_fit(cost).await;
    }
}

async fn a_cost_that_can_never_fit(cost: u32) {
    let clock = ManualClock::new(BASE);
    let policy = Policy::new("api", Quota::per_minute(2))
        .expect("policy")
        .costs(move |_: &http::request::Parts| cost);
    let server = Server::start(app(layer(vec![policy], &clock))).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(
        !reply.headers.contains_key("retry-after"),
        "waiting will not help"
    );
    assert_eq!(reply.body, "request cost exceeds the rate limit\n");
    let grpc = server
        .send(
            Request::post("/")
                .header("content-type", "application/grpc-web+proto")
                .body(Full::default())
                .expect("request"),
        )
        .await;
    assert_eq!(grpc.status, StatusCode::OK);
    assert_eq!(grpc.header("content-type"), "application/grpc-web");
    assert_eq!(grpc.header("grpc-status"), "8");
    assert_eq!(grpc.header("grpc-retry-pushback-ms"), "-1");
}
