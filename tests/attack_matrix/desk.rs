//! A login desk over real TCP: `POST /login` answers 200 for `x-password: right`, 401
//! otherwise; a request with `x-hold` waits for the desk's gate. Counts who reached it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tollgate::RateLimitLayer;

pub(crate) struct Desk {
    pub(crate) right: AtomicUsize,
    pub(crate) wrong: AtomicUsize,
    gate: watch::Sender<bool>,
}

impl Desk {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            right: AtomicUsize::new(0),
            wrong: AtomicUsize::new(0),
            gate: watch::Sender::new(false),
        })
    }

    pub(crate) fn reached(&self) -> (usize, usize) {
        (
            self.right.load(Ordering::SeqCst),
            self.wrong.load(Ordering::SeqCst),
        )
    }

    pub(crate) fn open(&self) {
        self.gate.send_replace(true);
    }

    pub(crate) fn close(&self) {
        self.gate.send_replace(false);
    }
}

async fn login(State(desk): State<Arc<Desk>>, headers: HeaderMap) -> StatusCode {
    let right = headers.get("x-password").is_some_and(|p| p == "right");
    if right {
        desk.right.fetch_add(1, Ordering::SeqCst);
    } else {
        desk.wrong.fetch_add(1, Ordering::SeqCst);
    }
    if headers.contains_key("x-hold") {
        let mut gate = desk.gate.subscribe();
        let _ = gate.wait_for(|open| *open).await;
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    if right {
        StatusCode::OK
    } else {
        StatusCode::UNAUTHORIZED
    }
}

/// `POST /login` on `desk`.
pub(crate) fn routes(desk: &Arc<Desk>) -> Router {
    Router::new()
        .route("/login", post(login))
        .with_state(desk.clone())
}

pub(crate) async fn serve(layer: &RateLimitLayer, desk: &Arc<Desk>) -> Arc<Server> {
    let app = routes(desk).layer(layer.clone());
    Arc::new(Server::start(app).await)
}

pub(crate) fn attempt(user: &str, password: &str, hold: bool) -> Request<Full<Bytes>> {
    let mut request = Request::post("/login")
        .header("x-user", user)
        .header("x-password", password);
    if hold {
        request = request.header("x-hold", "1");
    }
    request.body(Full::default()).expect("a request")
}

pub(crate) fn at_once(
    server: &Arc<Server>,
    n: usize,
    user: &'static str,
    password: &'static str,
) -> JoinSet<Reply> {
    let mut replies = JoinSet::new();
    for _ in 0..n {
        let server = server.clone();
        replies.spawn(async move { server.send(attempt(user, password, false)).await });
    }
    replies
}

/// (200, 401, 429) counted.
pub(crate) async fn tally(mut replies: JoinSet<Reply>) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    while let Some(reply) = replies.join_next().await {
        match reply.expect("a reply").status {
            StatusCode::OK => counts.0 += 1,
            StatusCode::UNAUTHORIZED => counts.1 += 1,
            StatusCode::TOO_MANY_REQUESTS => counts.2 += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    counts
}
