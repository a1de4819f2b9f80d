//! Plans over real TCP, with a real axum server and client: an authentication layer in
//! front of the limiter looks the caller's API key up and puts its plan in the request
//! extensions, and the policy's `quota_from` maps the plan to a quota. Each caller's
//! headers state its own quota; its usage carries over when its plan changes (on memory
//! and on Redis) or when a reload changes the policy's own quota; a quota the algorithm
//! cannot count is a store failure; a caller cannot choose its own plan.
//!
//! GCRA at 5/min counts one request per 12 s, at 50/min one per 1.2 s, at 10/min one
//! per 6 s: the expected `r` and `t` below follow from those (DESIGN §3).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use http_body_util::Full;
use support::http::{Reply, Server};
use tollgate::clock::ManualClock;
use tollgate::layer::FailMode;
use tollgate::store::Store;
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key};

/// 2023-11-14T00:00:00Z: a minute starts here.
const BASE: Duration = Duration::from_secs(1_699_920_000);

const FREE_POLICY: &str = r#""api";q=5;w=60"#;
const PRO_POLICY: &str = r#""api";q=50;w=60"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Free,
    Pro,
}

impl Plan {
    /// Free callers get the policy's own quota (`None`), Pro ones 50/min.
    fn quota(self) -> Option<Quota> {
        match self {
            Plan::Free => None,
            Plan::Pro => Some(Quota::per_minute(50)),
        }
    }
}

