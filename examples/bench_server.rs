//! The server `scripts/bench-http` loads: `GET /` answering "ok", with or without the
//! layer. Modes: `plain` (no layer), `allow` (layer on with its defaults, per-IP key,
//! draft-11 headers, a quota that never rejects), `lean` (as `allow`, without the
//! `Decisions` request extension), `reject` (layer on, every request rejected), and
//! `identity` (a layer that does nothing: what any layer costs in an axum router, which
//! boxes the layered service and its future).
//!
//! Run with: `cargo run --release --example bench_server -- allow 127.0.0.1:8080`

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use tollgate::{Limiter, Policy, Quota, RateLimitLayer, key};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "allow".to_string());
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_string())
        .parse()?;
    let app = Router::new().route("/", get(|| async { "ok" }));
    let quota = match mode.as_str() {
        "plain" | "identity" => None,
        "allow" | "lean" => Some(Quota::per_second(1_000_000_000)),
        "reject" => Some(Quota::per_day(1)),
        other => {
            return Err(format!(
                "unknown mode {other:?}: use plain, allow, lean, reject or identity"
            )
            .into());
        }
    };
    let app = match quota {
        None if mode == "identity" => app.layer(tower_layer::Identity::new()),
        None => app,
        Some(quota) => {
            let limiter = Limiter::builder()
                .policy(Policy::new("api", quota)?.key(key::peer_ip()))
                .build()?;
            app.layer(RateLimitLayer::new(limiter).decisions_extension(mode != "lean"))
        }
    };
    // One worker thread: the load generator gets the other core.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("bench_server: {mode} on http://{addr}");
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    })?;
    Ok(())
}
