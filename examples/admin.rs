//! Operating limits over HTTP: an admin router (peek, reset, block a key; JSON) behind
//! a bearer token, mounted next to a rate-limited API whose policy has a penalty box.
//! A scripted session then shows a caller tripping the penalty box, an operator
//! looking and resetting it, and the caller being served again.
//!
//! **The admin routes need your application's own authentication.** The bearer
//! token check below (a constant-time compare against a token from the environment)
//! is the least an example can do, not a design to deploy: put the routes behind your
//! real authentication and authorization, on an internal listener, and never expose
//! them to the callers they limit. Anyone who can call them can unblock themselves
//! or block anyone else.
//!
//! Run with: `cargo run --example admin` (`ADMIN_TOKEN` sets the token; the session
//! uses it, or a demo token).

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tollgate::{Decision, Key, Limiter, Penalty, Policy, Quota, RateLimitLayer, key};

/// The policy the API is limited by, and that the admin routes operate.
const POLICY: &str = "api";

/// What the admin handlers share: the API's limiter (clones share its state) and the
/// token callers must present.
#[derive(Clone)]
struct Admin {
    limiter: Limiter,
    token: String,
}

/// Whether the request carries `Authorization: Bearer <token>`. The bytes are
/// compared in constant time, so the time a guess takes does not tell how much of it
/// was right (its length may show; tokens are of a fixed, public length anyway).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
    else {
        return false;
    };
    let expected = token.as_bytes();
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0_u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}

/// A decision as the admin API shows it: durations in milliseconds, rounded up.
fn shown(decision: &Decision) -> Value {
    let ms = |d: Duration| d.as_micros().div_ceil(1_000);
    json!({
        "allowed": decision.allowed,
        "limit": decision.capacity,
        "remaining": decision.remaining,
        "reset_after_ms": ms(decision.reset_after),
        "retry_after_ms": decision.retry_after.map(ms),
        "blocked": decision.blocked_for.is_some(),
        "blocked_for_ms": decision.blocked_for.map(ms),
    })
}

type Reply = (StatusCode, Json<Value>);

fn refused() -> Reply {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({ "error": "missing or wrong bearer token" })),
    )
}

fn failed(error: &tollgate::StoreError) -> Reply {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({ "error": error.to_string() })),
    )
}

/// `GET /admin/keys/{key}`: the key's state, charging nothing.
async fn peek(State(admin): State<Admin>, headers: HeaderMap, Path(caller): Path<String>) -> Reply {
    if !authorized(&headers, &admin.token) {
        return refused();
    }
    match admin.limiter.peek(POLICY, &Key::from(caller)).await {
        Ok(decision) => (StatusCode::OK, Json(shown(&decision))),
        Err(error) => failed(&error),
    }
}

/// `DELETE /admin/keys/{key}`: the key is idle again, unblocked, its count cleared.
async fn reset(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Path(caller): Path<String>,
) -> Reply {
    if !authorized(&headers, &admin.token) {
        return refused();
    }
    match admin.limiter.reset(POLICY, &Key::from(caller)).await {
        Ok(()) => (StatusCode::OK, Json(json!({ "reset": true }))),
        Err(error) => failed(&error),
    }
}

/// `POST /admin/keys/{key}/block/{seconds}`: denied for that long (0 lifts a block).
async fn block(
    State(admin): State<Admin>,
    headers: HeaderMap,
    Path((caller, seconds)): Path<(String, u64)>,
) -> Reply {
    if !authorized(&headers, &admin.token) {
        return refused();
    }
    let duration = Duration::from_secs(seconds);
    match admin
        .limiter
        .block(POLICY, &Key::from(caller), duration)
        .await
    {
        Ok(decision) => (StatusCode::OK, Json(shown(&decision))),
        Err(error) => failed(&error),
    }
}

/// The API (rate limited, with a penalty box) and, beside it, the admin routes (not
/// rate limited by it: operators must get through to a caller that is blocked).
fn app(layer: RateLimitLayer, token: String) -> Router {
    let limiter = layer.limiter().clone();
    let api = Router::new()
        .route("/api", get(|| async { "hello" }))
        .layer(layer);
    let admin = Router::new()
        .route("/admin/keys/{key}", get(peek).delete(reset))
        .route("/admin/keys/{key}/block/{seconds}", post(block))
        .with_state(Admin { limiter, token });
    api.merge(admin)
}

