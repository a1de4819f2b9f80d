//! In-flight limits end to end, on any store: an axum app whose handlers wait at a
//! [`Gate`] until the test opens it, real HTTP requests over TCP, and the ways a
//! running request can end (its body ends, its body is dropped early, its client goes
//! away mid-handler, its handler panics). Each way is followed by a check that every
//! slot came back: `n` requests must all get in again. Stores that give slots back
//! in the background (Redis) may take a moment, so that check polls, with a bound.
//!
//! The crate knows no layer (it builds tollgate without features): the caller puts
//! its `RateLimitLayer`, with one policy of bound `n` and a global key, on the router
//! it is handed.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body::Frame;
use http_body_util::Full;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, sleep};
use tollgate::{Key, Limit, Store};

use crate::http::{Reply, Server};

/// How long a check that slots came back may poll.
const BOUND: Duration = Duration::from_secs(20);

/// Where the slow handlers wait, and how many got there.
#[derive(Debug)]
pub struct Gate {
    entered: AtomicUsize,
    permits: Semaphore,
}

impl Gate {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            entered: AtomicUsize::new(0),
            permits: Semaphore::new(0),
        })
    }

    /// How many handlers have started so far.
    pub fn entered(&self) -> usize {
        self.entered.load(Ordering::SeqCst)
    }

    /// Lets `n` waiting handlers finish.
    pub fn open(&self, n: usize) {
        self.permits.add_permits(n);
    }

    async fn pass(&self) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        self.permits.acquire().await.expect("gate open").forget();
    }
}

/// A body that sends a chunk every 10 ms and never ends: its request runs until the
/// client goes away.
struct Endless(Interval);

impl http_body::Body for Endless {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_tick(cx)
            .map(|_| Some(Ok(Frame::data(Bytes::from_static(b"tick\n")))))
    }
}

/// The routes: `/slow` waits at the gate, `/stream` answers at once with an
/// [`Endless`] body, `/panic` panics.
fn routes(gate: &Arc<Gate>) -> Router {
    let slow = gate.clone();
    let stream = gate.clone();
    Router::new()
        .route(
            "/slow",
            get(move || {
                let gate = slow.clone();
                async move {
                    gate.pass().await;
                    "done"
                }
            }),
        )
        .route(
            "/stream",
            get(move || {
                stream.entered.fetch_add(1, Ordering::SeqCst);
                async { Body::new(Endless(tokio::time::interval(Duration::from_millis(10)))) }
            }),
        )
        .route("/panic", get(panics))
}

async fn panics() -> &'static str {
    panic!("this handler panics on purpose")
}

/// A server with the gated routes under the caller's layer.
#[derive(Debug)]
pub struct App {
    /// The server, shared with the request tasks.
    pub server: Arc<Server>,
    /// Where its handlers wait.
    pub gate: Arc<Gate>,
}

impl App {
    /// Serves the routes with `limited` applied (it adds the rate-limit layer).
    pub async fn start(limited: impl FnOnce(Router) -> Router) -> Self {
        let gate = Gate::new();
        let server = Arc::new(Server::start(limited(routes(&gate))).await);
        Self { server, gate }
    }

    /// Starts `n` requests to `/slow` and waits until all `n` run (`Ok`) or one of
    /// them is answered without running (`Err`: a slot was not free).
    async fn try_fill(&self, n: usize) -> Result<Vec<JoinHandle<Reply>>, Vec<JoinHandle<Reply>>> {
        let before = self.gate.entered();
        let requests: Vec<JoinHandle<Reply>> = (0..n)
            .map(|_| {
                let server = self.server.clone();
                tokio::spawn(async move { server.get("/slow").await })
            })
            .collect();
        let deadline = Instant::now() + BOUND;
        loop {
            if self.gate.entered() == before + n {
                return Ok(requests);
            }
            if requests.iter().any(JoinHandle::is_finished) || Instant::now() > deadline {
                return Err(requests);
            }
            sleep(Duration::from_millis(2)).await;
        }
    }

