//! Attacks on the promises of first contact (issue 28: route scopes, key fallbacks,
//! the file saying what the code can, hooks kept by reloads, `ConfigError` printed
//! from `main`, a `Fallback` that carries the blocks it saw, headers that leave out
//! what was not evaluated), of settling (issue 26 part 1), of rollout and metrics
//! (issue 27) and of the ecosystem (issue 29: problem bodies, `pk`, in-flight
//! members, the `Decisions` extractor, CDN client-IP headers, a `ConnectionManager`'s
//! deadline). Public API only, each promise counted exactly.
//!
//! Tests that once exposed a broken promise now pass; two that show documented limits are ignored:
//!
//! ```text
//! cargo test --all-features --test attack_contact -- --ignored
//! ```

#![cfg(all(
    feature = "axum",
    feature = "config",
    feature = "redis",
    feature = "metrics"
))]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use tollgate::clock::ManualClock;
use tollgate::config::Limits;
use tollgate::key::Extractor;
use tollgate::layer::{Decisions, MissingKey};
use tollgate::{
    Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Penalty, Policy, Quota, RateLimitLayer,
    key,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// 2023-11-14T00:00:00Z.
const BASE: Duration = Duration::from_secs(1_699_920_000);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn manual() -> ManualClock {
    ManualClock::new(BASE)
}

fn request(method: Method, path: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .body(Full::default())
        .expect("a request")
}

fn with_header(method: Method, path: &str, name: &str, value: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(path)
        .header(name, value)
        .body(Full::default())
        .expect("a request")
}

fn parts(method: Method, path: &str) -> http::request::Parts {
    Request::builder()
        .method(method)
        .uri(path)
        .body(())
        .expect("a request")
        .into_parts()
        .0
}

fn layer_on(policies: impl IntoIterator<Item = Policy>, clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policies(policies)
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
}

/// A key extractor that counts how often it is asked.
fn counting_key(calls: &Arc<AtomicUsize>) -> Extractor {
    let calls = calls.clone();
    Extractor::new(move |parts: &http::request::Parts| {
        calls.fetch_add(1, Ordering::SeqCst);
        parts
            .headers
            .get("x-user")
            .map(|user| Key::from(user.as_bytes()))
    })
}

/// A handler that counts what it serves.
fn counted(handled: &Arc<AtomicUsize>) -> axum::routing::MethodRouter {
    let handled = handled.clone();
    get(move || {
        let handled = handled.clone();
        async move {
            handled.fetch_add(1, Ordering::SeqCst);
            "handled"
        }
    })
}

// =================================================================================
// Issue 28: route scopes.
// =================================================================================

mod routes {
    use super::*;

    /// "requests elsewhere are not looked at — no key is needed, nothing is charged,
    /// no header speaks for it": the key extractor is never even called for a request
    /// outside the scope, a reject-on-missing-key policy does not reject it, and its
    /// handler sees empty `Decisions`.
    #[tokio::test]
    async fn a_scoped_policy_never_looks_at_a_request_outside_its_routes() -> TestResult {
        let clock = manual();
        let calls = Arc::new(AtomicUsize::new(0));
        let search = Policy::new("search", Quota::per_minute(1))?
            .algorithm(Algorithm::FixedWindow)
            .key(counting_key(&calls))
            .on_missing_key(MissingKey::Reject)
            .on_route(Method::GET, "/search")?;
        let layer = layer_on([search], &clock);
        let app = Router::new()
            .route("/search", get(|| async { "results" }))
            .route(
                "/home",
                get(|decisions: Decisions| async move { format!("{}", decisions.len()) }),
            )
            .route("/form", post(|| async { "posted" }));
        let server = Server::start(app.layer(layer)).await;

        for _ in 0..20 {
            let home = server.get("/home").await;
            assert_eq!(home.status, StatusCode::OK, "{home:?}");
            assert_eq!(home.body, "0", "no decision of the scoped policy");
            assert_eq!(home.header("ratelimit-policy"), "");
            assert_eq!(home.header("ratelimit"), "");
            let form = server.send(request(Method::POST, "/form")).await;
            assert_eq!(form.status, StatusCode::OK);
            assert_eq!(form.header("ratelimit-policy"), "");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 0, "the key was looked for");

        // In scope: a missing key is rejected; a keyed caller gets one a minute.
        assert_eq!(
            server.get("/search").await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        let keyed = || with_header(Method::GET, "/search", "x-user", "u1");
        assert_eq!(server.send(keyed()).await.status, StatusCode::OK);
        assert_eq!(
            server.send(keyed()).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        Ok(())
    }

    /// `on_route`: "Templates and matching are those of `Costs::route`", and a `GET`
    /// route also prices `HEAD` requests (axum's `get` serves `HEAD` too). So a policy
    /// scoped to `GET /search` must count a `HEAD /search`, which axum serves with
    /// the very same handler: otherwise the handler's work is unlimited by `HEAD`.
    #[tokio::test]
    async fn a_get_scope_counts_head_requests_that_axum_serves_with_the_get_handler() -> TestResult
    {
        let search = Policy::new("search", Quota::per_minute(2))?
            .algorithm(Algorithm::FixedWindow)
            .on_route(Method::GET, "/search")?;
        // The cost table, which the scope says it matches alike, prices HEAD.
        let costs = tollgate::layer::Costs::new()
            .route(Method::GET, "/search", 7)?
            .default(1);
        assert_eq!(costs.cost(&parts(Method::HEAD, "/search")), 7);
        let head_applies = search.applies_to(&parts(Method::HEAD, "/search"));

        let clock = manual();
        let handled = Arc::new(AtomicUsize::new(0));
        let app = Router::new().route("/search", counted(&handled));
        let server = Server::start(app.layer(layer_on([search], &clock))).await;
        let mut head_ok = 0;
        for _ in 0..10 {
            if server.send(request(Method::HEAD, "/search")).await.status == StatusCode::OK {
                head_ok += 1;
            }
        }
        assert!(
            head_applies && head_ok <= 2 && handled.load(Ordering::SeqCst) <= 2,
            "GET /search limited to 2/min: applies_to(HEAD) = {head_applies}, \
             {head_ok} of 10 HEAD requests handled, handler ran {} times",
            handled.load(Ordering::SeqCst)
        );
        Ok(())
    }

    /// Every spelling of the scoped path a client can send to axum either misses the
    /// route (404, the handler never runs) or is counted: the handler never runs more
    /// than the quota allows, whatever the spelling.
    #[tokio::test]
    async fn no_spelling_of_a_scoped_path_reaches_its_handler_uncounted() -> TestResult {
        let clock = manual();
        let handled = Arc::new(AtomicUsize::new(0));
        let search = Policy::new("search", Quota::per_minute(3))?
            .algorithm(Algorithm::FixedWindow)
            .on_route(Method::GET, "/search")?
            .on_route_any("/search/{*rest}")?;
        let app = Router::new()
            .route("/search", counted(&handled))
            .route("/search/{*rest}", counted(&handled));
        let server = Server::start(app.layer(layer_on([search], &clock))).await;
        let spellings = [
            "/search",
            "/search/",
            "//search",
            "/%73earch",
            "/Search",
            "/search?q=1",
            "/search/a",
            "/search/a/",
            "/search//a",
            "/search/%2e%2e",
            "/./search",
            "/search/../search",
            "/search;x",
            "/search%2F",
            "/search/a?b",
        ];
        let mut statuses = Vec::new();
        for path in spellings {
            for _ in 0..3 {
                statuses.push((path, server.get(path).await.status.as_u16()));
            }
        }
        let handled = handled.load(Ordering::SeqCst);
        assert!(
            handled <= 3,
            "quota 3/min, handler ran {handled} times: {statuses:?}"
        );
        Ok(())
    }

    /// A layer on a nested router: axum's `MatchedPath` is the full path there
    /// (`/api/search`), so a scope written as the full path counts its requests. The
    /// scope written relative to the nested router (`/search`) matches nothing, and
    /// the route is silently unlimited: what the count shows.
    #[tokio::test]
    async fn a_scope_on_a_nested_router_is_the_full_matched_path() -> TestResult {
        let handled = Arc::new(AtomicUsize::new(0));
        let clock = manual();
        let full = Policy::new("full", Quota::per_minute(2))?
            .algorithm(Algorithm::FixedWindow)
            .on_route(Method::GET, "/api/search")?;
        let inner = Router::new()
            .route("/search", counted(&handled))
            .layer(layer_on([full], &clock));
        let server = Server::start(Router::new().nest("/api", inner)).await;
        let statuses: Vec<u16> = statuses_of(&server, "/api/search", 5).await;
        assert_eq!(statuses, [200, 200, 429, 429, 429]);

        let relative = Policy::new("relative", Quota::per_minute(2))?
            .algorithm(Algorithm::FixedWindow)
            .on_route(Method::GET, "/search")?;
        let inner = Router::new()
            .route("/search", get(|| async { "ok" }))
            .layer(layer_on([relative], &clock));
        let server = Server::start(Router::new().nest("/api", inner)).await;
        let statuses = statuses_of(&server, "/api/search", 5).await;
        assert_eq!(
            statuses, [200; 5],
            "the relative template matches nothing under the nest"
        );
        Ok(())
    }

    pub(super) async fn statuses_of(server: &Server, path: &str, n: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..n {
            statuses.push(server.get(path).await.status.as_u16());
        }
        statuses
    }

    /// `on_route` refuses "a malformed template, or one that matches exactly what an
    /// earlier route of this policy matches".
    #[test]
    fn route_scopes_refuse_malformed_and_duplicate_templates() -> TestResult {
        let p = || Policy::new("p", Quota::per_minute(5)).expect("policy");
        assert!(
            p().on_route(Method::GET, "/a")?
                .on_route(Method::GET, "/a")
                .is_err()
        );
        assert!(
            p().on_route(Method::GET, "/a/{x}")?
                .on_route(Method::GET, "/a/{y}")
                .is_err()
        );
        assert!(p().on_route_any("/a")?.on_route_any("/a").is_err());
        assert!(p().on_route(Method::GET, "a").is_err());
        assert!(p().on_route(Method::GET, "/a/*rest").is_err());
        assert!(p().on_route(Method::GET, "/{*rest}/a").is_err());
        // Not duplicates: another method, or any method beside one.
        assert!(
            p().on_route(Method::GET, "/a")?
                .on_route(Method::POST, "/a")
                .is_ok()
        );
        assert!(p().on_route(Method::GET, "/a")?.on_route_any("/a").is_ok());
        Ok(())
    }

    /// The file's `routes`, `count_when`, `penalty` and `fallback_for` are refused with
    /// their line and column when wrong.
    #[test]
    fn every_new_file_key_is_placed_when_wrong() {
        let base = "[[limit]]\nname = \"a\"\nquota = \"5/min\"\n";
        let cases: &[(&str, &str)] = &[
            ("routes = [\"GET /users/:id\"]\n", "/users/:id"),
            ("routes = [\"/login\"]\n", "/login"),
            ("routes = [\"GET\"]\n", "GET"),
            ("routes = [5]\n", ""),
            ("count_when = [99]\n", "99"),
            ("count_when = [600]\n", "600"),
            ("count_when = [\"6xx\"]\n", "6xx"),
            ("count_when = [\"40x\"]\n", "40x"),
            ("penalty = { after = 0, block_for = \"1min\" }\n", ""),
            ("penalty = { after = 2, block_for = \"1min\" }\n", ""),
            ("penalty = { after = 1 }\n", ""),
            (
                "penalty = { after = 1, block_for = \"1fortnight\" }\n",
                "1fortnight",
            ),
            (
                "penalty = { after = 1, block_for = \"1min\", afterr = 2 }\n",
                "afterr",
            ),
            ("fallback_for = \"nobody\"\n", "nobody"),
            ("fallback_for = \"a\"\n", ""),
        ];
        let mut wrong = Vec::new();
        for (line, quoted) in cases {
            let text = format!("{base}{line}");
            match Limits::from_toml(&text) {
                Ok(_) => wrong.push(format!("accepted: {line:?}")),
                Err(err) => {
                    let message = err.to_string();
                    if err.line() != Some(4) || err.column().is_none() {
                        wrong.push(format!(
                            "{line:?}: placed at {:?}:{:?}",
                            err.line(),
                            err.column()
                        ));
                    }
                    if !message.contains(quoted) {
                        wrong.push(format!("{line:?}: does not quote {quoted:?}: {message}"));
                    }
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// Settings a newcomer might write that would silently switch a limit off: an
    /// empty route list (applies to nothing, or to everything?), an empty
    /// `count_when` (nothing ever counts), a lowercase method (an extension method
    /// no request uses). "The same validation" as the code: each is either refused or
    /// does what it reads as.
    #[test]
    fn settings_that_would_silently_switch_a_limit_off_are_refused() {
        let base = "[[limit]]\nname = \"a\"\nquota = \"5/min\"\n";
        let mut silent = Vec::new();
        for line in [
            "routes = []\n",
            "count_when = []\n",
            "routes = [\"post /login\"]\n",
        ] {
            if let Ok(limits) = Limits::from_toml(&format!("{base}{line}")) {
                let policy = &limits.policies()[0];
                let post = parts(Method::POST, "/login");
                let applies = policy.applies_to(&post);
                let counts = [200, 401, 500]
                    .iter()
                    .filter(|s| policy.counts(StatusCode::from_u16(**s).expect("status")))
                    .count();
                if !applies || counts == 0 {
                    silent.push(format!(
                        "{line:?} accepted: applies to POST /login: {applies}, statuses counted: {counts} of 3"
                    ));
                }
            }
        }
        assert!(silent.is_empty(), "{silent:#?}");
    }
}

// =================================================================================
// Issue 28: a fallback key with its own quota (`unless_key`, `fallback_for`).
// =================================================================================

mod fallbacks {
    use super::*;

    /// Two policies as the README's recipe has them, each request answered by a
    /// handler that reports how many policies decided it.
    async fn recipe_server(per_key: Policy, anonymous: Policy) -> Server {
        let layer = layer_on([per_key, anonymous], &manual());
        let app = Router::new()
            .route(
                "/",
                get(|decisions: Decisions| async move {
                    decisions
                        .iter()
                        .map(|d| d.limit)
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            )
            .route(
                "/b",
                get(|decisions: Decisions| async move {
                    decisions
                        .iter()
                        .map(|d| d.limit)
                        .collect::<Vec<_>>()
                        .join(",")
                }),
            );
        Server::start(app.layer(layer)).await
    }

    fn recipe() -> (Policy, Policy) {
        let per_key = Policy::new("per-key", Quota::per_minute(1000))
            .expect("policy")
            .algorithm(Algorithm::FixedWindow)
            .key(key::header("x-api-key").expect("name"));
        let anonymous = Policy::new("anonymous", Quota::per_minute(60))
            .expect("policy")
            .algorithm(Algorithm::FixedWindow)
            .key(key::peer_ip())
            .unless_key(key::header("x-api-key").expect("name"));
        (per_key, anonymous)
    }

    /// "each caller is counted by exactly one": whatever shape of `x-api-key` a caller
    /// sends — none, empty, blank, two lines, an empty line beside a value, bytes that
    /// are not UTF-8, a huge value — exactly one of the two policies decides it.
    #[tokio::test]
    async fn every_shape_of_api_key_header_is_counted_by_exactly_one_policy() -> TestResult {
        let (per_key, anonymous) = recipe();
        let server = recipe_server(per_key, anonymous).await;
        let huge = "k".repeat(16 * 1024);
        let shapes: Vec<(&str, Vec<&[u8]>)> = vec![
            ("none", vec![]),
            ("empty", vec![b""]),
            ("blank", vec![b"   "]),
            ("two lines", vec![b"k1", b"k2"]),
            ("empty then value", vec![b"", b"k1"]),
            ("value then empty", vec![b"k1", b""]),
            ("two empty lines", vec![b"", b""]),
            ("not utf-8", vec![b"\xff\xfe"]),
            ("tab", vec![b"\t"]),
            ("huge", vec![huge.as_bytes()]),
        ];
        let mut wrong = Vec::new();
        for (name, lines) in shapes {
            let mut builder = Request::get("/");
            for line in &lines {
                builder = builder.header(
                    "x-api-key",
                    http::HeaderValue::from_bytes(line).expect("a header value"),
                );
            }
            let reply = server.send(builder.body(Full::default())?).await;
            let deciders: Vec<&str> = reply.body.split(',').filter(|s| !s.is_empty()).collect();
            if reply.status != StatusCode::OK || deciders.len() != 1 {
                wrong.push(format!("{name}: {} decided by {deciders:?}", reply.status));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        Ok(())
    }

    /// The recipe keys paying callers by whatever `x-api-key` they send, and only
    /// callers without one by IP. A caller that invents a key per request is never
    /// counted by the per-IP quota (`key::header`'s own docs warn of inventing keys,
    /// and advise pairing with a `client_ip` policy; the recipe's fallback is not such
    /// a pairing, and the README recipe does not say so). Counted: 200 requests from
    /// one address, 200 invented keys, per-IP quota 60: all 200 handled.
    #[tokio::test]
    async fn a_caller_inventing_api_keys_is_never_counted_by_the_per_ip_fallback() -> TestResult {
        let (per_key, anonymous) = recipe();
        let server = recipe_server(per_key, anonymous).await;
        let mut handled = 0;
        for i in 0..200 {
            let reply = server
                .send(with_header(
                    Method::GET,
                    "/",
                    "x-api-key",
                    &format!("made-up-{i}"),
                ))
                .await;
            if reply.status == StatusCode::OK {
                handled += 1;
            }
        }
        // Without a key, the same address gets its 60.
        let mut anonymous_served = 0;
        for _ in 0..70 {
            if server.get("/").await.status == StatusCode::OK {
                anonymous_served += 1;
            }
        }
        assert_eq!((handled, anonymous_served), (200, 60));
        Ok(())
    }

    /// `fallback_for` in the file: "this one applies only to requests that limit's
    /// `key` finds nothing for, on that limit's routes unless the file gives its own"
    /// (issue 35). When the main limit is scoped to some routes, the fallback is too:
    /// a request elsewhere is decided by neither, key or not, so a made-up key buys
    /// nothing there that no key would not; on the main limit's route a request
    /// without a key is held to the fallback's 5, and each made-up key is counted by
    /// the main limit alone.
    #[tokio::test]
    async fn a_fallback_for_a_scoped_limit_applies_on_its_routes_only() -> TestResult {
        let file = r#"
[[limit]]
name = "per-key"
quota = "1000/min"
algorithm = "fixed_window"
key = "header:x-api-key"
routes = ["GET /"]

[[limit]]
name = "anonymous"
quota = "5/min"
algorithm = "fixed_window"
key = "peer_ip"
fallback_for = "per-key"
"#;
        let mut policies = Limits::from_toml(file)?.into_policies();
        let anonymous = policies.pop().expect("two");
        let per_key = policies.pop().expect("two");
        let server = recipe_server(per_key, anonymous).await;
        // Off the main limit's routes neither limit applies, with a key or without.
        let plain = routes::statuses_of(&server, "/b", 7).await;
        assert_eq!(plain, [200; 7]);
        let keyed = server
            .send(with_header(Method::GET, "/b", "x-api-key", "made-up"))
            .await;
        assert_eq!((keyed.status, keyed.body.as_str()), (StatusCode::OK, ""));
        // On its route, without a key: the fallback's 5.
        let plain = routes::statuses_of(&server, "/", 7).await;
        assert_eq!(plain, [200, 200, 200, 200, 200, 429, 429]);
        // With made-up keys: each counted by the main limit alone.
        let mut deciders = std::collections::BTreeMap::<String, usize>::new();
        for i in 0..20 {
            let reply = server
                .send(with_header(Method::GET, "/", "x-api-key", &format!("x{i}")))
                .await;
            assert_eq!(reply.status, StatusCode::OK);
            *deciders.entry(reply.body.clone()).or_default() += 1;
        }
        assert_eq!(
            deciders.into_iter().collect::<Vec<_>>(),
            [("per-key".to_owned(), 20)]
        );
        Ok(())
    }

    /// A fallback for a limit whose key always finds one (`global`) would never apply:
    /// a dead limit the file should refuse ("the same validation" as the code, which
    /// refuses a chain of fallbacks with its line and column) or make apply.
    #[test]
    fn a_fallback_for_a_limit_that_always_has_a_key_is_refused() {
        let file = r#"
[[limit]]
name = "everyone"
quota = "1000/min"
key = "global"

[[limit]]
name = "anonymous"
quota = "5/min"
key = "peer_ip"
fallback_for = "everyone"
"#;
        let outcome = Limits::from_toml(file).map(|l| {
            let anonymous = &l.policies()[1];
            anonymous.applies_to(&parts(Method::GET, "/"))
        });
        assert!(
            matches!(outcome, Err(_) | Ok(true)),
            "fallback_for a global limit: accepted and never applies ({outcome:?})"
        );
    }
}

// =================================================================================
// Issue 28: hooks, penalties, errors.
// =================================================================================

mod hooks {
    use super::*;

    const FILE: &str =
        "[[limit]]\nname = \"api\"\nquota = \"1/min\"\nalgorithm = \"fixed_window\"\n";

    fn hooked(clock: &ManualClock) -> RateLimitLayer {
        RateLimitLayer::builder()
            .policies(Limits::from_toml(FILE).expect("file").into_policies())
            // Only callers with an x-user are limited; without the hook, everyone
            // shares one global key.
            .hook("api", |policy| {
                policy.key(key::header("x-user").expect("name"))
            })
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("layer")
    }

    /// A reload without the hooked policy is refused and the old set keeps working;
    /// a reload of the layer's limiter alone keeps the hooked rules by name; and
    /// after the limiter loses the limit and gets it back, the hook is still applied
    /// ("never silently dropped").
    #[tokio::test]
    async fn a_hook_survives_every_kind_of_reload() -> TestResult {
        let clock = manual();
        let layer = hooked(&clock);
        let server = Server::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer.clone()),
        )
        .await;
        // Without an x-user: not limited, no header.
        for _ in 0..3 {
            assert_eq!(server.get("/").await.header("ratelimit-policy"), "");
        }
        // A file that lost "api" is refused; the old set still limits.
        let other = Limits::from_toml("[[limit]]\nname = \"other\"\nquota = \"1/min\"\n")?;
        assert!(layer.reload(other.into_policies()).is_err());
        let user = || with_header(Method::GET, "/", "x-user", "u");
        assert_eq!(server.send(user()).await.status, StatusCode::OK);
        assert_eq!(
            server.send(user()).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        // The limiter alone, reloaded: the hook's key stays.
        layer
            .limiter()
            .reload([Limit::new("api", Quota::per_minute(2))?.algorithm(Algorithm::FixedWindow)])?;
        for _ in 0..3 {
            assert_eq!(server.get("/").await.header("ratelimit-policy"), "");
        }
        // The limiter loses "api" (nothing hooked can refuse that from here), then
        // gets it back: is the hook applied to the new "api"?
        let dropped = layer
            .limiter()
            .reload([Limit::new("other", Quota::per_minute(2))?]);
        let back = layer
            .limiter()
            .reload([Limit::new("api", Quota::per_minute(2))?.algorithm(Algorithm::FixedWindow)]);
        let mut unkeyed_limited = 0;
        for _ in 0..3 {
            if !server.get("/").await.header("ratelimit-policy").is_empty() {
                unkeyed_limited += 1;
            }
        }
        assert_eq!(
            unkeyed_limited, 0,
            "limiter reload without api: {dropped:?}, back: {back:?}; requests without x-user \
             limited by a global key"
        );
        Ok(())
    }

    /// "A hook whose policy is missing from the set, or that renames it, fails the
    /// build or the reload (which then keeps the set in force)."
    #[tokio::test]
    async fn a_hook_that_renames_or_misses_its_policy_fails_and_keeps_the_set() -> TestResult {
        let renaming = RateLimitLayer::builder()
            .policies(Limits::from_toml(FILE)?.into_policies())
            .hook("api", |_| {
                Policy::new("renamed", Quota::per_minute(1)).expect("policy")
            })
            .build();
        assert!(renaming.is_err(), "a renaming hook built");
        let missing = RateLimitLayer::builder()
            .policies(Limits::from_toml(FILE)?.into_policies())
            .hook("nobody", |p| p)
            .build();
        assert!(missing.is_err(), "a hook on a missing policy built");
        let clock = manual();
        let layer = hooked(&clock);
        let before = layer.policy("api").map(|p| p.quota());
        assert!(layer.reload(Vec::<Policy>::new()).is_err());
        assert_eq!(layer.policy("api").map(|p| p.quota()), before);
        Ok(())
    }

    /// Reloads racing each other (the layer's, with and without the hooked policy, and
    /// the limiter's) never decide a request by the file's rule without the hook: a
    /// request without an x-user is never limited.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_reloads_never_drop_a_hook() -> TestResult {
        let clock = manual();
        let layer = hooked(&clock);
        let server = Server::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer.clone()),
        )
        .await;
        let stop = Arc::new(AtomicBool::new(false));
        let mut reloaders = Vec::new();
        for n in 0..3_u64 {
            let layer = layer.clone();
            let stop = stop.clone();
            reloaders.push(std::thread::spawn(move || {
                let mut i = 0_u64;
                let mut refused = 0_u64;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let quota = format!("{}/min", 1 + (i + n) % 5);
                    let result = match (i + n) % 3 {
                        0 => layer.reload(
                            Limits::from_toml(&FILE.replace("1/min", &quota))
                                .expect("file")
                                .into_policies(),
                        ),
                        1 => layer.reload(
                            Limits::from_toml("[[limit]]\nname = \"x\"\nquota = \"1/min\"\n")
                                .expect("file")
                                .into_policies(),
                        ),
                        _ => layer
                            .limiter()
                            .reload([Limit::new("api", quota.parse().expect("q"))
                                .expect("limit")
                                .algorithm(Algorithm::FixedWindow)]),
                    };
                    if result.is_err() {
                        refused += 1;
                    }
                }
                refused
            }));
        }
        let mut limited = 0;
        for _ in 0..300 {
            let reply = server.get("/").await;
            if !reply.header("ratelimit-policy").is_empty() || reply.status != StatusCode::OK {
                limited += 1;
            }
        }
        stop.store(true, Ordering::SeqCst);
        let refused: u64 = reloaders
            .into_iter()
            .map(|t| t.join().expect("thread"))
            .sum();
        assert!(
            refused > 0,
            "the sets without the hooked policy were refused"
        );
        assert_eq!(
            limited, 0,
            "requests without x-user decided under the unhooked rule"
        );
        // And a keyed caller is still limited by the hooked rule.
        layer.reload(Limits::from_toml(FILE)?.into_policies())?;
        let user = || with_header(Method::GET, "/", "x-user", "racer");
        let first = server.send(user()).await.status;
        let second = server.send(user()).await.status;
        assert_eq!(
            (first, second),
            (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS)
        );
        Ok(())
    }

    /// "`Penalty::after(1)` needs no `within`; `within` is required only when more than
    /// one rejection trips the box": one rejection trips it, in code and in the file.
    #[tokio::test]
    async fn one_rejection_trips_a_penalty_after_1_without_a_window() -> TestResult {
        let clock = manual();
        let limiter = Limiter::builder()
            .limit(
                Limit::new("login", Quota::per_minute(2))?
                    .algorithm(Algorithm::FixedWindow)
                    .penalty(Penalty::after(1).block_for(secs(600))),
            )
            .store(MemoryStore::with_clock(clock.clone()))
            .build()?;
        let k = Key::from("mallory");
        assert!(limiter.check("login", &k, 1).await?.allowed);
        assert!(limiter.check("login", &k, 1).await?.allowed);
        let tripped = limiter.check("login", &k, 1).await?;
        assert_eq!(
            (tripped.allowed, tripped.blocked_for),
            (false, Some(secs(600)))
        );
        clock.advance(secs(120)); // two windows later: still blocked
        let still = limiter.check("login", &k, 1).await?;
        assert_eq!(still.blocked_for, Some(secs(480)));

        // More than one rejection without a window is refused, in code and file.
        let two = Limiter::builder()
            .limit(
                Limit::new("x", Quota::per_minute(2))?
                    .penalty(Penalty::after(2).block_for(secs(60))),
            )
            .build();
        assert!(two.is_err(), "after(2) without within was accepted");
        let file = "[[limit]]\nname = \"a\"\nquota = \"2/min\"\npenalty = { after = 1, block_for = \"10min\" }\n";
        let from_file = Limits::from_toml(file)?.into_policies().remove(0);
        assert_eq!(
            from_file.limit().get_penalty(),
            Some(Penalty::after(1).block_for(secs(600)))
        );
        Ok(())
    }

    /// "`ConfigError`'s `Debug` is its `Display`", for every way one is made, and what
    /// `main` prints for a boxed one.
    #[test]
    fn every_config_error_debugs_as_it_displays() -> TestResult {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("tollgate.toml");
        std::fs::write(
            &path,
            "[[limit]]\nname = \"api\"\nquota = \"100/min\"\n\n\n\nburst = \"x\"\n",
        )?;
        let errors: Vec<tollgate::ConfigError> = vec![
            Limits::from_path(&path).expect_err("bad burst"),
            Limits::from_path(dir.path().join("missing.toml")).expect_err("missing"),
            Limits::from_toml("[[limit]]\nname = \"a\"\nquota = \"1/fortnight\"\n").expect_err("q"),
            Limits::from_toml("").expect_err("empty"),
            Policy::new("", Quota::per_minute(1)).expect_err("name"),
            Policy::new("a", Quota::per_minute(1))?
                .enforce(2.0)
                .expect_err("share"),
            "1/fortnight".parse::<Quota>().expect_err("quota"),
            tollgate::key::TrustedProxies::new(["10.0.0.0/33"]).expect_err("cidr"),
            key::header("not a header").expect_err("header"),
            RateLimitLayer::builder()
                .policy(Policy::new("a", Quota::per_minute(1))?)
                .policy(Policy::new("a", Quota::per_minute(1))?)
                .build()
                .expect_err("twice"),
        ];
        let mut differ = Vec::new();
        for err in errors {
            let (debug, display) = (format!("{err:?}"), format!("{err}"));
            let boxed: Box<dyn std::error::Error> = Box::new(err);
            if debug != display || format!("{boxed:?}") != display {
                differ.push((debug, display));
            }
        }
        assert!(differ.is_empty(), "{differ:#?}");
        let printed = format!("{:?}", Limits::from_path(&path).expect_err("bad burst"));
        assert!(
            printed.starts_with(&format!("{}:7:9: ", path.display())),
            "{printed}"
        );
        Ok(())
    }
}

// =================================================================================
// Issue 28: a `Fallback` that carries the blocks it saw; headers of what was not
// evaluated.
// =================================================================================

/// A memory store that fails every call while `down` is set: a primary that can be
/// taken down and brought back on demand, passing every method on.
#[derive(Debug, Clone)]
struct Flaky {
    inner: MemoryStore,
    down: Arc<AtomicBool>,
}

mod flaky {
    use super::Flaky;
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    use tollgate::store::{Charge, InFlightSlot, Receipt, Store, StoreCall};
    use tollgate::{ConfigError, Decision, Key, Limit, StoreError, StoreErrorKind};

    impl Flaky {
        pub(crate) fn new(inner: tollgate::MemoryStore) -> Self {
            Self {
                inner,
                down: std::sync::Arc::default(),
            }
        }

        pub(crate) fn set_down(&self, down: bool) {
            self.down.store(down, Ordering::SeqCst);
        }

        fn up<'a, T>(&self, call: impl FnOnce() -> StoreCall<'a, T>) -> StoreCall<'a, T> {
            if self.down.load(Ordering::SeqCst) {
                StoreCall::ready(Err(StoreError::new(
                    StoreErrorKind::Connection,
                    "down for the test",
                )))
            } else {
                call()
            }
        }
    }

    impl Store for Flaky {
        fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
            self.up(|| self.inner.decide(charges))
        }
        fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
            self.up(|| self.inner.decide_one(charge))
        }
        fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
            self.up(|| self.inner.refund(charge))
        }
        fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
            self.up(|| self.inner.refund_charge(charge, receipt))
        }
        fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
            self.up(|| self.inner.settle(charge, receipt))
        }
        fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
            self.up(|| self.inner.peek(limit, key))
        }
        fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
            self.up(|| self.inner.reset(limit, key))
        }
        fn block<'a>(
            &'a self,
            limit: &'a Limit,
            key: &'a Key,
            duration: Duration,
        ) -> StoreCall<'a, Decision> {
            self.up(|| self.inner.block(limit, key, duration))
        }
        fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
            self.up(|| self.inner.penalize(charge))
        }
        fn reserve<'a>(
            &'a self,
            charge: Charge<'a>,
            max_wait: Duration,
        ) -> StoreCall<'a, Decision> {
            self.up(|| self.inner.reserve(charge, max_wait))
        }
        fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
            self.inner.validate(limit)
        }
        fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
            self.inner.validate_quota(limit)
        }
        fn acquire_in_flight<'a>(
            &'a self,
            limit: &'a Limit,
            key: &'a Key,
            max: u32,
        ) -> StoreCall<'a, Option<InFlightSlot>> {
            self.up(|| self.inner.acquire_in_flight(limit, key, max))
        }
        fn supports_in_flight(&self) -> bool {
            true
        }
    }
}

