//! Per-route costs: reads cost 1, creating a user costs 5, health checks are free.
//!
//! Run with: `cargo run --example route_costs`

mod support;

use axum::Router;
use axum::routing::get;
use http::{Method, Request};
use http_body_util::Full;
use support::Demo;
use tollgate::layer::Costs;
use tollgate::{Policy, Quota, RateLimitLayer, key};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let costs = Costs::new()
        .route(Method::POST, "/users", 5)?
        .route(Method::GET, "/users/{id}", 1)?
        .route(Method::GET, "/health", 0)?; // free: never reaches the store
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(10))?
                .key(key::peer_ip())
                .costs(costs),
        )
        .build()?;
    let app = Router::new()
        .route(
            "/users",
            get(|| async { "list" }).post(|| async { "created" }),
        )
        .route("/users/{id}", get(|| async { "one user" }))
        .route("/health", get(|| async { "ok" }))
        .layer(layer);
    let demo = Demo::start(app).await?;

    println!("quota: 10 per minute per client; POST /users costs 5, GET /health is free\n");
    let requests = [
        (Method::POST, "/users"),
        (Method::GET, "/users/7"),
        (Method::GET, "/health"),
        (Method::GET, "/users/8"),
        (Method::POST, "/users"),
        (Method::GET, "/users/9"),
        (Method::GET, "/health"),
        (Method::GET, "/users/10"),
    ];
    for (method, path) in requests {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Full::default())?;
        demo.show(request, &["ratelimit", "retry-after"]).await?;
    }
    Ok(())
}
