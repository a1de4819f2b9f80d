//! An LLM-style API, metered: per API key, 60 requests a minute and 20,000 tokens a
//! minute, and uploads at 1 MiB/s.
//!
//! Run with: `cargo run --example llm_api`
//!
//! A local "model" upstream streams its answer as server-sent events and reports the
//! usage in its last event (`"usage": {"total_tokens": …}`), as LLM APIs do. The API in
//! front of it reads each request's `max_tokens` (a middleware buffers the JSON body
//! and puts it in the request extensions), which is the estimate the "tokens" policy
//! admits the request on; the handler proxies the stream and reports the usage it sees
//! in the last event to the request's `Meter`, and the layer settles the charge when
//! the stream ends. The example prints, for each call: the estimate, the headers the
//! client saw (sent before the stream, so they show the estimate), the actual and
//! where the caller stands after the settle.
//!
//! Then a caller who under-estimates (`max_tokens: 1` with a prompt of 6,000 tokens:
//! prompts count too) goes into debt and is refused until time has repaid it. The
//! store's clock is a `ManualClock` here, advanced by the example, so that "a minute
//! later" takes no minute.
//!
//! Last, an upload of 2 MiB to a route limited to 1 MiB/s per key (the `MeterBytes`
//! layer counts its body as it streams), measured by a real client.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Extension, Request, State};
use axum::middleware::{Next, from_fn};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tollgate::clock::ManualClock;
use tollgate::layer::{Costs, Meter, MeterBytes};
use tollgate::{Key, MemoryStore, Policy, Quota, RateLimitLayer, key};

type Error = Box<dyn std::error::Error + Send + Sync>;

const TOKENS_PER_MINUTE: u64 = 20_000;
const MIB: u64 = 1 << 20;
const UPLOAD_BURST: u64 = 128 * 1_024;
const UPLOAD: u64 = 2 * MIB;

/// A body fed by a channel: what a handler streams from another task.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl ChannelBody {
    fn new() -> (mpsc::Sender<Bytes>, Self) {
        let (sender, receiver) = mpsc::channel(8);
        (sender, Self(receiver))
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|bytes| bytes.map(|b| Ok(Frame::data(b))))
    }
}

// ---------------------------------------------------------------------------------------
// The upstream model.
// ---------------------------------------------------------------------------------------

/// `POST /v1/completions`: one token per word of the prompt in, and an answer of
/// `max_tokens` tokens at most (120 when it can), streamed 40 tokens an event; the
/// last event carries the usage.
async fn model(body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let prompt_tokens = request["prompt"]
        .as_str()
        .map_or(0, |p| p.split_whitespace().count() as u64);
    let completion_tokens = request["max_tokens"].as_u64().unwrap_or(16).min(120);
    let (events, body) = ChannelBody::new();
    tokio::spawn(async move {
        let mut left = completion_tokens;
        while left > 0 {
            let n = left.min(40);
            left -= n;
            let text = "token ".repeat(n as usize);
            let _ = events.send(sse(&json!({ "text": text }))).await;
        }
        let usage = json!({ "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }});
        let _ = events.send(sse(&usage)).await;
        let _ = events.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::new(body),
    )
        .into_response()
}

fn sse(event: &Value) -> Bytes {
    Bytes::from(format!("data: {event}\n\n"))
}

/// The usage a chunk of an SSE stream reports, if it does.
fn usage_in(chunk: &[u8]) -> Option<u64> {
    String::from_utf8_lossy(chunk)
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter_map(|data| serde_json::from_str::<Value>(data).ok())
        .find_map(|event| event["usage"]["total_tokens"].as_u64())
}

// ---------------------------------------------------------------------------------------
// The API in front of it.
// ---------------------------------------------------------------------------------------

/// The request's `max_tokens`, read from its JSON body before the limiter decides.
#[derive(Debug, Clone, Copy)]
struct MaxTokens(u32);

/// Buffers the JSON body (at most 1 MiB), puts its `max_tokens` in the request
/// extensions, and passes the request on with its body.
async fn read_max_tokens(request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, 1 << 20).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let max_tokens = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|request| request["max_tokens"].as_u64());
    let Some(max_tokens) = max_tokens else {
        return (StatusCode::BAD_REQUEST, "max_tokens is required").into_response();
    };
    parts
        .extensions
        .insert(MaxTokens(u32::try_from(max_tokens).unwrap_or(u32::MAX)));
    next.run(Request::from_parts(parts, axum::body::Body::from(body)))
        .await
}

#[derive(Clone)]
struct Upstream {
    client: Client<HttpConnector, Full<Bytes>>,
    url: String,
}

/// `POST /v1/chat/completions`: proxies the model's stream, reporting the usage its
/// last event carries to the request's meter before passing that event on.
async fn chat(
    State(upstream): State<Upstream>,
    Extension(meter): Extension<Meter>,
    body: Bytes,
) -> Response {
    let request = http::Request::post(&upstream.url)
        .header("content-type", "application/json")
        .body(Full::new(body));
    let Ok(request) = request else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let Ok(response) = upstream.client.request(request).await else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let (events, body) = ChannelBody::new();
    tokio::spawn(async move {
        let mut stream = response.into_body();
        while let Some(Ok(frame)) = stream.frame().await {
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if let Some(total) = usage_in(&data) {
                meter.report(total);
            }
            if events.send(data).await.is_err() {
                return; // the client left: the layer settles what was reported
            }
        }
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::new(body),
    )
        .into_response()
}

/// `POST /v1/files`: reads the upload to its end and says how many bytes came.
async fn upload(body: axum::body::Body) -> Response {
    match body.collect().await {
        Ok(body) => body.to_bytes().len().to_string().into_response(),
        Err(error) => (StatusCode::BAD_REQUEST, error.to_string()).into_response(),
    }
}

fn per_api_key() -> Result<key::Extractor, tollgate::ConfigError> {
    key::header("x-api-key")
}

/// Serves `app` on 127.0.0.1; returns its address.
async fn serve(app: Router) -> Result<String, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(format!("http://{addr}"))
}

// ---------------------------------------------------------------------------------------
// The client.
// ---------------------------------------------------------------------------------------

struct Call {
    status: StatusCode,
    headers: HeaderMap,
    actual: Option<u64>,
}

async fn call_chat(
    client: &Client<HttpConnector, Full<Bytes>>,
    api: &str,
    api_key: &str,
    max_tokens: u64,
    prompt_words: usize,
) -> Result<Call, Error> {
    let body = json!({ "prompt": "word ".repeat(prompt_words), "max_tokens": max_tokens });
    let request = http::Request::post(format!("{api}/v1/chat/completions"))
        .header("x-api-key", api_key)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))?;
    let response = client.request(request).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Call {
        status: parts.status,
        headers: parts.headers,
        actual: usage_in(&body),
    })
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> &'h str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
}

