//! Rollout per policy, over real HTTP: a shadowed policy serves what it would reject
//! and reports (headers) and charges exactly what enforcement would, so turning it on
//! shows no jump; the enforced policies of a request a shadowed one would reject still
//! count it; `enforce(share)` picks a stable share of callers by key fingerprint, as
//! close to the share as the fingerprints make it; reloads (the layer's, a TOML
//! file's) move the share; a shadowed in-flight limit never refuses.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use support::in_flight::App;
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Policy, Quota, RateLimitLayer, key};

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// `quota` per `x-user`, counted in fixed windows (so that nothing refills while a
/// test runs on its manual clock).
fn per_user(name: &str, quota: Quota) -> Policy {
    Policy::new(name, quota)
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-user").expect("a header name"))
}

fn layer(policies: impl IntoIterator<Item = Policy>) -> RateLimitLayer {
    layer_on(policies, MemoryStore::with_clock(ManualClock::new(BASE)))
}

fn layer_on(policies: impl IntoIterator<Item = Policy>, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policies(policies)
        .store(store)
        .build()
        .expect("layer")
}

fn as_user(user: &str) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", user)
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
    member
        .split(';')
        .find_map(|p| p.strip_prefix("r="))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no r in {member:?}"))
}

#[tokio::test]
async fn a_shadowed_policy_serves_and_reports_what_enforcement_would_then_turns_on_without_a_jump()
{
    let store = || MemoryStore::with_clock(ManualClock::new(BASE));
    shadow_then_enforced(store(), store()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_shadowed_policy_serves_and_reports_what_enforcement_would() {
    use crate::shared_redis::redis_store;
    let clock = ManualClock::new(BASE);
    shadow_then_enforced(
        redis_store("rollout-shadow", clock.clone()),
        redis_store("rollout-enforced", clock),
    )
    .await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_the_cluster_a_shadowed_policy_serves_and_reports_what_enforcement_would() {
    use crate::shared_redis::cluster_store;
    let clock = ManualClock::new(BASE);
    shadow_then_enforced(
        cluster_store("rollout-shadow", clock.clone()),
        cluster_store("rollout-enforced", clock),
    )
    .await;
}

/// A shadowed and an enforced twin, the same requests: the shadowed one serves what
/// the other rejects, with the same headers; then enforced, it rejects at once.
async fn shadow_then_enforced(shadow_store: impl Store, enforced_store: impl Store) {
    let quota = Quota::per_minute(3);
    let shadowed = layer_on([per_user("api", quota).shadow(true)], shadow_store);
    let enforced = layer_on([per_user("api", quota)], enforced_store);
    let (shadow_server, enforced_server) = (
        Server::start(app(shadowed.clone())).await,
        Server::start(app(enforced)).await,
    );
    for i in 0..6 {
        let watched = shadow_server.send(as_user("alice")).await;
        let rejected = enforced_server.send(as_user("alice")).await;
        assert_eq!(watched.status, StatusCode::OK, "request {i}: {watched:?}");
        assert_eq!(watched.body, "ok");
        let expected = if i < 3 {
            StatusCode::OK
        } else {
            StatusCode::TOO_MANY_REQUESTS
        };
        assert_eq!(rejected.status, expected, "request {i}: {rejected:?}");
        // The same usage, the same headers: shadow mode charged what enforcement did.
        assert_eq!(
            remaining(&watched, "api"),
            remaining(&rejected, "api"),
            "request {i}"
        );
        assert_eq!(
            watched.header("ratelimit"),
            rejected.header("ratelimit"),
            "request {i}"
        );
    }
    // Enforced from now on: the caller is where enforcement would have left it.
    shadowed
        .reload([per_user("api", quota)])
        .expect("a valid set");
    let now_enforced = shadow_server.send(as_user("alice")).await;
    assert_eq!(now_enforced.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(remaining(&now_enforced, "api"), 0);
    // Another caller was never over: served.
    assert_eq!(
        shadow_server.send(as_user("bob")).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_enforced_policies_count_a_request_only_a_shadowed_one_would_reject() {
    enforced_beside_shadowed(MemoryStore::with_clock(ManualClock::new(BASE))).await;
}

/// On a remote store the enforced policies' second decision is a store call the
/// request awaits.
#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_the_enforced_policies_count_a_request_only_a_shadowed_one_would_reject() {
    use crate::shared_redis::redis_store;
    enforced_beside_shadowed(redis_store("rollout-mixed", ManualClock::new(BASE))).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_the_cluster_the_enforced_policies_count_a_request_only_a_shadowed_one_would_reject() {
    use crate::shared_redis::cluster_store;
    enforced_beside_shadowed(cluster_store("rollout-mixed", ManualClock::new(BASE))).await;
}

async fn enforced_beside_shadowed(store: impl Store) {
    // "route" (shadowed) allows 1 a minute to everyone together; "user" (enforced) 3
    // per caller. Past route's one, its denials must not let alice past user's three.
    let route = Policy::new("route", Quota::per_minute(1))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .shadow(true);
    let layer = layer_on([per_user("user", Quota::per_minute(3)), route], store);
    let server = Server::start(app(layer)).await;
    for left in [2, 1, 0] {
        let reply = server.send(as_user("alice")).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        assert_eq!(remaining(&reply, "user"), left, "{reply:?}");
        assert_eq!(remaining(&reply, "route"), 0, "{reply:?}");
    }
    let fourth = server.send(as_user("alice")).await;
    assert_eq!(fourth.status, StatusCode::TOO_MANY_REQUESTS, "{fourth:?}");
    assert_eq!(remaining(&fourth, "user"), 0);
    // The retry time is the enforced policy's (a fixed window of a minute), never the
    // shadowed one's.
    assert!(!fourth.header("retry-after").is_empty(), "{fourth:?}");
}

/// A 429's problem type and `violated-policies` name only the policies that rejected
/// the request: a shadowed policy that denied it too (here blocked, which would make
/// the type `abnormal-usage-detected`) only watches.
#[tokio::test]
async fn a_shadowed_policy_never_appears_in_a_429s_problem_type_or_violated_policies() {
    let watch = per_user("watch", Quota::per_minute(1)).shadow(true);
    let layer = layer([per_user("user", Quota::per_minute(1)), watch])
        .rejection(tollgate::layer::Rejection::Problem);
    let (parts, ()) = as_user("alice").map(|_| ()).into_parts();
    let alice = layer
        .policy("watch")
        .and_then(|p| p.key_of(&parts))
        .expect("a key");
    layer
        .limiter()
        .block("watch", &alice, Duration::from_secs(3_600))
        .await
        .expect("a block");
    let server = Server::start(app(layer)).await;
    assert_eq!(server.send(as_user("alice")).await.status, StatusCode::OK);
    let refused = server.send(as_user("alice")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS, "{refused:?}");
    let problem: serde_json::Value = serde_json::from_str(&refused.body).expect("json");
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(problem["violated-policies"], serde_json::json!(["user"]));
}

/// Whether `key` falls in an enforced share, computed here from the fingerprint as
/// `Rollout` documents it: the first 8 bytes, big-endian, below `share × 2⁶⁴`.
fn in_share(key: &Key, share: f64) -> bool {
    let fingerprint = key.fingerprint();
    let bucket = u64::from_be_bytes(fingerprint[..8].try_into().expect("8 bytes"));
    (bucket as f64) < share * 18_446_744_073_709_551_616.0
}

/// The callers of `enforce(0.1)` among "user-0" … "user-1999": fingerprints are the
/// same in every process and version, so this count is too.
const ENFORCED_OF_2000: usize = 197;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_of_callers_is_enforced_stably_and_close_to_its_fraction() {
    const USERS: usize = 2_000;
    const CLIENTS: usize = 8;
    let policy = per_user("api", Quota::per_minute(1))
        .enforce(0.1)
        .expect("a share");
    let server = Arc::new(Server::start(app(layer([policy.clone()]))).await);
    let expected: Vec<bool> = (0..USERS)
        .map(|user| in_share(&Key::from(format!("user-{user}")), 0.1))
        .collect();
    assert_eq!(
        expected.iter().filter(|e| **e).count(),
        ENFORCED_OF_2000,
        "fingerprints changed"
    );
    // Each caller spends its one request, then is over: enforced callers get 429 on
    // every later request, the others 200, always the same.
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let server = server.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for user in (client..USERS).step_by(CLIENTS) {
                    let name = format!("user-{user}");
                    let first = server.send(as_user(&name)).await;
                    assert_eq!(first.status, StatusCode::OK, "{name}: {first:?}");
                    let second = server.send(as_user(&name)).await.status;
                    let third = server.send(as_user(&name)).await.status;
                    assert_eq!(second, third, "{name} saw two behaviours");
                    seen.push((user, second == StatusCode::TOO_MANY_REQUESTS));
                }
                seen
            })
        })
        .collect();
    let mut enforced = vec![false; USERS];
    for task in tasks {
        for (user, rejected) in task.await.expect("a client") {
            enforced[user] = rejected;
        }
    }
    assert_eq!(
        enforced, expected,
        "the enforced callers are the fingerprint's"
    );
    for (user, enforced) in enforced.iter().enumerate() {
        assert_eq!(
            policy.enforces(&Key::from(format!("user-{user}"))),
            *enforced
        );
    }
    // 10 % of 2 000 is 200; the binomial spread (σ ≈ 13) allows ±40 at 3σ.
    let count = enforced.iter().filter(|e| **e).count();
    assert!((160..=240).contains(&count), "{count} of {USERS}");
}

#[tokio::test]
async fn a_reload_moves_the_share_and_a_caller_follows_it() {
    let quota = Quota::per_minute(1);
    let layer = layer([per_user("api", quota).enforce(0.0).expect("a share")]);
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(server.send(as_user("carol")).await.status, StatusCode::OK);
    let statuses = |share: f64| {
        let (layer, server) = (layer.clone(), &server);
        async move {
            layer
                .reload([per_user("api", quota).enforce(share).expect("a share")])
                .expect("a valid set");
            assert_eq!(
                layer.policy("api").map(|p| p.get_rollout().share()),
                Some(share)
            );
            server.send(as_user("carol")).await.status
        }
    };
    assert_eq!(statuses(0.0).await, StatusCode::OK);
    assert_eq!(statuses(1.0).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses(0.0).await, StatusCode::OK);
    // Carol's fingerprint falls in a share of 0.5 or not; the layer agrees with it.
    let half = if in_share(&Key::from("carol"), 0.5) {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    assert_eq!(statuses(0.5).await, half);
}

#[cfg(feature = "config")]
#[tokio::test]
async fn a_limits_file_moves_the_share_on_reload() {
    use tollgate::config::Limits;
    let file = |rollout: &str| {
        Limits::from_toml(&format!(
            "[[limit]]\nname = \"api\"\nquota = \"1/min\"\nalgorithm = \"fixed_window\"\n\
             key = \"header:x-user\"\n{rollout}\n"
        ))
        .expect("a valid file")
    };
    let layer = layer(file("shadow = true"));
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(server.send(as_user("dave")).await.status, StatusCode::OK);
    assert_eq!(server.send(as_user("dave")).await.status, StatusCode::OK);
    layer.reload(file("enforce = 1")).expect("a valid set");
    assert_eq!(
        server.send(as_user("dave")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    layer.reload(file("enforce = 0.0")).expect("a valid set");
    assert_eq!(server.send(as_user("dave")).await.status, StatusCode::OK);
}

#[cfg(feature = "config")]
#[test]
fn a_bad_share_in_a_file_is_placed_and_quoted() {
    use tollgate::config::Limits;
    let head = "[[limit]]\nname = \"api\"\nquota = \"1/min\"\n";
    for (rollout, column, quoted) in [
        ("enforce = 1.5", 11, "invalid enforcement share 1.5"),
        ("enforce = -1", 11, "invalid enforcement share -1"),
        ("enforce = \"10%\"", 11, "a share of callers from 0 to 1"),
        ("shadow = \"yes\"", 10, "invalid type"),
    ] {
        let err = Limits::from_toml(&format!("{head}{rollout}\n")).expect_err(rollout);
        assert_eq!((err.line(), err.column()), (Some(4), Some(column)), "{err}");
        assert!(err.to_string().contains(quoted), "{rollout}: {err}");
    }
    let both =
        Limits::from_toml(&format!("{head}enforce = 0.5\nshadow = true\n")).expect_err("both");
    assert_eq!((both.line(), both.column()), (Some(5), Some(10)), "{both}");
    assert!(both.to_string().contains("shadow with enforce"), "{both}");
}

#[tokio::test]
async fn a_shadowed_in_flight_limit_lets_every_request_run() {
    let policy = Policy::in_flight_only("slow", 1)
        .expect("policy")
        .shadow(true);
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .build()
        .expect("layer");
    let app = App::start(|router| router.layer(layer)).await;
    // Three at once under a bound of one: none is refused.
    let running = app.fill(3).await;
    let replies = app.finish(running).await;
    assert_eq!(replies.len(), 3);
}
