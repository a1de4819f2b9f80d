//! Bytes as the unit (`Policy::meter_request_bytes`, `meter_response_bytes`, the
//! `MeterBytes` layer), over real TCP: uploads from a real hyper client streaming its
//! body in chunks, downloads read by a slow reader. On tokio's paused clock, with the
//! memory store reading that clock, so that every figure is the quota's arithmetic:
//! no wall-clock threshold anywhere.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use support::http::Server;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tollgate::clock::Clock;
use tollgate::layer::{MeterBytes, MeteredBody, Unit};
use tollgate::store::{Charge, Receipt, Store, StoreCall};
use tollgate::{Decision, Key, Limit, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::streaming::ChannelBody;

const KIB: u64 = 1_024;
const MIB: u64 = 1_024 * KIB;

/// The store's clock: tokio's, so that a paused runtime moves both at once.
#[derive(Debug)]
struct TokioClock {
    start: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        Duration::from_secs(1_700_000_000) + self.start.elapsed()
    }
}

/// The memory store, recording the size and answer of every reservation: the
/// charges of frames' bytes (and the admissions of policies that wait).
#[derive(Debug, Clone)]
struct Recording {
    store: MemoryStore,
    reserved: Arc<Mutex<Vec<(u64, bool)>>>,
}

impl Recording {
    fn new() -> Self {
        Self {
            store: MemoryStore::with_clock(TokioClock {
                start: Instant::now(),
            }),
            reserved: Arc::default(),
        }
    }

    /// The sizes of the reservations the store admitted.
    fn admitted(&self) -> Vec<u64> {
        let reserved = self.reserved.lock().expect("reserved");
        reserved
            .iter()
            .filter(|(_, allowed)| *allowed)
            .map(|(cost, _)| *cost)
            .collect()
    }
}

impl Store for Recording {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.store.decide(charges)
    }

    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.store.decide_one(charge)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.store.refund(charge)
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.store.refund_charge(charge, receipt)
    }

    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        self.store.settle(charge, receipt)
    }

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.store.peek(limit, key)
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        let Ok(answer) = self.store.reserve(charge, max_wait).into_ready() else {
            unreachable!("the memory store answers at once")
        };
        let allowed = answer.as_ref().is_ok_and(|d| d.allowed);
        self.reserved
            .lock()
            .expect("reserved")
            .push((charge.cost, allowed));
        StoreCall::ready(answer)
    }
}

/// A byte policy per API key: `rate` bytes a second, `burst` at once.
fn bytes_policy(name: &str, rate: u64, burst: u64) -> Policy {
    Policy::new(
        name,
        Quota::per_second(rate).with_burst(burst).expect("a burst"),
    )
    .expect("policy")
    .key(key::header("x-api-key").expect("header"))
}

/// What an upload handler saw: when (from its start) it had read how many bytes.
type Log = Arc<Mutex<Vec<(Duration, u64)>>>;

/// `POST /upload`: reads the body frame by frame, logging each; answers the total, or
/// 400 with the read's error.
async fn upload(State(log): State<Log>, body: axum::body::Body) -> (StatusCode, String) {
    let start = Instant::now();
    let mut body = body;
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    total += data.len() as u64;
                    log.lock().expect("log").push((start.elapsed(), total));
                }
            }
            Err(error) => return (StatusCode::BAD_REQUEST, error.to_string()),
        }
    }
    (StatusCode::OK, total.to_string())
}

/// An axum app with `policy` and the `MeterBytes` layer under `Router::layer`.
async fn upload_app(policy: Policy, store: impl Store) -> (Server, Log) {
    let log = Log::default();
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let routes = Router::new()
        .route("/upload", post(upload))
        .with_state(log.clone())
        .layer(MeterBytes::new().map_request_body(axum::body::Body::new))
        .layer(layer);
    (Server::start(routes).await, log)
}

/// What a client got back.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

/// Uploads `chunks` chunks of `chunk` bytes as `api_key` from a real hyper client, as
/// fast as the connection takes them.
async fn send_upload(server: &Server, api_key: &str, chunk: u64, chunks: u64) -> Answer {
    send_body(server, "/upload", api_key, (chunk, chunks)).await
}

