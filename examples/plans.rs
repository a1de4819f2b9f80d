//! Plans: each API key has a plan (Free 5/min, Pro 50/min). An authentication layer in
//! front of the limiter looks the key up and puts the caller's plan in the request
//! extensions; the policy's `quota_from` counts each caller under its plan's quota.
//! A free and a pro caller side by side, then the free caller upgraded to Pro: what it
//! has already used counts against its new quota.
//!
//! Run with: `cargo run --example plans`

mod support;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use http_body_util::Full;
use support::{Demo, Reply};
use tollgate::{Policy, Quota, RateLimitLayer, key};

#[derive(Debug, Clone, Copy)]
enum Plan {
    Free,
    Pro,
}

impl Plan {
    fn quota(self) -> Quota {
        match self {
            Plan::Free => Quota::per_minute(5),
            Plan::Pro => Quota::per_minute(50),
        }
    }
}

/// API key → plan: the account database, which an upgrade writes while the server runs.
type Accounts = Arc<RwLock<HashMap<String, Plan>>>;

/// Authentication: the plan of a known key goes into the request extensions, where no
/// client can write; an unknown or missing key is turned away with 401 before the
/// limiter counts anything.
async fn authenticate(
    State(accounts): State<Accounts>,
    mut request: Request,
    next: Next,
) -> Response {
    let key = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok());
    let plan = key.and_then(|key| accounts.read().ok()?.get(key).copied());
    let Some(plan) = plan else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    request.extensions_mut().insert(plan);
    next.run(request).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let accounts: Accounts = Arc::new(RwLock::new(HashMap::from([
        ("key-free-1".to_string(), Plan::Free),
        ("key-pro-1".to_string(), Plan::Pro),
    ])));
    // GCRA (the default): a 5/min caller gets one request back every 12 s.
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Plan::Free.quota())?
                .key(key::header("x-api-key")?)
                .quota_from(|parts: &http::request::Parts| {
                    parts.extensions.get::<Plan>().map(|plan| plan.quota())
                }),
        )
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
        // Added last, so it runs first: the limiter sees the plan it inserts.
        .layer(from_fn_with_state(accounts.clone(), authenticate));
    let demo = Demo::start(app).await?;

    let (free, pro) = ("key-free-1 (Free: 5/min)", "key-pro-1 (Pro: 50/min)");
    println!(" #  {free:<48}{pro}");
    println!("{}", format!("    {}{}", columns(), columns()).trim_end());
    for n in 1..=10 {
        if n == 8 {
            accounts
                .write()
                .map_err(|_| "accounts lock poisoned")?
                .insert("key-free-1".to_string(), Plan::Pro);
            println!("--  key-free-1 upgraded to Pro: the 5 it was admitted count against 50/min");
        }
        let free = call(&demo, "key-free-1").await?;
        let pro = call(&demo, "key-pro-1").await?;
        println!(
            "{}",
            format!("{n:>2}  {}{}", cell(&free), cell(&pro)).trim_end()
        );
    }

    let stranger = call(&demo, "key-unknown").await?;
    println!(
        "\nkey-unknown: {} (no plan, so no quota: the limiter never saw it)",
        stranger.status.as_u16()
    );
    Ok(())
}

async fn call(demo: &Demo, api_key: &str) -> Result<Reply, Box<dyn std::error::Error>> {
    let request = http::Request::get("/")
        .header("x-api-key", api_key)
        .body(Full::default())?;
    demo.send(request).await
}

fn columns() -> String {
    format!(
        "{:<10}{:<20}{:<18}",
        "status", "RateLimit-Policy", "RateLimit"
    )
}

/// One caller's status (and Retry-After, when refused) and rate-limit headers.
fn cell(reply: &Reply) -> String {
    let mut status = reply.status.as_u16().to_string();
    if let Some(retry) = reply.headers.get("retry-after") {
        status = format!("{status} ({}s)", retry.to_str().unwrap_or("?"));
    }
    format!(
        "{status:<10}{:<20}{:<18}",
        reply.header("ratelimit-policy"),
        reply.header("ratelimit")
    )
}
