//! The memory store stays within `max_keys`, drops idle state by itself, and stores
//! nothing for peeks and denials.

use std::time::Duration;

use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn limiter(store: &MemoryStore, algorithm: Algorithm) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_minute(10))
                .expect("policy")
                .algorithm(algorithm),
        )
        .store(store.clone())
        .build()
        .expect("limiter")
}

#[test]
fn a_million_distinct_keys_never_grow_past_max_keys() {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone())
        .max_keys(10_000)
        .expect("bound");
    let limiter = limiter(&store, Algorithm::Gcra);
    for i in 0..1_000_000_u64 {
        let d = immediate(limiter.check("api", &Key::from(i), 1)).expect("memory store");
        assert!(d.allowed, "a fresh key is always admitted");
        if i % 50_000 == 0 {
            assert!(store.len() <= 10_000, "{} keys after {i}", store.len());
        }
        if i % 1_000 == 0 {
            clock.advance(Duration::from_micros(10));
        }
    }
    let len = store.len();
    assert!(len <= 10_000, "{len} keys stored");
    assert!(
        len > 5_000,
        "the store should still be well used, holds {len}"
    );
}

#[test]
fn every_algorithm_respects_the_bound() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 6 },
        Algorithm::SlidingWindowLog,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ] {
        let store = MemoryStore::with_clock(ManualClock::new(BASE))
            .max_keys(500)
            .expect("bound");
        let limiter = limiter(&store, algorithm);
        for i in 0..20_000_u64 {
            immediate(limiter.check("api", &Key::from(i), 1)).expect("memory store");
        }
        assert!(store.len() <= 500, "{algorithm}: {} keys", store.len());
    }
}

#[test]
fn idle_state_is_dropped_without_any_background_task() {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone());
    let limiter = limiter(&store, Algorithm::FixedWindow);
    for i in 0..1_000_u64 {
        immediate(limiter.check("api", &Key::from(i), 1)).expect("memory store");
    }
    assert_eq!(store.len(), 1_000);
    // Past the window every key is idle; touching the store sweeps the shards it hits.
    clock.advance(Duration::from_secs(61));
    for i in 0..10_000_u64 {
        immediate(limiter.check("api", &Key::from(1_000_000 + i), 0)).expect("memory store");
    }
    assert_eq!(store.len(), 0, "idle state survived the sweep");
}

#[test]
fn peeks_and_denials_of_unknown_keys_store_nothing() {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let limiter = limiter(&store, Algorithm::SlidingWindowCounters { buckets: 6 });
    let d = immediate(limiter.check("api", &Key::from("peek"), 0)).expect("memory store");
    assert!(d.allowed);
    assert_eq!(d.remaining, 10);
    let d = immediate(limiter.check("api", &Key::from("too-big"), 11)).expect("memory store");
    assert!(!d.allowed);
    assert_eq!(d.retry_after, None);
    assert!(store.is_empty());
}

#[test]
fn clones_and_identical_policies_share_one_state() {
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let a = limiter(&store, Algorithm::Gcra);
    let b = limiter(&store.clone(), Algorithm::Gcra);
    let key = Key::from("alice");
    immediate(a.check("api", &key, 4)).expect("store");
    immediate(a.clone().check("api", &key, 4)).expect("store");
    assert_eq!(
        immediate(b.check("api", &key, 0)).expect("store").remaining,
        2
    );
    // A different algorithm under the same name is a different state.
    let c = limiter(&store, Algorithm::TokenBucket);
    assert_eq!(
        immediate(c.check("api", &key, 0)).expect("store").remaining,
        10
    );
}

#[test]
fn max_keys_zero_is_a_config_error() {
    let err = MemoryStore::new().max_keys(0).expect_err("zero");
    assert!(err.to_string().contains("max_keys 0"), "{err}");
}
