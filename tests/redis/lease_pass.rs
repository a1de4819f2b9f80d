//! Leases where they cannot help cost nothing: a `LeasedStore` key whose leases would
//! serve nothing but the request charging them (under its rate, or with slices capped
//! at 1) passes through as the plain store's own call, one `FCALL` per decision,
//! answering exactly as a plain `RedisStore` does (every field, the receipt too); it
//! leases again when traffic rises and passes again when it falls; and processes that
//! pass admit exactly the capacity under contention, on Redis and on the Cluster.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::leases::{assert_exact, hammer};
use support::redis_cluster::shared_cluster;
use support::redis_server::{RedisServer, script_calls, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::store::LeasedStore;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Every algorithm that leases (the sliding log always goes to the store).
const LEASABLE: [Algorithm; 6] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowCounters { buckets: 10 },
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

/// A Redis store on the server at `url`, or on the shared cluster for `None`, on
/// `clock`.
fn redis(url: Option<&str>, prefix: &str, clock: &ManualClock) -> RedisStore {
    let store = match url {
        Some(url) => RedisStore::from_url(url),
        None => RedisStore::from_cluster_urls(shared_cluster().urls()),
    };
    store
        .expect("a valid url")
        .prefix(prefix)
        // Many tasks on two cores: answers are checked here, not speed.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
        .with_clock(clock.clone())
}

fn leased(url: Option<&str>, prefix: &str, clock: &ManualClock) -> LeasedStore<RedisStore> {
    LeasedStore::builder(redis(url, prefix, clock))
        .clock(clock.clone())
        .build()
}

fn limiter<S: tollgate::store::Store>(store: S, limit: &Limit) -> Limiter {
    Limiter::builder()
        .limit(limit.clone())
        .store(store)
        .build()
        .expect("a limiter")
}

/// Requests of cost 1–3 every 300 ms on 10/s (under the rate, and each after any lease
/// of the one before would have ended) through a leased and a plain store on the same
/// clock: the same answers, receipts included, and one store call each; on a server of
/// the test's own (`calls`), the same script calls on the server as the plain store's
/// (one `FCALL`; a new connection's first call also loads the library).
async fn passes_with_the_plain_answers(url: Option<&str>, calls: Option<&RedisServer>) {
    for algorithm in LEASABLE {
        let clock = ManualClock::new(BASE + Duration::from_millis(17));
        let limit = Limit::new("api", Quota::per_second(10))
            .expect("a limit")
            .algorithm(algorithm);
        let store = leased(url, &unique_prefix("pass-leased"), &clock);
        let with = limiter(store.clone(), &limit);
        let without = limiter(redis(url, &unique_prefix("pass-plain"), &clock), &limit);
        let key = Key::from("quiet");
        let on_server = || calls.map_or(0, |server| script_calls(server.port()));
        for i in 1..=30_u32 {
            clock.advance(Duration::from_millis(300));
            let before = on_server();
            let leased: Decision = with
                .check("api", &key, 1 + i % 3)
                .await
                .expect("a decision");
            let between = on_server();
            let plain = without
                .check("api", &key, 1 + i % 3)
                .await
                .expect("a decision");
            let after = on_server();
            // The server's first call of a store loads the function library: after
            // it, one `FCALL` each, as the plain store makes.
            if calls.is_some() && i > 1 {
                assert_eq!(between - before, 1, "{algorithm}, request {i}: one FCALL");
                assert_eq!(after - between, 1, "{algorithm}, request {i}: one FCALL");
            }
            assert!(leased.allowed, "{algorithm}, request {i}: {leased:?}");
            assert_eq!(leased, plain, "{algorithm}, request {i}");
            assert_eq!(
                leased.receipt(),
                plain.receipt(),
                "{algorithm}, request {i}"
            );
        }
        assert_eq!((store.store_calls(), store.held()), (30, 0), "{algorithm}");
    }
}

#[tokio::test]
async fn a_key_under_its_rate_passes_through_one_fcall_each_with_the_plain_answers() {
    // A server of its own: `INFO commandstats` counts every client's calls.
    let server = RedisServer::start();
    passes_with_the_plain_answers(Some(&server.url()), Some(&server)).await;
}

#[tokio::test]
async fn a_key_under_its_rate_passes_through_with_the_plain_answers_on_a_cluster() {
    passes_with_the_plain_answers(None, None).await;
}

/// Calls (on the server) that `requests` requests `gap` apart make through `limiter`,
/// each admitted.
async fn calls_for(
    server: &RedisServer,
    clock: &ManualClock,
    limiter: &Limiter,
    requests: usize,
    gap: Duration,
) -> Vec<u64> {
    let key = Key::from("varying");
    let mut calls = Vec::with_capacity(requests);
    for _ in 0..requests {
        clock.advance(gap);
        let before = script_calls(server.port());
        let decision = limiter.check("api", &key, 1).await.expect("a decision");
        assert!(decision.allowed, "{decision:?}");
        calls.push(script_calls(server.port()) - before);
    }
    calls
}

#[tokio::test]
async fn a_key_leases_again_when_traffic_rises_and_passes_again_when_it_falls() {
    let server = RedisServer::start();
    for (algorithm, quota) in [
        // Windows of a minute: a lease lasts its 250 ms.
        (Algorithm::FixedWindow, Quota::per_minute(6_000)),
        // 10 ms a unit, a burst of 1000: slices of up to 62.
        (
            Algorithm::Gcra,
            Quota::per_second(100).with_burst(1_000).expect("a burst"),
        ),
    ] {
        let clock = ManualClock::new(BASE + Duration::from_millis(5));
        let limit = Limit::new("api", quota)
            .expect("a limit")
            .algorithm(algorithm);
        let store = leased(Some(&server.url()), &unique_prefix("vary"), &clock);
        let limiter = limiter(store.clone(), &limit);
        // A new connection's first call loads the library: made on another key.
        limiter
            .check("api", &Key::from("warm-up"), 1)
            .await
            .expect("a decision");
        let warm = store.store_calls();
        let quiet = calls_for(&server, &clock, &limiter, 10, Duration::from_millis(300)).await;
        assert_eq!(quiet, vec![1; 10], "{algorithm}: quiet, one call each");
        assert_eq!(store.held(), 0, "{algorithm}");
        let hot = calls_for(&server, &clock, &limiter, 200, Duration::from_millis(1)).await;
        let hot: u64 = hot.iter().sum();
        // Window slices double to 64, GCRA's grow by one while used up quickly.
        assert!(
            hot * 5 < 200,
            "{algorithm}: {hot} calls for 200 hot decisions"
        );
        // Past the hot phase's debt (GCRA) and the last lease, quiet again: at most the
        // ends of the last leases (a return, one more slice), then one call each.
        clock.advance(Duration::from_secs(3));
        let quiet = calls_for(&server, &clock, &limiter, 10, Duration::from_millis(300)).await;
        assert_eq!(quiet[2..], [1; 8], "{algorithm}: quiet again, {quiet:?}");
        assert_eq!(store.held(), 0, "{algorithm}");
        // The store counts no call the server did not see.
        assert!(store.store_calls() - warm <= 10 + hot + quiet.iter().sum::<u64>());
    }
}

/// Four processes × 64 tasks × 3 attempts on one key at a frozen instant: with a
/// capacity of 20, slices are capped at 1 (20 / (4 × 4 processes)), so every process
/// passes (denials repeated locally) and exactly 20 are admitted; with 400, keys lease
/// while there is room and pass near the limit, and admitted + still leased is exactly
/// 400 (what is leased comes back on `release_all`, and fresh processes admit it).
async fn passing_processes_admit_exactly(url: Option<&str>) {
    for algorithm in LEASABLE {
        for capacity in [20, 400] {
            let clock = ManualClock::new(BASE + Duration::from_millis(123));
            let prefix = unique_prefix(algorithm.name());
            let processes = || -> Vec<LeasedStore<RedisStore>> {
                (0..4).map(|_| leased(url, &prefix, &clock)).collect()
            };
            let limit = Limit::new("hot", Quota::per_minute(capacity))
                .expect("a limit")
                .algorithm(algorithm);
            let stores = processes();
            let run = hammer(&stores, &limit, 64, 3).await;
            assert!(run.store_calls <= run.decisions, "{algorithm}: {run:?}");
            if capacity == 20 {
                assert_eq!(run.admitted, 20, "{algorithm}: {run:?}");
                assert_eq!(
                    stores.iter().map(LeasedStore::held).sum::<u64>(),
                    0,
                    "{algorithm}"
                );
            }
            assert_exact(&stores, processes(), &limit, run.admitted, capacity).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passing_processes_admit_exactly_the_capacity_on_redis() {
    let server = RedisServer::start();
    passing_processes_admit_exactly(Some(&server.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passing_processes_admit_exactly_the_capacity_on_a_cluster() {
    passing_processes_admit_exactly(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gcra_key_under_its_rate_on_server_time_passes_every_decision() {
    // 10⁶/s: a unit of debt is repaid in 1 µs, long before any answer is back, so no
    // slice would last and no plain decision is worth recording: every one of 8 tasks ×
    // 50 requests is the plain store's call.
    let server = RedisServer::start();
    let redis = RedisStore::from_url(&server.url())
        .expect("a valid url")
        .prefix(&unique_prefix("server-time"))
        .deadline(Duration::from_secs(10))
        .expect("a deadline");
    let store = LeasedStore::new(redis);
    let limit = Limit::new("hot", Quota::per_second(1_000_000))
        .expect("a limit")
        .algorithm(Algorithm::Gcra);
    let run = hammer(std::slice::from_ref(&store), &limit, 8, 50).await;
    assert_eq!(run.admitted, 400, "{run:?}");
    assert_eq!(run.store_calls, run.decisions, "{run:?}");
    assert_eq!(store.held(), 0);
}
