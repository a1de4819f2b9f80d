//! The wire formats, read by parsers no one here wrote, over real HTTP (a real axum
//! server, a hyper client): every header style the layer writes parses as RFC 9651
//! Structured Fields with the `sfv` crate; draft-ietf-httpapi-ratelimit-headers-11's
//! in-flight members (`qu="concurrent-requests"`) and partition keys (`pk`, a Byte
//! Sequence of the key's fingerprint, never the raw key); its problem types in RFC
//! 9457 bodies parsed with `serde_json`; and two tollgate layers adding up their
//! members.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::Full;
use serde_json::Value;
use sfv::{BareItem, Item, List, ListEntry, Parser};
use support::http::{Reply, Server};
use support::in_flight::App;
use tollgate::clock::ManualClock;
use tollgate::layer::{FailMode, HeaderStyle, MissingKey, Rejection, ResetFormat};
use tollgate::{Algorithm, Key, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, key};

use crate::broken_store::BrokenStore;

const BASE: Duration = Duration::from_secs(1_699_920_000);

const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";
const ABNORMAL_USAGE: &str =
    "https://iana.org/assignments/http-problem-types#abnormal-usage-detected";

// ---------------------------------------------------------------------------------------
// Reading Structured Fields with `sfv`.
// ---------------------------------------------------------------------------------------

/// Every field line of `name`, combined as RFC 9110 §5.3 says (joined by ", "), read
/// as an SF List; panics when absent or malformed.
fn sf_list(reply: &Reply, name: &str) -> List {
    let lines: Vec<&str> = reply
        .headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("ASCII"))
        .collect();
    assert!(!lines.is_empty(), "{name} missing: {reply:?}");
    let combined = lines.join(", ");
    Parser::new(combined.as_bytes())
        .parse::<List>()
        .unwrap_or_else(|e| panic!("{name}: {combined:?} is not an SF List: {e}"))
}

/// `name` read as an SF Item, panicking when absent or malformed.
fn sf_item(reply: &Reply, name: &str) -> Item {
    let value = reply
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("{name} missing: {reply:?}"));
    Parser::new(value.as_bytes())
        .parse::<Item>()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not an SF Item: {e}"))
}

/// `name` read as an SF Integer without parameters.
fn sf_integer(reply: &Reply, name: &str) -> i64 {
    let item = sf_item(reply, name);
    assert!(item.params.is_empty(), "{name} has parameters");
    i64::from(item.bare_item.as_integer().expect("an SF Integer"))
}

fn items(list: &List) -> Vec<&Item> {
    list.iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => item,
            ListEntry::InnerList(_) => panic!("an inner list where an item belongs"),
        })
        .collect()
}

/// A member's name: draft-11 names are SF Strings.
fn name(item: &Item) -> &str {
    item.bare_item
        .as_string()
        .expect("a policy name is an SF String")
        .as_str()
}

fn param_names(item: &Item) -> Vec<&str> {
    item.params.keys().map(|k| k.as_str()).collect()
}

fn int_param(item: &Item, key: &str) -> i64 {
    let value = item
        .params
        .get(key)
        .unwrap_or_else(|| panic!("no {key} on {item:?}"));
    i64::from(value.as_integer().expect("an SF Integer"))
}

fn problem(reply: &Reply) -> Value {
    assert_eq!(reply.header("content-type"), "application/problem+json");
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{:?}: {e}", reply.body))
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

// ---------------------------------------------------------------------------------------
// Every header style.
// ---------------------------------------------------------------------------------------

/// 2 a minute per peer (fixed window), and at most 4 in flight.
fn two_policies(clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(2))
                .expect("policy")
                .algorithm(Algorithm::FixedWindow)
                .key(key::peer_ip()),
        )
        .policy(Policy::in_flight_only("uploads", 4).expect("policy"))
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
}