mod fallback {
    use super::*;
    use support::redis_server::RedisServer;
    use tollgate::RedisStore;
    use tollgate::store::{Fallback, LeasedStore, Store};

    /// "login": 1 a minute per x-user, a 10-minute penalty box on the first
    /// rejection; "global": 1000 a minute for everyone.
    fn login_and_global() -> Vec<Policy> {
        vec![
            Policy::new("login", Quota::per_minute(1))
                .expect("policy")
                .algorithm(Algorithm::FixedWindow)
                .key(key::header("x-user").expect("name"))
                .penalty(Penalty::after(1).block_for(secs(600))),
            Policy::new("global", Quota::per_minute(1000))
                .expect("policy")
                .algorithm(Algorithm::FixedWindow),
        ]
    }

    fn as_user(user: &str) -> Request<Full<Bytes>> {
        with_header(Method::GET, "/", "x-user", user)
    }

    /// Over real HTTP with a real Redis killed mid-run: a block this process saw
    /// through a tripped penalty box and one an operator made through it hold while
    /// the memory store serves; blocks this process lifted (a `reset`, a zero
    /// `block`) before the kill, or lifts during the outage, do not come back; and a
    /// blocked caller's 429 leaves out the limit its carried block kept from being
    /// evaluated (never `"global";r=0`).
    #[tokio::test]
    async fn the_blocks_this_process_saw_and_lifted_are_kept_and_lifted_through_a_redis_kill()
    -> TestResult {
        let mut redis = RedisServer::start();
        let store = Fallback::new(
            RedisStore::from_url(&redis.url())?
                .deadline(secs(2))?
                .denial_cache(0),
            MemoryStore::new(),
        )
        .probe_interval(secs(600));
        let layer = RateLimitLayer::builder()
            .policies(login_and_global())
            .store(store.clone())
            .build()?;
        let limiter = layer.limiter().clone();
        let server = Server::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await;
        // On Redis: "tripper" trips the box; the operator blocks "blocked", blocks
        // and then resets "reset-before", blocks and then unblocks "unblocked",
        // blocks "reset-during" (reset once Redis is dead).
        assert_eq!(server.send(as_user("tripper")).await.status, StatusCode::OK);
        let tripped = server.send(as_user("tripper")).await;
        assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
        for user in ["blocked", "reset-before", "unblocked", "reset-during"] {
            limiter.block("login", &Key::from(user), secs(600)).await?;
            // Seen on a decision too, as a caller hitting it would.
            assert_eq!(
                server.send(as_user(user)).await.status,
                StatusCode::TOO_MANY_REQUESTS,
                "{user}"
            );
        }
        limiter.reset("login", &Key::from("reset-before")).await?;
        limiter
            .block("login", &Key::from("unblocked"), Duration::ZERO)
            .await?;

        redis.kill();
        let first = server.send(as_user("someone")).await;
        assert_eq!(first.status, StatusCode::OK);
        assert!(!store.serving_primary(), "the memory store serves");
        limiter.reset("login", &Key::from("reset-during")).await?;

        let mut wrong = Vec::new();
        for (user, blocked) in [
            ("tripper", true),
            ("blocked", true),
            ("reset-before", false),
            ("unblocked", false),
            ("reset-during", false),
        ] {
            let reply = server.send(as_user(user)).await;
            let is_blocked = reply.status == StatusCode::TOO_MANY_REQUESTS;
            if is_blocked != blocked {
                wrong.push(format!(
                    "{user}: {} {:?}",
                    reply.status,
                    reply.header("ratelimit")
                ));
            }
            if is_blocked && reply.header("ratelimit").contains("global") {
                wrong.push(format!(
                    "{user}: unevaluated global in {:?}",
                    reply.header("ratelimit")
                ));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        Ok(())
    }

    fn login_limit() -> Limit {
        Limit::new("login", Quota::per_hour(1))
            .expect("limit")
            .algorithm(Algorithm::FixedWindow)
            .penalty(Penalty::after(1).block_for(secs(3600)))
    }

    /// A primary on demand, a memory insurance, both on `clock`.
    fn flaky_fallback(clock: &ManualClock) -> (Flaky, Limiter) {
        let primary = Flaky::new(MemoryStore::with_clock(clock.clone()));
        // Probed on every call: back as soon as it is up.
        let store = Fallback::new(primary.clone(), MemoryStore::with_clock(clock.clone()))
            .probe_interval(Duration::ZERO);
        let limiter = Limiter::builder()
            .limit(login_limit())
            .limit(
                Limit::new("api", Quota::per_hour(1))
                    .expect("limit")
                    .algorithm(Algorithm::FixedWindow),
            )
            .store(store)
            .build()
            .expect("limiter");
        (primary, limiter)
    }

    /// Trips `who`'s penalty box on the primary: admitted, then rejected and blocked.
    async fn trip(limiter: &Limiter, who: &Key) {
        assert!(limiter.check("login", who, 1).await.expect("check").allowed);
        let tripped = limiter.check("login", who, 1).await.expect("check");
        assert!(tripped.blocked_for.is_some(), "{tripped:?}");
    }

    /// Flooding the process with keys that are admitted or merely denied (never
    /// blocked), through the same limit and another, never pushes a block it saw out
    /// of what the fallback carries: 30,000 admitted and 30,000 denied decisions.
    #[tokio::test]
    async fn a_flood_of_unblocked_keys_never_evicts_a_carried_block() -> TestResult {
        let clock = manual();
        let (primary, limiter) = flaky_fallback(&clock);
        let victim = Key::from("mallory");
        trip(&limiter, &victim).await;
        for i in 0..15_000_u64 {
            let k = Key::from(i);
            // Admitted, then denied (the penalty box of "api" has none; "login"'s
            // callers here stop at their first denial... which would trip it, so
            // "login" keys are only admitted).
            assert!(limiter.check("login", &k, 1).await?.allowed);
            assert!(limiter.check("api", &k, 1).await?.allowed);
            assert!(!limiter.check("api", &k, 1).await?.allowed);
        }
        primary.set_down(true);
        let during = limiter.check("login", &victim, 1).await?;
        assert!(
            !during.allowed && during.blocked_for.is_some(),
            "the block was forgotten: {during:?}"
        );
        Ok(())
    }

    /// The documented bound, measured: "at most 10,000 keys (the oldest seen leave
    /// first)". How many other blocked keys an attacker (who chooses its keys, e.g.
    /// made-up API keys) must trip while the primary serves to have its own block
    /// forgotten in an outage, and whether being seen again keeps a block.
    #[tokio::test]
    async fn a_carried_block_leaves_after_ten_thousand_newer_ones_as_documented() -> TestResult {
        let clock = manual();
        let (primary, limiter) = flaky_fallback(&clock);
        let attacker = Key::from("attacker");
        trip(&limiter, &attacker).await;
        for i in 0..9_999_u64 {
            trip(&limiter, &Key::from(i)).await;
        }
        primary.set_down(true);
        let kept = !limiter.check("login", &attacker, 1).await?.allowed;
        primary.set_down(false);
        trip(&limiter, &Key::from("one more")).await;
        primary.set_down(true);
        let after_one_more = limiter.check("login", &attacker, 1).await?;
        // The block is forgotten, but not the attacker's usage: the insurance store
        // starts it where the primary left it (its one login this minute spent), so
        // the request is rejected, and that rejection trips the box again there.
        assert_eq!(
            (
                kept,
                after_one_more.blocked_for.is_some(),
                after_one_more.allowed
            ),
            (true, true, false),
            "the 10,000th newer block pushes the oldest out: 2 requests per made-up key, \
             20,000 requests in all"
        );
        Ok(())
    }

    /// "enforced by this process while the insurance store serves, until it ends":
    /// a carried block ends when the stores' clock says it does, not later.
    #[tokio::test]
    #[ignore = "by design, documented on Fallback: a carried block is timed on the process's monotonic clock, not an injected store clock"]
    async fn a_carried_block_ends_when_its_time_is_up() -> TestResult {
        let clock = manual();
        let (primary, limiter) = flaky_fallback(&clock);
        let victim = Key::from("mallory");
        trip(&limiter, &victim).await;
        primary.set_down(true);
        assert!(!limiter.check("login", &victim, 1).await?.allowed);
        clock.advance(secs(3601));
        let after = limiter.check("login", &victim, 1).await?;
        assert!(
            after.allowed,
            "an hour's block still holds after 3601 s: {after:?}"
        );
        Ok(())
    }

    /// A block seen under a caller's plan quota (`check_with`) is carried under that
    /// quota.
    #[tokio::test]
    async fn a_block_seen_under_a_plan_quota_is_carried_for_that_plan() -> TestResult {
        let clock = manual();
        let (primary, limiter) = flaky_fallback(&clock);
        let pro = Quota::per_minute(2);
        let victim = Key::from("pro-caller");
        for _ in 0..2 {
            assert!(limiter.check_with("login", &victim, 1, pro).await?.allowed);
        }
        let tripped = limiter.check_with("login", &victim, 1, pro).await?;
        assert!(tripped.blocked_for.is_some(), "{tripped:?}");
        primary.set_down(true);
        let during = limiter.check_with("login", &victim, 1, pro).await?;
        assert!(!during.allowed, "{during:?}");
        Ok(())
    }

    /// A repeated denial a `LeasedStore` answers locally (a blocked key, a batch of
    /// two policies): the limit it did not evaluate is not shown as exhausted.
    #[tokio::test]
    async fn a_lease_repeating_a_block_leaves_the_unevaluated_limit_out_of_the_headers()
    -> TestResult {
        let clock = manual();
        let layer = RateLimitLayer::builder()
            .policies(login_and_global())
            .store(LeasedStore::new(MemoryStore::with_clock(clock.clone())))
            .build()?;
        let server = Server::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await;
        assert_eq!(server.send(as_user("m")).await.status, StatusCode::OK);
        let mut headers = Vec::new();
        for _ in 0..4 {
            let reply = server.send(as_user("m")).await;
            assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
            headers.push(reply.header("ratelimit").to_owned());
        }
        let lying: Vec<&String> = headers
            .iter()
            .filter(|h| h.contains("\"global\";r=0"))
            .collect();
        assert!(lying.is_empty(), "{headers:#?}");
        Ok(())
    }

    /// The same over a `Fallback` whose primary is down: the 429s of a carried block
    /// leave "global" out (it was not evaluated), and a request of another caller
    /// sees "global" as it stands.
    #[tokio::test]
    async fn a_carried_block_leaves_the_unevaluated_limit_out_of_the_headers() -> TestResult {
        let clock = manual();
        let primary = Flaky::new(MemoryStore::with_clock(clock.clone()));
        let store = Fallback::new(primary.clone(), MemoryStore::with_clock(clock.clone()))
            .probe_interval(secs(3600));
        let layer = RateLimitLayer::builder()
            .policies(login_and_global())
            .store(store)
            .build()?;
        let server = Server::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await;
        assert_eq!(server.send(as_user("m")).await.status, StatusCode::OK);
        assert_eq!(
            server.send(as_user("m")).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        primary.set_down(true);
        let blocked = server.send(as_user("m")).await;
        assert_eq!(blocked.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            !blocked.header("ratelimit").contains("global"),
            "{:?}",
            blocked.header("ratelimit")
        );
        let other = server.send(as_user("o")).await;
        assert_eq!(other.status, StatusCode::OK);
        // "global" as it stands: m's one admission on the primary carried over.
        assert!(
            other.header("ratelimit").contains("\"global\";r=998"),
            "{other:?}"
        );
        Ok(())
    }

    #[allow(dead_code)]
    fn assert_store<S: Store>(_: &S) {}
}

// =================================================================================
// Issue 26 part 1: `Limiter::settle`.
// =================================================================================

mod settle {
    use super::*;
    use support::redis_server::{shared_server, unique_prefix};
    use tollgate::RedisStore;
    use tollgate::store::Store;

    const ALL: [Algorithm; 7] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 10 },
        Algorithm::SlidingWindowLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ];

    fn redis(clock: &ManualClock, name: &str) -> RedisStore {
        RedisStore::from_url(&shared_server().url())
            .expect("url")
            .prefix(&unique_prefix(name))
            .with_clock(clock.clone())
            .denial_cache(0)
            // Far above a loaded machine's worst round trip: these tests count
            // settles, not deadlines.
            .deadline(secs(2))
            .expect("deadline")
    }

    fn on(store: impl Store, algorithm: Algorithm, quota: Quota) -> Limiter {
        Limiter::builder()
            .limit(Limit::new("l", quota).expect("limit").algorithm(algorithm))
            .store(store)
            .build()
            .expect("limiter")
    }

    /// One limiter per store, each on its own manual clock: the memory store and a
    /// Redis store under a prefix of its own (`name`).
    fn both_stores(name: &str, algorithm: Algorithm, quota: Quota) -> [(&'static str, Limiter); 2] {
        [
            (
                "memory",
                on(MemoryStore::with_clock(manual()), algorithm, quota),
            ),
            ("redis", on(redis(&manual(), name), algorithm, quota)),
        ]
    }

    async fn used(limiter: &Limiter, key: &Key) -> u64 {
        let peek = limiter.peek("l", key).await.expect("peek");
        peek.capacity - peek.remaining
    }

    #[ignore = "documented misuse: a receipt is not tied to a key; settle and refund_charge a decision with its own key (Limiter::settle docs)"]
    /// decision does not say whose it is): the other key must not be given back a
    /// charge it never paid. Counted per algorithm: what "bob" (who spent 60 of 100)
    /// gets back when alice's charge of 40 is settled to 0 under bob's key.
    async fn wrong_key(
        store_for: impl Fn(Algorithm) -> Box<dyn FnOnce() -> Limiter>,
    ) -> Vec<String> {
        let mut wrong = Vec::new();
        for algorithm in ALL {
            let limiter = store_for(algorithm)();
            let (alice, bob) = (Key::from("alice"), Key::from("bob"));
            let alices = limiter.check("l", &alice, 40).await.expect("check");
            assert!(alices.allowed);
            assert!(limiter.check("l", &bob, 60).await.expect("check").allowed);
            let _ = limiter.settle(&alices, &bob, 0).await;
            let bob_used = used(&limiter, &bob).await;
            if bob_used < 60 {
                wrong.push(format!("{algorithm:?}: bob's 60 became {bob_used}"));
            }
        }
        wrong
    }

    #[tokio::test]
    #[ignore = "documented misuse: a receipt is not tied to a key; settle and refund_charge a decision with its own key (Limiter::settle docs)"]
    async fn a_decision_settled_under_another_key_gives_that_key_nothing() -> TestResult {
        let clock = manual();
        let mut wrong = wrong_key(|algorithm| {
            let clock = clock.clone();
            Box::new(move || {
                on(
                    MemoryStore::with_clock(clock),
                    algorithm,
                    Quota::per_hour(100),
                )
            })
        })
        .await;
        let on_redis = wrong_key(|algorithm| {
            let store = redis(&clock, "wrong-key");
            Box::new(move || on(store, algorithm, Quota::per_hour(100)))
        })
        .await;
        wrong.extend(on_redis.into_iter().map(|w| format!("redis {w}")));
        assert!(wrong.is_empty(), "{wrong:#?}");
        Ok(())
    }

    /// Places reserved behind a charge that is then settled down: "no two requests
    /// are ever given one place". At 1 per second with a burst of 1, every request
    /// that does work (actual > 0) must have a place of its own, a second apart.
    async fn places_after_settling_down(limiter: &Limiter) -> Vec<Duration> {
        let k = Key::from("queue");
        let wait = secs(30);
        let first = limiter.check("l", &k, 1).await.expect("check");
        assert!(first.allowed);
        let mut places = vec![Duration::ZERO];
        for _ in 0..3 {
            let reserved = limiter.reserve("l", &k, 1, wait).await.expect("reserve");
            assert!(reserved.allowed);
            places.push(reserved.delay);
        }
        // The first request did no work after all.
        limiter.settle(&first, &k, 0).await.expect("settle");
        places.remove(0);
        for _ in 0..3 {
            let reserved = limiter.reserve("l", &k, 1, wait).await.expect("reserve");
            assert!(reserved.allowed);
            places.push(reserved.delay);
        }
        places.sort();
        places
    }

    fn crowded(places: &[Duration]) -> bool {
        places
            .windows(2)
            .any(|w| w[1].saturating_sub(w[0]) < secs(1))
    }

    #[tokio::test]
    async fn settling_down_ahead_of_reserved_places_never_gives_two_requests_one_place()
    -> TestResult {
        let mut wrong = Vec::new();
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
        ] {
            let quota = Quota::per_second(1).with_burst(1)?;
            let clock = manual();
            let memory = on(MemoryStore::with_clock(clock.clone()), algorithm, quota);
            let places = places_after_settling_down(&memory).await;
            if crowded(&places) {
                wrong.push(format!("memory {algorithm:?}: {places:?}"));
            }
            let on_redis = on(redis(&clock, "places"), algorithm, quota);
            let redis_places = places_after_settling_down(&on_redis).await;
            if crowded(&redis_places) {
                wrong.push(format!("redis {algorithm:?}: {redis_places:?}"));
            }
            assert_eq!(
                places, redis_places,
                "{algorithm:?}: memory and Redis agree"
            );
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        Ok(())
    }

    /// "Settling the same decision twice moves its charge twice, as refunding it twice
    /// does" — documented, and the way a caller gets back more than it was charged
    /// (issue 26: "never returns more than was charged"). Measured: another request's
    /// 30 beside a charge of 10 settled to 0 twice; the documented bound is twice the
    /// charge, so another's charge loses at most 10.
    #[tokio::test]
    async fn settling_one_decision_twice_gives_back_at_most_its_charge_twice() -> TestResult {
        let mut measured = Vec::new();
        for algorithm in ALL {
            for (store_name, limiter) in both_stores("twice", algorithm, Quota::per_hour(100)) {
                let k = Key::from("k");
                assert!(limiter.check("l", &k, 30).await?.allowed);
                let d = limiter.check("l", &k, 10).await?;
                limiter.settle(&d, &k, 0).await?;
                limiter.settle(&d, &k, 0).await?;
                let left = used(&limiter, &k).await;
                assert!(
                    left >= 20,
                    "{store_name} {algorithm:?}: 30 + 10, settled twice: {left}"
                );
                measured.push(format!("{store_name} {algorithm:?}: {left}"));
            }
        }
        println!("usage after 30 + 10 settled to 0 twice: {measured:#?}");
        Ok(())
    }

    /// "A decision from before a `reset` of its key gives nothing back ... but an
    /// extra is still charged": after a reset and another request's charge of 7, a
    /// pre-reset estimate of 10 settled to 0 gives nothing back, settled to 30
    /// charges its extra 20, and that chain settled back to 0 never takes the 7.
    #[tokio::test]
    async fn a_settle_from_before_a_reset_never_gives_back_the_fresh_quota() -> TestResult {
        for algorithm in ALL {
            for (store_name, limiter) in both_stores("reset", algorithm, Quota::per_hour(100)) {
                let k = Key::from("k");
                let d = limiter.check("l", &k, 10).await?;
                // A second pre-reset estimate for the settle up: a receipt moves once.
                let d2 = limiter.check("l", &k, 10).await?;
                limiter.reset("l", &k).await?;
                assert!(limiter.check("l", &k, 7).await?.allowed);
                limiter.settle(&d, &k, 0).await?;
                let after_down = used(&limiter, &k).await;
                let up = limiter.settle(&d2, &k, 30).await?;
                let after_up = used(&limiter, &k).await;
                limiter.settle(&up, &k, 0).await?;
                let after_chain = used(&limiter, &k).await;
                assert_eq!(
                    (after_down, after_up >= 27, after_chain >= 7),
                    (7, true, true),
                    "{store_name} {algorithm:?}: {after_down}, {after_up}, {after_chain}"
                );
            }
        }
        Ok(())
    }

    /// A chain that goes up, down, up and down again at one instant, after another
    /// request's charge, on every algorithm and both stores: the other's charge is
    /// never given back, and the chain's last actual is what the key counts for it at
    /// most ("a later settle gives back at most that extra").
    #[tokio::test]
    async fn a_zigzag_chain_never_gives_back_another_requests_charge() -> TestResult {
        for algorithm in ALL {
            for (store_name, limiter) in both_stores("zigzag", algorithm, Quota::per_hour(1000)) {
                let k = Key::from("k");
                assert!(limiter.check("l", &k, 100).await?.allowed);
                let mut d = limiter.check("l", &k, 50).await?;
                let mut trail = Vec::new();
                for actual in [400_u64, 0, 900, 10, u64::MAX, 0, 3] {
                    d = limiter.settle(&d, &k, actual).await?;
                    trail.push(used(&limiter, &k).await);
                    assert!(d.allowed);
                    if d.receipt().is_none() {
                        break;
                    }
                }
                let last = *trail.last().expect("a step");
                assert!(
                    last >= 100,
                    "{store_name} {algorithm:?}: another's 100 given back: {trail:?}"
                );
            }
        }
        Ok(())
    }

    /// Many tasks checking and settling one key at one instant, on every algorithm, on
    /// memory and on Redis: the usage is exactly the sum of the actuals (the leaky
    /// bucket, which gives back no place queued behind a later one: at least it).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_tasks_settling_one_key_leave_the_sum_of_actuals_on_every_algorithm() -> TestResult
    {
        let quota = Quota::per_hour(100_000);
        let mut wrong = Vec::new();
        for algorithm in ALL {
            for on_redis in [false, true] {
                let clock = manual();
                let limiter = if on_redis {
                    on(redis(&clock, "concurrent"), algorithm, quota)
                } else {
                    on(MemoryStore::with_clock(clock), algorithm, quota)
                };
                let total = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let mut tasks = Vec::new();
                for t in 0..6_u64 {
                    let (limiter, total) = (limiter.clone(), total.clone());
                    tasks.push(tokio::spawn(async move {
                        let k = Key::from("hot");
                        for i in 0..25_u64 {
                            let estimate = 1 + (t * 5 + i * 11) % 40;
                            let actual = (t * 13 + i * 7) % 70;
                            let d = limiter
                                .check("l", &k, estimate as u32)
                                .await
                                .expect("check");
                            assert!(d.allowed);
                            limiter.settle(&d, &k, actual).await.expect("settle");
                            total.fetch_add(actual, Ordering::SeqCst);
                        }
                    }));
                }
                for task in tasks {
                    task.await?;
                }
                let usage = used(&limiter, &Key::from("hot")).await;
                let sum = total.load(Ordering::SeqCst);
                let exact = if algorithm == Algorithm::LeakyBucket {
                    usage >= sum
                } else {
                    usage == sum
                };
                if !exact {
                    wrong.push(format!(
                        "redis {on_redis} {algorithm:?}: usage {usage}, actuals {sum}"
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
        Ok(())
    }

    /// Many tasks checking and settling one key, the clock standing still, through a
    /// `LeasedStore` over a `Fallback` of Redis and memory: what the two stores count
    /// together is exactly the sum of the actuals on the fixed window (each settle goes
    /// where its charge went, should the fallback switch under load); on GCRA, whose
    /// lease units are not returned ("until time repays them"), at least the sum and
    /// less than a quarter of the capacity more.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_tasks_settling_through_leases_over_a_fallback_leave_the_sum_of_actuals()
    -> TestResult {
        use tollgate::store::{Fallback, LeasedStore};
        let quota = Quota::per_hour(1_000_000);
        for algorithm in [Algorithm::FixedWindow, Algorithm::Gcra] {
            let clock = manual();
            let redis = redis(&clock, "sum");
            let insurance = MemoryStore::with_clock(clock.clone());
            let store = LeasedStore::builder(Fallback::new(redis.clone(), insurance.clone()))
                .clock(clock.clone())
                .build();
            let limiter = on(store.clone(), algorithm, quota);
            let total = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let mut tasks = Vec::new();
            for t in 0..8_u64 {
                let (limiter, total) = (limiter.clone(), total.clone());
                tasks.push(tokio::spawn(async move {
                    let k = Key::from("hot");
                    for i in 0..40_u64 {
                        let estimate = 1 + (t * 7 + i * 13) % 50;
                        let actual = (t * 11 + i * 17) % 90;
                        let d = limiter
                            .check("l", &k, estimate as u32)
                            .await
                            .expect("check");
                        assert!(d.allowed);
                        limiter.settle(&d, &k, actual).await.expect("settle");
                        total.fetch_add(actual, Ordering::SeqCst);
                    }
                }));
            }
            for task in tasks {
                task.await?;
            }
            store.release_all().await?;
            let hot = Key::from("hot");
            let usage = used(&on(redis, algorithm, quota), &hot).await
                + used(&on(insurance, algorithm, quota), &hot).await;
            let sum = total.load(Ordering::SeqCst);
            if algorithm == Algorithm::Gcra {
                assert!(
                    usage >= sum && usage - sum < 1_000_000 / 4,
                    "{algorithm:?}: usage {usage} against the sum of actuals {sum}"
                );
            } else {
                assert_eq!(
                    usage, sum,
                    "{algorithm:?}: usage against the sum of actuals"
                );
            }
        }
        Ok(())
    }
}

// =================================================================================
// Issue 27: rollout per policy, metrics.
// =================================================================================

mod rollout {
    use super::*;
    use tollgate::layer::Rollout;

    fn per_user(name: &str, quota: Quota) -> Policy {
        Policy::new(name, quota)
            .expect("policy")
            .algorithm(Algorithm::FixedWindow)
            .key(key::header("x-user").expect("name"))
    }

    fn as_user(user: &str) -> Request<Full<Bytes>> {
        with_header(Method::GET, "/", "x-user", user)
    }

    fn app(layer: RateLimitLayer) -> Router {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer)
    }

    /// "a stable share of keys ... raising the share only adds callers": over 20,000
    /// keys, every caller enforced at a share is enforced at every larger one, and
    /// the enforced fraction is within 1.5 points of the share.
    #[test]
    fn raising_the_share_only_adds_callers() -> TestResult {
        let shares = [0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 0.999, 1.0];
        let keys: Vec<Key> = (0..20_000_u64)
            .map(|n| Key::from(format!("k{n}")))
            .collect();
        let mut previous: Option<Vec<bool>> = None;
        for share in shares {
            let rollout = Rollout::enforce(share)?;
            let enforced: Vec<bool> = keys.iter().map(|k| rollout.enforces(k)).collect();
            let fraction = enforced.iter().filter(|e| **e).count() as f64 / keys.len() as f64;
            assert!((fraction - share).abs() < 0.015, "{share}: {fraction}");
            if let Some(previous) = &previous {
                let dropped = previous
                    .iter()
                    .zip(&enforced)
                    .filter(|(was, is)| **was && !**is)
                    .count();
                assert_eq!(dropped, 0, "raising to {share} dropped callers");
            }
            previous = Some(enforced);
        }
        assert!(Rollout::enforce(f64::NAN).is_err());
        assert!(Rollout::enforce(-0.0).is_ok_and(|r| r.share() == 0.0));
        Ok(())
    }

    /// A caller that picks its own key (a made-up API key, any header key) picks its
    /// behaviour too: at `enforce(0.5)`, a key the rollout shadows is never rejected,
    /// whatever it sends. Documented only as "picked by the key's fingerprint ...
    /// each seeing one behaviour"; the docs do not warn that a caller who controls its
    /// key can choose the shadowed share. Counted: 30 requests on a 2/min quota, 30
    /// handled for a shadowed key, 2 for an enforced one.
    #[tokio::test]
    async fn a_caller_that_picks_its_key_picks_the_shadowed_share() -> TestResult {
        let policy = per_user("half", Quota::per_minute(2)).enforce(0.5)?;
        let shadowed = (0..100_000_u64)
            .map(|n| format!("user-{n}"))
            .find(|u| !policy.enforces(&Key::from(u.as_bytes())))
            .expect("a shadowed key");
        let enforced = (0..100_000_u64)
            .map(|n| format!("user-{n}"))
            .find(|u| policy.enforces(&Key::from(u.as_bytes())))
            .expect("an enforced key");
        let server = Server::start(app(layer_on([policy], &manual()))).await;
        let mut handled = (0, 0);
        for _ in 0..30 {
            if server.send(as_user(&shadowed)).await.status == StatusCode::OK {
                handled.0 += 1;
            }
            if server.send(as_user(&enforced)).await.status == StatusCode::OK {
                handled.1 += 1;
            }
        }
        assert_eq!(handled, (30, 2));
        Ok(())
    }

    /// What shadow mode charges, with three policies: a shadowed one that would
    /// reject, two enforced ones that admit. The request is handled; each enforced
    /// policy is charged exactly once (not once per store call), the shadowed one
    /// nothing. Then a request an enforced policy rejects charges nothing anywhere.
    #[tokio::test]
    async fn a_request_only_a_shadowed_policy_would_reject_charges_each_enforced_policy_once()
    -> TestResult {
        let clock = manual();
        let layer = layer_on(
            [
                per_user("tight", Quota::per_minute(1)).shadow(true),
                per_user("a", Quota::per_minute(100)),
                per_user("b", Quota::per_minute(3)),
            ],
            &clock,
        );
        let limiter = layer.limiter().clone();
        let server = Server::start(app(layer)).await;
        let mut statuses = Vec::new();
        for _ in 0..5 {
            statuses.push(server.send(as_user("u")).await.status.as_u16());
        }
        let u = Key::from("u");
        let used = |d: Decision| d.capacity - d.remaining;
        let (tight, a, b) = (
            used(limiter.peek("tight", &u).await?),
            used(limiter.peek("a", &u).await?),
            used(limiter.peek("b", &u).await?),
        );
        // 3 handled (b's quota), the shadowed "tight" charged for the first only.
        assert_eq!(statuses, [200, 200, 200, 429, 429]);
        assert_eq!((tight, a, b), (1, 3, 3));
        Ok(())
    }

    /// The layer-wide switch over per-policy shares: while it is on nothing is
    /// rejected and the usage is enforcement's; a clone of the layer with the switch
    /// off (sharing limiter and policies) rejects at once: no jump.
    #[tokio::test]
    async fn the_layer_wide_switch_charges_what_enforcement_would() -> TestResult {
        let clock = manual();
        let layer = layer_on(
            [per_user("api", Quota::per_minute(3)).enforce(1.0)?],
            &clock,
        );
        let watching = Server::start(app(layer.clone().shadow(true))).await;
        let enforcing = Server::start(app(layer.clone().shadow(false))).await;
        let mut remaining = Vec::new();
        for _ in 0..6 {
            let reply = watching.send(as_user("u")).await;
            assert_eq!(reply.status, StatusCode::OK);
            remaining.push(reply.header("ratelimit").to_owned());
        }
        assert_eq!(
            remaining,
            [
                "\"api\";r=2;t=60",
                "\"api\";r=1;t=60",
                "\"api\";r=0;t=60",
                "\"api\";r=0;t=60",
                "\"api\";r=0;t=60",
                "\"api\";r=0;t=60"
            ]
        );
        assert_eq!(
            enforcing.send(as_user("u")).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(enforcing.send(as_user("v")).await.status, StatusCode::OK);
        Ok(())
    }

    /// "A shadowed penalty box counts the shadowed denials and trips as it would; the
    /// block it sets is only watched too, until the policy is enforced": a reload to
    /// enforcement rejects the tripped caller for what is left of its block.
    #[tokio::test]
    async fn a_shadowed_penalty_box_trips_and_bites_once_enforced() -> TestResult {
        let clock = manual();
        let policy = || {
            per_user("login", Quota::per_minute(1))
                .penalty(Penalty::after(2).within(secs(60)).block_for(secs(600)))
        };
        let layer = layer_on([policy().shadow(true)], &clock);
        let limiter = layer.limiter().clone();
        let server = Server::start(app(layer.clone())).await;
        for _ in 0..4 {
            assert_eq!(server.send(as_user("m")).await.status, StatusCode::OK);
        }
        let peek = limiter.peek("login", &Key::from("m")).await?;
        assert_eq!(peek.blocked_for, Some(secs(600)), "{peek:?}");
        clock.advance(secs(120));
        layer.reload([policy()])?;
        let bitten = server.send(as_user("m")).await;
        assert_eq!(bitten.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(bitten.header("retry-after"), "480");
        assert_eq!(server.send(as_user("n")).await.status, StatusCode::OK);
        Ok(())
    }

    /// A reload that moves the share, racing requests: each request is decided by one
    /// set, so a caller enforced in neither set is never rejected and one enforced in
    /// both is rejected past its quota.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_share_moved_by_racing_reloads_never_mixes_sets() -> TestResult {
        let clock = manual();
        let at = |share: f64| {
            per_user("api", Quota::per_minute(1))
                .enforce(share)
                .expect("share")
        };
        let (low, high) = (at(0.2), at(0.6));
        let never = (0..100_000_u64)
            .map(|n| format!("n{n}"))
            .find(|u| !high.enforces(&Key::from(u.as_bytes())))
            .expect("a key shadowed at 0.6");
        let always = (0..100_000_u64)
            .map(|n| format!("a{n}"))
            .find(|u| low.enforces(&Key::from(u.as_bytes())))
            .expect("a key enforced at 0.2");
        let layer = layer_on([low], &clock);
        let server = Server::start(app(layer.clone())).await;
        let stop = Arc::new(AtomicBool::new(false));
        let reloader = {
            let (layer, stop) = (layer.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let share = if i % 2 == 0 { 0.2 } else { 0.6 };
                    layer
                        .reload([per_user("api", Quota::per_minute(1))
                            .enforce(share)
                            .expect("s")])
                        .expect("reload");
                }
            })
        };
        let mut wrong = Vec::new();
        for i in 0..100 {
            let n = server.send(as_user(&never)).await.status;
            let a = server.send(as_user(&always)).await.status;
            if n != StatusCode::OK || (i > 0 && a != StatusCode::TOO_MANY_REQUESTS) {
                wrong.push((i, n, a));
            }
        }
        stop.store(true, Ordering::SeqCst);
        reloader.join().expect("reloader");
        assert!(wrong.is_empty(), "{wrong:?}");
        Ok(())
    }
}

mod observe {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    use tollgate::layer::FailMode;

    /// Each series (its name and sorted labels) with its counters and gauges summed.
    type Seen = BTreeMap<(String, Vec<(String, String)>), f64>;

    fn snapshotter() -> &'static Snapshotter {
        static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
        SNAPSHOTTER.get_or_init(|| {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            recorder.install().expect("the binary's one recorder");
            snapshotter
        })
    }

    /// Every series seen so far (name, sorted labels) with counters and gauges summed.
    fn seen() -> std::sync::MutexGuard<'static, Seen> {
        static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
        let mut seen = SEEN
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (key, _, _, value) in snapshotter().snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let change = match value {
                DebugValue::Counter(n) => n as f64,
                DebugValue::Gauge(g) => g.into_inner(),
                DebugValue::Histogram(xs) => xs.len() as f64,
            };
            *seen.entry((key.name().to_owned(), labels)).or_default() += change;
        }
        seen
    }

    fn count(name: &str, labels: &[(&str, &str)]) -> f64 {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        seen()
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0.0)
    }

    /// Traffic of every kind with secret keys (API keys, client addresses): no metric
    /// name or label value carries a key, its fingerprint, or an address; the outcomes
    /// are counted exactly (`allowed`, `shadow_rejected`, `blocked`, `rejected`, `fail_open`).
    #[tokio::test]
    #[allow(clippy::too_many_lines)] // one scenario, its outcomes and its labels
    async fn labels_never_carry_a_key_and_outcomes_are_counted_exactly() -> TestResult {
        snapshotter();
        let secret = "sk_live_TOPSECRET_4242";
        let address = "198.51.100.77";
        let clock = manual();
        let primary = Flaky::new(MemoryStore::with_clock(clock.clone()));
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::new("obs-keyed", Quota::per_minute(2))?
                    .algorithm(Algorithm::FixedWindow)
                    .key(key::header("x-api-key")?)
                    .penalty(Penalty::after(2).within(secs(60)).block_for(secs(600))),
            )
            .policy(
                Policy::new("obs-ip", Quota::per_minute(3))?
                    .algorithm(Algorithm::FixedWindow)
                    .key(key::client_ip(tollgate::key::TrustedProxies::loopback()))
                    .shadow(true),
            )
            .store(primary.clone())
            .build()?
            .on_store_error(FailMode::Open);
        let server = Server::start(
            Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer),
        )
        .await;
        let call = |api_key: &str, from: &str| {
            Request::get("/")
                .header("x-api-key", api_key)
                .header("x-forwarded-for", from)
                .body(Full::default())
                .expect("request")
        };
        let mut statuses = Vec::new();
        for _ in 0..6 {
            statuses.push(server.send(call(secret, address)).await.status.as_u16());
        }
        // Another address, five keys: the shadowed per-IP limit would reject two.
        for i in 0..5 {
            let reply = server
                .send(call(&format!("other-{i}"), "198.51.100.78"))
                .await;
            statuses.push(reply.status.as_u16());
        }
        primary.set_down(true);
        for _ in 0..2 {
            statuses.push(server.send(call(secret, address)).await.status.as_u16());
        }
        assert_eq!(
            statuses,
            [
                200, 200, 429, 429, 429, 429, 200, 200, 200, 200, 200, 200, 200
            ]
        );

