//! Outbound limiting: the layer on a *client*, so that this service stays under a
//! third-party API's limit by waiting instead of failing.
//!
//! Run with: `cargo run --example outbound`
//!
//! A local "upstream API" counts the calls it receives in each second and says how
//! many. The client is hyper-util's `Client` wrapped in a `ServiceBuilder` with a
//! `RateLimitLayer` keyed per upstream host, in wait mode: a call over the limit (10
//! per second, one at a time: burst 1) is not rejected but holds its place, reserved
//! at once behind the earlier ones, for up to 10 s, and leaves when its place comes:
//! one every 100 ms. The example fires 100 calls at once and prints what the upstream
//! received in each second: 10, never more.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tollgate::{Key, Policy, Quota, RateLimitLayer};
use tower::{Service, ServiceBuilder, ServiceExt};

const CALLS: usize = 100;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The upstream: records when each call arrives.
    let arrivals = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let upstream = listener.local_addr()?;
    let recorded = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let recorded = recorded.clone();
            let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                recorded
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(Instant::now());
                async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok")))) }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });

    // The client: one queue per upstream host, 10 per second, waiting up to 10 s.
    let per_host = Policy::new("upstream", Quota::per_second(10).with_burst(1)?)?.key(
        |parts: &http::request::Parts| parts.uri.authority().map(|host| Key::from(host.as_str())),
    );
    let layer = RateLimitLayer::builder().policy(per_host).build()?;
    let client = ServiceBuilder::new()
        .layer(layer.wait(Duration::from_secs(10)))
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());

    println!("firing {CALLS} calls at once at an upstream that allows 10 per second\n");
    let started = Instant::now();
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        let mut client = client.clone();
        let request = Request::get(format!("http://{upstream}/")).body(Empty::<Bytes>::new())?;
        calls.push(tokio::spawn(async move {
            let response = client.ready().await?.call(request).await?;
            let status = response.status();
            response.into_body().collect().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(status)
        }));
    }
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await?.map_err(|e| e.to_string())?);
    }
    let took = started.elapsed();

    let arrivals = arrivals
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let mut per_second = vec![0_usize; took.as_secs() as usize + 1];
    for at in &arrivals {
        per_second[at.duration_since(started).as_secs() as usize] += 1;
    }
    println!("second  calls received upstream");
    for (second, count) in per_second.iter().enumerate() {
        println!("{second:>6}  {count:>3} {}", "#".repeat(*count));
    }
    let ok = statuses.iter().filter(|s| s.is_success()).count();
    println!(
        "\n{ok} of {CALLS} calls succeeded in {:.1} s; none was refused, each waited its turn",
        took.as_secs_f64()
    );
    // Calls leave on schedule, never early; one that a busy machine sends a little late
    // can land in the next second, which then shows 11.
    if ok != CALLS || per_second.iter().any(|&n| n > 11) {
        return Err("the upstream saw a burst".into());
    }
    Ok(())
}