/// One HTTP exchange: status, two headers and the body, printed on one line.
struct Session {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
    token: String,
}

impl Session {
    async fn call(
        &self,
        step: &str,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Value), Box<dyn std::error::Error>> {
        let mut request = Request::builder()
            .method(method.clone())
            .uri(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.client.request(request.body(Full::default())?).await?;
        let status = response.status().as_u16();
        let shown: Vec<String> = ["ratelimit", "retry-after"]
            .iter()
            .map(|name| {
                let value = response
                    .headers()
                    .get(*name)
                    .map(|v| v.to_str().unwrap_or("?"));
                format!("{name}: {}", value.unwrap_or("-"))
            })
            .collect();
        let body = response.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body).into_owned();
        println!("{step:<44} {method} {path:<40} → {status}");
        if path.starts_with("/api") {
            println!("{:<46}{}", "", shown.join("  "));
        } else {
            println!("{:<46}{text}", "");
        }
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok((status, json))
    }

    async fn api(&self, step: &str, caller: &str) -> Result<u16, Box<dyn std::error::Error>> {
        let (status, _) = self
            .call(step, Method::GET, "/api", &[("x-api-key", caller)])
            .await?;
        Ok(status)
    }

    async fn admin(
        &self,
        step: &str,
        method: Method,
        path: &str,
    ) -> Result<(u16, Value), Box<dyn std::error::Error>> {
        let bearer = format!("Bearer {}", self.token);
        self.call(step, method, path, &[("authorization", &bearer)])
            .await
    }
}

/// Fails the session (exit code 1) when a step does not answer as scripted.
fn expect(what: &str, ok: bool) -> Result<(), Box<dyn std::error::Error>> {
    if ok {
        Ok(())
    } else {
        Err(format!("unexpected answer: {what}").into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let token =
        std::env::var("ADMIN_TOKEN").unwrap_or_else(|_| "demo-admin-token-0123456789".to_owned());
    // 2 requests a minute per API key; the 2nd rejection within a minute blocks the
    // key for 10 minutes.
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new(POLICY, Quota::per_minute(2))?
                .key(key::header("x-api-key")?)
                .penalty(
                    Penalty::after(2)
                        .within(Duration::from_secs(60))
                        .block_for(Duration::from_secs(600)),
                ),
        )
        .build()?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(
        axum::serve(
            listener,
            app(layer, token.clone()).into_make_service_with_connect_info::<SocketAddr>(),
        )
        .into_future(),
    );
    let session = Session {
        base: format!("http://{addr}"),
        client: Client::builder(TokioExecutor::new()).build_http(),
        token,
    };
    println!("API on http://{addr}/api (2/min per x-api-key, penalty box: 2nd rejection → 10 min)");
    println!("admin routes on http://{addr}/admin/keys/… (bearer token)\n");

    for n in 1..=2 {
        let status = session
            .api(&format!("alice: request {n} of her quota"), "alice")
            .await?;
        expect("alice within her quota", status == 200)?;
    }
    let status = session
        .api("alice: over quota (1st rejection)", "alice")
        .await?;
    expect("alice over quota", status == 429)?;
    let status = session
        .api("alice: 2nd rejection trips the penalty box", "alice")
        .await?;
    expect("alice blocked", status == 429)?;

    let (status, _) = session
        .call(
            "operator without the token",
            Method::GET,
            "/admin/keys/alice",
            &[],
        )
        .await?;
    expect("no token refused", status == 401)?;
    let (status, state) = session
        .admin("operator: peek at alice", Method::GET, "/admin/keys/alice")
        .await?;
    expect(
        "alice shown blocked",
        status == 200 && state["blocked"] == true,
    )?;
    let (status, _) = session
        .admin("operator: reset alice", Method::DELETE, "/admin/keys/alice")
        .await?;
    expect("alice reset", status == 200)?;
    let status = session.api("alice: served again", "alice").await?;
    expect("alice served after the reset", status == 200)?;

    let (status, state) = session
        .admin(
            "operator: block bob for 30 s",
            Method::POST,
            "/admin/keys/bob/block/30",
        )
        .await?;
    expect(
        "bob blocked",
        status == 200 && state["blocked_for_ms"] == 30_000,
    )?;
    let status = session
        .api("bob: blocked (Retry-After: the block)", "bob")
        .await?;
    expect("bob denied", status == 429)?;

    server.abort();
    println!("\ndone");
    Ok(())
}