/// API key → plan, as an account database holds it: tests change a plan between two
/// requests, as an upgrade or a downgrade would.
#[derive(Debug, Clone)]
struct Accounts(Arc<RwLock<HashMap<&'static str, Plan>>>);

impl Accounts {
    fn new(plans: &[(&'static str, Plan)]) -> Self {
        Self(Arc::new(RwLock::new(plans.iter().copied().collect())))
    }

    fn set(&self, key: &'static str, plan: Plan) {
        self.0.write().expect("accounts").insert(key, plan);
    }

    fn plan_of(&self, key: &str) -> Option<Plan> {
        self.0.read().expect("accounts").get(key).copied()
    }
}

/// The authentication layer: a known key's plan goes into the request extensions,
/// which only the server can write; an unknown or missing key is a 401 that never
/// reaches the limiter.
async fn authenticate(
    State(accounts): State<Accounts>,
    mut request: axum::extract::Request,
    next: Next,
) -> Response {
    let plan = request
        .headers()
        .get("x-api-key")
        .and_then(|key| key.to_str().ok())
        .and_then(|key| accounts.plan_of(key));
    match plan {
        Some(plan) => {
            request.extensions_mut().insert(plan);
            next.run(request).await
        }
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

/// The policy "api" per API key, `own` for Free callers, each caller counted under
/// `quota_of_plan` of its plan.
fn api_with(own: Quota, algorithm: Algorithm, quota_of_plan: fn(Plan) -> Option<Quota>) -> Policy {
    Policy::new("api", own)
        .expect("a policy")
        .algorithm(algorithm)
        .key(key::header("x-api-key").expect("a header name"))
        .quota_from(move |parts: &http::request::Parts| {
            parts
                .extensions
                .get::<Plan>()
                .copied()
                .and_then(quota_of_plan)
        })
}

/// The policy "api" on GCRA, 5/min of its own, plans mapped by [`Plan::quota`].
fn api(own: Quota) -> Policy {
    api_with(own, Algorithm::Gcra, Plan::quota)
}

fn layer(policy: Policy, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("a layer")
}

/// `GET /` behind the limiter, behind the authentication layer (the last layer added
/// runs first).
async fn serve(layer: RateLimitLayer, accounts: &Accounts) -> Server {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
        .layer(from_fn_with_state(accounts.clone(), authenticate));
    Server::start(app).await
}

/// `GET /` with `headers` (name, value).
async fn call(server: &Server, headers: &[(&str, &str)]) -> Reply {
    let request = headers
        .iter()
        .fold(http::Request::get("/"), |request, (name, value)| {
            request.header(*name, *value)
        });
    server
        .send(request.body(Full::default()).expect("a request"))
        .await
}

/// `GET /` as the holder of API key `key`.
async fn as_caller(server: &Server, key: &str) -> Reply {
    call(server, &[("x-api-key", key)]).await
}

/// The reply's status and its two draft-11 headers.
fn seen(reply: &Reply) -> (StatusCode, &str, &str) {
    (
        reply.status,
        reply.header("ratelimit-policy"),
        reply.header("ratelimit"),
    )
}

#[tokio::test]
async fn each_plan_states_its_own_quota_and_remaining() {
    let clock = ManualClock::new(BASE);
    let accounts = Accounts::new(&[("key-free-1", Plan::Free), ("key-pro-1", Plan::Pro)]);
    let store = MemoryStore::with_clock(clock.clone());
    let server = serve(layer(api(Quota::per_minute(5)), store), &accounts).await;

    let ok = StatusCode::OK;
    let free = as_caller(&server, "key-free-1").await;
    assert_eq!(seen(&free), (ok, FREE_POLICY, r#""api";r=4;t=12"#));
    let pro = as_caller(&server, "key-pro-1").await;
    // T = 1.2 s: the quota is whole again in 2 s, rounded up.
    assert_eq!(seen(&pro), (ok, PRO_POLICY, r#""api";r=49;t=2"#));
    let free = as_caller(&server, "key-free-1").await;
    assert_eq!(seen(&free), (ok, FREE_POLICY, r#""api";r=3;t=24"#));
    let pro = as_caller(&server, "key-pro-1").await;
    assert_eq!(seen(&pro), (ok, PRO_POLICY, r#""api";r=48;t=3"#));

    // No key, or one the accounts do not know: 401 before the limiter, no rate headers.
    for reply in [
        call(&server, &[]).await,
        as_caller(&server, "key-nobody").await,
    ] {
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
        assert!(!reply.headers.contains_key("ratelimit"), "{reply:?}");
    }
}

/// The upgrade and the downgrade of one caller's plan between requests, at exact
/// instants of `clock` (the clock of `store`).
async fn plan_changes_carry_usage_over(store: impl Store, clock: &ManualClock) {
    let accounts = Accounts::new(&[("key-a", Plan::Free), ("key-b", Plan::Pro)]);
    let server = serve(layer(api(Quota::per_minute(5)), store), &accounts).await;
    let (ok, limited) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);

    // Free: all 5 of 5/min used at one instant, the 6th refused for 12 s.
    for _ in 0..5 {
        assert_eq!(as_caller(&server, "key-a").await.status, ok);
    }
    let refused = as_caller(&server, "key-a").await;
    assert_eq!(seen(&refused), (limited, FREE_POLICY, r#""api";r=0;t=12"#));
    assert_eq!(refused.header("retry-after"), "12");

    // Upgraded to Pro: the 5 used count under 50/min (5 at 1.2 s), one more is 6.
    accounts.set("key-a", Plan::Pro);
    let upgraded = as_caller(&server, "key-a").await;
    assert_eq!(seen(&upgraded), (ok, PRO_POLICY, r#""api";r=44;t=8"#));

    // Pro: 20 of 50/min used (20 at 1.2 s = 24 s)...
    for _ in 0..20 {
        assert_eq!(as_caller(&server, "key-b").await.status, ok);
    }
    // ...downgraded to Free: 20 at 12 s = 240 s of usage against a 60 s burst. Nothing
    // left, and the next request fits once 192 s have been repaid.
    accounts.set("key-b", Plan::Free);
    let downgraded = as_caller(&server, "key-b").await;
    assert_eq!(
        seen(&downgraded),
        (limited, FREE_POLICY, r#""api";r=0;t=192"#)
    );
    assert_eq!(downgraded.header("retry-after"), "192");

    clock.advance(Duration::from_secs(191));
    assert_eq!(as_caller(&server, "key-b").await.status, limited);
    clock.advance(Duration::from_secs(1));
    let repaid = as_caller(&server, "key-b").await;
    assert_eq!(seen(&repaid), (ok, FREE_POLICY, r#""api";r=0;t=60"#));
}

#[tokio::test]
async fn a_plan_change_carries_usage_over() {
    let clock = ManualClock::new(BASE);
    plan_changes_carry_usage_over(MemoryStore::with_clock(clock.clone()), &clock).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_plan_change_carries_usage_over_on_redis() {
    let clock = ManualClock::new(BASE);
    // With the denial cache on, as by default: a denial cached under the Free
    // quota must not answer for the same key once it is Pro.
    let store = crate::shared_redis::redis_store("plans", clock.clone());
    plan_changes_carry_usage_over(store, &clock).await;
}

#[tokio::test]
async fn a_reload_of_the_policys_own_quota_carries_usage_over() {
    let clock = ManualClock::new(BASE);
    let accounts = Accounts::new(&[("key-free-1", Plan::Free), ("key-pro-1", Plan::Pro)]);
    let layer = layer(
        api(Quota::per_minute(5)),
        MemoryStore::with_clock(clock.clone()),
    );
    // The server and the test share the layer: a reload through either is seen by both.
    let server = serve(layer.clone(), &accounts).await;

    for _ in 0..2 {
        as_caller(&server, "key-free-1").await;
    }
    let third = as_caller(&server, "key-free-1").await;
    assert_eq!(
        seen(&third),
        (StatusCode::OK, FREE_POLICY, r#""api";r=2;t=36"#)
    );

    // Free callers' quota (the policy's own) raised to 10/min: the 3 used count at 6 s
    // each, one more is 4.
    layer
        .reload([api(Quota::per_minute(10))])
        .expect("a valid set");
    let fourth = as_caller(&server, "key-free-1").await;
    assert_eq!(
        seen(&fourth),
        (StatusCode::OK, r#""api";q=10;w=60"#, r#""api";r=6;t=24"#)
    );
    // Pro callers have a quota of their own: the reload does not change it.
    let pro = as_caller(&server, "key-pro-1").await;
    assert_eq!(
        seen(&pro),
        (StatusCode::OK, PRO_POLICY, r#""api";r=49;t=2"#)
    );
}

/// A fixed window cannot count a burst: Pro's quota is invalid for it.
fn burst_for_pro(plan: Plan) -> Option<Quota> {
    match plan {
        Plan::Free => None,
        Plan::Pro => Some(Quota::per_minute(50).with_burst(10).expect("a valid quota")),
    }
}

#[tokio::test]
async fn a_quota_the_algorithm_cannot_count_is_a_store_failure() {
    let clock = ManualClock::new(BASE);
    let accounts = Accounts::new(&[("key-free-1", Plan::Free), ("key-pro-1", Plan::Pro)]);
    let policy = || api_with(Quota::per_minute(5), Algorithm::FixedWindow, burst_for_pro);
    let store = || MemoryStore::with_clock(clock.clone());

    // Fail open (the default): the Pro caller passes uncounted, without rate headers;
    // the Free caller, whose quota is the policy's own, is counted as ever.
    let server = serve(layer(policy(), store()), &accounts).await;
    for _ in 0..8 {
        let pro = as_caller(&server, "key-pro-1").await;
        assert_eq!((pro.status, pro.body.as_str()), (StatusCode::OK, "ok"));
        assert!(!pro.headers.contains_key("ratelimit"), "{pro:?}");
        assert!(!pro.headers.contains_key("ratelimit-policy"), "{pro:?}");
    }
    let free = as_caller(&server, "key-free-1").await;
    assert_eq!(
        seen(&free),
        (StatusCode::OK, FREE_POLICY, r#""api";r=4;t=60"#)
    );

    // Fail closed: 503, retry in a second.
    let layer = layer(policy(), store()).on_store_error(FailMode::Closed);
    let server = serve(layer, &accounts).await;
    let pro = as_caller(&server, "key-pro-1").await;
    assert_eq!(pro.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(pro.header("retry-after"), "1");
}

#[tokio::test]
async fn a_caller_cannot_choose_its_own_plan() {
    let clock = ManualClock::new(BASE);
    let accounts = Accounts::new(&[("key-free-1", Plan::Free)]);
    let store = MemoryStore::with_clock(clock.clone());
    let server = serve(layer(api(Quota::per_minute(5)), store), &accounts).await;

    // Whatever the request says about its plan, the plan is the one the server's
    // accounts hold for its key: only server code writes request extensions.
    let forged = [
        ("x-api-key", "key-free-1"),
        ("x-plan", "pro"),
        ("x-ratelimit-plan", "Pro"),
        ("ratelimit-policy", r#""api";q=50;w=60"#),
    ];
    for remaining in (0..5).rev() {
        let reply = call(&server, &forged).await;
        let state = format!(r#""api";r={remaining};t={}"#, 60 - 12 * remaining);
        assert_eq!(seen(&reply), (StatusCode::OK, FREE_POLICY, state.as_str()));
    }
    let refused = call(&server, &forged).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);

    // A forged plan without a known key does not get past authentication.
    let anonymous = call(&server, &forged[1..]).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}
