//! Reservations and their give-backs, memory against Redis: random walks of
//! reserves, plain checks, cancellations (by receipt, any waiter) and clock steps
//! give the same decision, field by field, on both stores, on every algorithm; and
//! with a burst of 1 no two places ahead are closer than the emission interval
//! (issue 23, item 6).
//! Peeks after every step too: while a key has places ahead, both answer as of the
//! latest place.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{shared_server, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);
/// 10 per second, burst 1: T = 100 ms.
const T_US: u64 = 100_000;

/// Burst 1 where the algorithm takes a burst (its places are then spaced by T); the
/// window algorithms count 10 per second.
fn limiter(algorithm: Algorithm, store: impl Store) -> Result<Limiter, Box<dyn std::error::Error>> {
    let quota = if spaced(algorithm) {
        Quota::per_second(10).with_burst(1)?
    } else {
        Quota::per_second(10)
    };
    let limit = Limit::new("wait", quota)?
        .algorithm(algorithm)
        .max_delay(Duration::from_secs(10));
    Ok(Limiter::builder().limit(limit).store(store).build()?)
}

fn spaced(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    )
}

/// A reservation still waiting: its decision and the instant (µs after the walk's
/// start) it proceeds at.
struct Held {
    decision: Decision,
    at: u64,
}

#[tokio::test]
async fn random_reserve_and_cancel_walks_agree_and_keep_places_apart()
-> Result<(), Box<dyn std::error::Error>> {
    for algorithm in support::every_algorithm(5) {
        for seed in 1..=8_u64 {
            let clock = ManualClock::new(BASE);
            let memory = limiter(algorithm, MemoryStore::with_clock(clock.clone()))?;
            let redis = limiter(
                algorithm,
                RedisStore::from_url(&shared_server().url())?
                    .prefix(&unique_prefix("walk"))
                    .denial_cache(0)
                    .deadline(Duration::from_secs(5))?
                    .with_clock(clock.clone()),
            )?;
            let key = Key::from("walk");
            let mut walk = support::rng::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut now = 0_u64;
            let mut held: Vec<Held> = Vec::new();
            for step in 0..120 {
                let what = walk.below(10);
                if what < 4 {
                    let max_wait = Duration::from_millis(200 * (1 + walk.below(10)));
                    let m = memory.reserve("wait", &key, 1, max_wait).await?;
                    let r = redis.reserve("wait", &key, 1, max_wait).await?;
                    assert_eq!(m, r, "{algorithm} seed {seed} step {step}: reserve");
                    if m.allowed {
                        let at = now + u64::try_from(m.delay.as_micros())?;
                        held.push(Held { decision: m, at });
                    }
                } else if what < 6 {
                    // A request that does not wait: behind the queue, or admitted now.
                    let m = memory.check("wait", &key, 1).await?;
                    let r = redis.check("wait", &key, 1).await?;
                    assert_eq!(m, r, "{algorithm} seed {seed} step {step}: check");
                    if m.allowed {
                        let at = now + u64::try_from(m.delay.as_micros())?;
                        held.push(Held { decision: m, at });
                    }
                } else if what < 8 {
                    // Cancel a waiter still waiting: any of them.
                    held.retain(|h| h.at > now);
                    if !held.is_empty() {
                        let gone = held.remove(usize::try_from(walk.below(held.len() as u64))?);
                        memory.refund_charge(&gone.decision, &key, 1).await?;
                        redis.refund_charge(&gone.decision, &key, 1).await?;
                    }
                } else {
                    let step_us = walk.below(3 * T_US);
                    now += step_us;
                    clock.advance(Duration::from_micros(step_us));
                }
                let m = memory.peek("wait", &key).await?;
                let r = redis.peek("wait", &key).await?;
                assert_eq!(m, r, "{algorithm} seed {seed} step {step}: peek");
                // The places still ahead keep the rule's spacing: never two within T.
                let mut ahead: Vec<u64> =
                    held.iter().map(|h| h.at).filter(|&at| at > now).collect();
                ahead.sort_unstable();
                for pair in ahead.windows(2).filter(|_| spaced(algorithm)) {
                    assert!(
                        pair[1] - pair[0] >= T_US,
                        "{algorithm} seed {seed} step {step}: places {ahead:?} closer than T"
                    );
                }
            }
        }
    }
    Ok(())
}
