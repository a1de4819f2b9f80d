//! The app `scripts/soak` loads while it breaks Redis: axum on 127.0.0.1 with the layer
//! on a `RedisStore`, failing closed, one global GCRA limit, every call going to Redis
//! (no denial cache). Every 200 ms it prints one line of figures:
//!
//! ```text
//! tick <unix ms> ok <n> limited <n> closed <n> other5xx <n> p99_us <n> max_us <n> panics <n>
//! ```
//!
//! `closed` counts the fail-closed answers (503 with `Retry-After`); `other5xx` any
//! other 5xx; latencies are measured around the layer, so they include the Redis call.
//! At start it prints the Redis key it charges (`key <name>`), so a script can find
//! the cluster slot and the node that holds it.
//!
//! Run with: `cargo run --release --features redis --example soak_server -- 127.0.0.1:18090 redis://127.0.0.1:16390`
//!
//! Several comma-separated URLs are the seed nodes of a Redis Cluster:
//! `… -- 127.0.0.1:18091 redis://127.0.0.1:17001,redis://127.0.0.1:17002`

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use http::StatusCode;
use tollgate::layer::FailMode;
use tollgate::{Policy, Quota, RateLimitLayer, RedisStore};

/// The limit under test: `LIMIT` per second, burst `LIMIT`, so at most `2 × LIMIT`
/// may pass in any one second.
const LIMIT: u64 = 500;
const TICK: Duration = Duration::from_millis(200);

static PANICS: AtomicU64 = AtomicU64::new(0);

#[derive(Default)]
struct Tick {
    ok: u64,
    limited: u64,
    closed: u64,
    other_5xx: u64,
    latencies_us: Vec<u64>,
}

type Shared = Arc<Mutex<Tick>>;

async fn record(State(figures): State<Shared>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let response = next.run(request).await;
    let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let status = response.status();
    let mut current = figures.lock().unwrap_or_else(PoisonError::into_inner);
    match status {
        StatusCode::OK => current.ok += 1,
        StatusCode::TOO_MANY_REQUESTS => current.limited += 1,
        StatusCode::SERVICE_UNAVAILABLE if response.headers().contains_key("retry-after") => {
            current.closed += 1;
        }
        s if s.is_server_error() => current.other_5xx += 1,
        _ => {}
    }
    current.latencies_us.push(took);
    response
}

fn report(stats: &Shared) {
    let mut tick = std::mem::take(&mut *stats.lock().unwrap_or_else(PoisonError::into_inner));
    tick.latencies_us.sort_unstable();
    let p99 = tick
        .latencies_us
        .get(
            (tick.latencies_us.len() * 99)
                .div_ceil(100)
                .saturating_sub(1),
        )
        .copied()
        .unwrap_or(0);
    let max = tick.latencies_us.last().copied().unwrap_or(0);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    println!(
        "tick {now_ms} ok {} limited {} closed {} other5xx {} p99_us {p99} max_us {max} panics {}",
        tick.ok,
        tick.limited,
        tick.closed,
        tick.other_5xx,
        PANICS.load(Ordering::Relaxed)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:18090".into())
        .parse()?;
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:16390".into());
    assert!(
        addr.ip().is_loopback(),
        "the soak server listens on 127.0.0.1 only"
    );

    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        default_hook(info);
    }));

    let store = if url.contains(',') {
        RedisStore::from_cluster_urls(url.split(','))?
    } else {
        RedisStore::from_url(&url)?
    }
    .prefix("soak")
    .denial_cache(0);
    println!(
        "soak_server on {addr}, redis {url}, cluster {}, limit {LIMIT}/s burst {LIMIT}, deadline_ms {}",
        store.is_cluster(),
        store.get_deadline().as_millis()
    );
    let policy = Policy::new("soak", Quota::per_second(LIMIT))?;
    // The policy's default extractor is `key::global`: every request charges this key.
    let (parts, ()) = http::Request::new(()).into_parts();
    let everyone = tollgate::key::global()
        .extract(&parts)
        .ok_or("the global extractor always finds a key")?;
    println!("key {}", store.state_key(&policy, &everyone));
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()?;
    let stats = Shared::default();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.on_store_error(FailMode::Closed))
        .layer(middleware::from_fn_with_state(stats.clone(), record));

    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(TICK);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            report(&stats);
        }
    });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
