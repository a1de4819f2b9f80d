//! The layer without axum: a plain `tower::ServiceBuilder` stack around a
//! `tower::service_fn` handler, served by hyper 1 over real TCP (the accept loop
//! inserts the peer's `SocketAddr`), with a real HTTP/1 client.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key, layer::Decisions};
use tower::ServiceBuilder;

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

type ClientBody = BoxBody<Bytes, Infallible>;

/// The handler: says who called and what the limiter decided; counts its calls.
fn handle(request: &Request<Incoming>, calls: &AtomicUsize) -> Response<Full<Bytes>> {
    calls.fetch_add(1, Ordering::SeqCst);
    let peer = request
        .extensions()
        .get::<SocketAddr>()
        .map(|addr| addr.ip().to_string())
        .unwrap_or_default();
    let remaining = request
        .extensions()
        .get::<Decisions>()
        .and_then(|decisions| decisions.first())
        .map(|decision| decision.remaining.to_string())
        .unwrap_or_default();
    Response::new(Full::new(Bytes::from(format!(
        "{peer} has {remaining} left"
    ))))
}

/// A hyper server whose every connection gets its own `ServiceBuilder` stack with a
/// clone of `layer`; aborted on drop.
struct Served {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    task: JoinHandle<()>,
    /// Opens a new connection per request, so every request meets a fresh stack.
    client: Client<HttpConnector, ClientBody>,
}

impl Served {
    async fn start(layer: RateLimitLayer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let calls = Arc::new(AtomicUsize::new(0));
        let handler_calls = calls.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    continue;
                };
                let calls = handler_calls.clone();
                let stack = ServiceBuilder::new()
                    .map_request(move |mut request: Request<Incoming>| {
                        request.extensions_mut().insert(peer);
                        request
                    })
                    .layer(layer.clone())
                    .service_fn(move |request| {
                        let response = handle(&request, &calls);
                        async move { Ok::<_, Infallible>(response) }
                    });
                tokio::spawn(async move {
                    // A client hanging up early is not the server's failure.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(stack))
                        .await;
                });
            }
        });
        Self {
            addr,
            calls,
            task,
            client: client(None),
        }
    }

    async fn send(
        &self,
        client: &Client<HttpConnector, ClientBody>,
        body: ClientBody,
    ) -> (StatusCode, HeaderMap, String) {
        let request = Request::post(format!("http://{}/", self.addr))
            .body(body)
            .expect("request");
        let response = client.request(request).await.expect("response");
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    }

    async fn post(&self) -> (StatusCode, HeaderMap, String) {
        self.send(&self.client, empty()).await
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP/1 client that never reuses a connection, leaving from `local` if given.
fn client(local: Option<IpAddr>) -> Client<HttpConnector, ClientBody> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(local);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(connector)
}

fn empty() -> ClientBody {
    Full::new(Bytes::new()).boxed()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

fn layer(policy: Policy, clock: &ManualClock) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("layer")
}

fn per_minute(name: &str, n: u64) -> Policy {
    Policy::new(name, Quota::per_minute(n))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::peer_ip())
}

#[tokio::test]
async fn a_service_builder_stack_admits_then_answers_429_with_headers() {
    let clock = ManualClock::new(BASE);
    let server = Served::start(layer(per_minute("api", 2), &clock)).await;

    let (status, headers, body) = server.post().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "127.0.0.1 has 1 left");
    assert_eq!(header(&headers, "ratelimit-policy"), r#""api";q=2;w=60"#);
    assert_eq!(header(&headers, "ratelimit"), r#""api";r=1;t=60"#);

    clock.advance(Duration::from_millis(45_200));
    let (status, headers, body) = server.post().await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "127.0.0.1 has 0 left");
    assert_eq!(header(&headers, "ratelimit"), r#""api";r=0;t=15"#);

    // Every request came on a new connection, through a new stack: clones share quota.
    let (status, headers, body) = server.post().await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body, "rate limit exceeded: retry after 15 s\n");
    assert_eq!(header(&headers, "retry-after"), "15");
    assert_eq!(
        header(&headers, "content-type"),
        "text/plain; charset=utf-8"
    );
    assert_eq!(header(&headers, "ratelimit"), r#""api";r=0;t=15"#);
    assert_eq!(header(&headers, "ratelimit-policy"), r#""api";q=2;w=60"#);
    assert_eq!(server.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn peer_ip_keys_by_the_socket_addr_the_accept_loop_inserts() {
    let clock = ManualClock::new(BASE);
    let server = Served::start(layer(per_minute("peer", 1), &clock)).await;
    let from_other = client(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))));

    let (status, _, body) = server.post().await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "127.0.0.1 has 0 left")
    );
    assert_eq!(server.post().await.0, StatusCode::TOO_MANY_REQUESTS);

    let (status, _, body) = server.send(&from_other, empty()).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "127.0.0.2 has 0 left")
    );
    assert_eq!(
        server.send(&from_other, empty()).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(server.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_connections_share_one_quota() {
    let clock = ManualClock::new(BASE);
    let server = Arc::new(Served::start(layer(per_minute("api", 10), &clock)).await);
    let tasks: Vec<_> = (0..40)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { server.post().await.0 })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        let status = task.await.expect("task");
        assert!(
            status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS,
            "{status}"
        );
        admitted += usize::from(status == StatusCode::OK);
    }
    assert_eq!(admitted, 10);
    assert_eq!(server.calls.load(Ordering::SeqCst), 10);
}

#[tokio::test]
async fn a_rejected_request_is_answered_before_its_body_ends() {
    let clock = ManualClock::new(BASE);
    let server = Served::start(layer(per_minute("uploads", 1), &clock)).await;
    assert_eq!(server.post().await.0, StatusCode::OK);

    // A chunked body that sends one chunk and never ends: only a layer that answers
    // without reading the body can answer it.
    let (sender, receiver) = tokio::sync::mpsc::channel(1);
    sender
        .send(Bytes::from_static(b"first chunk"))
        .await
        .expect("send");
    let endless = ChannelBody(receiver).boxed();
    let (status, headers, _) = tokio::time::timeout(HANG, server.send(&server.client, endless))
        .await
        .expect("the rejection does not wait for the request body");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&headers, "retry-after"), "60");
    assert_eq!(server.calls.load(Ordering::SeqCst), 1);
    drop(sender);
}

/// A request body fed by a channel: it ends only when the sender is dropped.
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}