/// Two admitted requests, then a rejected one, in `style`.
async fn three_replies(style: HeaderStyle) -> [Reply; 3] {
    let clock = ManualClock::new(BASE);
    let server = Server::start(app(two_policies(&clock).headers(style))).await;
    let first = server.get("/").await;
    let second = server.get("/").await;
    let third = server.get("/").await;
    assert_eq!(
        [first.status, second.status, third.status],
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Retry-After is delay-seconds: an SF Integer too.
    assert_eq!(sf_integer(&third, "retry-after"), 60);
    [first, second, third]
}

#[tokio::test]
async fn draft11_headers_parse_as_structured_field_lists() {
    for (reply, remaining) in three_replies(HeaderStyle::Draft11)
        .await
        .iter()
        .zip([1, 0, 0])
    {
        let policy = sf_list(reply, "ratelimit-policy");
        let policy = items(&policy);
        assert_eq!(policy.len(), 2, "{reply:?}");
        assert_eq!(name(policy[0]), "api");
        assert_eq!(param_names(policy[0]), ["q", "w"]);
        assert_eq!(
            (int_param(policy[0], "q"), int_param(policy[0], "w")),
            (2, 60)
        );
        // The in-flight bound: a quota of concurrent requests, no window.
        assert_eq!(name(policy[1]), "uploads");
        assert_eq!(param_names(policy[1]), ["q", "qu"]);
        assert_eq!(int_param(policy[1], "q"), 4);
        assert_eq!(
            policy[1]
                .params
                .get("qu")
                .and_then(BareItem::as_string)
                .map(sfv::StringRef::as_str),
            Some("concurrent-requests")
        );

        let state = sf_list(reply, "ratelimit");
        let state = items(&state);
        // `r` is required and no store says how many slots are free: no in-flight member.
        assert_eq!(state.len(), 1, "{reply:?}");
        assert_eq!(name(state[0]), "api");
        assert_eq!(param_names(state[0]), ["r", "t"]);
        assert_eq!(int_param(state[0], "r"), remaining);
        assert_eq!(int_param(state[0], "t"), 60);
    }
}

#[tokio::test]
async fn draft06_headers_parse_as_structured_fields() {
    for (reply, remaining) in three_replies(HeaderStyle::Draft06)
        .await
        .iter()
        .zip([1, 0, 0])
    {
        assert_eq!(sf_integer(reply, "ratelimit-limit"), 2);
        assert_eq!(sf_integer(reply, "ratelimit-remaining"), remaining);
        assert_eq!(sf_integer(reply, "ratelimit-reset"), 60);
        // Draft-06's policy list: bare integers with a window; rate policies only.
        let policy = sf_list(reply, "ratelimit-policy");
        let policy = items(&policy);
        assert_eq!(policy.len(), 1, "{reply:?}");
        assert_eq!(policy[0].bare_item.as_integer().map(i64::from), Some(2));
        assert_eq!(param_names(policy[0]), ["w"]);
        assert_eq!(int_param(policy[0], "w"), 60);
        assert!(!reply.headers.contains_key("ratelimit"));
    }
}

#[tokio::test]
async fn legacy_headers_parse_as_structured_field_integers() {
    for format in [ResetFormat::Seconds, ResetFormat::UnixEpoch] {
        let replies = three_replies(HeaderStyle::Legacy(format)).await;
        for (reply, remaining) in replies.iter().zip([1, 0, 0]) {
            assert_eq!(sf_integer(reply, "x-ratelimit-limit"), 2);
            assert_eq!(sf_integer(reply, "x-ratelimit-remaining"), remaining);
            let reset = sf_integer(reply, "x-ratelimit-reset");
            match format {
                ResetFormat::Seconds => assert_eq!(reset, 60),
                // Wall-clock seconds: after 2023, within the 15-digit SF Integer range.
                _ => assert!(reset > 1_700_000_000, "{reset}"),
            }
            assert!(!reply.headers.contains_key("ratelimit-policy"));
        }
    }
}

#[tokio::test]
async fn no_headers_style_writes_none_but_retry_after() {
    for reply in three_replies(HeaderStyle::None).await {
        assert!(
            reply
                .headers
                .keys()
                .all(|name| !name.as_str().contains("ratelimit")),
            "{reply:?}"
        );
    }
}

#[tokio::test]
async fn names_with_quotes_and_backslashes_survive_sf_and_json() {
    let tricky = r#"say "hi" \ there"#;
    let clock = ManualClock::new(BASE);
    let layer = RateLimitLayer::builder()
        .policy(Policy::new(tricky, Quota::per_minute(1)).expect("printable ASCII"))
        .store(MemoryStore::with_clock(clock))
        .build()
        .expect("layer")
        .rejection(Rejection::Problem);
    let server = Server::start(app(layer)).await;
    server.get("/").await;
    let rejected = server.get("/").await;
    assert_eq!(rejected.status, StatusCode::TOO_MANY_REQUESTS);
    for header in ["ratelimit-policy", "ratelimit"] {
        let list = sf_list(&rejected, header);
        assert_eq!(name(items(&list)[0]), tricky);
    }
    assert_eq!(problem(&rejected)["violated-policies"][0], tricky);
}

// ---------------------------------------------------------------------------------------
// In-flight bounds and partition keys.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_refusal_for_a_slot_advertises_the_bound_and_is_a_quota_exceeded_problem() {
    let layer = RateLimitLayer::builder()
        .policy(Policy::in_flight_only("uploads", 1).expect("policy"))
        .build()
        .expect("layer")
        .rejection(Rejection::Problem);
    let app = App::start(|router| router.layer(layer)).await;
    let running = app.fill(1).await;

    let refused = app.server.get("/slow").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(sf_integer(&refused, "retry-after"), 1);
    let policy = sf_list(&refused, "ratelimit-policy");
    let policy = items(&policy);
    assert_eq!(name(policy[0]), "uploads");
    assert_eq!(int_param(policy[0], "q"), 1);
    assert!(!refused.headers.contains_key("ratelimit"), "{refused:?}");
    let body = problem(&refused);
    assert_eq!(body["type"], QUOTA_EXCEEDED);
    assert_eq!(body["title"], "Quota Exceeded");
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["uploads"]));

    for served in app.finish(running).await {
        let policy = sf_list(&served, "ratelimit-policy");
        assert_eq!(name(items(&policy)[0]), "uploads");
    }
}

