//! Escalating penalties on Redis beyond the conformance tables: with the denial cache
//! on (a cached block repeats its trips), through a [`LeasedStore`] and through a
//! [`Fallback`] whose primary is Redis; and a record written before trips existed
//! reads as none.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{shared_server, unique_prefix};
use support::scenarios::{
    BASE, ESCALATION_EXTREMES, ESCALATION_FACTOR, ESCALATION_RELOAD, ESCALATION_STEPS,
    EscalationScenario, run_escalation,
};
use tollgate::clock::ManualClock;
use tollgate::store::{Fallback, LeasedStore};
use tollgate::{Key, Limit, Limiter, MemoryStore, Penalty, Quota, RedisStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Every escalation table.
const TABLES: [&EscalationScenario; 4] = [
    &ESCALATION_STEPS,
    &ESCALATION_FACTOR,
    &ESCALATION_RELOAD,
    &ESCALATION_EXTREMES,
];

/// A store on the shared server, the denial cache on (its default).
fn redis(clock: ManualClock) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(&unique_prefix("escalation"))
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}

#[tokio::test]
async fn escalation_tables_hold_with_the_denial_cache() -> TestResult {
    for table in TABLES {
        run_escalation(table, redis).await?;
    }
    Ok(())
}

#[tokio::test]
async fn escalation_tables_hold_through_a_leased_redis_store() -> TestResult {
    for table in TABLES {
        run_escalation(table, |clock: ManualClock| {
            LeasedStore::builder(redis(clock.clone()))
                .clock(clock)
                .build()
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn escalation_tables_hold_through_a_fallback_to_memory() -> TestResult {
    for table in TABLES {
        run_escalation(table, |clock: ManualClock| {
            Fallback::new(redis(clock.clone()), MemoryStore::with_clock(clock))
        })
        .await?;
    }
    Ok(())
}

/// The caller's record under `prefix` (the only one there), and its text.
fn record(prefix: &str) -> (String, String) {
    let server = shared_server();
    let keys = server.cli(&["--scan", "--pattern", &format!("{prefix}:*:b")]);
    let key = keys.lines().next().expect("a record").to_owned();
    let text = server.cli(&["GET", &key]);
    (key, text)
}

#[tokio::test]
async fn a_record_written_before_trips_existed_reads_as_none() -> TestResult {
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("escalation-old-record");
    let store = RedisStore::from_url(&shared_server().url())?
        .prefix(&prefix)
        .denial_cache(0)
        .deadline(Duration::from_secs(5))?
        .with_clock(clock.clone());
    let penalty = Penalty::after(1)
        .block_for(Duration::from_secs(2))
        .escalate(&[Duration::from_secs(5)])
        .remember(Duration::from_secs(60));
    let limiter = Limiter::builder()
        .limit(Limit::new("login", Quota::per_hour(1))?.penalty(penalty))
        .store(store)
        .build()?;
    let key = Key::from("mallory");
    // An operator's block writes the record as every version did: four numbers.
    limiter.block("login", &key, Duration::from_secs(3)).await?;
    let (record_key, text) = record(&prefix);
    let base_us = BASE.as_micros();
    assert_eq!(text, format!("{} 0 0 0", base_us + 3_000_000));
    // As an older version leaves it after an operator's reset: with its suffix.
    shared_server().cli(&[
        "SET",
        &record_key,
        &format!("{} 0 0 0 r{base_us}", base_us + 3_000_000),
        "PX",
        "60000",
    ]);
    clock.advance(Duration::from_secs(1));
    let blocked = limiter.check("login", &key, 1).await?;
    assert_eq!(
        (blocked.blocked_for, blocked.trips),
        (Some(Duration::from_secs(2)), 0)
    );
    clock.advance(Duration::from_secs(2));
    assert!(limiter.check("login", &key, 1).await?.allowed);
    // No trip before: the first block, then the second.
    clock.advance(Duration::from_secs(1));
    let first = limiter.check("login", &key, 1).await?;
    assert_eq!(
        (first.blocked_for, first.trips),
        (Some(Duration::from_secs(2)), 1)
    );
    clock.advance(Duration::from_secs(2));
    let second = limiter.check("login", &key, 1).await?;
    assert_eq!(
        (second.blocked_for, second.trips),
        (Some(Duration::from_secs(5)), 2)
    );
    // The trips are a suffix item, before the reset's: an older version reads the four
    // numbers and the reset's instant as before, and ignores the item.
    let (_, text) = record(&prefix);
    assert_eq!(
        text,
        format!(
            "{} 0 0 0 t2:{}:{} r{base_us}",
            base_us + 11_000_000,
            base_us + 6_000_000,
            base_us + 66_000_000
        )
    );
    Ok(())
}

/// The penalties a walk reloads between: explicit steps, a factor, both, none.
fn walk_penalty(which: u64) -> Penalty {
    let s = Duration::from_secs;
    let base = Penalty::after(2).within(s(3)).block_for(s(1));
    match which % 4 {
        0 => base.escalate(&[s(2), s(4)]).remember(s(30)),
        1 => base.escalate_by(3, s(20)).remember(s(25)),
        2 => base.escalate(&[s(2)]).escalate_by(2, s(16)).remember(s(60)),
        _ => base,
    }
}

/// What a walk compares of a decision: everything it says of blocks and trips.
fn said(d: &tollgate::Decision) -> (bool, Option<Duration>, Option<Duration>, u32) {
    (d.allowed, d.blocked_for, d.retry_after, d.trips)
}

/// Random walks of checks (several callers, plans over another period), peeks,
/// operators' blocks and lifts, resets and reloads of the escalation, at random
/// instants: the memory store and Redis agree on every block, wait and trip.
#[tokio::test]
async fn memory_and_redis_agree_on_random_walks_of_escalating_penalties() -> TestResult {
    for (a, algorithm) in (1_u64..).zip(support::every_algorithm(4)) {
        for seed in 1..=6_u64 {
            let clock = ManualClock::new(BASE);
            let limit = |which| -> Result<Limit, tollgate::ConfigError> {
                Ok(Limit::new("walk", Quota::per_second(2))?
                    .algorithm(algorithm)
                    .penalty(walk_penalty(which)))
            };
            let memory = Limiter::builder()
                .limit(limit(0)?)
                .store(MemoryStore::with_clock(clock.clone()))
                .build()?;
            let redis_store = RedisStore::from_url(&shared_server().url())?
                .prefix(&unique_prefix("escalation-walk"))
                .denial_cache(0)
                .deadline(Duration::from_secs(5))?
                .with_clock(clock.clone());
            let redis = Limiter::builder()
                .limit(limit(0)?)
                .store(redis_store)
                .build()?;
            let keys = [Key::from("a"), Key::from("b")];
            let plan = Quota::per_minute(20);
            let mut rng = support::rng::Rng(seed * 0x9e37_79b9 + a);
            for step in 0..300 {
                clock.advance(Duration::from_millis(rng.below(700)));
                let key = &keys[rng.below(2) as usize];
                let what = rng.below(100);
                let context = format!("{algorithm} seed {seed} step {step} op {what}");
                let (m, r) = match what {
                    0..=59 => (
                        memory.check("walk", key, 1).await?,
                        redis.check("walk", key, 1).await?,
                    ),
                    60..=69 => (
                        memory.check_with("walk", key, 1, plan).await?,
                        redis.check_with("walk", key, 1, plan).await?,
                    ),
                    70..=79 => {
                        let (mo, ro) = (
                            memory.offences("walk", key).await?,
                            redis.offences("walk", key).await?,
                        );
                        assert_eq!(mo, ro, "{context}");
                        (
                            memory.peek("walk", key).await?,
                            redis.peek("walk", key).await?,
                        )
                    }
                    80..=85 => {
                        let d = Duration::from_millis(rng.below(3) * 1_500);
                        (
                            memory.block("walk", key, d).await?,
                            redis.block("walk", key, d).await?,
                        )
                    }
                    86..=89 => {
                        memory.reset("walk", key).await?;
                        redis.reset("walk", key).await?;
                        (
                            memory.peek("walk", key).await?,
                            redis.peek("walk", key).await?,
                        )
                    }
                    _ => {
                        let which = rng.below(4);
                        memory.reload([limit(which)?])?;
                        redis.reload([limit(which)?])?;
                        (
                            memory.peek("walk", key).await?,
                            redis.peek("walk", key).await?,
                        )
                    }
                };
                assert_eq!(said(&m), said(&r), "{context}");
            }
        }
    }
    Ok(())
}

/// `calls=` of one command in `INFO commandstats` of `server` (0 when never called).
fn calls(server: &support::redis_server::RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split([':', ',']).find_map(|f| f.strip_prefix("calls=")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Every decision of an escalating penalty, trips included, is one call: an `FCALL`
/// of the library (the escalation its second argument), or one `EVALSHA` without it.
#[tokio::test]
async fn an_escalating_trip_is_decided_in_one_call() -> TestResult {
    for functions in [true, false] {
        let server = support::redis_server::RedisServer::start();
        let clock = ManualClock::new(BASE);
        let store = RedisStore::from_url(&server.url())?
            .denial_cache(0)
            .functions(functions)
            .deadline(Duration::from_secs(5))?
            .with_clock(clock.clone());
        let penalty = Penalty::after(1)
            .block_for(Duration::from_secs(1))
            .escalate_by(2, Duration::from_secs(8))
            .remember(Duration::from_secs(60));
        let limiter = Limiter::builder()
            .limit(Limit::new("login", Quota::per_hour(1))?.penalty(penalty))
            .store(store)
            .build()?;
        let key = Key::from("mallory");
        // The first call loads the library (or the script) first.
        assert!(limiter.check("login", &key, 1).await?.allowed);
        let command = if functions { "fcall" } else { "evalsha" };
        let before = calls(&server, command);
        for (trip, block) in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 8)] {
            let d = limiter.check("login", &key, 1).await?;
            assert_eq!(
                (d.blocked_for, d.trips),
                (Some(Duration::from_secs(block)), trip)
            );
            clock.advance(Duration::from_secs(block));
        }
        assert_eq!(calls(&server, command), before + 5, "{command}");
    }
    Ok(())
}