/// [`send_upload`] to `path`.
async fn send_body(
    server: &Server,
    path: &str,
    api_key: &str,
    (chunk, chunks): (u64, u64),
) -> Answer {
    let stream = TcpStream::connect(server.addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let (frames, body) = ChannelBody::new(4);
    tokio::spawn(async move {
        for _ in 0..chunks {
            let bytes = Bytes::from(vec![b'x'; chunk as usize]);
            if frames.send(bytes).await.is_err() {
                return;
            }
        }
    });
    let request = Request::post(path)
        .header("host", server.addr.to_string())
        .header("x-api-key", api_key)
        .body(body)
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map_or_else(
        |error| format!("<{error}>"),
        |b| String::from_utf8_lossy(&b.to_bytes()).into_owned(),
    );
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// `bytes` within what `rate` per second with `burst` allows after `elapsed`.
fn within_quota(bytes: u64, elapsed: Duration, rate: u64, burst: u64) -> bool {
    u128::from(bytes) * 1_000_000
        <= u128::from(burst) * 1_000_000 + u128::from(rate) * elapsed.as_micros()
}

// ---------------------------------------------------------------------------------------
// Uploads.
// ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn an_upload_of_one_key_is_held_to_one_mib_a_second() {
    const BURST: u64 = 128 * KIB;
    const TOTAL: u64 = 3 * MIB;
    let store = Recording::new();
    let policy = bytes_policy("upload", MIB, BURST).meter_request_bytes();
    let (server, log) = upload_app(policy, store.clone()).await;
    let started = Instant::now();
    let answer = send_upload(&server, "alice", 32 * KIB, TOTAL / (32 * KIB)).await;
    let elapsed = started.elapsed();
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "3145728")
    );
    assert_eq!(
        answer.headers["ratelimit-policy"],
        r#""upload";q=1048576;w=1;qu="content-bytes""#
    );
    // Every frame the handler read was within the quota when it read it.
    let log = log.lock().expect("log").clone();
    assert!(log.len() >= 2, "{log:?}");
    for &(at, read) in &log {
        assert!(within_quota(read, at, MIB, BURST), "{read} bytes at {at:?}");
    }
    // Measured by the client: the burst, then 1 MiB/s, to the microsecond of each
    // charge (rounded in the limiter's favour).
    let least = Duration::from_micros((TOTAL - BURST) * 1_000_000 / MIB);
    assert!(elapsed >= least, "{elapsed:?}");
    assert!(elapsed <= least + Duration::from_millis(5), "{elapsed:?}");
    let rate = TOTAL as f64 / elapsed.as_secs_f64();
    assert!(
        rate <= (TOTAL as f64 / (TOTAL - BURST) as f64) * MIB as f64,
        "{rate}"
    );
    // Charged exactly what went through: the advance (1 byte) and the frames.
    let charged: u64 = store.admitted().iter().sum();
    assert_eq!(charged + 1, TOTAL);
}

