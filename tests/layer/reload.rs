//! Reloads seen over real HTTP: the layer's `reload` swaps limits and request rules as
//! one set (no request is decided by the limits of one set and the rules of the other),
//! a refused reload leaves the old set serving, and a reload of the layer's limiter
//! alone keeps each limit's rules by name.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Limit, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::in_flight::NoSlots;

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

fn fixed_window(name: &str, quota: Quota) -> Policy {
    Policy::new(name, quota)
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
}

/// Set A: "api" 1000/min per `x-user`, and "global" for everyone.
fn set_a() -> Vec<Policy> {
    vec![
        fixed_window("api", Quota::per_minute(1000))
            .key(key::header("x-user").expect("a header name")),
        fixed_window("global", Quota::per_minute(100_000)).key(key::global()),
    ]
}

/// Set B: "api" 2000/min per `x-tenant` (same name, period and algorithm as A's, so
/// usage carries over between them), and "daily" instead of "global".
fn set_b() -> Vec<Policy> {
    vec![
        fixed_window("api", Quota::per_minute(2000))
            .key(key::header("x-tenant").expect("a header name")),
        fixed_window("daily", Quota::per_day(100_000)).key(key::global()),
    ]
}

const POLICY_A: &str = r#""api";q=1000;w=60, "global";q=100000;w=60"#;
const POLICY_B: &str = r#""api";q=2000;w=60, "daily";q=100000;w=86400"#;

/// A request of a user of its own (fresh under A's key rule) in the one tenant "t".
fn request(user: usize) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", format!("user-{user}"))
        .header("x-tenant", "t")
        .body(Full::default())
        .expect("request")
}

/// The `r` the `ratelimit` header gives the policy `name`.
fn remaining(reply: &Reply, name: &str) -> u64 {
    let header = reply.header("ratelimit");
    let member = header
        .split(", ")
        .find(|m| m.starts_with(&format!("\"{name}\";")))
        .unwrap_or_else(|| panic!("no {name} in {header:?}"));
    let r = member
        .split(';')
        .find_map(|p| p.strip_prefix("r="))
        .unwrap_or_else(|| panic!("no r in {member:?}"));
    r.parse().expect("a number")
}

/// Which set decided `reply`, after checking that its limits and rules agree: each
/// request has a user of its own, so under A's rule "api" counts it alone (r = 999);
/// under B's it counts the tenant, which has spent at least one already (r ≤ 1998).
/// A's limit with B's rule, or B's with A's, shows as anything else.
fn decided_by(reply: &Reply) -> char {
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let policy = reply.header("ratelimit-policy");
    let api = remaining(reply, "api");
    match policy {
        POLICY_A => {
            assert_eq!(api, 999, "A's limit with B's key rule: {reply:?}");
            assert!(
                reply.header("ratelimit").contains("\"global\";"),
                "{reply:?}"
            );
            'A'
        }
        POLICY_B => {
            assert!(api <= 1998, "B's limit with A's key rule: {reply:?}");
            assert!(
                reply.header("ratelimit").contains("\"daily\";"),
                "{reply:?}"
            );
            'B'
        }
        other => panic!("a policy header of neither set: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_request_is_decided_by_one_whole_set_while_the_layer_reloads() {
    const CLIENTS: usize = 4;
    const REQUESTS: usize = 100;
    let layer = RateLimitLayer::builder()
        .policies(set_b())
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer");
    let server = Arc::new(Server::start(app(layer.clone())).await);
    // The tenant spends one under B, so B's "api" never answers r = 1999 again.
    let first = server.send(request(0)).await;
    assert_eq!(first.header("ratelimit-policy"), POLICY_B);
    assert_eq!(remaining(&first, "api"), 1999);

    let done = Arc::new(AtomicBool::new(false));
    let reloader = {
        let (layer, done) = (layer.clone(), done.clone());
        tokio::spawn(async move {
            let mut reloads = 0_u32;
            while !done.load(Ordering::Relaxed) {
                let set = if reloads.is_multiple_of(2) {
                    set_a()
                } else {
                    set_b()
                };
                layer.reload(set).expect("a valid set");
                reloads += 1;
                tokio::task::yield_now().await;
            }
            reloads
        })
    };
    let clients: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let server = server.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for i in 0..REQUESTS {
                    let reply = server.send(request(1 + client * REQUESTS + i)).await;
                    seen.push(decided_by(&reply));
                }
                seen
            })
        })
        .collect();
    let mut seen = Vec::new();
    for client in clients {
        seen.extend(client.await.expect("a client"));
    }
    done.store(true, Ordering::Relaxed);
    let reloads = reloader.await.expect("the reloader");
    assert!(reloads >= 2, "{reloads} reloads");
    assert_eq!(seen.len(), CLIENTS * REQUESTS);
    // Both sets decided some requests: the test saw reloads between requests.
    assert!(seen.contains(&'A') && seen.contains(&'B'), "{seen:?}");
}