        let fingerprints = [
            Key::from(secret).to_hex(),
            Key::from(address.parse::<IpAddr>()?).to_hex(),
        ];
        let mut leaks = Vec::new();
        for ((name, labels), _) in seen().iter() {
            let mut texts = vec![name.clone()];
            texts.extend(labels.iter().flat_map(|(k, v)| [k.clone(), v.clone()]));
            for text in texts {
                if text.contains("TOPSECRET")
                    || text.contains(address)
                    || fingerprints.iter().any(|f| text.contains(f.as_str()))
                {
                    leaks.push(format!("{name} {labels:?}"));
                }
            }
        }
        assert!(leaks.is_empty(), "{leaks:#?}");
        let outcomes: Vec<(&str, &str, f64)> = [
            ("obs-keyed", "allowed"),
            ("obs-keyed", "rejected"),
            ("obs-keyed", "blocked"),
            ("obs-keyed", "fail_open"),
            ("obs-ip", "allowed"),
            ("obs-ip", "shadow_rejected"),
            ("obs-ip", "fail_open"),
        ]
        .into_iter()
        .map(|(policy, outcome)| {
            (
                policy,
                outcome,
                count(
                    "tollgate_requests_total",
                    &[("policy", policy), ("outcome", outcome)],
                ),
            )
        })
        .collect();
        let typed: Vec<String> = seen()
            .keys()
            .flat_map(|(_, labels)| labels.iter().map(|(_, v)| v.clone()))
            .filter(|v| v.contains("::") || v.contains('<'))
            .collect();
        assert!(typed.is_empty(), "type paths in labels: {typed:?}");
        let counted: Vec<f64> = outcomes.iter().map(|o| o.2).collect();
        assert_eq!(counted, [7.0, 1.0, 3.0, 2.0, 9.0, 2.0, 2.0], "{outcomes:?}");
        Ok(())
    }
}