/// Per API key: 10 a minute, at most 5 at once; partition keys on or off.
fn per_key(partition_keys: bool) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(10))
                .expect("policy")
                .key(key::header("x-api-key").expect("header name"))
                .in_flight(5)
                .expect("in flight"),
        )
        .partition_keys(partition_keys)
        .build()
        .expect("layer")
}

async fn with_key(server: &Server, api_key: &str) -> Reply {
    server
        .send(
            Request::get("/")
                .header("x-api-key", api_key)
                .body(Full::default())
                .expect("request"),
        )
        .await
}

/// Every `pk` of both draft-11 headers, as bytes.
fn partition_keys(reply: &Reply) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    for header in ["ratelimit-policy", "ratelimit"] {
        let list = sf_list(reply, header);
        for item in items(&list) {
            if let Some(pk) = item.params.get("pk") {
                found.push(
                    pk.as_byte_sequence()
                        .expect("pk is a Byte Sequence")
                        .to_vec(),
                );
            }
        }
    }
    found
}

#[tokio::test]
async fn partition_keys_are_each_keys_fingerprint_as_a_byte_sequence() {
    let server = Server::start(app(per_key(true))).await;
    let alice = with_key(&server, "alice-secret-token").await;
    assert_eq!(alice.status, StatusCode::OK);
    // The rate member, the in-flight member and the state member each carry it.
    let fingerprint = Key::from("alice-secret-token").fingerprint().to_vec();
    assert_eq!(partition_keys(&alice), vec![fingerprint; 3]);
    let state = sf_list(&alice, "ratelimit");
    assert_eq!(param_names(items(&state)[0]), ["r", "t", "pk"]);
    // Never the raw key.
    let text = format!("{:?}", alice.headers);
    assert!(!text.contains("alice-secret-token"), "{text}");

    // Another key, another partition.
    let bob = with_key(&server, "bob-secret-token").await;
    let bob_fingerprint = Key::from("bob-secret-token").fingerprint().to_vec();
    assert_eq!(partition_keys(&bob), vec![bob_fingerprint; 3]);
}

#[tokio::test]
async fn partition_keys_are_off_by_default() {
    let server = Server::start(app(per_key(false))).await;
    let reply = with_key(&server, "alice-secret-token").await;
    assert!(partition_keys(&reply).is_empty(), "{reply:?}");
    assert_eq!(
        reply.header("ratelimit-policy"),
        r#""api";q=10;w=60, "api";q=5;qu="concurrent-requests""#
    );
}

// ---------------------------------------------------------------------------------------
// Problem types.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn only_the_policies_that_denied_are_violated() {
    let clock = ManualClock::new(BASE);
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("roomy", Quota::per_minute(100)).expect("policy"))
        .policy(Policy::new("tight", Quota::per_minute(1)).expect("policy"))
        .store(MemoryStore::with_clock(clock))
        .build()
        .expect("layer")
        .rejection(Rejection::Problem);
    let server = Server::start(app(layer)).await;
    server.get("/").await;
    let rejected = server.get("/").await;
    let body = problem(&rejected);
    assert_eq!(body["type"], QUOTA_EXCEEDED);
    assert_eq!(body["status"], 429);
    assert_eq!(body["detail"], "rate limit exceeded");
    assert_eq!(body["retry_after"], 60);
    assert_eq!(body["violated-policies"], serde_json::json!(["tight"]));
}

#[tokio::test]
async fn a_penalty_block_and_an_operators_block_are_abnormal_usage() {
    let clock = ManualClock::new(BASE);
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("login", Quota::per_minute(1))
                .expect("policy")
                .key(key::peer_ip())
                .penalty(
                    Penalty::after(1)
                        .within(Duration::from_secs(60))
                        .block_for(Duration::from_secs(600)),
                ),
        )
        .policy(Policy::new("other", Quota::per_minute(100)).expect("policy"))
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
        .rejection(Rejection::Problem);
    let limiter = layer.limiter().clone();
    let server = Server::start(app(layer)).await;
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    let tripped = server.get("/").await;
    let body = problem(&tripped);
    assert_eq!(body["type"], ABNORMAL_USAGE);
    assert_eq!(body["title"], "Abnormal Usage Detected");
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["login"]));
    assert_eq!(sf_integer(&tripped, "retry-after"), 600);

    // An operator's block on a fresh caller's record: the same type.
    let caller = Key::from(server.addr.ip());
    limiter.reset("login", &caller).await.expect("reset");
    limiter
        .block("login", &caller, Duration::from_secs(30))
        .await
        .expect("block");
    let blocked = server.get("/").await;
    assert_eq!(problem(&blocked)["type"], ABNORMAL_USAGE);
    assert_eq!(sf_integer(&blocked, "retry-after"), 30);
}