/// The API: two policies per API key on the chat route, the tokens one metered and
/// at most 4 calls of a key running at once (which bounds what under-estimates can
/// run ahead), on a store whose clock is `clock`; 1 MiB/s per key (128 KiB at once) on
/// the upload route, counted as the body streams. Returns the app and the chat
/// route's layer, whose limiter the example asks where callers stand.
fn api(model_url: String, clock: &ManualClock) -> Result<(Router, RateLimitLayer), Error> {
    let requests = Policy::new("requests", Quota::per_minute(60))?.key(per_api_key()?);
    let tokens = Policy::new("tokens", Quota::per_minute(TOKENS_PER_MINUTE))?
        .key(per_api_key()?)
        .costs(Costs::from_fn(|parts: &http::request::Parts| {
            parts.extensions.get::<MaxTokens>().map_or(1, |m| m.0)
        }))
        .metered()
        .in_flight(4)?;
    let llm = RateLimitLayer::builder()
        .policy(requests)
        .policy(tokens)
        .store(MemoryStore::with_clock(clock.clone()))
        .build()?;
    let bytes = Policy::new("upload", Quota::per_second(MIB).with_burst(UPLOAD_BURST)?)?
        .key(per_api_key()?)
        .meter_request_bytes();
    let uploads = RateLimitLayer::builder().policy(bytes).build()?;
    let upstream = Upstream {
        client: Client::builder(TokioExecutor::new()).build_http(),
        url: model_url,
    };
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post(chat)
                .layer::<_, Infallible>(llm.clone())
                .layer(from_fn(read_max_tokens)),
        )
        .route(
            "/v1/files",
            post(upload)
                .layer::<_, Infallible>(MeterBytes::new().map_request_body(axum::body::Body::new))
                .layer(uploads),
        )
        .with_state(upstream);
    Ok((app, llm))
}

/// Calls the API and prints one row per call.
struct Console {
    client: Client<HttpConnector, Full<Bytes>>,
    api: String,
    llm: RateLimitLayer,
}

impl Console {
    fn heading() {
        println!(
            "per API key: 60 requests/min and {TOKENS_PER_MINUTE} tokens/min; estimate = max_tokens\n"
        );
        println!(
            "{:<8} {:>10} {:>7}  {:<44} {:>6}  {:>14}  {:>11}",
            "caller",
            "max_tokens",
            "prompt",
            "RateLimit the client saw (before the stream)",
            "actual",
            "settled",
            "tokens left"
        );
    }

    /// Where a caller stands under "tokens", as the server sees it.
    async fn tokens_left(&self, api_key: &str) -> Result<u64, Error> {
        let (parts, ()) = http::Request::get("/")
            .header("x-api-key", api_key)
            .body(())?
            .into_parts();
        let key: Key = per_api_key()?.extract(&parts).ok_or("a key")?;
        Ok(self.llm.limiter().peek("tokens", &key).await?.remaining)
    }

