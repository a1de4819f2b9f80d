//! The README's recipes, written in the TOML file alone, over real TCP to a real axum
//! server: "5 failed logins a minute block the caller for 10 minutes" (a route scope,
//! `count_when` and a one-rejection penalty, no dead parameter), a per-API-key limit
//! with a smaller per-IP fallback for callers without a key (each with its own
//! quota), and a limit that applies to one route only (a first-class route scope, not
//! a cost of 0).

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::{get, post};
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::clock::ManualClock;
use tollgate::config::Limits;
use tollgate::{MemoryStore, RateLimitLayer};

/// 2023-11-14T00:00:00Z.
const BASE: Duration = Duration::from_secs(1_699_920_000);

const LOGIN: &str = r#"
[[limit]]
name = "failed-logins"
quota = "5/min"
algorithm = "sliding_window_log"
key = "peer_ip"
routes = ["POST /login"]
count_when = [401]
penalty = { after = 1, block_for = "10min" }
"#;

/// `POST /login` answers 200 for the password "right", 401 otherwise.
async fn login(headers: HeaderMap) -> StatusCode {
    if headers.get("x-password").is_some_and(|p| p == "right") {
        StatusCode::OK
    } else {
        StatusCode::UNAUTHORIZED
    }
}

/// `routes` behind a layer with the file's limits, on a memory store on `clock`.
async fn serve(
    file: &str,
    clock: &ManualClock,
    routes: Router,
) -> Result<Server, Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::builder()
        .policies(Limits::from_toml(file)?.into_policies())
        .store(MemoryStore::with_clock(clock.clone()))
        .build()?;
    Ok(Server::start(routes.layer(layer)).await)
}

fn attempt(password: &str) -> Request<Full<bytes::Bytes>> {
    Request::post("/login")
        .header("x-password", password)
        .body(Full::default())
        .expect("a request")
}

