//! Escalating penalties through the decorators, as blocks go through them: a
//! [`LeasedStore`] (whose repeated denials are answered locally, a block counting
//! down with its trips) and a [`Fallback`] whose primary serves; the escalation
//! tables of `tests/support/scenarios/escalation.rs`, step by step.

use support::scenarios::{
    ESCALATION_EXTREMES, ESCALATION_FACTOR, ESCALATION_RELOAD, ESCALATION_STEPS,
    EscalationScenario, run_escalation,
};
use tollgate::MemoryStore;
use tollgate::clock::ManualClock;
use tollgate::store::{Fallback, LeasedStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn leased(clock: ManualClock) -> LeasedStore<MemoryStore> {
    LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock)
        .build()
}

fn fallback(clock: ManualClock) -> Fallback<MemoryStore, MemoryStore> {
    Fallback::new(
        MemoryStore::with_clock(clock.clone()),
        MemoryStore::with_clock(clock),
    )
}

/// Every escalation table.
const TABLES: [&EscalationScenario; 4] = [
    &ESCALATION_STEPS,
    &ESCALATION_FACTOR,
    &ESCALATION_RELOAD,
    &ESCALATION_EXTREMES,
];

#[tokio::test]
async fn escalation_tables_hold_through_a_leased_store() -> TestResult {
    for table in TABLES {
        run_escalation(table, leased).await?;
    }
    Ok(())
}

#[tokio::test]
async fn escalation_tables_hold_through_a_fallback() -> TestResult {
    for table in TABLES {
        run_escalation(table, fallback).await?;
    }
    Ok(())
}

/// A flood of distinct keys, each rejected once (a record holding a count), in a
/// store of 256 keys: the records stay within the bound, and the flood recycles its
/// own records before it takes a repeat offender's remembered trips, whose next trip
/// still gets the longer block.
#[tokio::test]
async fn a_flood_of_offenders_does_not_wipe_a_repeat_offenders_trips() -> TestResult {
    use std::time::Duration;
    use tollgate::{Key, Limit, Limiter, Penalty, Quota};

    let clock = ManualClock::new(support::scenarios::BASE);
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let penalty = Penalty::after(2)
        .within(Duration::from_secs(600))
        .block_for(Duration::from_secs(1))
        .escalate(&[Duration::from_secs(3_600)])
        .remember(Duration::from_secs(86_400));
    let limiter = Limiter::builder()
        .limit(Limit::new("login", Quota::per_hour(1))?.penalty(penalty))
        .store(store.clone())
        .build()?;
    let offender = Key::from("offender");
    assert!(limiter.check("login", &offender, 1).await?.allowed);
    assert!(!limiter.check("login", &offender, 1).await?.allowed);
    let tripped = limiter.check("login", &offender, 1).await?;
    assert_eq!(
        (tripped.blocked_for, tripped.trips),
        (Some(Duration::from_secs(1)), 1)
    );
    clock.advance(Duration::from_secs(2));
    for i in 0..20_000_u64 {
        let key = Key::from(i);
        assert!(limiter.check("login", &key, 1).await?.allowed);
        assert!(!limiter.check("login", &key, 1).await?.allowed);
        assert!(store.block_records() <= 256, "{}", store.block_records());
    }
    assert_eq!(limiter.offences("login", &offender).await?.trips, 1);
    assert!(!limiter.check("login", &offender, 1).await?.allowed);
    let again = limiter.check("login", &offender, 1).await?;
    assert_eq!(
        (again.blocked_for, again.trips),
        (Some(Duration::from_secs(3_600)), 2)
    );
    Ok(())
}
