//! Escalating penalties on Redis beyond the conformance tables: with the denial cache
//! on (a cached block repeats its trips), through a [`LeasedStore`] and through a
//! [`Fallback`] whose primary is Redis; and a record written before trips existed
//! reads as none.

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
            "{} 0 0 0 t2:{} r{base_us}",
            base_us + 11_000_000,
            base_us + 6_000_000
        )
    );
    Ok(())
}
