//! Response bytes as the unit (`meter_response_bytes`, `MeterBytes`) with `count_when`:
//! the bytes that went to the client count whatever the status, and a failure's
//! advance comes back once. Over real TCP, at a frozen instant, memory and Redis.

use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::Server;
use tollgate::layer::{Costs, MeterBytes};
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{HANG, clock, redis};

/// 10,000 response bytes a minute per API key in fixed windows, 1,000 in advance,
/// only successes counting.
fn downloads() -> Policy {
    Policy::new("download", Quota::per_minute(10_000))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-api-key").expect("header"))
        .meter_response_bytes()
        .costs(Costs::new().default(1_000))
        .count_when(|status| status.is_success())
}

/// `GET /{status}/{n}`: `n` bytes with `status`.
fn routes() -> Router {
    Router::new().route(
        "/{status}/{n}",
        get(|Path((status, n)): Path<(u16, usize)>| async move {
            (StatusCode::from_u16(status).expect("status"), vec![b'x'; n])
        }),
    )
}

fn get_as(path: &str) -> Request<Full<Bytes>> {
    Request::get(path)
        .header("x-api-key", "alice")
        .body(Full::default())
        .expect("request")
}

async fn app(store: impl Store) -> (Server, RateLimitLayer, Key) {
    let layer = RateLimitLayer::builder()
        .policy(downloads())
        .store(store)
        .build()
        .expect("layer");
    let server = Server::start(routes().layer(MeterBytes::new()).layer(layer.clone())).await;
    let (parts, _) = get_as("/").into_parts();
    let key = downloads().key_of(&parts).expect("key");
    (server, layer, key)
}

/// Remaining once it stops moving (settles on Redis land in the background).
async fn settled(layer: &RateLimitLayer, key: &Key) -> u64 {
    let started = std::time::Instant::now();
    let mut last = u64::MAX;
    loop {
        let now = layer
            .limiter()
            .peek("download", key)
            .await
            .expect("peek")
            .remaining;
        if now == last {
            return now;
        }
        assert!(started.elapsed() < HANG, "never settled");
        last = now;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// A failed response of 3,000 bytes counts its 3,000 bytes (its advance back once):
/// 7,000 left.
async fn a_failure_counts_its_bytes(store: impl Store) -> u64 {
    let (server, layer, key) = app(store).await;
    let reply = server.send(get_as("/500/3000")).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(reply.body.len(), 3_000);
    settled(&layer, &key).await
}

#[tokio::test]
async fn a_failed_download_counts_the_bytes_it_sent_on_memory() {
    assert_eq!(
        a_failure_counts_its_bytes(MemoryStore::with_clock(clock())).await,
        7_000
    );
}

#[tokio::test]
async fn a_failed_download_counts_the_bytes_it_sent_on_redis() {
    assert_eq!(
        a_failure_counts_its_bytes(redis("bytes-fail", clock())).await,
        7_000
    );
}

/// Alternating successes and failures of 1,000 bytes each: at most 10,000 bytes reach
/// the client in the window.
async fn alternating(store: impl Store) -> (usize, u64) {
    let (server, layer, key) = app(store).await;
    let mut through = 0;
    for n in 0..30 {
        let path = if n % 2 == 0 { "/200/1000" } else { "/500/1000" };
        let reply = server.send(get_as(path)).await;
        if reply.status != StatusCode::TOO_MANY_REQUESTS {
            through += reply.body.len();
        }
        // Let a background settle land before the next request (Redis).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (through, settled(&layer, &key).await)
}

#[tokio::test]
async fn alternating_download_outcomes_move_at_most_the_window_on_memory() {
    let (through, left) = alternating(MemoryStore::with_clock(clock())).await;
    assert!(
        through <= 10_000,
        "{through} bytes through a 10,000-byte window"
    );
    assert_eq!(left, 10_000 - through as u64);
}

#[tokio::test]
async fn alternating_download_outcomes_move_at_most_the_window_on_redis() {
    let (through, left) = alternating(redis("bytes-alt", clock())).await;
    assert!(
        through <= 10_000,
        "{through} bytes through a 10,000-byte window"
    );
    assert_eq!(left, 10_000 - through as u64);
}

/// Request bytes with `count_when(success)`: an upload whose client leaves after
/// 5,000 of its announced 20,000 bytes (the handler's read fails: not a success)
/// still counts the bytes that went through: at most 5,000 left of 10,000, and the
/// advance is not given back on top.
async fn an_upload_left_mid_way(store: impl Store) -> (u64, u64) {
    use axum::extract::State;
    use axum::routing::post;
    use http_body_util::BodyExt as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::AsyncWriteExt as _;
    let policy = Policy::new("upload", Quota::per_minute(10_000))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-api-key").expect("header"))
        .meter_request_bytes()
        .costs(Costs::new().default(1_000))
        .count_when(|status| status.is_success());
    let layer = RateLimitLayer::builder()
        .policy(policy.clone())
        .store(store)
        .build()
        .expect("layer");
    let read = Arc::new(AtomicU64::new(0));
    let routes = Router::new()
        .route(
            "/upload",
            post(
                |State(read): State<Arc<AtomicU64>>, body: axum::body::Body| async move {
                    let mut body = body;
                    while let Some(frame) = body.frame().await {
                        match frame {
                            Ok(frame) => {
                                if let Some(data) = frame.data_ref() {
                                    read.fetch_add(data.len() as u64, Ordering::SeqCst);
                                }
                            }
                            Err(_) => return StatusCode::BAD_REQUEST,
                        }
                    }
                    StatusCode::OK
                },
            ),
        )
        .with_state(read.clone())
        .layer(MeterBytes::new().map_request_body(axum::body::Body::new))
        .layer(layer.clone());
    let server = Server::start(routes).await;
    let mut socket = tokio::net::TcpStream::connect(server.addr)
        .await
        .expect("connect");
    let head =
        "POST /upload HTTP/1.1\r\nhost: x\r\nx-api-key: alice\r\ncontent-length: 20000\r\n\r\n";
    socket.write_all(head.as_bytes()).await.expect("head");
    for _ in 0..5 {
        socket.write_all(&[b'u'; 1_000]).await.expect("part");
        socket.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = std::time::Instant::now();
    while read.load(Ordering::SeqCst) < 5_000 && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(socket);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (parts, _) = get_as("/").into_parts();
    let key = policy.key_of(&parts).expect("key");
    let left = {
        let started = std::time::Instant::now();
        let mut last = u64::MAX;
        loop {
            let now = layer
                .limiter()
                .peek("upload", &key)
                .await
                .expect("peek")
                .remaining;
            if now == last {
                break now;
            }
            assert!(started.elapsed() < HANG, "never settled");
            last = now;
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    };
    let read = read.load(Ordering::SeqCst);
    assert!(read >= 4_000, "the handler read only {read} bytes");
    (read, left)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_whose_client_leaves_counts_the_bytes_that_went_through_on_memory() {
    let (read, left) = an_upload_left_mid_way(MemoryStore::with_clock(clock())).await;
    assert!(left <= 10_000 - read, "{left} left after {read} bytes read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_whose_client_leaves_counts_the_bytes_that_went_through_on_redis() {
    let (read, left) = an_upload_left_mid_way(redis("upload-left", clock())).await;
    assert!(left <= 10_000 - read, "{left} left after {read} bytes read");
}