#[tokio::test]
async fn five_failed_logins_block_the_caller_for_ten_minutes()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE);
    let routes = Router::new()
        .route("/login", post(login))
        .route("/login", get(|| async { "the login form" }))
        .route("/home", get(|| async { "home" }));
    let server = serve(LOGIN, &clock, routes).await?;

    // Successful logins are given back: any number of them count nothing.
    for _ in 0..8 {
        assert_eq!(server.send(attempt("right")).await.status, StatusCode::OK);
    }
    // Five failures are answered by the handler.
    for i in 0..5 {
        let reply = server.send(attempt("wrong")).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "failure {i}");
    }
    // The sixth attempt, even with the right password, trips the box: 10 minutes.
    let tripped = server.send(attempt("right")).await;
    assert_eq!(tripped.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(tripped.header("retry-after"), "600");

    // The failures leave the log a minute later; the block holds for ten.
    clock.advance(Duration::from_secs(9 * 60));
    let still = server.send(attempt("right")).await;
    assert_eq!(still.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(still.header("retry-after"), "60");
    clock.advance(Duration::from_secs(60));
    assert_eq!(server.send(attempt("right")).await.status, StatusCode::OK);

    // Other routes and methods were never limited, and carry no header of the limit.
    let home = server.get("/home").await;
    assert_eq!(home.status, StatusCode::OK);
    assert_eq!(home.header("ratelimit-policy"), "");
    let form = server.get("/login").await;
    assert_eq!(form.status, StatusCode::OK);
    assert_eq!(form.header("ratelimit-policy"), "");
    Ok(())
}

const ONE_ROUTE: &str = r#"
[[limit]]
name = "search"
quota = "2/min"
algorithm = "fixed_window"
key = "header:x-api-key"
on_missing_key = "reject"
routes = ["GET /search"]
"#;

#[tokio::test]
async fn a_limit_scoped_to_one_route_leaves_the_others_alone()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE);
    let routes = Router::new()
        .route("/search", get(|| async { "results" }))
        .route("/health", get(|| async { "ok" }));
    let server = serve(ONE_ROUTE, &clock, routes).await?;
    let search = || {
        Request::get("/search")
            .header("x-api-key", "k1")
            .body(Full::default())
            .expect("a request")
    };
    assert_eq!(server.send(search()).await.status, StatusCode::OK);
    let second = server.send(search()).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.header("ratelimit-policy"), r#""search";q=2;w=60"#);
    assert_eq!(
        server.send(search()).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Out of scope, a request with no API key is not rejected for it (a cost of 0
    // would still look for the key, and `on_missing_key = "reject"` would refuse it).
    for _ in 0..5 {
        let health = server.get("/health").await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.header("ratelimit-policy"), "");
    }
    // In scope, the missing key is still refused.
    assert_eq!(
        server.get("/search").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    Ok(())
}

const FALLBACK: &str = r#"
[[limit]]
name = "per-key"
quota = "3/min"
algorithm = "fixed_window"
key = "header:x-api-key"

[[limit]]
name = "anonymous"
quota = "1/min"
algorithm = "fixed_window"
key = "peer_ip"
fallback_for = "per-key"
"#;

#[tokio::test]
async fn callers_without_an_api_key_get_the_smaller_per_ip_quota()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE);
    let routes = Router::new().route("/", get(|| async { "hello" }));
    let server = serve(FALLBACK, &clock, routes).await?;
    let keyed = |key: &str| {
        Request::get("/")
            .header("x-api-key", key)
            .body(Full::default())
            .expect("a request")
    };
    // Without a key: one a minute, counted by IP, and only that policy speaks.
    let first = server.get("/").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("ratelimit-policy"), r#""anonymous";q=1;w=60"#);
    assert_eq!(server.get("/").await.status, StatusCode::TOO_MANY_REQUESTS);
    // With a key (from the same IP): three a minute, the anonymous quota untouched
    // and unmentioned.
    for i in 0..3 {
        let reply = server.send(keyed("k1")).await;
        assert_eq!(reply.status, StatusCode::OK, "keyed request {i}");
        assert_eq!(reply.header("ratelimit-policy"), r#""per-key";q=3;w=60"#);
    }
    assert_eq!(
        server.send(keyed("k1")).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another key has its own three.
    assert_eq!(server.send(keyed("k2")).await.status, StatusCode::OK);
    Ok(())
}

/// The README's code for each recipe builds, and behaves as its file twin: the same
/// scope, counted statuses, penalty and fallback on sample requests.
#[test]
fn each_recipe_in_code_matches_its_file() -> Result<(), Box<dyn std::error::Error>> {
    use http::Method;
    use tollgate::{Algorithm, Penalty, Policy, Quota, key};

    let logins = Policy::new("failed-logins", Quota::per_minute(5))?
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::peer_ip())
        .on_route(Method::POST, "/login")?
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let from_file = Limits::from_toml(LOGIN)?.into_policies().remove(0);
    assert_eq!(rule(logins.limit()), rule(from_file.limit()));
    let samples = [
        Request::post("/login").body(())?.into_parts().0,
        Request::get("/login").body(())?.into_parts().0,
        Request::post("/home").body(())?.into_parts().0,
    ];
    for parts in &samples {
        assert_eq!(logins.applies_to(parts), from_file.applies_to(parts));
    }
    for status in [200, 401, 403, 500] {
        let status = StatusCode::from_u16(status)?;
        assert_eq!(logins.counts(status), from_file.counts(status));
    }

    let per_key = Policy::new("per-key", Quota::per_minute(3))?
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-api-key")?);
    let anonymous = Policy::new("anonymous", Quota::per_minute(1))?
        .algorithm(Algorithm::FixedWindow)
        .key(key::peer_ip())
        .unless_key(key::header("x-api-key")?);
    let file = Limits::from_toml(FALLBACK)?.into_policies();
    assert_eq!(rule(per_key.limit()), rule(file[0].limit()));
    assert_eq!(rule(anonymous.limit()), rule(file[1].limit()));
    let with_key = Request::get("/")
        .header("x-api-key", "k")
        .body(())?
        .into_parts()
        .0;
    let without = Request::get("/").body(())?.into_parts().0;
    for parts in [&with_key, &without] {
        assert_eq!(anonymous.applies_to(parts), file[1].applies_to(parts));
        assert_eq!(per_key.applies_to(parts), file[0].applies_to(parts));
    }
    assert!(!anonymous.applies_to(&with_key) && anonymous.applies_to(&without));

    let search = Policy::new("search", Quota::per_minute(2))?
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-api-key")?)
        .on_missing_key(tollgate::layer::MissingKey::Reject)
        .on_route(Method::GET, "/search")?;
    let file = Limits::from_toml(ONE_ROUTE)?.into_policies().remove(0);
    for path in ["/search", "/health", "/search/more"] {
        let parts = Request::get(path).body(())?.into_parts().0;
        assert_eq!(search.applies_to(&parts), file.applies_to(&parts), "{path}");
    }
    Ok(())
}

/// What a limit counts: its name, quota, algorithm and penalty.
fn rule(
    limit: &tollgate::Limit,
) -> (
    &'static str,
    tollgate::Quota,
    tollgate::Algorithm,
    Option<tollgate::Penalty>,
) {
    (
        limit.name(),
        limit.quota(),
        limit.get_algorithm(),
        limit.get_penalty(),
    )
}

