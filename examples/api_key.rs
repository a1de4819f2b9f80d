//! Keys from an API-key header, falling back to the client IP for anonymous callers;
//! keyed callers get a bigger quota than anonymous ones.
//!
//! Run with: `cargo run --example api_key`

mod support;

use axum::Router;
use axum::routing::get;
use http::Request;
use http_body_util::Full;
use support::Demo;
use tollgate::key::TrustedProxies;
use tollgate::{Policy, Quota, RateLimitLayer, key};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let api_key = key::header("x-api-key")?;
    let layer = RateLimitLayer::builder()
        // Callers with a key: 5 per minute each (the key is hashed, never stored raw).
        .policy(Policy::new("keyed", Quota::per_minute(5))?.key(api_key.clone()))
        // Everyone else, by client IP: 2 per minute. A request with a key has no
        // "anonymous" key, so this policy skips it.
        .policy(Policy::new("anonymous", Quota::per_minute(2))?.key(
            move |parts: &http::request::Parts| {
                if api_key.extract(parts).is_some() {
                    None
                } else {
                    key::client_ip(TrustedProxies::none()).extract(parts)
                }
            },
        ))
        .build()?;
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let demo = Demo::start(app).await?;

    println!("with a key: 5/min per key; without: 2/min per IP\n");
    for caller in [
        None,
        None,
        None,
        Some("alice"),
        Some("alice"),
        Some("bob"),
        None,
    ] {
        let mut request = Request::get("/");
        if let Some(key) = caller {
            request = request.header("x-api-key", key);
        }
        print!("{:<8}", caller.unwrap_or("anon"));
        demo.show(request.body(Full::default())?, &["ratelimit"])
            .await?;
    }
    Ok(())
}
