//! Exactness through Redis: four limiter instances (four "processes", each with its
//! own connection) × 64 tasks hammer one key; the admitted cost equals the
//! algorithm's bound exactly, never one more.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::redis_cluster::shared_cluster;
use support::redis_server::{shared_server, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);
const INSTANCES: usize = 4;
const TASKS: usize = 64;
const ATTEMPTS: usize = 3;

pub(crate) const ALGORITHMS: [Algorithm; 7] = support::every_algorithm(10);

/// Admitted cost when `INSTANCES × TASKS` tasks each try `ATTEMPTS` times.
async fn hammer(stores: Vec<RedisStore>, algorithm: Algorithm, quota: Quota) -> u64 {
    let limiters: Vec<Limiter> = stores
        .into_iter()
        .map(|store| {
            Limiter::builder()
                .limit(
                    Limit::new("hot", quota)
                        .expect("a policy")
                        .algorithm(algorithm),
                )
                .store(store)
                .build()
                .expect("a limiter")
        })
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for limiter in &limiters {
        for _ in 0..TASKS {
            let limiter = limiter.clone();
            let admitted = admitted.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..ATTEMPTS {
                    let decision = limiter
                        .check("hot", &Key::from("shared"), 1)
                        .await
                        .expect("a decision");
                    if decision.allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("no panic");
    }
    admitted.load(Ordering::Relaxed)
}

/// `INSTANCES` stores on the server at `url`, or on the shared cluster for `None`.
fn stores(url: Option<&str>, prefix: &str, clock: Option<&ManualClock>) -> Vec<RedisStore> {
    (0..INSTANCES)
        .map(|_| {
            let store = match url {
                Some(url) => RedisStore::from_url(url),
                None => RedisStore::from_cluster_urls(shared_cluster().urls()),
            };
            let store = store
                .expect("a valid url")
                .prefix(prefix)
                // Many tasks on two cores: answers are checked here, not speed.
                .deadline(Duration::from_secs(10))
                .expect("a deadline");
            match clock {
                Some(clock) => store.with_clock(clock.clone()),
                None => store,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_admit_exactly_the_capacity() {
    let url = shared_server().url();
    for algorithm in ALGORITHMS {
        // A frozen clock: nothing refills while the tasks run.
        let clock = ManualClock::new(BASE + Duration::from_millis(123));
        let prefix = unique_prefix(algorithm.name());
        let admitted = hammer(
            stores(Some(&url), &prefix, Some(&clock)),
            algorithm,
            Quota::per_minute(100),
        )
        .await;
        assert_eq!(admitted, 100, "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_on_server_time_admit_exactly_the_burst() {
    let url = shared_server().url();
    // On the server's clock, a day-long period refills nothing measurable meanwhile.
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ] {
        let prefix = unique_prefix(algorithm.name());
        let quota = Quota::per_day(1_000).with_burst(37).expect("a burst");
        let admitted = hammer(stores(Some(&url), &prefix, None), algorithm, quota).await;
        assert_eq!(admitted, 37, "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_on_a_cluster_admit_exactly_the_capacity() {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE + Duration::from_millis(321));
        let prefix = unique_prefix(algorithm.name());
        let admitted = hammer(
            stores(None, &prefix, Some(&clock)),
            algorithm,
            Quota::per_minute(100),
        )
        .await;
        assert_eq!(admitted, 100, "{algorithm}");
    }
}
