//! The service under the layer and what it writes down: a handler that answers each
//! request the status, body and meter report its stream chose, and records, by request
//! id, the decisions the layer handed it and the body bytes it could read; and the
//! rejection the layer answers with, which spells out its decisions for the model.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::BodyExt;
use tollgate::Decision;
use tollgate::layer::{Decisions, Meter, RejectReason, Rejection, RejectionInfo};

/// What the handler saw of one request.
#[derive(Debug, Clone, Default)]
pub(crate) struct Served {
    pub(crate) decisions: Vec<Decision>,
    /// Body bytes the handler read.
    pub(crate) bytes: u64,
    /// Reading the body failed (a byte limit ended it).
    pub(crate) read_failed: bool,
    /// The handler returned its response.
    pub(crate) finished: bool,
}

/// Every request the handler saw, by the id the client gave it (`x-req`).
pub(crate) type Log = Arc<Mutex<HashMap<u64, Served>>>;

/// A body of chunks, handed out one frame at a time.
#[derive(Debug)]
pub(crate) struct Chunks(pub(crate) VecDeque<Bytes>);

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }
}

fn header_u64(request: &Request<Body>, name: &str) -> Option<u64> {
    request.headers().get(name)?.to_str().ok()?.parse().ok()
}

/// The handler: records what it saw, reads the body, works, reports, answers.
pub(crate) async fn handle(log: Log, request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let id = header_u64(&request, "x-req").unwrap_or(u64::MAX);
    let decisions = request
        .extensions()
        .get::<Decisions>()
        .map(|d| d.to_vec())
        .unwrap_or_default();
    log.lock().expect("the log").insert(
        id,
        Served {
            decisions,
            ..Served::default()
        },
    );
    let status = header_u64(&request, "x-status").unwrap_or(200);
    let actual = header_u64(&request, "x-actual");
    let work = header_u64(&request, "x-work-ms").unwrap_or(0);
    let meter = request.extensions().get::<Meter>().cloned();
    let mut body = request.into_body();
    let mut bytes = 0;
    let mut failed = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            failed = true;
            break;
        };
        bytes += frame.data_ref().map_or(0, |d| d.len() as u64);
    }
    if work > 0 {
        tokio::time::sleep(Duration::from_millis(work)).await;
    }
    if let (Some(meter), Some(actual)) = (meter, actual) {
        meter.report(actual);
    }
    if let Some(served) = log.lock().expect("the log").get_mut(&id) {
        served.bytes = bytes;
        served.read_failed = failed;
        served.finished = true;
    }
    let status = if failed {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::from_u16(status as u16).expect("a status")
    };
    let chunks = VecDeque::from([
        Bytes::from_static(b"served "),
        Bytes::from_static(b"in "),
        Bytes::from_static(b"three"),
    ]);
    Ok(Response::builder()
        .status(status)
        .body(Body::new(Chunks(chunks)))
        .expect("a response"))
}

/// The first line of every rejection the layer answers in the model.
pub(crate) const REJECTED: &str = "rejected";

/// A rejection that lists its reason and every decision, one per line:
/// `limit allowed remaining blocked_us trips evaluated capacity`.
pub(crate) fn rejection() -> Rejection {
    Rejection::custom(|info: &RejectionInfo| {
        let mut body = format!("{REJECTED} {:?}\n", info.reason);
        for d in &info.decisions {
            let _ = writeln!(
                body,
                "{} {} {} {} {} {} {}",
                d.limit,
                d.allowed,
                d.remaining,
                micros(d.blocked_for),
                d.trips,
                d.evaluated(),
                d.capacity,
            );
        }
        let status = match info.reason {
            RejectReason::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            RejectReason::Denied => StatusCode::FORBIDDEN,
            _ => StatusCode::TOO_MANY_REQUESTS,
        };
        Response::builder()
            .status(status)
            .body(Bytes::from(body))
            .expect("a response")
    })
}

/// One decision as a rejection spells it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Spelled {
    pub(crate) limit: String,
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) blocked: bool,
    pub(crate) blocked_us: i64,
    pub(crate) trips: u32,
    pub(crate) evaluated: bool,
    pub(crate) capacity: u64,
}

impl Spelled {
    pub(crate) fn of(d: &Decision) -> Self {
        Self {
            limit: d.limit.to_string(),
            allowed: d.allowed,
            remaining: d.remaining,
            blocked: d.blocked_for.is_some(),
            blocked_us: micros(d.blocked_for),
            trips: d.trips,
            evaluated: d.evaluated(),
            capacity: d.capacity,
        }
    }
}

/// A block's length in µs (saturating), -1 for none.
fn micros(blocked: Option<Duration>) -> i64 {
    blocked.map_or(-1, |b| i64::try_from(b.as_micros()).unwrap_or(i64::MAX))
}

/// The reason and decisions a rejection's body spells out; `None` for another body.
pub(crate) fn parse_rejection(body: &str) -> Option<(String, Vec<Spelled>)> {
    let mut lines = body.lines();
    let reason = lines.next()?.strip_prefix(REJECTED)?.trim().to_string();
    let decisions = lines
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            (f.len() == 7).then(|| Spelled {
                limit: f[0].to_string(),
                allowed: f[1] == "true",
                remaining: f[2].parse().unwrap_or(0),
                blocked: f[3] != "-1",
                blocked_us: f[3].parse().unwrap_or(-1),
                trips: f[4].parse().unwrap_or(0),
                evaluated: f[5] == "true",
                capacity: f[6].parse().unwrap_or(0),
            })
        })
        .collect();
    Some((reason, decisions))
}

/// Reads up to `frames` frames of `body` (all of them for `None`); the bytes read and
/// whether the body ended.
pub(crate) async fn read<B>(body: B, frames: Option<u32>) -> (Vec<u8>, bool)
where
    B: http_body::Body<Data = Bytes>,
{
    let mut body = std::pin::pin!(body);
    let mut bytes = Vec::new();
    let mut read = 0;
    loop {
        if frames.is_some_and(|max| read >= max) {
            return (bytes, false);
        }
        match body.frame().await {
            Some(Ok(frame)) => {
                read += 1;
                if let Some(data) = frame.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Some(Err(_)) | None => return (bytes, true),
        }
    }
}