/// A rule the file cannot hold (a key a closure computes), attached in code by name
/// with `LayerBuilder::hook`: a reload of the file keeps it (before hooks,
/// `reload(limits.into_policies())` dropped it and every caller shared one key).
#[tokio::test]
async fn a_reload_of_the_file_keeps_the_rules_hooked_in_code()
-> Result<(), Box<dyn std::error::Error>> {
    const FILE: &str =
        "[[limit]]\nname = \"per-user\"\nquota = \"2/min\"\nalgorithm = \"fixed_window\"\n";
    let clock = ManualClock::new(BASE);
    let per_user = tollgate::key::Extractor::new(|parts: &http::request::Parts| {
        parts
            .headers
            .get("x-user")
            .map(|user| tollgate::Key::from(user.as_bytes()))
    });
    let layer = RateLimitLayer::builder()
        .policies(Limits::from_toml(FILE)?.into_policies())
        .hook("per-user", move |policy| policy.key(per_user.clone()))
        .store(MemoryStore::with_clock(clock.clone()))
        .build()?;
    let server = Server::start(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer.clone()),
    )
    .await;
    let as_user = |user: &str| {
        Request::get("/")
            .header("x-user", user)
            .body(Full::default())
            .expect("a request")
    };
    let status = |reply: support::http::Reply| reply.status;
    assert_eq!(status(server.send(as_user("a")).await), StatusCode::OK);
    assert_eq!(status(server.send(as_user("a")).await), StatusCode::OK);
    assert_eq!(
        status(server.send(as_user("a")).await),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(server.send(as_user("b")).await), StatusCode::OK);

    layer.reload(Limits::from_toml(&FILE.replace("2/min", "3/min"))?.into_policies())?;
    // Still one count per user: a has one more, b two more, c three.
    assert_eq!(status(server.send(as_user("a")).await), StatusCode::OK);
    assert_eq!(
        status(server.send(as_user("a")).await),
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..2 {
        assert_eq!(status(server.send(as_user("b")).await), StatusCode::OK);
    }
    for _ in 0..3 {
        assert_eq!(status(server.send(as_user("c")).await), StatusCode::OK);
    }
    // A file that lost the hooked policy is refused, and the rules stay in force.
    let renamed = FILE.replace("per-user", "someone");
    assert!(
        layer
            .reload(Limits::from_toml(&renamed)?.into_policies())
            .is_err()
    );
    assert_eq!(status(server.send(as_user("d")).await), StatusCode::OK);
    Ok(())
}

/// `routes` behind a layer with the file's limits, on `store`.
async fn serve_on(
    file: &str,
    store: impl tollgate::store::Store,
) -> Result<Server, Box<dyn std::error::Error>> {
    let routes = Router::new()
        .route("/health", get(|| async { "up" }))
        .route("/api/upload", post(|| async { "stored" }))
        .route("/api/{*rest}", axum::routing::any(|| async { "api" }));
    let layer = RateLimitLayer::builder()
        .policies(Limits::from_toml(file)?.into_policies())
        .store(store)
        .build()?;
    Ok(Server::start(routes.layer(layer)).await)
}

/// A request to `path` with `method`, with the API key `key` if any.
fn call(method: &str, path: &str, key: Option<&str>) -> Request<Full<bytes::Bytes>> {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.body(Full::default()).expect("a request")
}

/// The fallback's own routes include one the main policy is scoped away from.
const FALLBACK_OWN_ROUTES: &str = r#"
[[limit]]
name = "per-key"
quota = "3/min"
algorithm = "fixed_window"
key = "header:x-api-key"
routes = ["* /api/{*rest}"]

[[limit]]
name = "anonymous"
quota = "1/min"
algorithm = "fixed_window"
key = "peer_ip"
routes = ["GET /health", "* /api/{*rest}"]
fallback_for = "per-key"
"#;

