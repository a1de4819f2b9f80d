//! axum's conventions, in a real axum server over TCP: `Decisions` as an extractor
//! (a 500 that says why without a layer, `Option<Decisions>` to cope), every request
//! the layer passes on carrying them, a per-route limit with `route_layer`, and a
//! handler answering its own limiter check with `Rejected` (`IntoResponse`).

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;
use support::http::Server;
use tollgate::layer::{Decisions, Rejected, Rejection, RejectionInfo};
use tollgate::{Key, Limit, Limiter, Policy, Quota, RateLimitLayer, key};

/// Each decision as `name=remaining`, in order.
async fn listed(decisions: Decisions) -> String {
    decisions
        .iter()
        .map(|d| format!("{}={}", d.limit, d.remaining))
        .collect::<Vec<_>>()
        .join(",")
}

async fn maybe(decisions: Option<Decisions>) -> String {
    match decisions {
        Some(decisions) => format!("{} decisions", decisions.len()),
        None => "no layer".to_owned(),
    }
}

fn two_policies() -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_minute(2)).expect("policy"))
        .policy(Policy::new("global", Quota::per_minute(100)).expect("policy"))
        .build()
        .expect("layer")
}

#[tokio::test]
async fn handlers_read_every_policys_decision_with_the_extractor() {
    let app = Router::new().route("/", get(listed)).layer(two_policies());
    let server = Server::start(app).await;
    assert_eq!(server.get("/").await.body, "api=1,global=99");
    assert_eq!(server.get("/").await.body, "api=0,global=98");
}

#[tokio::test]
async fn a_handler_without_the_layer_gets_a_500_that_says_why() {
    let app = Router::new()
        .route("/", get(listed))
        .route("/maybe", get(maybe));
    let server = Server::start(app).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        reply.body.contains("no tollgate::layer::Decisions"),
        "{}",
        reply.body
    );
    assert!(reply.body.contains("RateLimitLayer"), "{}", reply.body);
    // `Option<Decisions>` copes instead.
    let maybe = server.get("/maybe").await;
    assert_eq!(
        (maybe.status, maybe.body.as_str()),
        (StatusCode::OK, "no layer")
    );
}

#[tokio::test]
async fn the_extension_turned_off_is_a_500_too() {
    let app = Router::new()
        .route("/", get(listed))
        .layer(two_policies().decisions_extension(false));
    let reply = Server::start(app).await.get("/").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(reply.body.contains("decisions_extension"), "{}", reply.body);
}

#[tokio::test]
async fn requests_no_policy_checked_carry_empty_decisions() {
    // Allowed by a predicate, keyless under a skipping policy, free, and limited only
    // in flight: each reaches the handler with empty `Decisions`.
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("per-key", Quota::per_minute(10))
                .expect("policy")
                .key(key::header("x-api-key").expect("header name"))
                .costs(|parts: &http::request::Parts| u32::from(parts.uri.path() != "/free")),
        )
        .policy(
            Policy::in_flight_only("slots", 8)
                .expect("policy")
                .key(key::header("x-slot").expect("header name")),
        )
        .build()
        .expect("layer")
        .allow(|parts: &http::request::Parts| parts.headers.contains_key("x-internal"));
    let app = Router::new()
        .route("/", get(maybe))
        .route("/free", get(maybe))
        .layer(layer);
    let server = Server::start(app).await;
    let send = |path: &str, header: Option<(&str, &str)>| {
        let mut request = Request::get(path);
        if let Some((name, value)) = header {
            request = request.header(name, value);
        }
        server.send(request.body(Full::default()).expect("request"))
    };
    assert_eq!(
        send("/", Some(("x-internal", "1"))).await.body,
        "0 decisions"
    );
    assert_eq!(send("/", None).await.body, "0 decisions");
    assert_eq!(
        send("/free", Some(("x-api-key", "k"))).await.body,
        "0 decisions"
    );
    assert_eq!(send("/", Some(("x-slot", "s"))).await.body, "0 decisions");
    // And a checked one has its decision.
    assert_eq!(
        send("/", Some(("x-api-key", "k"))).await.body,
        "1 decisions"
    );
}

#[tokio::test]
async fn a_per_route_limit_counts_only_its_route() {
    let exports = RateLimitLayer::builder()
        .policy(
            Policy::new("export", Quota::per_minute(1))
                .expect("policy")
                .key(key::peer_ip()),
        )
        .build()
        .expect("layer");
    let everyone = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(100))
                .expect("policy")
                .key(key::peer_ip()),
        )
        .build()
        .expect("layer");
    let app = Router::new()
        .route("/export", get(listed).route_layer(exports))
        .route("/", get(listed))
        .layer(everyone);
    let server = Server::start(app).await;

    // A 404 never reaches a route layer: the export quota is untouched.
    assert_eq!(server.get("/nowhere").await.status, StatusCode::NOT_FOUND);
    let export = server.get("/export").await;
    assert_eq!(export.status, StatusCode::OK);
    // The router-wide layer's decision, then the route's.
    assert_eq!(export.body, "api=98,export=0");
    assert_eq!(
        server.get("/export").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The other route is limited by the router-wide layer only.
    let index = server.get("/").await;
    assert_eq!(index.status, StatusCode::OK);
    assert!(index.body.starts_with("api="), "{}", index.body);
    assert!(!index.body.contains("export"), "{}", index.body);
}

/// Checks `?rows` rows against a 1,000-a-minute budget, answering a denial as the
/// layer would.
async fn rows(State(limiter): State<Limiter>, uri: http::Uri) -> Result<String, Rejected> {
    let n: u32 = uri
        .query()
        .and_then(|q| q.strip_prefix("rows="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let decision = limiter
        .check("rows", &Key::from("everyone"), n)
        .await
        .expect("the memory store does not fail");
    if decision.allowed {
        Ok(format!("{n} rows"))
    } else {
        Err(Rejection::Problem.reject(&RejectionInfo::rate_limited(vec![decision])))
    }
}

#[tokio::test]
async fn a_handler_answers_its_own_check_as_the_layer_would() {
    let limiter = Limiter::builder()
        .limit(Limit::new("rows", Quota::per_minute(1_000)).expect("limit"))
        .build()
        .expect("limiter");
    let app = Router::new().route("/", get(rows)).with_state(limiter);
    let server = Server::start(app).await;
    assert_eq!(server.get("/?rows=600").await.body, "600 rows");
    let denied = server.get("/?rows=600").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("content-type"), "application/problem+json");
    let retry: u64 = denied.header("retry-after").parse().expect("seconds");
    assert!((1..=60).contains(&retry), "{retry}");
    let problem: Value = serde_json::from_str(&denied.body).expect("json");
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["violated-policies"], serde_json::json!(["rows"]));
    // A cost that can never fit: no Retry-After, as from the layer.
    let never = server.get("/?rows=1001").await;
    assert_eq!(never.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(!never.headers.contains_key("retry-after"), "{never:?}");
}