    async fn row(&self, api_key: &str, max_tokens: u64, prompt: usize) -> Result<Call, Error> {
        let call = call_chat(&self.client, &self.api, api_key, max_tokens, prompt).await?;
        let left = self.tokens_left(api_key).await?;
        let (actual, settled) = match (call.status, call.actual) {
            (StatusCode::OK, Some(actual)) => {
                (actual.to_string(), format!("{max_tokens} → {actual}"))
            }
            (status, _) => (String::from("-"), format!("{} refused", status.as_u16())),
        };
        println!(
            "{api_key:<8} {max_tokens:>10} {prompt:>7}  {:<44} {actual:>6}  {settled:>14}  {left:>11}",
            header(&call.headers, "ratelimit")
        );
        Ok(call)
    }
}

/// A caller who under-estimates: `max_tokens: 1` with 6,000-token prompts. Each is
/// admitted while its key has a token left, and settled to 6,001 after the fact,
/// until the debt refuses it; then refused until time has repaid it.
async fn under_estimates(console: &Console, clock: &ManualClock) -> Result<(), Error> {
    println!("\nmallory sends 6,000-token prompts with max_tokens: 1");
    let (mut refused, mut used) = (None, 0);
    for _ in 0..6 {
        let call = console.row("mallory", 1, 6_000).await?;
        if call.status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some(call);
            break;
        }
        used += call.actual.unwrap_or(0);
    }
    let refused = refused.ok_or("the debt never refused mallory")?;
    let retry: u64 = header(&refused.headers, "retry-after").parse()?;
    println!(
        "mallory used {used} tokens of its {TOKENS_PER_MINUTE}: {} into debt, refused until time repays it \
         (Retry-After {retry} s). Calls running at once can run ahead of the quota by their \
         work beyond their estimates; in_flight(4) caps how many run at once.",
        used.saturating_sub(TOKENS_PER_MINUTE)
    );
    clock.advance(Duration::from_secs(retry - 1));
    println!(
        "{} s later (the store's clock is advanced, not waited for):",
        retry - 1
    );
    if console.row("mallory", 1, 10).await?.status != StatusCode::TOO_MANY_REQUESTS {
        return Err("admitted before the debt was repaid".into());
    }
    clock.advance(Duration::from_secs(1));
    println!("{retry} s later, the debt repaid:");
    if console.row("mallory", 1, 10).await?.status != StatusCode::OK {
        return Err("still refused once the debt was repaid".into());
    }
    Ok(())
}

/// An upload of 2 MiB, measured by a real client streaming its body in 64 KiB chunks.
async fn measure_upload(api: &str) -> Result<(), Error> {
    let uploader: Client<HttpConnector, ChannelBody> =
        Client::builder(TokioExecutor::new()).build_http();
    let (chunks, body) = ChannelBody::new();
    tokio::spawn(async move {
        for _ in 0..UPLOAD / (64 * 1_024) {
            let chunk = Bytes::from(vec![0_u8; 64 * 1_024]);
            if chunks.send(chunk).await.is_err() {
                return;
            }
        }
    });
    let request = http::Request::post(format!("{api}/v1/files"))
        .header("x-api-key", "alice")
        .body(body)?;
    let started = Instant::now();
    let response = uploader.request(request).await?;
    let policy = header(response.headers(), "ratelimit-policy").to_owned();
    let received = response.into_body().collect().await?.to_bytes();
    let took = started.elapsed().as_secs_f64();
    let rate = UPLOAD as f64 / took / MIB as f64;
    println!(
        "\nupload of {} MiB limited to 1 MiB/s per key ({policy}): the server got {} bytes in {took:.2} s, {rate:.2} MiB/s",
        UPLOAD / MIB,
        String::from_utf8_lossy(&received)
    );
    // The burst goes at once, the rest at 1 MiB/s: never faster than that.
    let fastest = UPLOAD as f64 / (UPLOAD - UPLOAD_BURST) as f64;
    if received != UPLOAD.to_string().as_bytes() || rate > fastest * 1.01 {
        return Err("the upload was not held to its rate".into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let model_url =
        serve(Router::new().route("/v1/completions", post(model))).await? + "/v1/completions";
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (app, llm) = api(model_url, &clock)?;
    let api = serve(app).await?;
    let console = Console {
        client: Client::builder(TokioExecutor::new()).build_http(),
        api: api.clone(),
        llm,
    };

    // Honest calls: the estimate is the most the answer may be; the settle gives
    // back what the answer did not use.
    Console::heading();
    for (max_tokens, prompt) in [(1_000, 12), (500, 40), (2_000, 300)] {
        if console.row("alice", max_tokens, prompt).await?.status != StatusCode::OK {
            return Err("an honest call was refused".into());
        }
    }
    under_estimates(&console, &clock).await?;
    measure_upload(&api).await
}