    /// `n` requests running at once, polling (with a bound) until they all get in:
    /// the proof that `n` slots are free.
    pub async fn fill(&self, n: usize) -> Vec<JoinHandle<Reply>> {
        let deadline = Instant::now() + BOUND;
        loop {
            let before = self.gate.entered();
            match self.try_fill(n).await {
                Ok(requests) => return requests,
                Err(requests) => {
                    // Let the ones that got in finish, and try again.
                    self.gate.open(self.gate.entered() - before);
                    for request in requests {
                        request.await.expect("request task");
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{n} slots were not free again within {BOUND:?}"
                    );
                    sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// Lets `requests` (from [`fill`](App::fill)) finish, checks they were served, and
    /// returns their replies.
    pub async fn finish(&self, requests: Vec<JoinHandle<Reply>>) -> Vec<Reply> {
        self.gate.open(requests.len());
        let mut replies = Vec::new();
        for request in requests {
            let reply = request.await.expect("request task");
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            assert_eq!(reply.body, "done");
            replies.push(reply);
        }
        replies
    }

    /// Checks that one more request is refused for want of a slot, without running.
    pub async fn assert_refused(&self) {
        let before = self.gate.entered();
        let reply = self.server.get("/slow").await;
        assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
        assert_eq!(reply.header("retry-after"), "1");
        assert_eq!(reply.body, "too many requests in flight: retry after 1 s\n");
        // The in-flight limit has no member in the rate-limit headers.
        assert!(!reply.headers.contains_key("ratelimit"), "{reply:?}");
        assert_eq!(self.gate.entered(), before, "the refused request ran");
    }
}

/// Every way a request with an in-flight slot can end, on a policy of bound `n`:
/// exactly `n` run and the next is refused; the slots come back when the bodies end,
/// when bodies are dropped early, when clients go away mid-handler and when handlers
/// panic.
pub async fn every_way_a_request_ends(n: usize, limited: impl FnOnce(Router) -> Router) {
    let app = App::start(limited).await;

    // Exactly n run; the (n+1)-th is refused; once they end, n get in again.
    let running = app.fill(n).await;
    app.assert_refused().await;
    assert_eq!(app.gate.entered(), n);
    app.finish(running).await;
    let running = app.fill(n).await;
    app.finish(running).await;

    // Bodies dropped after their heads arrived: the client closes the connection, the
    // server's next write fails, and the response body is dropped with it.
    let mut streams = Vec::new();
    for _ in 0..n {
        let request = Request::get("/stream")
            .body(Full::default())
            .expect("request");
        let response = app.server.open(request).await.expect("stream response");
        assert_eq!(response.status(), StatusCode::OK);
        streams.push(response);
    }
    app.assert_refused().await;
    drop(streams);
    let running = app.fill(n).await;
    app.finish(running).await;

    // Clients that go away while their handlers wait.
    let before = app.gate.entered();
    let mut clients = Vec::new();
    for _ in 0..n {
        let mut client = TcpStream::connect(app.server.addr).await.expect("connect");
        client
            .write_all(b"GET /slow HTTP/1.1\r\nhost: localhost\r\n\r\n")
            .await
            .expect("send request");
        clients.push(client);
    }
    let deadline = Instant::now() + BOUND;
    while app.gate.entered() < before + n {
        assert!(Instant::now() < deadline, "the raw requests never ran");
        sleep(Duration::from_millis(2)).await;
    }
    app.assert_refused().await;
    drop(clients);
    let running = app.fill(n).await;
    app.finish(running).await;

    // Handlers that panic: the connection's task unwinds and drops the request.
    for _ in 0..n {
        let request = Request::get("/panic")
            .body(Full::default())
            .expect("request");
        assert!(
            app.server.open(request).await.is_err(),
            "a panic has no answer"
        );
    }
    let running = app.fill(n).await;
    app.finish(running).await;
}

/// Takes `n` slots of `key` under `limit` on a store built by `make` in a runtime of
/// its own, then ends that runtime without giving them back: a process that crashed
/// holding them (its tasks, the lease renewal among them, are gone with it).
pub fn crash_holding<S, F>(make: F, limit: Limit, key: Key, n: u32)
where
    S: Store,
    F: FnOnce() -> S + Send + 'static,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let store = make();
            for _ in 0..n {
                let slot = store
                    .acquire_in_flight(&limit, &key, n)
                    .await
                    .expect("the store answers")
                    .expect("a free slot");
                // Never given back, as by a process that died.
                std::mem::forget(slot);
            }
        });
        drop(runtime);
    })
    .join()
    .expect("the crashing process's thread");
}

/// Polls `store` (with a bound) until `key` has a free slot under `limit` of bound
/// `max`, and returns how many polls were refused first.
pub async fn until_free<S: Store>(store: &S, limit: &Limit, key: &Key, max: u32) -> usize {
    let deadline = Instant::now() + BOUND;
    let mut refused = 0;
    loop {
        if store
            .acquire_in_flight(limit, key, max)
            .await
            .expect("the store answers")
            .is_some()
        {
            return refused;
        }
        refused += 1;
        assert!(
            Instant::now() < deadline,
            "no slot came free within {BOUND:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}
