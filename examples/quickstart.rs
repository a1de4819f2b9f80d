//! An axum server with tollgate in front, firing a burst at itself over real HTTP and
//! printing what came back: status, rate-limit headers, Retry-After.
//!
//! Run with: `cargo run --example quickstart`

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::key::TrustedProxies;
use tollgate::layer::Costs;
use tollgate::{Policy, Quota, RateLimitLayer, key};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::builder()
        // Per client: 5 per second, bursts of 3; creating a user costs 2.
        .policy(
            Policy::new("per-client", Quota::per_second(5).with_burst(3)?)?
                .key(key::client_ip(TrustedProxies::none()))
                .costs(Costs::new().route(Method::POST, "/users", 2)?),
        )
        // Everyone together: 20 per minute.
        .policy(Policy::new("global", "20/min".parse()?)?.key(key::global()))
        .build()?; // in memory
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/users", post(|| async { "created" }))
        .layer(layer);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    println!("serving on http://{addr}; firing a burst at it\n");
    println!(
        "{:<6} {:<12} {:<6} {:<40} {:<42} Retry-After",
        "t(ms)", "request", "status", "RateLimit", "RateLimit-Policy"
    );

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let started = tokio::time::Instant::now();
    let schedule: [(u64, Method, &str); 10] = [
        (0, Method::GET, "/"),
        (0, Method::GET, "/"),
        (0, Method::GET, "/"),
        (0, Method::GET, "/"),
        (250, Method::POST, "/users"),
        (450, Method::POST, "/users"),
        (450, Method::GET, "/"),
        (650, Method::GET, "/"),
        (1_100, Method::POST, "/users"),
        (1_100, Method::GET, "/"),
    ];
    for (at_ms, method, path) in schedule {
        tokio::time::sleep_until(started + Duration::from_millis(at_ms)).await;
        let request = Request::builder()
            .method(method.clone())
            .uri(format!("http://{addr}{path}"))
            .body(Full::default())?;
        let response = client.request(request).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        };
        let (ratelimit, policy, retry) = (
            header("ratelimit"),
            header("ratelimit-policy"),
            header("retry-after"),
        );
        let status = response.status();
        let _body = response.into_body().collect().await?;
        println!(
            "{:<6} {:<12} {:<6} {:<40} {:<42} {}",
            at_ms,
            format!("{method} {path}"),
            status.as_u16(),
            ratelimit,
            policy,
            retry
        );
    }
    server.abort();
    println!("\nPOST /users costs 2; a request one policy rejects is charged to none.");
    Ok(())
}