#[tokio::test]
async fn a_store_failure_under_fail_closed_is_temporary_reduced_capacity() {
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_minute(10)).expect("policy"))
        .store(BrokenStore(calls))
        .build()
        .expect("layer")
        .on_store_error(FailMode::Closed)
        .rejection(Rejection::Problem);
    let server = Server::start(app(layer)).await;
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    let body = problem(&reply);
    assert_eq!(body["type"], REDUCED_CAPACITY);
    assert_eq!(body["title"], "Temporary Reduced Capacity");
    assert_eq!(body["status"], 503);
    assert_eq!(body["violated-policies"], serde_json::json!([]));
    assert_eq!(sf_integer(&reply, "retry-after"), 1);
}

#[tokio::test]
async fn a_full_hold_is_temporary_reduced_capacity_naming_the_queue() {
    let clock = ManualClock::new(BASE);
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("queue", Quota::per_second(1).with_burst(5).expect("burst"))
                .expect("policy")
                .algorithm(Algorithm::LeakyBucket),
        )
        .store(MemoryStore::with_clock(clock))
        .build()
        .expect("layer")
        .max_held(0)
        .rejection(Rejection::Problem);
    let server = Server::start(app(layer)).await;
    // The first is served at once; the second would wait its turn, and nothing may wait.
    assert_eq!(server.get("/").await.status, StatusCode::OK);
    let reply = server.get("/").await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    let body = problem(&reply);
    assert_eq!(body["type"], REDUCED_CAPACITY);
    assert_eq!(body["status"], 429);
    assert_eq!(body["violated-policies"], serde_json::json!(["queue"]));
}

#[tokio::test]
async fn a_denied_request_and_a_missing_key_are_about_blank() {
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(10))
                .expect("policy")
                .key(key::header("x-api-key").expect("header name"))
                .on_missing_key(MissingKey::Reject),
        )
        .build()
        .expect("layer")
        .deny(|parts: &http::request::Parts| parts.headers.contains_key("x-banned"))
        .rejection(Rejection::Problem);
    let server = Server::start(app(layer)).await;

    let banned = server
        .send(
            Request::get("/")
                .header("x-banned", "1")
                .body(Full::default())
                .expect("request"),
        )
        .await;
    assert_eq!(banned.status, StatusCode::FORBIDDEN);
    let body = problem(&banned);
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["title"], "Forbidden");
    assert_eq!(body["status"], 403);
    assert!(body.get("violated-policies").is_none(), "{body}");

    let keyless = server.get("/").await;
    assert_eq!(keyless.status, StatusCode::TOO_MANY_REQUESTS);
    let body = problem(&keyless);
    assert_eq!(body["type"], "about:blank");
    assert_eq!(body["title"], "Too Many Requests");
}

// ---------------------------------------------------------------------------------------
// Two layers.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_layer_around_another_adds_its_members_as_field_lines_of_their_own() {
    let per_route = RateLimitLayer::builder()
        .policy(Policy::new("export", Quota::per_minute(1)).expect("policy"))
        .build()
        .expect("layer");
    let router_wide = RateLimitLayer::builder()
        .policy(Policy::new("global", Quota::per_minute(100)).expect("policy"))
        .build()
        .expect("layer");
    let app = Router::new()
        .route(
            "/export",
            get(|| async { "exported" }).route_layer(per_route),
        )
        .route("/", get(|| async { "ok" }))
        .layer(router_wide);
    let server = Server::start(app).await;

    let export = server.get("/export").await;
    assert_eq!(export.status, StatusCode::OK);
    // Two field lines each, one list once combined: the inner layer's member first.
    assert_eq!(export.headers.get_all("ratelimit").iter().count(), 2);
    for header in ["ratelimit-policy", "ratelimit"] {
        let list = sf_list(&export, header);
        let names: Vec<&str> = items(&list).into_iter().map(name).collect();
        assert_eq!(names, ["export", "global"], "{header}");
    }
    // Elsewhere, the router-wide layer alone.
    let index = server.get("/").await;
    let list = sf_list(&index, "ratelimit");
    assert_eq!(
        items(&list).into_iter().map(name).collect::<Vec<_>>(),
        ["global"]
    );
}