#[tokio::test(start_paused = true)]
async fn two_uploads_of_one_key_share_its_rate_and_other_keys_have_their_own() {
    const BURST: u64 = 64 * KIB;
    const EACH: u64 = MIB;
    let policy = bytes_policy("upload", MIB, BURST)
        .meter_request_bytes()
        .wait(Duration::from_secs(10));
    let (server, _) = upload_app(policy, Recording::new()).await;
    let started = Instant::now();
    let (a, b, c) = tokio::join!(
        send_upload(&server, "alice", 16 * KIB, EACH / (16 * KIB)),
        send_upload(&server, "alice", 16 * KIB, EACH / (16 * KIB)),
        send_upload(&server, "bob", 16 * KIB, EACH / (16 * KIB)),
    );
    for answer in [&a, &b, &c] {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    }
    // Alice's 2 MiB took at least (2 MiB − burst) at 1 MiB/s; bob's 1 MiB ran beside.
    // (Two streams: one may wait for the other's next place while its bytes are on
    // the wire, so the upper bound is a generous one.)
    let least = Duration::from_micros((2 * EACH - BURST) * 1_000_000 / MIB);
    assert!(started.elapsed() >= least, "{:?}", started.elapsed());
    assert!(started.elapsed() <= least + Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn a_body_that_would_wait_longer_than_its_wait_is_cut_off_and_answered_429() {
    // 1 KiB/s, 1 KiB at once, frames wait at most 2 s: a frame of more than 3 KiB
    // can never have its place in time.
    const RATE: u64 = KIB;
    let store = Recording::new();
    let policy = bytes_policy("upload", RATE, RATE)
        .meter_request_bytes()
        .wait(Duration::from_secs(2));
    let (server, log) = upload_app(policy, store.clone()).await;
    let answer = send_upload(&server, "alice", 64 * KIB, 1).await;
    assert_eq!(
        answer.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        answer.body
    );
    let retry: u64 = answer.headers["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!(retry >= 3, "{retry}");
    assert!(
        answer.headers["ratelimit-policy"]
            .to_str()
            .expect("ascii")
            .ends_with(r#"qu="content-bytes""#)
    );
    // Whatever frames the client's chunk arrived in, the handler read no more than
    // the burst and two seconds of the rate; the store kept no more than that.
    let read = log.lock().expect("log").last().map_or(0, |&(_, read)| read);
    assert!(read <= 3 * KIB, "{read}");
    let charged: u64 = store.admitted().iter().sum();
    assert!(charged <= 3 * KIB, "{charged}");
}

#[tokio::test(start_paused = true)]
async fn a_caller_whose_bytes_are_spent_is_refused_before_the_handler_reads_anything() {
    let policy = bytes_policy("upload", KIB, KIB).meter_request_bytes();
    let (server, log) = upload_app(policy, Recording::new()).await;
    let first = send_upload(&server, "alice", 1_024, 1).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "1024")
    );
    let frames = log.lock().expect("log").len();
    // 1,024 bytes spent (1 paid in advance, 1,023 as the body came): no byte left
    // for the next request.
    let second = send_upload(&server, "alice", 100, 1).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(second.headers["ratelimit"], r#""upload";r=0;t=1"#);
    assert_eq!(
        log.lock().expect("log").len(),
        frames,
        "the handler never ran"
    );
    // Another key is not touched.
    assert_eq!(
        send_upload(&server, "bob", 100, 1).await.status,
        StatusCode::OK
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_body_gives_its_advance_back() {
    let store = Recording::new();
    let policy = bytes_policy("upload", KIB, KIB)
        .meter_request_bytes()
        .costs(tollgate::layer::Costs::new().default(100));
    let (server, _) = upload_app(policy, store.clone()).await;
    let answer = send_upload(&server, "alice", 10, 0).await;
    assert_eq!((answer.status, answer.body.as_str()), (StatusCode::OK, "0"));
    assert_eq!(answer.headers["ratelimit"], r#""upload";r=924;t=1"#);
    let limiter = RateLimitLayer::builder()
        .policy(bytes_policy("upload", KIB, KIB))
        .store(store)
        .build()
        .expect("layer");
    let key = alice_key();
    let peek = limiter.limiter().peek("upload", &key).await.expect("peek");
    assert_eq!(
        peek.remaining, KIB,
        "the 100 bytes paid in advance came back"
    );
}

fn alice_key() -> Key {
    let (parts, ()) = Request::get("/")
        .header("x-api-key", "alice")
        .body(())
        .expect("request")
        .into_parts();
    bytes_policy("upload", KIB, KIB)
        .key_of(&parts)
        .expect("a key")
}

// ---------------------------------------------------------------------------------------
// Downloads.
// ---------------------------------------------------------------------------------------

/// `GET /download`: `frames` frames of `frame` bytes, fed as fast as the body takes
/// them.
fn download_routes(frame: u64, frames: u64) -> Router {
    Router::new().route(
        "/download",
        get(move || async move {
            let (sender, body) = ChannelBody::new(2);
            tokio::spawn(async move {
                for _ in 0..frames {
                    let bytes = Bytes::from(vec![b'y'; frame as usize]);
                    if sender.send(bytes).await.is_err() {
                        return;
                    }
                }
            });
            axum::body::Body::new(body)
        }),
    )
}

async fn download_app(policy: Policy, store: impl Store, routes: Router) -> Server {
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    Server::start(routes.layer(MeterBytes::new()).layer(layer)).await
}

fn download(api_key: &str) -> Request<Full<Bytes>> {
    Request::get("/download")
        .header("x-api-key", api_key)
        .body(Full::default())
        .expect("request")
}

#[tokio::test(start_paused = true)]
async fn a_slow_reader_gets_the_whole_download_within_the_quota() {
    const BURST: u64 = 128 * KIB;
    const FRAME: u64 = 16 * KIB;
    const TOTAL: u64 = 2 * MIB;
    let store = Recording::new();
    let policy = bytes_policy("download", MIB, BURST).meter_response_bytes();
    let server = download_app(policy, store.clone(), download_routes(FRAME, TOTAL / FRAME)).await;
    let started = Instant::now();
    let response = server.open(download("alice")).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()["ratelimit-policy"],
        r#""download";q=1048576;w=1;qu="content-bytes""#
    );
    let mut body = response.into_body();
    let mut read = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("a frame");
        read += frame.data_ref().map_or(0, |d| d.len() as u64);
        assert!(
            within_quota(read, started.elapsed(), MIB, BURST),
            "{read} at {:?}",
            started.elapsed()
        );
        // A slow reader: far slower than the rate, for a while.
        if read < 256 * KIB {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(read, TOTAL);
    let charged: u64 = store.admitted().iter().sum();
    assert_eq!(charged + 1, TOTAL, "every byte sent was charged, once");
}

#[tokio::test(start_paused = true)]
async fn a_frame_larger_than_the_burst_is_charged_in_pieces_of_at_most_the_burst() {
    const BURST: u64 = MIB;
    let store = Recording::new();
    // Its last piece is 2 s away: within a wait of 10 s.
    let policy = bytes_policy("download", MIB, BURST)
        .meter_response_bytes()
        .wait(Duration::from_secs(10));
    let server = download_app(policy, store.clone(), download_routes(3 * MIB + 7, 1)).await;
    let started = Instant::now();
    let reply = server.send(download("alice")).await;
    assert_eq!(reply.body.len() as u64, 3 * MIB + 7);
    let pieces = store.admitted();
    assert!(pieces.iter().all(|&piece| piece <= BURST), "{pieces:?}");
    // In wait mode the admission is a reservation too: the byte paid in advance.
    assert_eq!(pieces[0], 1);
    assert_eq!(pieces.iter().sum::<u64>(), 3 * MIB + 7);
    // The frame went out whole once its last piece had its place: 2 MiB + 6 bytes
    // after the burst, at 1 MiB/s.
    assert!(started.elapsed() >= Duration::from_micros((2 * MIB + 6) * 1_000_000 / MIB));
}

#[tokio::test(start_paused = true)]
async fn a_download_that_would_wait_longer_than_its_wait_ends_with_an_error() {
    let store = Recording::new();
    let policy = bytes_policy("download", KIB, KIB)
        .meter_response_bytes()
        .wait(Duration::from_secs(2));
    let server = download_app(policy, store.clone(), download_routes(KIB, 64)).await;
    let response = server.open(download("alice")).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    // Frames of 1 KiB at 1 KiB/s each wait a second: a lone download streams at the
    // rate and is never cut off.
    assert_eq!(futures_collect(vec![response]).await, [(64 * KIB, false)]);
    // Three downloads of one key want three times the rate: places move past 2 s.
    let first = server.open(download("bob")).await.expect("response");
    let second = server.open(download("bob")).await.expect("response");
    let third = server.open(download("bob")).await.expect("response");
    let results = futures_collect(vec![first, second, third]).await;
    assert!(
        results
            .iter()
            .any(|(read, failed)| *failed && *read < 64 * KIB),
        "{results:?}"
    );
}

/// Reads each body to its end or its error, all at once: (bytes read, whether it
/// ended with an error).
async fn futures_collect(
    responses: Vec<http::Response<hyper::body::Incoming>>,
) -> Vec<(u64, bool)> {
    let tasks: Vec<_> = responses
        .into_iter()
        .map(|response| {
            tokio::spawn(async move {
                let mut body = response.into_body();
                let mut read = 0;
                while let Some(frame) = body.frame().await {
                    match frame {
                        Ok(frame) => read += frame.data_ref().map_or(0, |d| d.len() as u64),
                        Err(_) => return (read, true),
                    }
                }
                (read, false)
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.expect("a reader"));
    }
    results
}

#[tokio::test(start_paused = true)]
async fn without_the_meter_bytes_layer_bodies_go_through_and_the_admission_stands() {
    let store = Recording::new();
    let policy = bytes_policy("upload", KIB, KIB).meter_request_bytes();
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store.clone())
        .build()
        .expect("layer");
    let log = Log::default();
    let routes = Router::new()
        .route("/upload", post(upload))
        .with_state(log)
        .layer(layer);
    let server = Server::start(routes).await;
    let answer = send_upload(&server, "alice", 8 * KIB, 1).await;
    assert_eq!(
        (answer.status, answer.body.as_str()),
        (StatusCode::OK, "8192")
    );
    assert_eq!(answer.headers["ratelimit"], r#""upload";r=1023;t=1"#);
}

#[test]
fn a_byte_policy_states_its_unit() {
    let policy = bytes_policy("upload", KIB, KIB).meter_request_bytes();
    assert_eq!(policy.get_unit(), Unit::ContentBytes);
    let plain = MeteredBody::new(Full::new(Bytes::from("x")));
    assert_eq!(http_body::Body::size_hint(&plain).exact(), Some(1));
}

// ---------------------------------------------------------------------------------------
// On Redis: every frame's charge is a store call on the wire.
// ---------------------------------------------------------------------------------------

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_an_upload_is_charged_frame_by_frame_and_cut_off_at_its_window() {
    use tollgate::Algorithm;
    use tollgate::clock::ManualClock;
    // 1 MiB an hour in fixed windows, at a frozen instant: nothing refills, so the
    // counts are exact whatever the timing.
    let clock = ManualClock::new(Duration::from_secs(1_699_920_000));
    let store = crate::shared_redis::redis_store("bytes-upload", clock);
    let policy = Policy::new("upload", Quota::per_hour(MIB))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .key(key::header("x-api-key").expect("header"))
        .meter_request_bytes()
        .wait(Duration::from_secs(2));
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let routes = Router::new()
        .route("/upload", post(upload))
        .with_state(Log::default())
        .layer(MeterBytes::new().map_request_body(axum::body::Body::new))
        .layer(layer.clone());
    let server = Server::start(routes).await;
    let first = send_upload(&server, "alice", 16 * KIB, 48).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "786432")
    );
    let key = alice_key();
    let left = |layer: RateLimitLayer| async move {
        let peek = layer.limiter().peek("upload", &key).await.expect("peek");
        peek.remaining
    };
    assert_eq!(left(layer.clone()).await, MIB - 768 * KIB);
    // The rest of the window is 256 KiB: a 512 KiB upload is cut off there, and the
    // store counts no more than the window holds.
    let second = send_upload(&server, "alice", 16 * KIB, 32).await;
    assert_eq!(
        second.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        second.body
    );
    assert_eq!(left(layer.clone()).await, 0);
}

// ---------------------------------------------------------------------------------------
// One account per request: a byte advance comes back once, and the bytes that went
// through count whatever the status.
// ---------------------------------------------------------------------------------------

/// 10,000 bytes a minute per API key in fixed windows (at a frozen instant nothing
/// refills), 1,000 of them paid in advance, only successes counting.
fn counted_bytes() -> Policy {
    Policy::new("upload", Quota::per_minute(10_000))
        .expect("policy")
        .algorithm(tollgate::Algorithm::FixedWindow)
        .key(key::header("x-api-key").expect("header"))
        .meter_request_bytes()
        .costs(tollgate::layer::Costs::new().default(1_000))
        .count_when(|status| status.is_success())
}

/// `POST /read/{status}`: reads the whole body, adding its bytes to `read`, then
/// answers `status` (400 when the read fails).
async fn read_then(
    State(read): State<Arc<AtomicU64>>,
    axum::extract::Path(status): axum::extract::Path<u16>,
    body: axum::body::Body,
) -> StatusCode {
    let mut body = body;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    read.fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            Err(_) => return StatusCode::BAD_REQUEST,
        }
    }
    StatusCode::from_u16(status).expect("a status")
}

/// An axum app with `counted_bytes()` in front of `/read/{status}`, on `store`; the
/// layer (for peeks) and the count of bytes the handlers read.
async fn counted_app(store: impl Store) -> (Server, RateLimitLayer, Arc<AtomicU64>) {
    let read = Arc::new(AtomicU64::new(0));
    let layer = RateLimitLayer::builder()
        .policy(counted_bytes())
        .store(store)
        .build()
        .expect("layer");
    let routes = Router::new()
        .route("/read/{status}", post(read_then))
        .with_state(Arc::clone(&read))
        .layer(MeterBytes::new().map_request_body(axum::body::Body::new))
        .layer(layer.clone());
    (Server::start(routes).await, layer, read)
}

async fn upload_left(layer: &RateLimitLayer) -> u64 {
    let peek = layer.limiter().peek("upload", &alice_key()).await;
    peek.expect("a peek").remaining
}

/// Polls until `alice` has `left` bytes, then makes sure nothing more comes back.
async fn settles_at(layer: &RateLimitLayer, left: u64) {
    let started = std::time::Instant::now();
    while upload_left(layer).await != left {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "still {} left, not {left}",
            upload_left(layer).await
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(upload_left(layer).await, left, "given back again");
}

async fn a_failed_request_gives_its_byte_advance_back_once_on(store: impl Store) {
    let (server, layer, _) = counted_app(store).await;
    // A success of 3,000 bytes: its advance and 2,000 more.
    let success = send_body(&server, "/read/200", "alice", (1_000, 3)).await;
    assert_eq!(success.status, StatusCode::OK);
    settles_at(&layer, 7_000).await;
    // A failure with an empty body: its advance comes back, once.
    let failure = send_body(&server, "/read/500", "alice", (1_000, 0)).await;
    assert_eq!(failure.status, StatusCode::INTERNAL_SERVER_ERROR);
    settles_at(&layer, 7_000).await;
}

async fn alternating_successes_and_failures_move_at_most_the_window_on(store: impl Store) {
    let (server, layer, read) = counted_app(store).await;
    let mut answered = Vec::new();
    for n in 0..20 {
        let path = if n % 2 == 0 { "/read/200" } else { "/read/500" };
        answered.push(send_body(&server, path, "alice", (1_000, 1)).await.status);
    }
    let handled = answered
        .iter()
        .filter(|&&status| status != StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!(handled, 10, "{answered:?}");
    assert_eq!(read.load(Ordering::Relaxed), 10_000);
    assert_eq!(upload_left(&layer).await, 0);
}

#[tokio::test]
async fn a_failed_request_gives_its_byte_advance_back_once() {
    let store = MemoryStore::with_clock(tollgate::clock::ManualClock::new(Duration::from_secs(
        1_699_920_000,
    )));
    a_failed_request_gives_its_byte_advance_back_once_on(store).await;
}

#[tokio::test]
async fn alternating_successes_and_failures_never_move_more_bytes_than_the_window() {
    let store = MemoryStore::with_clock(tollgate::clock::ManualClock::new(Duration::from_secs(
        1_699_920_000,
    )));
    alternating_successes_and_failures_move_at_most_the_window_on(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_a_failed_request_gives_its_byte_advance_back_once() {
    let clock = tollgate::clock::ManualClock::new(Duration::from_secs(1_699_920_000));
    let store = crate::shared_redis::redis_store("bytes-advance-once", clock);
    a_failed_request_gives_its_byte_advance_back_once_on(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_alternating_successes_and_failures_never_move_more_bytes_than_the_window() {
    let clock = tollgate::clock::ManualClock::new(Duration::from_secs(1_699_920_000));
    let store = crate::shared_redis::redis_store("bytes-alternating", clock);
    alternating_successes_and_failures_move_at_most_the_window_on(store).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_the_cluster_a_failed_request_gives_its_byte_advance_back_once() {
    let clock = tollgate::clock::ManualClock::new(Duration::from_secs(1_699_920_000));
    let store = crate::shared_redis::cluster_store("bytes-advance-once", clock);
    a_failed_request_gives_its_byte_advance_back_once_on(store).await;
}
