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
