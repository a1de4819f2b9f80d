//! Outbound limiting over real sockets: the layer on a hyper-util client keyed per
//! upstream host, a burst of calls held for their turns, measured at the receiving
//! server.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, MemoryStore, Policy, Quota, RateLimitLayer};
use tower::{Service, ServiceBuilder, ServiceExt};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// An upstream that records when each call arrives, and the host it was addressed to.
async fn upstream() -> (std::net::SocketAddr, Arc<Mutex<Vec<Instant>>>) {
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let recorded = arrivals.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let recorded = recorded.clone();
            let service = hyper::service::service_fn(move |_: Request<Incoming>| {
                recorded
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Instant::now());
                async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok")))) }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    (addr, arrivals)
}

/// Fires `calls` calls at once through `layer`, on a hyper-util client, at the upstream
/// at `addr`: each must succeed (held for its turn, never refused), and each must reach
/// the upstream once. Returns when the burst started and the upstream's arrivals, in
/// order.
async fn burst(
    layer: RateLimitLayer,
    addr: std::net::SocketAddr,
    calls: u32,
    arrivals: &Arc<Mutex<Vec<Instant>>>,
) -> (Instant, Vec<Instant>) {
    let client = ServiceBuilder::new()
        .layer(layer)
        .service(Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>());
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..calls {
        let mut client = client.clone();
        let request = Request::get(format!("http://{addr}/"))
            .body(Empty::<Bytes>::new())
            .expect("request");
        tasks.push(tokio::spawn(async move {
            let response = client.ready().await?.call(request).await?;
            let status = response.status();
            response.into_body().collect().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(status)
        }));
    }
    for task in tasks {
        let status = task.await.expect("no panic").expect("the call");
        assert_eq!(status, StatusCode::OK, "a call was refused instead of held");
    }
    let mut seen = arrivals
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    seen.sort();
    assert_eq!(
        seen.len(),
        calls as usize,
        "every call reached the upstream once"
    );
    (started, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_calls_reaches_the_upstream_no_faster_than_its_limit() {
    const CALLS: u32 = 30;
    let period = Duration::from_millis(100); // 10 per second: T = 100 ms
    let (addr, arrivals) = upstream().await;
    // The limiter's clock stands still, so every decision is made at one instant and
    // the queue's delays are exactly 0, T, 2T, …; the layer holds each call that long
    // on the real clock.
    let clock = ManualClock::new(BASE);
    let per_host = Policy::new(
        "upstream",
        Quota::per_second(10)
            .with_burst(u64::from(CALLS))
            .expect("burst"),
    )
    .expect("policy")
    .algorithm(Algorithm::LeakyBucket)
    .max_delay(Duration::from_secs(10))
    .key(|parts: &http::request::Parts| parts.uri.authority().map(|host| Key::from(host.as_str())));
    let layer = RateLimitLayer::builder()
        .policy(per_host)
        .store(MemoryStore::with_clock(clock))
        .build()
        .expect("layer");
    let limiter = layer.limiter().clone();
    let (started, seen) = burst(layer.clone(), addr, CALLS, &arrivals).await;
    // The k-th call to arrive left no earlier than its turn, k·T after the burst: by
    // any instant t the upstream has seen at most 1 + t/T calls, never a burst.
    for (k, at) in seen.iter().enumerate() {
        let turn = period * u32::try_from(k).expect("small");
        assert!(
            at.duration_since(started) >= turn,
            "call {k} arrived {:?} after the burst, before its turn at {turn:?}",
            at.duration_since(started)
        );
    }
    // A second host has a queue of its own: its first call goes at once.
    let other = Key::from(format!("localhost:{}", addr.port()).as_str());
    assert_eq!(
        limiter
            .check("upstream", &other, 0)
            .await
            .expect("peek")
            .remaining,
        u64::from(CALLS)
    );
}

/// Wait mode on a client: a fixed window of 10 per second holds the calls over its
/// quota for their window instead of rejecting them; the k-th call to arrive left no
/// earlier than its window, ⌊k/10⌋ s after the burst.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_wait_mode_calls_over_the_quota_wait_for_their_window() {
    const CALLS: u32 = 30;
    let (addr, arrivals) = upstream().await;
    // Frozen at a whole second: the windows' edges are 1 s and 2 s after the burst.
    let per_host = Policy::new("upstream", Quota::per_second(10))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(|parts: &http::request::Parts| {
            parts.uri.authority().map(|host| Key::from(host.as_str()))
        });
    let layer = RateLimitLayer::builder()
        .policy(per_host)
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("layer");
    let (started, seen) = burst(layer.wait(Duration::from_secs(5)), addr, CALLS, &arrivals).await;
    for (k, at) in seen.iter().enumerate() {
        let window = Duration::from_secs(u64::try_from(k / 10).expect("small"));
        assert!(
            at.duration_since(started) >= window,
            "call {k} arrived {:?} after the burst, before its window at {window:?}",
            at.duration_since(started)
        );
    }
}
