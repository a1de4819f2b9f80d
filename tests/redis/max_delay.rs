//! The leaky bucket's bound on delays (`Limit::max_delay`) through Redis: the Lua twin
//! answers exactly as the memory store on random sequences (single decisions through
//! the function library and through scripts, all-or-nothing batches through the
//! general driver, refunds, a clock that steps back), on a standalone server and on a
//! three-master cluster.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_cluster::shared_cluster;
use support::redis_server::{shared_server, unique_prefix};
use support::rng::Rng;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// (quota, burst, `max_delay` µs): bounds shorter than the queue's longest wait
/// (`(B − 1)·T`), with exact and inexact emission intervals, and a bound of 0.
const CASES: [(&str, u64, u64); 5] = [
    ("10/s", 10, 250_000),
    ("3/s", 7, 1_000_000),
    ("7 per 3 seconds", 9, 999_999),
    ("1000000/s", 50, 17),
    ("10/s", 4, 0),
];

fn policy(name: &str, quota: Quota, max_delay_us: u64) -> Limit {
    Limit::new(name, quota)
        .expect("a policy")
        .algorithm(Algorithm::LeakyBucket)
        .max_delay(Duration::from_micros(max_delay_us))
}

/// The same two policies ("queue" with the case's bound, "wide" with the default) on
/// `store`.
fn limiter(store: impl tollgate::store::Store, quota: Quota, max_delay_us: u64) -> Limiter {
    Limiter::builder()
        .limit(policy("queue", quota, max_delay_us))
        .limit(
            Limit::new("wide", Quota::per_second(1_000))
                .expect("a policy")
                .algorithm(Algorithm::LeakyBucket),
        )
        .store(store)
        .build()
        .expect("a limiter")
}

fn redis(url: Option<&str>, cluster: &[String], clock: &ManualClock) -> RedisStore {
    let store = match url {
        Some(url) => RedisStore::from_url(url).expect("a valid url"),
        None => RedisStore::from_cluster_urls(cluster.to_vec()).expect("valid urls"),
    };
    store
        .prefix(&unique_prefix("max-delay"))
        .denial_cache(0)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock.clone())
}

/// Random steps on memory and on every Redis limiter of `redis_limiters`, which must
/// give the memory store's every answer.
async fn same_answers(url: Option<&str>, cluster: &[String]) -> TestResult {
    for (case, (quota, burst, max_delay_us)) in CASES.into_iter().enumerate() {
        let quota: Quota = quota.parse::<Quota>()?.with_burst(burst)?;
        let clock = ManualClock::new(BASE);
        let memory = limiter(MemoryStore::with_clock(clock.clone()), quota, max_delay_us);
        let mut others = vec![(
            "function",
            limiter(redis(url, cluster, &clock), quota, max_delay_us),
        )];
        if url.is_some() {
            let scripts = redis(url, cluster, &clock).functions(false);
            others.push(("script", limiter(scripts, quota, max_delay_us)));
        }
        let key = Key::from("subject");
        let period_us = u64::try_from(quota.period().as_micros())?;
        let step_us = period_us / quota.limit();
        let mut rng = Rng(0x5eed_0fde_1a5e_u64 ^ case as u64);
        let mut now = 0_u64;
        // Both keys start with state, and both see every instant: the memory store's
        // floor is per shard, Redis keeps the latest instant in each key's own state
        // (see store.rs), so only keys that saw the same instants agree once
        // the clock steps back.
        for policy in ["queue", "wide"] {
            let first = memory.check(policy, &key, 1).await?;
            for (name, other) in &others {
                assert_eq!(other.check(policy, &key, 1).await?, first, "{name}");
            }
        }
        for step in 0..400 {
            match rng.below(10) {
                0 => now += rng.below(period_us),
                1 => now = now.saturating_sub(rng.below(step_us * 3 + 1)),
                2..=4 => {}
                _ => now += rng.below(step_us + 2),
            }
            clock.set(BASE + Duration::from_micros(now));
            let wide = memory.check("wide", &key, 0).await?;
            for (name, other) in &others {
                assert_eq!(other.check("wide", &key, 0).await?, wide, "{name}");
            }
            let cost = match rng.below(8) {
                0 => 0,
                1 => u32::try_from(burst + 1)?,
                _ => u32::try_from(rng.below(burst.min(4)) + 1)?,
            };
            let at = format!(
                "{quota} (burst {burst}, max_delay {max_delay_us} µs), step {step}, \
                 t = {now} µs, cost {cost}"
            );
            match rng.below(8) {
                0 => {
                    let amount = u32::try_from(rng.below(burst + 2))?;
                    memory.refund("queue", &key, amount).await?;
                    for (_, other) in &others {
                        other.refund("queue", &key, amount).await?;
                    }
                }
                1 => {
                    // All-or-nothing with a second leaky bucket: the general driver.
                    let batch = [("queue", &key, cost), ("wide", &key, 1)];
                    let want = memory.check_all(&batch).await?;
                    for (name, other) in &others {
                        assert_eq!(other.check_all(&batch).await?, want, "{name} batch: {at}");
                    }
                }
                _ => {
                    let want = memory.check("queue", &key, cost).await?;
                    for (name, other) in &others {
                        assert_eq!(
                            other.check("queue", &key, cost).await?,
                            want,
                            "{name}: {at}"
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_lua_twin_bounds_delays_exactly_as_the_memory_store() -> TestResult {
    same_answers(Some(&shared_server().url()), &[]).await
}

#[tokio::test]
async fn the_lua_twin_bounds_delays_exactly_as_the_memory_store_on_a_cluster() -> TestResult {
    same_answers(None, &shared_cluster().urls()).await
}