#[tokio::test]
async fn a_refused_reload_leaves_the_old_set_serving() {
    let layer = RateLimitLayer::builder()
        .policies(set_a())
        .store(NoSlots(MemoryStore::with_clock(ManualClock::new(BASE))))
        .build()
        .expect("layer");
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(decided_by(&server.send(request(1)).await), 'A');

    let twice = layer
        .reload(set_b().into_iter().chain(set_b()))
        .expect_err("a name twice");
    assert!(
        twice.to_string().contains("duplicate limit name"),
        "{twice}"
    );
    let slots = layer
        .reload(
            set_b()
                .into_iter()
                .chain([Policy::in_flight_only("uploads", 2).expect("policy")]),
        )
        .expect_err("no slots on this store");
    assert!(slots.to_string().contains("\"uploads\""), "{slots}");

    // A's limits and rules, as before: every user counted alone, "global" beside it.
    let names: Vec<String> = layer
        .policies()
        .iter()
        .map(|p| p.name().to_owned())
        .collect();
    assert_eq!(names, ["api", "global"]);
    let limits: Vec<String> = layer
        .limiter()
        .limits()
        .iter()
        .map(|l| l.name().to_owned())
        .collect();
    assert_eq!(limits, ["api", "global"]);
    for user in 2..5 {
        assert_eq!(decided_by(&server.send(request(user)).await), 'A');
    }
}

#[tokio::test]
async fn a_reload_of_the_limiter_alone_keeps_each_limits_rules_by_name() {
    let layer = RateLimitLayer::builder()
        .policies(set_a())
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer");
    let server = Server::start(app(layer.clone())).await;
    layer
        .limiter()
        .reload([
            Limit::new("api", Quota::per_minute(3))
                .expect("limit")
                .algorithm(Algorithm::FixedWindow),
            Limit::new("new", Quota::per_minute(10))
                .expect("limit")
                .algorithm(Algorithm::FixedWindow),
        ])
        .expect("a valid set");
    let reply = server.send(request(1)).await;
    assert_eq!(
        reply.header("ratelimit-policy"),
        r#""api";q=3;w=60, "new";q=10;w=60"#
    );
    // "api" keeps its key rule (per `x-user`): two users, two counts of 3.
    for _ in 0..2 {
        server.send(request(1)).await;
    }
    assert_eq!(
        server.send(request(1)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(server.send(request(2)).await.status, StatusCode::OK);
    // "new" has the default rules: keyed by the peer (every request here, one count).
    let api = layer.policy("api").expect("api");
    let new = layer.policy("new").expect("new");
    let (parts, ()) = Request::get("/")
        .header("x-user", "user-9")
        .body(())
        .expect("request")
        .into_parts();
    assert!(api.key_of(&parts).is_some(), "api keys by x-user");
    assert_eq!(new.cost_of(&parts), 1);
    let reply = server.send(request(3)).await;
    // 1 (first) + 2 + 1 (refused, charged to none) + 1 + this one = 5 of 10 from one peer:
    // the refused request was denied by "api", so "new" was not charged for it.
    assert_eq!(remaining(&reply, "new"), 5, "{reply:?}");
}
