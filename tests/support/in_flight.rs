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
//!
//! Also: a process that crashes holding slots (a child process of the test binary,
//! killed), a Redis stall (a busy Lua loop on a connection of its own), and many
//! keys' slots taken at once.

use std::convert::Infallible;
use std::io::{BufRead, BufReader, Write};
use std::pin::Pin;
use std::process::{Command, Stdio};
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, sleep};
use tollgate::store::{InFlightSlot, Store};
use tollgate::{Key, Limit};

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
                    // Let the ones that got in finish, and try again. One may still be
                    // on its way in: keep opening for late comers until all ended.
                    let mut opened = 0;
                    while !requests.iter().all(JoinHandle::is_finished) {
                        let entered = self.gate.entered() - before;
                        self.gate.open(entered - opened);
                        opened = entered;
                        sleep(Duration::from_millis(2)).await;
                    }
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

/// The environment variable that makes a test binary's crashing-process test (see
/// [`crash_holding`]) hold slots; it carries that test's spec.
pub const CRASH_SPEC: &str = "TOLLGATE_CRASH_HOLDING";

/// What the crashing process prints once it holds its slots.
const HOLDING: &str = "tollgate-crash-child: holding";

/// A process that crashes holding in-flight slots: runs `test` (an ignored test of
/// this same test binary that calls [`crash_spec`], takes the slots, then
/// [`hold_until_killed`]) in a child process with `spec` in [`CRASH_SPEC`], waits
/// until it holds them, and kills it (`SIGKILL`): its leases stay behind, renewed by
/// nobody. A process of its own, as a crash is: a store renews its leases on a
/// thread of its own, which nothing in one process can stop from outside.
pub fn crash_holding(test: &str, spec: &str) {
    // This very binary, even if a build has replaced its file since it started.
    let this = if std::path::Path::new("/proc/self/exe").exists() {
        std::path::PathBuf::from("/proc/self/exe")
    } else {
        std::env::current_exe().expect("the test binary")
    };
    let mut child = Command::new(this)
        .args([
            test,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_SPEC, spec)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the crashing process");
    let stdout = child.stdout.take().expect("its stdout");
    let (said, heard) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may have begun the line with the test's name.
            if line.ends_with(HOLDING) {
                let _ = said.send(());
            }
        }
    });
    let held = heard.recv_timeout(BOUND);
    child.kill().expect("kill the crashing process");
    child.wait().expect("reap the crashing process");
    held.unwrap_or_else(|_| panic!("the crashing process held no slots within {BOUND:?}"));
}

/// In a test binary's crashing-process test: the spec [`crash_holding`] gave it, or
/// `None` when the test runs as a test (it then does nothing).
pub fn crash_spec() -> Option<String> {
    std::env::var(CRASH_SPEC).ok()
}

/// In the crashing process, once it holds its slots: says so to [`crash_holding`]
/// and waits to be killed.
pub async fn hold_until_killed() {
    println!("{HOLDING}");
    std::io::stdout().flush().expect("flush stdout");
    sleep(BOUND * 3).await;
    panic!("the crashing process was not killed");
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

/// A Redis stall: a busy Lua loop of `length` run on a connection of its own (by
/// `redis-cli`) on the server at `port`, which answers nothing else meanwhile.
/// Returns once the stall is seen (a `PING` on another connection goes unanswered
/// for 50 ms); join the handle to wait for its end.
pub async fn stall(port: u16, length: Duration) -> std::thread::JoinHandle<()> {
    let ms = length.as_millis().to_string();
    let busy = std::thread::spawn(move || {
        let loop_for = "local t = redis.call('TIME') \
             local start = t[1] * 1000000 + t[2] \
             while true do \
               local n = redis.call('TIME') \
               if n[1] * 1000000 + n[2] - start > tonumber(ARGV[1]) * 1000 then break end \
             end \
             return 1";
        let out = crate::redis_server::cli(port, &["EVAL", loop_for, "0", &ms]);
        assert_eq!(out, "1", "the stall script failed");
    });
    let deadline = Instant::now() + BOUND;
    loop {
        let mut ping = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        ping.write_all(b"PING\r\n").await.expect("send PING");
        let mut reply = [0_u8; 16];
        let answered = tokio::time::timeout(Duration::from_millis(50), ping.read(&mut reply)).await;
        if answered.is_err() {
            return busy;
        }
        assert!(Instant::now() < deadline, "the stall never began");
        assert!(!busy.is_finished(), "the stall ended before it was seen");
    }
}

/// Takes one slot (bound 1) of each of `keys` under `limit` on `store`, 64 calls at
/// a time; the slots in the keys' order.
pub async fn take_each<S: Store + Clone + 'static>(
    store: &S,
    limit: &Limit,
    keys: &[Key],
) -> Vec<Option<InFlightSlot>> {
    let mut calls = tokio::task::JoinSet::new();
    let mut slots: Vec<Option<InFlightSlot>> = keys.iter().map(|_| None).collect();
    let mut next = 0;
    loop {
        while calls.len() < 64 && next < keys.len() {
            let (store, limit, key, at) = (store.clone(), limit.clone(), keys[next], next);
            calls.spawn(async move { (at, store.acquire_in_flight(&limit, &key, 1).await) });
            next += 1;
        }
        let Some(done) = calls.join_next().await else {
            return slots;
        };
        let (at, slot) = done.expect("an acquire task");
        slots[at] = slot.expect("the store answers");
    }
}
