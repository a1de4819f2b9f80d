//! Exact admissions through coalesced calls: several stores, each with its own
//! connection and coalescing, and many tasks on each, asking about one hot key and
//! many keys on a clock that stands still; every algorithm must admit exactly what
//! the memory store admits. Used by `tests/redis/coalesced.rs` and
//! `tests/cluster/coalesced.rs`.

use std::time::Duration;

use support::redis_server::unique_prefix;
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota, RedisStore};

fn limiter_on(store: impl Store, limit: Limit) -> Limiter {
    Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("a limiter")
}

/// Every algorithm with a small capacity, on a clock that stands still: whatever the
/// order, exactly the capacity is admitted per key.
fn exact_limits() -> Vec<Limit> {
    [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 4 },
        Algorithm::SlidingWindowLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ]
    .into_iter()
    .map(|algorithm| {
        Limit::new("api", Quota::per_hour(7))
            .expect("a limit")
            .algorithm(algorithm)
    })
    .collect()
}

/// Admissions of `limit` when `stores.len()` stores × `tasks` tasks each ask `rounds`
/// times about one hot key and once about each of `keys` keys: (hot, per key).
async fn hammer(stores: &[RedisStore], limit: &Limit, tasks: u64, keys: u64) -> (u64, Vec<u64>) {
    let rounds = 12;
    let mut handles = Vec::new();
    for store in stores {
        let limiter = limiter_on(store.clone(), limit.clone());
        for task in 0..tasks {
            let limiter = limiter.clone();
            handles.push(tokio::spawn(async move {
                let mut hot = 0;
                let mut per_key = vec![0_u64; keys as usize];
                for round in 0..rounds.max(keys) {
                    if round < rounds {
                        let d = limiter.check("api", &Key::from("hot"), 1).await;
                        hot += u64::from(d.expect("a decision").allowed);
                    }
                    if round < keys {
                        // Each task walks the keys from its own start.
                        let k = (round + task * 7) % keys;
                        let d = limiter.check("api", &Key::from(k), 1).await;
                        per_key[k as usize] += u64::from(d.expect("a decision").allowed);
                    }
                }
                (hot, per_key)
            }));
        }
    }
    let mut hot = 0;
    let mut per_key = vec![0_u64; keys as usize];
    for handle in handles {
        let (h, k) = handle.await.expect("a task");
        hot += h;
        for (total, n) in per_key.iter_mut().zip(k) {
            *total += n;
        }
    }
    (hot, per_key)
}

/// What the memory store admits of the same limit, asked as often, one at a time.
async fn memory_admits(limit: &Limit, clock: &ManualClock, asks: u64) -> u64 {
    let limiter = limiter_on(MemoryStore::with_clock(clock.clone()), limit.clone());
    let mut admitted = 0;
    for _ in 0..asks {
        let d = limiter
            .check("api", &Key::from("k"), 1)
            .await
            .expect("memory");
        admitted += u64::from(d.allowed);
    }
    admitted
}

/// Three stores (each its own connection and coalescing) made by `make` (on a clock,
/// with a prefix) × many tasks: the same admissions as the memory store, on a hot key
/// and on many keys, for every algorithm.
pub(crate) async fn admissions_are_exact(make: impl Fn(&ManualClock, &str) -> RedisStore) {
    let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    let (tasks, keys) = (16, 24);
    for limit in exact_limits() {
        let prefix = unique_prefix("exact");
        let stores: Vec<RedisStore> = (0..3).map(|_| make(&clock, &prefix)).collect();
        let (hot, per_key) = hammer(&stores, &limit, tasks, keys).await;
        let asked_hot = 3 * tasks * 12;
        let expected = memory_admits(&limit, &clock, asked_hot).await;
        assert_eq!(hot, expected, "{}: the hot key", limit.get_algorithm());
        let expected = memory_admits(&limit, &clock, 3 * tasks).await;
        for (k, admitted) in per_key.iter().enumerate() {
            assert_eq!(*admitted, expected, "{}: key {k}", limit.get_algorithm());
        }
    }
}
