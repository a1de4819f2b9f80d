//! Metrics that must not lie where the fixes meet: one decision counted per request
//! and policy, whether it waited for outcomes, was refused at the end of its wait or
//! was given back at the hold cap. Policies are named per test, so the binary's one
//! recorder keeps their series apart.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{clock, wait_until};
use crate::desk::{Desk, at_once, attempt, serve, tally};

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the binary's one recorder");
        snapshotter
    })
}

/// `tollgate_requests_total` by outcome for `policy`, accumulated over snapshots.
fn outcomes(policy: &str) -> HashMap<String, u64> {
    static TOTALS: OnceLock<Mutex<HashMap<(String, String), u64>>> = OnceLock::new();
    let mut totals = TOTALS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let key = key.key();
        if key.name() != "tollgate_requests_total" {
            continue;
        }
        let label = |name: &str| {
            key.labels()
                .find(|l| l.key() == name)
                .map(|l| l.value().to_owned())
                .unwrap_or_default()
        };
        if let DebugValue::Counter(n) = value {
            *totals
                .entry((label("policy"), label("outcome")))
                .or_default() += n;
        }
    }
    totals
        .iter()
        .filter(|((p, _), _)| p == policy)
        .map(|((_, o), n)| (o.clone(), *n))
        .collect()
}

fn logins(name: &str, wait: Duration) -> Policy {
    Policy::new(name, Quota::per_minute(1))
        .expect("policy")
        .algorithm(Algorithm::Gcra)
        .key(key::header("x-user").expect("header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .wait_for_outcomes(wait)
}

/// One pending login and 4 more that wait for its outcome (each served in turn): 5
/// requests, 5 decisions counted, none of them `blocked` or `rejected`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_waited_for_outcomes_are_each_counted_once() {
    snapshotter();
    let layer = RateLimitLayer::builder()
        .policy(logins("mx-waited", Duration::from_secs(5)))
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("m", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let rest = at_once(&server, 4, "m", "right");
    tokio::time::sleep(Duration::from_millis(50)).await;
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    assert_eq!(tally(rest).await, (4, 0, 0));
    let seen = outcomes("mx-waited");
    let total: u64 = seen.values().sum();
    assert_eq!(total, 5, "{seen:?}");
    assert_eq!(seen.get("blocked").copied().unwrap_or(0), 0, "{seen:?}");
    assert_eq!(seen.get("rejected").copied().unwrap_or(0), 0, "{seen:?}");
}

/// Logins whose wait runs out are refused without an offence: counted once each, as
/// `rejected`, never `blocked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_runs_out_is_counted_once_as_a_rejection() {
    snapshotter();
    let layer = RateLimitLayer::builder()
        .policy(logins("mx-ran-out", Duration::from_millis(100)))
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("r", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    assert_eq!(tally(at_once(&server, 3, "r", "right")).await, (0, 0, 3));
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    let seen = outcomes("mx-ran-out");
    let total: u64 = seen.values().sum();
    assert_eq!(total, 4, "{seen:?}");
    assert_eq!(seen.get("blocked").copied().unwrap_or(0), 0, "{seen:?}");
}
