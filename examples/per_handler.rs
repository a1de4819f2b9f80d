//! Per-handler limits in axum: a router-wide limit on every route, a tighter one on
//! `/export` alone (`route_layer`), handlers that read their `Decisions` with the
//! extractor, and a handler that checks a limiter itself (its cost is known only once
//! it has read the query) and answers a denial as the layer would. The server fires a
//! few requests at itself over HTTP and prints what came back.
//!
//! Run with: `cargo run --example per_handler`

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tollgate::layer::{Decisions, Rejected, Rejection, RejectionInfo};
use tollgate::{Key, Limit, Limiter, Policy, Quota, RateLimitLayer, key};

/// `GET /export`: limited by both layers; its `Decisions` hold both policies.
async fn export(decisions: Decisions) -> String {
    let left: Vec<String> = decisions
        .iter()
        .map(|d| format!("{} {} left", d.limit, d.remaining))
        .collect();
    format!("exported ({})", left.join(", "))
}

/// `GET /report?rows=N`: costs N rows of a per-minute budget, which the handler
/// checks itself once it knows N.
async fn report(State(rows): State<Limiter>, uri: Uri) -> Result<String, Rejected> {
    let n: u32 = uri
        .query()
        .and_then(|query| query.strip_prefix("rows="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    // One budget for the whole app here; key by user in a real one.
    let decision = rows.check("rows", &Key::from("everyone"), n).await;
    match decision {
        Ok(d) if d.allowed => Ok(format!("{n} rows ({} left this minute)", d.remaining)),
        // Denied: the layer's own answer (429, Retry-After, problem+json).
        Ok(d) => Err(Rejection::Problem.reject(&RejectionInfo::rate_limited(vec![d]))),
        // The limiter's store failed: fail open, as the layer does by default.
        Err(_) => Ok(format!("{n} rows (unchecked)")),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every route: 100 a minute per client.
    let everyone = RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_minute(100))?.key(key::peer_ip()))
        .build()?;
    // `/export` only: 1 a minute per client. `route_layer` runs it only when the route
    // matched, so a 404 costs nothing here.
    let exports = RateLimitLayer::builder()
        .policy(Policy::new("export", Quota::per_minute(1))?.key(key::peer_ip()))
        .build()?
        .rejection(Rejection::Problem);
    let rows = Limiter::builder()
        .limit(Limit::new("rows", Quota::per_minute(1_000))?)
        .build()?;

    let app = Router::new()
        .route("/export", get(export).route_layer(exports))
        .route("/report", get(report))
        .route(
            "/",
            get(|decisions: Decisions| async move {
                format!("hello ({} policy checked)", decisions.len())
            }),
        )
        .with_state(rows)
        .layer(everyone);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    println!("serving on http://{addr}\n");

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut statuses = Vec::new();
    for path in [
        "/",
        "/export",
        "/export",
        "/nowhere",
        "/report?rows=600",
        "/report?rows=600",
    ] {
        let request = Request::get(format!("http://{addr}{path}")).body(Full::default())?;
        let response = client.request(request).await?;
        let status = response.status();
        let ratelimit: Vec<&str> = response
            .headers()
            .get_all("ratelimit")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let ratelimit = ratelimit.join(", ");
        let body = response.into_body().collect().await?.to_bytes();
        let body = String::from_utf8_lossy(&body);
        // A problem body: show its type and the policies it names.
        let shown = match serde_json::from_str::<Value>(&body) {
            Ok(problem) => format!("{} {}", problem["type"], problem["violated-policies"]),
            Err(_) => body.trim().to_string(),
        };
        println!("{:<20} {} {:<38} {shown}", path, status.as_u16(), ratelimit);
        statuses.push(status.as_u16());
    }
    server.abort();
    // What the runs above must show: the second export and the second report are
    // refused, nothing else is, and the 404 was not counted by the export limit.
    assert_eq!(statuses, [200, 200, 429, 404, 200, 429], "{statuses:?}");
    println!("\n/export is limited by both layers; / and the 404 only by the router-wide one.");
    Ok(())
}