/// A request with the main policy's key is that policy's business wherever it goes:
/// where the main policy is scoped away from the route, the fallback does not charge
/// it either (before, it charged it as if it had no key: the 2nd keyed `/health` of a
/// minute got a 429 from "anonymous").
async fn a_fallback_never_charges_a_request_that_has_the_main_policys_key(
    store: impl tollgate::store::Store,
) -> Result<(), Box<dyn std::error::Error>> {
    let server = serve_on(FALLBACK_OWN_ROUTES, store).await?;
    for i in 0..3 {
        let reply = server.send(call("GET", "/health", Some("k1"))).await;
        assert_eq!(reply.status, StatusCode::OK, "keyed /health {i}");
        assert_eq!(reply.header("ratelimit-policy"), "", "keyed /health {i}");
    }
    // Without the key, the fallback's own route is limited by it.
    let first = server.send(call("GET", "/health", None)).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("ratelimit-policy"), r#""anonymous";q=1;w=60"#);
    let second = server.send(call("GET", "/health", None)).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    // On the main policy's routes, the key is counted there, never by the fallback.
    for _ in 0..3 {
        let reply = server.send(call("GET", "/api/items", Some("k1"))).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.header("ratelimit-policy"), r#""per-key";q=3;w=60"#);
    }
    assert_eq!(
        server
            .send(call("GET", "/api/items", Some("k1")))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    Ok(())
}

#[tokio::test]
async fn a_fallback_never_charges_a_request_that_has_the_main_policys_key_on_memory()
-> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    a_fallback_never_charges_a_request_that_has_the_main_policys_key(store).await
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_fallback_never_charges_a_request_that_has_the_main_policys_key_on_redis()
-> Result<(), Box<dyn std::error::Error>> {
    let store = crate::shared_redis::redis_store("fallback-key", ManualClock::new(BASE));
    a_fallback_never_charges_a_request_that_has_the_main_policys_key(store).await
}

/// The main policy is scoped to `/api`; the fallback says nothing of routes.
const FALLBACK_INHERITS: &str = r#"
[[limit]]
name = "per-key"
quota = "30/min"
algorithm = "fixed_window"
key = "header:x-api-key"
routes = ["* /api/{*rest}"]

[limit.costs]
"POST /api/upload" = 3

[[limit]]
name = "anonymous"
quota = "6/min"
algorithm = "fixed_window"
key = "peer_ip"
fallback_for = "per-key"
"#;

/// A fallback that says nothing of routes applies on the main policy's routes only
/// (before, it limited every route, `/health` included, for callers without a key).
async fn a_fallback_takes_the_main_policys_routes_unless_the_file_gives_its_own(
    store: impl tollgate::store::Store,
) -> Result<(), Box<dyn std::error::Error>> {
    let server = serve_on(FALLBACK_INHERITS, store).await?;
    for i in 0..8 {
        let reply = server.send(call("GET", "/health", None)).await;
        assert_eq!(reply.status, StatusCode::OK, "/health {i}");
        assert_eq!(reply.header("ratelimit-policy"), "", "/health {i}");
    }
    for i in 0..6 {
        let reply = server.send(call("GET", "/api/items", None)).await;
        assert_eq!(reply.status, StatusCode::OK, "/api/items {i}");
        assert_eq!(reply.header("ratelimit-policy"), r#""anonymous";q=6;w=60"#);
    }
    assert_eq!(
        server.send(call("GET", "/api/items", None)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    Ok(())
}

#[tokio::test]
async fn a_fallback_takes_the_main_policys_routes_unless_the_file_gives_its_own_on_memory()
-> Result<(), Box<dyn std::error::Error>> {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    a_fallback_takes_the_main_policys_routes_unless_the_file_gives_its_own(store).await
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_fallback_takes_the_main_policys_routes_unless_the_file_gives_its_own_on_redis()
-> Result<(), Box<dyn std::error::Error>> {
    let store = crate::shared_redis::redis_store("fallback-routes", ManualClock::new(BASE));
    a_fallback_takes_the_main_policys_routes_unless_the_file_gives_its_own(store).await
}

/// A fallback that says nothing of costs prices requests as the main policy does
/// (before, an upload the main policy prices at 3 cost a caller without a key 1: six
/// uploads a minute on 6/min instead of two); with costs of its own, it uses those.
async fn a_fallback_takes_the_main_policys_costs_unless_the_file_gives_its_own<S, F>(
    store: F,
) -> Result<(), Box<dyn std::error::Error>>
where
    S: tollgate::store::Store,
    F: Fn(&str) -> S,
{
    let server = serve_on(FALLBACK_INHERITS, store("inherited")).await?;
    let upload = || call("POST", "/api/upload", None);
    let first = server.send(upload()).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("ratelimit"), r#""anonymous";r=3;t=60"#);
    assert_eq!(server.send(upload()).await.status, StatusCode::OK);
    assert_eq!(
        server.send(upload()).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    let own = FALLBACK_INHERITS.replace(
        "fallback_for = \"per-key\"",
        "fallback_for = \"per-key\"\ncosts = { default = 2 }",
    );
    let server = serve_on(&own, store("own")).await?;
    for i in 0..3 {
        assert_eq!(
            server.send(upload()).await.status,
            StatusCode::OK,
            "upload {i}"
        );
    }
    assert_eq!(
        server.send(upload()).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    Ok(())
}

#[tokio::test]
async fn a_fallback_takes_the_main_policys_costs_unless_the_file_gives_its_own_on_memory()
-> Result<(), Box<dyn std::error::Error>> {
    a_fallback_takes_the_main_policys_costs_unless_the_file_gives_its_own(|_| {
        MemoryStore::with_clock(ManualClock::new(BASE))
    })
    .await
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_fallback_takes_the_main_policys_costs_unless_the_file_gives_its_own_on_redis()
-> Result<(), Box<dyn std::error::Error>> {
    a_fallback_takes_the_main_policys_costs_unless_the_file_gives_its_own(|name| {
        crate::shared_redis::redis_store(&format!("fallback-costs-{name}"), ManualClock::new(BASE))
    })
    .await
}