// =================================================================================
// Issue 29: problem bodies, pk, in-flight members, the extractor, CDN client IPs,
// a ConnectionManager's deadline.
// =================================================================================

mod ecosystem {
    use super::*;
    use http::HeaderValue;
    use serde_json::Value;
    use sfv::{List, ListEntry, Parser};
    use tollgate::key::{ProxyHeader, TrustedProxies};
    use tollgate::layer::{FailMode, Rejection};

    fn sf_list(reply: &Reply, name: &str) -> List {
        let combined = reply
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ASCII"))
            .collect::<Vec<_>>()
            .join(", ");
        Parser::new(combined.as_bytes())
            .parse::<List>()
            .unwrap_or_else(|e| panic!("{name}: {combined:?}: {e}"))
    }

    fn app(layer: RateLimitLayer) -> Router {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer)
    }

    /// Policy names with every printable ASCII character JSON and Structured Fields
    /// must escape (`"`, `\`) and a few they need not, in every rejection body the
    /// layer writes: each is valid JSON naming the policy exactly, and the headers
    /// parse. Names with control characters, DEL or non-ASCII are refused up front.
    #[tokio::test]
    async fn policy_names_json_must_escape_survive_every_rejection_body() -> TestResult {
        for bad in ["a\u{1}b", "a\u{7f}b", "é", "a\nb", ""] {
            assert!(Policy::new(bad, Quota::per_minute(1)).is_err(), "{bad:?}");
        }
        let name = r#"q"u\o{t}e, 'x' ;=:"#;
        for rejection in [Rejection::Problem, Rejection::Json] {
            let clock = manual();
            let layer = layer_on(
                [Policy::new(name, Quota::per_minute(1))?
                    .algorithm(Algorithm::FixedWindow)
                    .key(key::header("x-user")?)],
                &clock,
            )
            .rejection(rejection.clone());
            let limiter = layer.limiter().clone();
            let server = Server::start(app(layer)).await;
            let user = || with_header(Method::GET, "/", "x-user", "u");
            assert_eq!(server.send(user()).await.status, StatusCode::OK);
            let denied = server.send(user()).await;
            limiter.block(name, &Key::from("u"), secs(60)).await?;
            let blocked = server.send(user()).await;
            for (reply, kind) in [
                (&denied, "quota-exceeded"),
                (&blocked, "abnormal-usage-detected"),
            ] {
                assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
                let body: Value = serde_json::from_str(&reply.body)
                    .unwrap_or_else(|e| panic!("{:?} is not JSON: {e}", reply.body));
                let policies = body
                    .get("violated-policies")
                    .or_else(|| body.get("policies"))
                    .and_then(Value::as_array)
                    .unwrap_or_else(|| panic!("no policies in {body}"));
                assert_eq!(policies, &vec![Value::from(name)], "{body}");
                if matches!(rejection, Rejection::Problem) {
                    let expected =
                        format!("https://iana.org/assignments/http-problem-types#{kind}");
                    assert_eq!(body["type"], Value::from(expected), "{body}");
                }
                let list = sf_list(reply, "ratelimit-policy");
                let ListEntry::Item(item) = &list[0] else {
                    panic!("an item")
                };
                assert_eq!(
                    item.bare_item.as_string().map(sfv::StringRef::as_str),
                    Some(name)
                );
            }
        }
        // Fail closed: the problem type for reduced capacity, valid JSON.
        let failing = Flaky::new(MemoryStore::new());
        failing.set_down(true);
        let layer = RateLimitLayer::builder()
            .policy(Policy::new(name, Quota::per_minute(1))?)
            .store(failing)
            .build()?
            .on_store_error(FailMode::Closed)
            .rejection(Rejection::Problem);
        let server = Server::start(app(layer)).await;
        let closed = server.get("/").await;
        assert_eq!(closed.status, StatusCode::SERVICE_UNAVAILABLE);
        let body: Value = serde_json::from_str(&closed.body)?;
        assert_eq!(
            body["type"],
            "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
        );
        Ok(())
    }

    /// `pk` is the key's fingerprint, never the raw key: for a header key, for the
    /// global key and beside an in-flight member; the raw value appears in no
    /// response header. In-flight bounds say `qu="concurrent-requests"` and have no
    /// `RateLimit` member.
    #[tokio::test]
    async fn pk_is_the_fingerprint_and_in_flight_members_say_concurrent_requests() -> TestResult {
        let secret = "sk_live_PKSECRET";
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::new("keyed", Quota::per_minute(10))?
                    .algorithm(Algorithm::FixedWindow)
                    .key(key::header("x-api-key")?),
            )
            .policy(
                Policy::new("everyone", Quota::per_minute(100))?.algorithm(Algorithm::FixedWindow),
            )
            .policy(Policy::in_flight_only("running", 3)?.key(key::header("x-api-key")?))
            .partition_keys(true)
            .store(MemoryStore::with_clock(manual()))
            .build()?;
        let server = Server::start(app(layer)).await;
        let reply = server
            .send(with_header(Method::GET, "/", "x-api-key", secret))
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        for (name, value) in &reply.headers {
            let text = String::from_utf8_lossy(value.as_bytes());
            assert!(!text.contains("PKSECRET"), "{name}: {text}");
        }
        let policy = sf_list(&reply, "ratelimit-policy");
        let ratelimit = sf_list(&reply, "ratelimit");
        let mut pks = std::collections::BTreeMap::new();
        for entry in policy.iter().chain(ratelimit.iter()) {
            let ListEntry::Item(item) = entry else {
                panic!("an item")
            };
            let name = item
                .bare_item
                .as_string()
                .expect("a name")
                .as_str()
                .to_owned();
            if let Some(pk) = item.params.get("pk") {
                let bytes = pk
                    .as_byte_sequence()
                    .expect("pk is a Byte Sequence")
                    .to_vec();
                pks.entry(name.clone()).or_insert_with(Vec::new).push(bytes);
            }
            if name == "running" {
                let qu = item
                    .params
                    .get("qu")
                    .and_then(|q| q.as_string())
                    .map(sfv::StringRef::as_str);
                assert_eq!(qu, Some("concurrent-requests"), "{item:?}");
            }
        }
        let fingerprint = Key::from(secret).fingerprint().to_vec();
        assert!(pks["keyed"].iter().all(|pk| *pk == fingerprint), "{pks:?}");
        assert!(pks["keyed"].len() == 2, "pk on both members: {pks:?}");
        let ratelimit_names: Vec<String> = ratelimit
            .iter()
            .map(|e| match e {
                ListEntry::Item(i) => i.bare_item.as_string().expect("name").as_str().to_owned(),
                ListEntry::InnerList(_) => panic!("inner list"),
            })
            .collect();
        assert!(
            !ratelimit_names.contains(&"running".to_owned()),
            "{ratelimit_names:?}"
        );
        Ok(())
    }

    /// The `Decisions` extractor: under a router-wide layer and a `route_layer`, the
    /// handler sees the outer then the inner decisions; on a route where every policy
    /// is out of scope it sees an empty `Decisions`, not a 500; `Option<Decisions>`
    /// without any layer is `None`.
    #[tokio::test]
    async fn the_extractor_sees_both_layers_and_empty_decisions_outside_every_scope() -> TestResult
    {
        let clock = manual();
        let outer = layer_on(
            [Policy::new("outer", Quota::per_minute(10))?
                .algorithm(Algorithm::FixedWindow)
                .on_route(Method::GET, "/both")?],
            &clock,
        );
        let inner = layer_on(
            [Policy::new("inner", Quota::per_minute(10))?.algorithm(Algorithm::FixedWindow)],
            &clock,
        );
        let names = |decisions: Decisions| async move {
            decisions
                .iter()
                .map(|d| d.limit)
                .collect::<Vec<_>>()
                .join(",")
        };
        let app = Router::new()
            .route("/both", get(names).route_layer(inner))
            .route("/none", get(names))
            .layer(outer);
        let server = Server::start(app).await;
        let both = server.get("/both").await;
        assert_eq!(
            (both.status, both.body.as_str()),
            (StatusCode::OK, "outer,inner")
        );
        let none = server.get("/none").await;
        assert_eq!((none.status, none.body.as_str()), (StatusCode::OK, ""));

        let bare = Server::start(Router::new().route(
            "/",
            get(|d: Option<Decisions>| async move { format!("{}", d.is_some()) }),
        ))
        .await;
        assert_eq!(bare.get("/").await.body, "false");
        Ok(())
    }

    const PROXY: &str = "10.0.0.2:40000";

    fn from_peer(peer: &str, headers: &[(&str, &str)]) -> http::request::Parts {
        let mut builder = Request::get("/");
        for (name, value) in headers {
            builder = builder.header(*name, HeaderValue::from_str(value).expect("value"));
        }
        let mut request = builder.body(()).expect("request");
        request
            .extensions_mut()
            .insert(peer.parse::<SocketAddr>().expect("socket address"));
        request.into_parts().0
    }

    fn ip(s: &str) -> Key {
        Key::from(s.parse::<IpAddr>().expect("ip"))
    }

    /// "IPv4-mapped IPv6 addresses (`::ffff:10.1.2.3`) are treated as the IPv4
    /// addresses they carry, in this list and in requests": in every CDN header (and
    /// `CloudFront`'s bracketed and unbracketed forms), a mapped client is keyed as its
    /// IPv4 address — not by the /64 every IPv4 client would share — and a mapped
    /// trusted peer is trusted.
    #[test]
    fn ipv4_mapped_clients_in_cdn_headers_are_keyed_as_their_ipv4_address() {
        let mut wrong = Vec::new();
        for (header, mapped, other) in [
            (
                ProxyHeader::CfConnectingIp,
                "::ffff:203.0.113.7",
                "::ffff:203.0.113.8",
            ),
            (
                ProxyHeader::TrueClientIp,
                "::ffff:203.0.113.7",
                "::ffff:203.0.113.8",
            ),
            (
                ProxyHeader::FlyClientIp,
                "::ffff:203.0.113.7",
                "::ffff:203.0.113.8",
            ),
            (
                ProxyHeader::XEnvoyExternalAddress,
                "::ffff:203.0.113.7",
                "::ffff:203.0.113.8",
            ),
            (
                ProxyHeader::XRealIp,
                "::ffff:203.0.113.7",
                "::ffff:203.0.113.8",
            ),
            (
                ProxyHeader::XForwardedFor,
                "::ffff:203.0.113.7",
                "::ffff:203.0.113.8",
            ),
            (
                ProxyHeader::CloudFrontViewerAddress,
                "[::ffff:203.0.113.7]:443",
                "[::ffff:203.0.113.8]:443",
            ),
            (
                ProxyHeader::CloudFrontViewerAddress,
                "::ffff:203.0.113.7:443",
                "::ffff:203.0.113.8:443",
            ),
        ] {
            let client_ip = key::client_ip(
                TrustedProxies::new(["10.0.0.0/8"])
                    .expect("proxies")
                    .header(header),
            );
            for peer in [PROXY, "[::ffff:10.0.0.2]:40000"] {
                let first = client_ip.extract(&from_peer(peer, &[(header.name(), mapped)]));
                let second = client_ip.extract(&from_peer(peer, &[(header.name(), other)]));
                if first != Some(ip("203.0.113.7")) || first == second {
                    wrong.push(format!(
                        "{header:?} from {peer}: {mapped:?} → {first:?}, {other:?} → {second:?}"
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// Values no edge writes, from a trusted peer: an address with a zone, a port on a
    /// one-address header, two addresses, a bracketed address without a port on
    /// `CloudFront`'s: each keys either the address written or the proxy, never a third
    /// address; and from an untrusted peer every value keys the peer.
    #[test]
    fn odd_cdn_values_key_the_written_address_or_the_proxy() {
        let cases: &[(ProxyHeader, &str, &[&str])] = &[
            (ProxyHeader::CfConnectingIp, "fe80::1%eth0", &[]),
            (
                ProxyHeader::CfConnectingIp,
                "203.0.113.7:443",
                &["203.0.113.7"],
            ),
            (
                ProxyHeader::CfConnectingIp,
                " 203.0.113.7 ",
                &["203.0.113.7"],
            ),
            (ProxyHeader::CfConnectingIp, "203.000.113.007", &[]),
            (ProxyHeader::CfConnectingIp, "0x7f.1", &[]),
            (ProxyHeader::FlyClientIp, "203.0.113.7,203.0.113.8", &[]),
            (ProxyHeader::CloudFrontViewerAddress, "[2001:db8::1]", &[]),
            (
                ProxyHeader::CloudFrontViewerAddress,
                "2001:db8::1:abcd",
                &[],
            ),
            (ProxyHeader::CloudFrontViewerAddress, "203.0.113.7:-1", &[]),
            (
                ProxyHeader::CloudFrontViewerAddress,
                "203.0.113.7:+443",
                &[],
            ),
            (ProxyHeader::CloudFrontViewerAddress, ":443", &[]),
            (ProxyHeader::XEnvoyExternalAddress, "unknown", &[]),
        ];
        let mut wrong = Vec::new();
        for (header, value, addresses) in cases {
            let client_ip = key::client_ip(
                TrustedProxies::new(["10.0.0.0/8"])
                    .expect("proxies")
                    .ipv6_prefix(128)
                    .expect("prefix")
                    .header(*header),
            );
            let got = client_ip.extract(&from_peer(PROXY, &[(header.name(), value)]));
            let allowed: Vec<Option<Key>> = std::iter::once(Some(ip("10.0.0.2")))
                .chain(addresses.iter().map(|a| Some(ip(a))))
                .collect();
            if !allowed.contains(&got) {
                wrong.push(format!(
                    "{header:?} {value:?} keyed neither the proxy nor {addresses:?}"
                ));
            }
            let stranger =
                client_ip.extract(&from_peer("198.51.100.99:1", &[(header.name(), value)]));
            if stranger != Some(ip("198.51.100.99")) {
                wrong.push(format!("{header:?} {value:?} moved an untrusted peer"));
            }
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    /// Over real TCP from 127.0.0.1, which the layer does not trust: 30 requests with
    /// 30 different spoofed client addresses in each CDN header (and all at once) share
    /// the peer's quota of 5.
    #[tokio::test]
    async fn spoofed_cdn_headers_from_an_untrusted_peer_share_its_quota() -> TestResult {
        for header in [
            ProxyHeader::CfConnectingIp,
            ProxyHeader::TrueClientIp,
            ProxyHeader::FlyClientIp,
            ProxyHeader::CloudFrontViewerAddress,
            ProxyHeader::XEnvoyExternalAddress,
        ] {
            let policy = Policy::new("edge", Quota::per_minute(5))?
                .algorithm(Algorithm::FixedWindow)
                .key(key::client_ip(
                    TrustedProxies::new(["10.0.0.0/8", "2001:db8::/32"])?.header(header),
                ));
            let server = Server::start(app(layer_on([policy], &manual()))).await;
            let mut handled = 0;
            for i in 0..30 {
                let value = if header == ProxyHeader::CloudFrontViewerAddress {
                    format!("203.0.113.{i}:443")
                } else {
                    format!("203.0.113.{i}")
                };
                let mut builder = Request::get("/").header(header.name(), &value);
                for other in [
                    "cf-connecting-ip",
                    "true-client-ip",
                    "fly-client-ip",
                    "x-envoy-external-address",
                    "x-forwarded-for",
                    "x-real-ip",
                ] {
                    if other != header.name() {
                        builder = builder.header(other, format!("198.18.0.{i}"));
                    }
                }
                let reply = server.send(builder.body(Full::default())?).await;
                if reply.status == StatusCode::OK {
                    handled += 1;
                }
            }
            assert_eq!(handled, 5, "{header:?}");
        }
        Ok(())
    }

    /// A `RedisStore` from a `ConnectionManager` (its response timeout off, as the
    /// README shows): while the server is stopped, every call — one alone, then 20 at
    /// once — comes back as a `Timeout` instead of hanging, and decisions resume when
    /// the server does. (The outer 10 s bound only keeps a hang from stalling the
    /// suite; the store's deadline is 200 ms.)
    #[tokio::test]
    async fn a_connection_manager_store_times_out_on_a_stopped_server_and_recovers() -> TestResult {
        use tollgate::{RedisStore, StoreErrorKind};
        let server = support::redis_server::RedisServer::start();
        let client = redis::Client::open(server.url())?;
        let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
        let manager = redis::aio::ConnectionManager::new_with_config(client, config).await?;
        let store = RedisStore::from_connection_manager(manager)
            .deadline(Duration::from_millis(200))?
            .denial_cache(0);
        let limiter = Limiter::builder()
            .limit(Limit::new("api", Quota::per_minute(1000))?)
            .store(store)
            .build()?;
        let k = Key::from("k");
        assert!(limiter.check("api", &k, 1).await?.allowed);
        server.pause();
        let alone = tokio::time::timeout(secs(10), limiter.check("api", &k, 1)).await;
        let mut calls = Vec::new();
        for _ in 0..20 {
            let limiter = limiter.clone();
            calls.push(tokio::spawn(async move {
                tokio::time::timeout(secs(10), limiter.check("api", &Key::from("k"), 1)).await
            }));
        }
        let mut kinds = Vec::new();
        for call in calls {
            kinds.push(
                call.await?
                    .map(|r| r.map_err(|e| e.kind()).map(|d| d.allowed)),
            );
        }
        server.resume();
        let alone = alone.map(|r| r.map_err(|e| e.kind()).map(|d| d.allowed));
        assert_eq!(alone, Ok(Err(StoreErrorKind::Timeout)));
        assert!(
            kinds.iter().all(|k| *k == Ok(Err(StoreErrorKind::Timeout))),
            "{kinds:?}"
        );
        let mut resumed = false;
        for _ in 0..50 {
            if limiter.check("api", &k, 1).await.is_ok_and(|d| d.allowed) {
                resumed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(resumed, "decisions resumed after SIGCONT");
        Ok(())
    }
}

// =================================================================================
// Issue 28: more first-contact corners.
// =================================================================================

mod corners {
    use super::*;

    fn app_with(layer: RateLimitLayer) -> Router {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .route(
                "/login",
                post(|headers: http::HeaderMap| async move {
                    if headers.get("x-password").is_some_and(|p| p == "right") {
                        StatusCode::OK
                    } else {
                        StatusCode::UNAUTHORIZED
                    }
                }),
            )
            .layer(layer)
    }

    /// Issue 28 §5, "Honest headers": "a refunded or settled response shows where the
    /// caller stands after it". A successful login under `count_when(401)` is given
    /// back; its response should say r=5 of 5, not r=4.
    #[tokio::test]
    async fn a_refunded_response_shows_where_the_caller_stands_after_the_refund() -> TestResult {
        let policy = Policy::new("logins", Quota::per_minute(5))?
            .algorithm(Algorithm::FixedWindow)
            .on_route(Method::POST, "/login")?
            .count_when(|status| status == StatusCode::UNAUTHORIZED);
        let layer = layer_on([policy], &manual());
        let limiter = layer.limiter().clone();
        let server = Server::start(app_with(layer)).await;
        let ok = server
            .send(with_header(Method::POST, "/login", "x-password", "right"))
            .await;
        assert_eq!(ok.status, StatusCode::OK);
        let after = limiter
            .peek(
                "logins",
                &key::global()
                    .extract(&parts(Method::POST, "/login"))
                    .expect("global key"),
            )
            .await?;
        assert_eq!(after.remaining, 5, "the refund happened");
        // Where the peek says the caller stands: the quota whole, nothing to reset.
        assert_eq!(
            ok.header("ratelimit"),
            format!(
                "\"logins\";r={};t={}",
                after.remaining,
                after.reset_after.as_secs()
            )
        );
        assert_eq!(ok.header("ratelimit"), "\"logins\";r=5;t=0");
        Ok(())
    }

    /// A fallback for a limit that rejects requests without its key
    /// (`on_missing_key = "reject"`) can never serve anyone: the main limit rejects
    /// every request the fallback applies to. Either the file refuses it, or the
    /// fallback's callers are handled by it.
    #[tokio::test]
    async fn a_fallback_for_a_limit_that_rejects_missing_keys_serves_its_callers_or_is_refused()
    -> TestResult {
        let file = r#"
[[limit]]
name = "per-key"
quota = "100/min"
key = "header:x-api-key"
on_missing_key = "reject"

[[limit]]
name = "anonymous"
quota = "5/min"
algorithm = "fixed_window"
key = "peer_ip"
fallback_for = "per-key"
"#;
        let Ok(limits) = Limits::from_toml(file) else {
            return Ok(()); // refused: fine
        };
        let server = Server::start(app_with(layer_on(limits.into_policies(), &manual()))).await;
        let statuses = routes::statuses_of(&server, "/", 5).await;
        assert_eq!(statuses, [200; 5], "callers without a key");
        Ok(())
    }

    /// `routes` duplicates and `enforce` beside `shadow` are placed and refused; a
    /// route cost outside the limit's own routes is refused or harmless.
    #[test]
    fn duplicate_routes_and_conflicting_rollout_keys_are_placed() {
        let base = "[[limit]]\nname = \"a\"\nquota = \"5/min\"\n";
        for (line, at) in [
            ("routes = [\"GET /a\", \"GET /a\"]\n", 4),
            ("routes = [\"GET /a/{x}\", \"GET /a/{y}\"]\n", 4),
            ("enforce = 0.5\nshadow = true\n", 4),
            (
                "key = \"peer_ip\"\nproxy_header = \"cf-connecting-ip\"\n",
                5,
            ),
            ("proxy_header = \"x-client-ip\"\nkey = \"client_ip\"\n", 4),
        ] {
            let err = Limits::from_toml(&format!("{base}{line}"))
                .map(|_| ())
                .expect_err(line);
            assert!(
                err.line().is_some_and(|l| (4..=at.max(5)).contains(&l)) && err.column().is_some(),
                "{line:?}: {err}"
            );
        }
    }

    /// "A request without a key, under `on_missing_key(Reject)`, is rejected only by a
    /// policy that enforces every caller."
    #[tokio::test]
    async fn a_missing_key_is_rejected_only_by_a_policy_that_enforces_everyone() -> TestResult {
        let policy = |share: f64| {
            Policy::new("keyed", Quota::per_minute(5))
                .expect("policy")
                .key(key::header("x-api-key").expect("name"))
                .on_missing_key(MissingKey::Reject)
                .enforce(share)
                .expect("share")
        };
        let mut statuses = Vec::new();
        for share in [0.0, 0.5, 0.999, 1.0] {
            let server = Server::start(app_with(layer_on([policy(share)], &manual()))).await;
            statuses.push(server.get("/").await.status.as_u16());
        }
        assert_eq!(statuses, [200, 200, 200, 429]);
        Ok(())
    }

    /// A scope on a service nested with `nest_service` (a file server, say): axum's
    /// matched path there is the nest's own, so `on_route_any("/files/{*rest}")`
    /// must count its requests (or the scope is silently void for it).
    #[tokio::test]
    async fn a_scope_over_a_nested_service_counts_its_requests() -> TestResult {
        let handled = Arc::new(AtomicUsize::new(0));
        let files = {
            let handled = handled.clone();
            tower::service_fn(move |_req: Request<axum::body::Body>| {
                let handled = handled.clone();
                async move {
                    handled.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(axum::response::Response::new(
                        axum::body::Body::from("file"),
                    ))
                }
            })
        };
        let policy = Policy::new("files", Quota::per_minute(2))?
            .algorithm(Algorithm::FixedWindow)
            .on_route_any("/files/{*rest}")?;
        let app = Router::new()
            .nest_service("/files", files)
            .layer(layer_on([policy], &manual()));
        let server = Server::start(app).await;
        let mut statuses = Vec::new();
        for path in [
            "/files/a.txt",
            "/files/b/c.txt",
            "/files/a.txt",
            "/files/d",
            "/files/e",
        ] {
            statuses.push(server.get(path).await.status.as_u16());
        }
        let handled = handled.load(Ordering::SeqCst);
        assert!(
            handled <= 2,
            "2/min over /files/{{*rest}}: handled {handled}, {statuses:?}"
        );
        Ok(())
    }
}

mod scoped_slots {
    use super::*;
    use tokio::sync::Notify;

    /// An in-flight bound scoped to one route (`on_route`), or to callers without an
    /// API key (`unless_key`), takes no slot for requests outside its scope: two
    /// requests held open at once elsewhere are both handled, while in scope the
    /// second of two held at once is refused.
    /// Waits (at most 10 s, a bound against hangs, not a measurement) until `ready`.
    async fn until(ready: impl Fn() -> bool) {
        for _ in 0..1_000 {
            if ready() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("never became ready");
    }

    #[tokio::test]
    async fn a_scoped_in_flight_bound_takes_no_slot_outside_its_scope() -> TestResult {
        let release = Arc::new(Notify::new());
        let entered = Arc::new(AtomicUsize::new(0));
        let slow = {
            let (release, entered) = (release.clone(), entered.clone());
            get(move || {
                let (release, entered) = (release.clone(), entered.clone());
                async move {
                    let notified = release.notified();
                    entered.fetch_add(1, Ordering::SeqCst);
                    notified.await;
                    "done"
                }
            })
        };
        let layer = RateLimitLayer::builder()
            .policy(Policy::in_flight_only("route-slots", 1)?.on_route(Method::GET, "/scoped")?)
            .policy(
                Policy::in_flight_only("anonymous-slots", 1)?.unless_key(key::header("x-api-key")?),
            )
            .build()?;
        let app = Router::new()
            .route("/scoped", slow.clone())
            .route("/elsewhere", slow)
            .layer(layer);
        let server = Arc::new(Server::start(app).await);
        let spawn = |path: &'static str| {
            let server = server.clone();
            tokio::spawn(async move {
                server
                    .send(with_header(Method::GET, path, "x-api-key", "k"))
                    .await
                    .status
            })
        };
        // Two keyed requests to /elsewhere held at once (neither bound applies), and
        // one to /scoped held.
        let elsewhere = [spawn("/elsewhere"), spawn("/elsewhere")];
        until(|| entered.load(Ordering::SeqCst) == 2).await;
        let scoped = spawn("/scoped");
        until(|| entered.load(Ordering::SeqCst) == 3).await;
        // In scope, the next one finds no slot.
        let refused = spawn("/scoped");
        until(|| refused.is_finished()).await;
        let refused = refused.await?;
        release.notify_waiters();
        let mut statuses = Vec::new();
        for task in elsewhere {
            statuses.push(task.await?);
        }
        statuses.push(scoped.await?);
        statuses.push(refused);
        assert_eq!(
            statuses,
            [
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::OK,
                StatusCode::TOO_MANY_REQUESTS
            ]
        );
        Ok(())
    }
}

mod carried_batches {
    use super::*;
    use tollgate::store::Fallback;

    /// A `check_all` whose first entry is a block the fallback carries is denied
    /// without charging the other entry ("nothing was charged to them"), and that
    /// entry's decision says it was not evaluated; an operator's zero block during
    /// the outage lifts a carried block.
    #[tokio::test]
    async fn a_batch_denied_by_a_carried_block_charges_nothing_else() -> TestResult {
        let clock = manual();
        let primary = Flaky::new(MemoryStore::with_clock(clock.clone()));
        let insurance = MemoryStore::with_clock(clock.clone());
        let limiter = Limiter::builder()
            .limit(Limit::new("login", Quota::per_hour(5))?.algorithm(Algorithm::FixedWindow))
            .limit(Limit::new("api", Quota::per_hour(5))?.algorithm(Algorithm::FixedWindow))
            .store(Fallback::new(primary.clone(), insurance.clone()).probe_interval(secs(3600)))
            .build()?;
        let (m, other) = (Key::from("m"), Key::from("other"));
        let seen = limiter.block("login", &m, secs(600)).await?;
        assert!(seen.blocked_for.is_some());
        assert!(!limiter.check("login", &m, 1).await?.allowed);
        primary.set_down(true);
        let batch = limiter
            .check_all(&[("login", &m, 1), ("api", &other, 2)])
            .await?;
        assert!(!batch[0].allowed);
        assert!(!batch[1].evaluated(), "{:?}", batch[1]);
        let on_insurance = Limiter::builder()
            .limit(Limit::new("api", Quota::per_hour(5))?.algorithm(Algorithm::FixedWindow))
            .store(insurance)
            .build()?;
        assert_eq!(on_insurance.peek("api", &other).await?.remaining, 5);
        limiter.block("login", &m, Duration::ZERO).await?;
        assert!(limiter.check("login", &m, 1).await?.allowed);
        Ok(())
    }
}

mod hooked_fallback {
    use super::*;

    /// `fallback_for`: "this one applies only to requests that limit's `key` finds
    /// nothing for". When a hook (the README's way to add what a file cannot hold)
    /// gives the main limit its key in code — say, the identity an authentication
    /// layer found — the fallback must follow that key: every request is counted by
    /// exactly one of the two.
    #[tokio::test]
    async fn a_fallback_follows_the_key_a_hook_gives_its_main_limit() -> TestResult {
        let file = r#"
[[limit]]
name = "per-key"
quota = "1000/min"
algorithm = "fixed_window"
key = "header:x-api-key"

[[limit]]
name = "anonymous"
quota = "5/min"
algorithm = "fixed_window"
key = "peer_ip"
fallback_for = "per-key"
"#;
        let layer = RateLimitLayer::builder()
            .policies(Limits::from_toml(file)?.into_policies())
            .hook("per-key", |policy| {
                policy.key(key::header("x-authenticated-user").expect("name"))
            })
            .store(MemoryStore::with_clock(manual()))
            .build()?;
        let server = Server::start(
            Router::new()
                .route(
                    "/",
                    get(|decisions: Decisions| async move {
                        decisions
                            .iter()
                            .map(|d| d.limit)
                            .collect::<Vec<_>>()
                            .join(",")
                    }),
                )
                .layer(layer),
        )
        .await;
        let mut deciders = std::collections::BTreeMap::<String, usize>::new();
        let mut handled = 0;
        for i in 0..20 {
            let reply = server
                .send(with_header(Method::GET, "/", "x-api-key", &format!("k{i}")))
                .await;
            handled += usize::from(reply.status == StatusCode::OK);
            *deciders
                .entry(format!("only x-api-key: {:?}", reply.body))
                .or_default() += 1;
            let reply = server
                .send(with_header(
                    Method::GET,
                    "/",
                    "x-authenticated-user",
                    "alice",
                ))
                .await;
            *deciders
                .entry(format!("only the hooked key: {:?}", reply.body))
                .or_default() += 1;
        }
        // The hooked key is counted by the main limit alone (1000/min: all 20), and a
        // request without it by the fallback alone (5 a minute per IP: 5 served, the
        // rest refused by it).
        assert_eq!(
            deciders.get("only the hooked key: \"per-key\""),
            Some(&20),
            "{deciders:#?}"
        );
        assert_eq!(handled, 5, "{deciders:#?}");
        assert_eq!(
            deciders.get("only x-api-key: \"anonymous\""),
            Some(&5),
            "{deciders:#?}"
        );
        Ok(())
    }
}

mod chained_fallbacks {
    use super::*;

    /// A chain of fallbacks in the file (per API key, else per session, else per IP):
    /// refused at the second `fallback_for` (line 17), or else each request counted
    /// by exactly one of the three.
    #[tokio::test]
    async fn a_chain_of_fallbacks_counts_each_request_once_or_is_refused() -> TestResult {
        let file = r#"
[[limit]]
name = "per-key"
quota = "1000/min"
key = "header:x-api-key"

[[limit]]
name = "per-session"
quota = "100/min"
key = "header:x-session"
fallback_for = "per-key"

[[limit]]
name = "per-ip"
quota = "5/min"
key = "peer_ip"
fallback_for = "per-session"
"#;
        if let Err(err) = Limits::from_toml(file) {
            assert_eq!(
                err.line(),
                Some(17),
                "placed at the second fallback_for: {err}"
            );
        }
        let Ok(limits) = Limits::from_toml(file) else {
            return Ok(()); // refused: fine
        };
        let server = Server::start(
            Router::new()
                .route(
                    "/",
                    get(|decisions: Decisions| async move {
                        decisions
                            .iter()
                            .map(|d| d.limit)
                            .collect::<Vec<_>>()
                            .join(",")
                    }),
                )
                .layer(layer_on(limits.into_policies(), &manual())),
        )
        .await;
        let mut seen = Vec::new();
        for headers in [
            vec![("x-api-key", "k")],
            vec![("x-session", "s")],
            vec![("x-api-key", "k"), ("x-session", "s")],
            vec![],
        ] {
            let mut builder = Request::get("/");
            for (name, value) in &headers {
                builder = builder.header(*name, *value);
            }
            let reply = server.send(builder.body(Full::default())?).await;
            seen.push((headers, reply.body));
        }
        let wrong: Vec<_> = seen
            .iter()
            .filter(|(_, body)| body.contains(',') || body.is_empty())
            .collect();
        assert!(wrong.is_empty(), "{seen:?}");
        Ok(())
    }
}
