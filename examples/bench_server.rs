//! The server `scripts/bench-http` loads: `GET /` answering "ok", with or without a
//! rate-limiting layer.
//!
//! tollgate's modes: `plain` (no layer), `allow` (layer on with its defaults, per-IP
//! key, draft-11 headers, a quota that never rejects), `lean` (as `allow`, without the
//! `Decisions` request extension), `reject` (layer on, every request rejected), and
//! `identity` (a layer that does nothing: what any layer costs in an axum router, which
//! boxes the layered service and its future), and, built with the feature `metrics`,
//! `metrics` (as `allow`, with `metrics-exporter-prometheus`'s recorder installed:
//! what recording every decision, near-limit count, running gauge and store latency
//! costs; `allow` built with the feature but no recorder is the cost of the feature
//! alone).
//!
//! The peer, `tower_governor` 0.8 (governor's keyed GCRA behind a Tower layer), set up
//! as `allow` and `reject` are: keyed by the peer's IP (`PeerIpKeyExtractor`, read from
//! axum's `ConnectInfo<SocketAddr>`, as tollgate's `key::peer_ip()` reads it), with the
//! same quotas. `governor` (never rejecting, none of its optional headers),
//! `governor-headers` (never rejecting, with `use_headers()`: `x-ratelimit-limit` and
//! `x-ratelimit-remaining` on every response, the closest it has to tollgate's default
//! headers) and `governor-reject` (every request rejected: its 429 with `retry-after`
//! and `x-ratelimit-after`).
//!
//! Run with: `cargo run --release --example bench_server -- allow 127.0.0.1:8080`

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tollgate::{Policy, Quota, RateLimitLayer, key};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// A quota that never rejects in a benchmark: 10⁹ per second, burst 10⁹.
const NEVER_REJECTS: u32 = 1_000_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "allow".to_string());
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_string())
        .parse()?;
    let app = Router::new().route("/", get(|| async { "ok" }));
    let app = match mode.as_str() {
        "plain" => app,
        "identity" => app.layer(tower_layer::Identity::new()),
        "allow" | "lean" | "reject" | "metrics" => {
            #[cfg(feature = "metrics")]
            if mode == "metrics" {
                metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
            }
            #[cfg(not(feature = "metrics"))]
            if mode == "metrics" {
                return Err("the metrics mode needs the feature: --features metrics".into());
            }
            let quota = if mode == "reject" {
                Quota::per_day(1)
            } else {
                Quota::per_second(u64::from(NEVER_REJECTS))
            };
            let layer = RateLimitLayer::builder()
                .policy(Policy::new("api", quota)?.key(key::peer_ip()))
                .build()?;
            app.layer(layer.decisions_extension(mode != "lean"))
        }
        // The same quotas as tollgate's: one cell per nanosecond with a burst of 10⁹ is
        // 10⁹ per second, burst 10⁹ (`Quota::per_second`'s burst is its limit); one per
        // day, burst 1, admits the warm-up's first request and rejects the rest.
        "governor" | "governor-headers" | "governor-reject" => {
            let mut builder = GovernorConfigBuilder::default();
            if mode == "governor-reject" {
                builder.period(Duration::from_secs(86_400)).burst_size(1);
            } else {
                builder.per_nanosecond(1).burst_size(NEVER_REJECTS);
            }
            // `use_headers` changes the config's type, hence two arms.
            if mode == "governor-headers" {
                let config = builder.use_headers().finish().ok_or("a governor config")?;
                app.layer(GovernorLayer::new(config))
            } else {
                let config = builder.finish().ok_or("a governor config")?;
                app.layer(GovernorLayer::new(config))
            }
        }
        other => {
            return Err(format!(
                "unknown mode {other:?}: use plain, allow, lean, reject, identity, metrics, \
                 governor, governor-headers or governor-reject"
            )
            .into());
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
