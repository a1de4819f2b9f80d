//! `RateLimitLayer` on a plain `tower::ServiceBuilder` stack served by hyper, without axum.
//!
//! Run with: `cargo run --example tower_hyper`
//!
//! The accept loop puts each connection's peer address in the request extensions (a
//! bare `SocketAddr`, which `key::peer_ip()` reads on any stack) and serves it with a
//! `ServiceBuilder` stack holding a clone of one layer: clones share the limiter, so
//! every connection draws on the same quota. The server then fires 5 requests at
//! itself, each on a new connection, prints each status and its rate-limit headers,
//! and exits.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate::layer::Decisions;
use tollgate::{Policy, Quota, RateLimitLayer, key};
use tower::ServiceBuilder;

/// The application: greets the caller with what is left of its quota.
async fn hello(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let left = request
        .extensions()
        .get::<Decisions>()
        .and_then(|decisions| decisions.get("per-peer"))
        .map_or(0, |decision| decision.remaining);
    Ok(Response::new(Full::new(Bytes::from(format!(
        "hello ({left} left)"
    )))))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("per-peer", Quota::per_minute(3))?.key(key::peer_ip()))
        .build()?;

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                continue;
            };
            let stack = ServiceBuilder::new()
                .map_request(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert::<SocketAddr>(peer);
                    request
                })
                .layer(layer.clone())
                .service_fn(hello);
            tokio::spawn(async move {
                let connection = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(stack));
                if let Err(error) = connection.await {
                    eprintln!("connection from {peer}: {error}");
                }
            });
        }
    });
    println!("hyper server on {addr}: 3 requests a minute per peer IP\n");

    // A new connection per request: each meets a fresh clone of the stack.
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<Empty<Bytes>>();
    for n in 1..=5 {
        let response = client.get(format!("http://{addr}/").parse()?).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("-")
                .to_string()
        };
        println!(
            "request {n}: {}  {:?}\n           ratelimit-policy: {}  ratelimit: {}  retry-after: {}",
            parts.status,
            String::from_utf8_lossy(&body).trim_end(),
            header("ratelimit-policy"),
            header("ratelimit"),
            header("retry-after"),
        );
    }

    server.abort();
    Ok(())
}
