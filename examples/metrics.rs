//! tollgate's metrics in Prometheus' text format: `/metrics` (rendered by
//! `metrics-exporter-prometheus`) beside a rate-limited `/api`.
//!
//! `/api` has two policies per caller (`x-user`): "api", 20 a second (GCRA, burst 20),
//! enforced; and "api-v2", 10 a second, a stricter limit being tried in shadow mode.
//! The recorder is installed before the layer's first request, and given buckets for
//! the histograms (without them the exporter renders summaries).
//!
//! ```text
//! cargo run --example metrics --features metrics                  # self-test: serves on an
//!                                                                 # ephemeral port, fires at
//!                                                                 # itself, reads /metrics, exits
//! cargo run --example metrics --features metrics -- serve 127.0.0.1:9898
//! cargo run --example metrics --features metrics -- load http://127.0.0.1:9898/api 20 100
//!                                                                 # 100 requests a second for 20 s
//! ```
//!
//! `scripts/prometheus-check` runs Debian's Prometheus against `serve` while `load`
//! runs, and checks the series through Prometheus' HTTP API.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tollgate::{Policy, Quota, RateLimitLayer, key};

/// The enforced quota "api" admits per second and caller.
const API_PER_SECOND: u64 = 20;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => self_test().await,
        ["serve", addr] => serve(addr.parse()?).await,
        ["load", url, seconds, rate] => {
            let (admitted, rejected) = load(url, seconds.parse()?, rate.parse()?).await?;
            println!("admitted {admitted} rejected {rejected}");
            Ok(())
        }
        _ => Err("usage: metrics [serve ADDR | load URL SECONDS RATE]".into()),
    }
}

/// The recorder, with buckets for the latency histograms (seconds: 10 µs to 1 s).
fn recorder() -> Result<PrometheusHandle, BoxError> {
    let buckets = [
        0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01,
        0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    ];
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), &buckets)?
        .install_recorder()?;
    // Histograms are kept in blocks that upkeep folds in; without an exporter task of
    // its own, the program runs it.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(5));
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

fn app(handle: PrometheusHandle) -> Result<Router, BoxError> {
    let caller = key::header("x-user")?;
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_second(API_PER_SECOND))?.key(caller.clone()))
        .policy(
            Policy::new("api-v2", Quota::per_second(10))?
                .key(caller)
                .shadow(true),
        )
        .build()?;
    let api = Router::new()
        .route("/api", get(|| async { "ok" }))
        .layer(layer);
    Ok(Router::new()
        .route("/metrics", get(move || async move { handle.render() }))
        .merge(api))
}

async fn serve(addr: SocketAddr) -> Result<(), BoxError> {
    let app = app(recorder()?)?;
    let listener = TcpListener::bind(addr).await?;
    eprintln!("metrics: /api and /metrics on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}

/// Sends `rate` requests a second to `url` for `seconds`, as caller "load"; returns
/// how many were admitted and how many rejected. Bounded: at most `seconds × rate`
/// requests, each with a 5 s timeout.
async fn load(url: &str, seconds: u64, rate: u64) -> Result<(u64, u64), BoxError> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let mut every = tokio::time::interval(Duration::from_secs(1) / u32::try_from(rate.max(1))?);
    let mut sent = Vec::new();
    for _ in 0..seconds * rate {
        every.tick().await;
        let (client, counts) = (client.clone(), counts.clone());
        let request = Request::get(url)
            .header("x-user", "load")
            .body(Empty::new())?;
        sent.push(tokio::spawn(async move {
            let response =
                tokio::time::timeout(Duration::from_secs(5), client.request(request)).await;
            if let Ok(Ok(response)) = response {
                let rejected = response.status() == StatusCode::TOO_MANY_REQUESTS;
                let _ = response.into_body().collect().await;
                counts[usize::from(rejected)].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for request in sent {
        request.await?;
    }
    Ok((
        counts[0].load(Ordering::Relaxed),
        counts[1].load(Ordering::Relaxed),
    ))
}

/// Serves on an ephemeral port, fires at itself past the quota, and checks that
/// `/metrics` shows the decisions and the store latency.
async fn self_test() -> Result<(), BoxError> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = app(recorder()?)?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut rejected = 0;
    for _ in 0..API_PER_SECOND + 5 {
        let request = Request::get(format!("http://{addr}/api"))
            .header("x-user", "self-test")
            .body(Empty::new())?;
        if client.request(request).await?.status() == StatusCode::TOO_MANY_REQUESTS {
            rejected += 1;
        }
    }
    assert!(rejected >= 5, "{rejected} rejected");
    let request = Request::get(format!("http://{addr}/metrics")).body(Empty::new())?;
    let body = client.request(request).await?.into_body().collect().await?;
    let text = String::from_utf8(body.to_bytes().to_vec())?;
    for series in [
        r#"tollgate_requests_total{policy="api",outcome="allowed"}"#,
        r#"tollgate_requests_total{policy="api",outcome="rejected"}"#,
        r#"tollgate_requests_total{policy="api-v2",outcome="shadow_rejected"}"#,
        r#"tollgate_store_duration_seconds_bucket{store="MemoryStore",operation="decide",le="0.001"}"#,
    ] {
        assert!(text.contains(series), "no {series} in:\n{text}");
    }
    println!("metrics: {rejected} rejected; /metrics shows them and the store latency");
    Ok(())
}
