//! The runner of the escalation tables: each table on every algorithm, each on a
//! fresh store, every step compared with the table.

use std::error::Error;
use std::fmt::Write as _;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, Penalty, Quota};

use super::BASE;
use super::escalation::{EscalationOp, EscalationScenario, Standing};

/// The table's limit under `algorithm` and `penalty`, named for both.
fn limit(
    scenario: &EscalationScenario,
    algorithm: Algorithm,
    penalty: Penalty,
) -> Result<Limit, Box<dyn Error>> {
    let quota: Quota = scenario.quota.parse()?;
    Ok(Limit::new(scenario.name, quota)?
        .algorithm(algorithm)
        .penalty(penalty))
}

/// What `decision` says of the key's penalty; a block must also be its waits.
fn standing(decision: &Decision) -> Result<Standing, String> {
    let blocked_us = decision.blocked_for.map(micros).transpose()?;
    if let Some(left) = blocked_us {
        let waits = (
            decision.retry_after.map(micros).transpose()?,
            micros(decision.reset_after)?,
        );
        if waits != (Some(left), left) {
            return Err(format!("blocked for {left} µs, but waits {waits:?}"));
        }
    }
    Ok(Standing {
        allowed: decision.allowed,
        blocked_us,
        trips: decision.trips,
    })
}

/// Runs `scenario` on every algorithm, each on a fresh store built by `make_store`,
/// then fails listing every step whose answer differs from the table.
pub async fn run_escalation<S: Store>(
    scenario: &EscalationScenario,
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    let mut failures = String::new();
    for algorithm in crate::every_algorithm(4) {
        run_on(scenario, algorithm, &make_store, &mut failures).await?;
    }
    assert!(
        failures.is_empty(),
        "escalation table {:?} differs:\n{failures}",
        scenario.name
    );
    Ok(())
}

async fn run_on<S: Store>(
    scenario: &EscalationScenario,
    algorithm: Algorithm,
    make_store: &impl Fn(ManualClock) -> S,
    failures: &mut String,
) -> Result<(), Box<dyn Error>> {
    let clock = ManualClock::new(BASE);
    let limiter = Limiter::builder()
        .limit(limit(scenario, algorithm, (scenario.penalty)())?)
        .store(make_store(clock.clone()))
        .build()?;
    let name = scenario.name;
    let key = Key::from("escalating-caller");
    for (index, step) in scenario.steps.iter().enumerate() {
        clock.set(BASE + Duration::from_micros(step.at_us));
        let mut differs = |seen: &dyn std::fmt::Debug, want: &dyn std::fmt::Debug| {
            writeln!(
                failures,
                "  {algorithm}, step {index} (at {} µs, {:?}):\n    expected {want:?}\n    \
                 got      {seen:?}",
                step.at_us, step.op
            )
        };
        match step.op {
            EscalationOp::Check { expect } => {
                let seen = standing(&limiter.check(name, &key, 1).await?)?;
                if seen != expect {
                    differs(&seen, &expect)?;
                }
            }
            EscalationOp::Block { us, expect } => {
                let decision = limiter.block(name, &key, Duration::from_micros(us)).await?;
                let seen = standing(&decision)?;
                if seen != expect {
                    differs(&seen, &expect)?;
                }
            }
            EscalationOp::Offences {
                expect,
                next_block_us,
            } => {
                let seen = standing(&limiter.peek(name, &key).await?)?;
                let offences = limiter.offences(name, &key).await?;
                let told = (
                    offences.trips,
                    offences.blocked_for.map(micros).transpose()?,
                    offences.next_block.map(micros).transpose()?,
                );
                let want = (expect.trips, expect.blocked_us, Some(next_block_us));
                if seen != expect || told != want {
                    differs(&(seen, told), &(expect, want))?;
                }
            }
            EscalationOp::Reset => limiter.reset(name, &key).await?,
            EscalationOp::Reload { penalty } => {
                limiter.reload([limit(scenario, algorithm, penalty())?])?;
            }
        }
    }
    Ok(())
}

/// A duration in whole µs (decisions round up to them).
fn micros(d: Duration) -> Result<u64, String> {
    if !d.subsec_nanos().is_multiple_of(1_000) {
        return Err(format!("{d:?} is not a whole number of microseconds"));
    }
    u64::try_from(d.as_micros()).map_err(|e| e.to_string())
}
