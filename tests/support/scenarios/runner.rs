//! The runner: one scenario against a fresh store, every step compared with its table.

use std::error::Error;
use std::fmt::Write as _;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, Penalty, Quota};

use super::{BASE, Expect, Op, Scenario};

/// What a decision said, in the same shape as [`Expect`] plus the capacity.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    limit: u64,
    expect: Expect,
}

/// The scenario's limit, and its capacity.
fn limit_of(scenario: &Scenario) -> Result<(Limit, u64), Box<dyn Error>> {
    let mut quota: Quota = scenario.quota.parse()?;
    if let Some(burst) = scenario.burst {
        quota = quota.with_burst(burst)?;
    }
    let capacity = scenario.burst.unwrap_or(quota.limit());
    let mut policy = Limit::new(scenario.name, quota)?.algorithm(scenario.algorithm);
    if let Some(max_delay_us) = scenario.max_delay_us {
        policy = policy.max_delay(Duration::from_micros(max_delay_us));
    }
    if let Some((after, within_us, block_us)) = scenario.penalty {
        policy = policy.penalty(
            Penalty::after(after)
                .within(Duration::from_micros(within_us))
                .block_for(Duration::from_micros(block_us)),
        );
    }
    Ok((policy, capacity))
}

/// A caller's own quota (notation and burst), and its capacity under `algorithm`.
fn own_quota(
    algorithm: Algorithm,
    notation: &str,
    burst: Option<u64>,
) -> Result<(Quota, u64), Box<dyn Error>> {
    let mut own: Quota = notation.parse()?;
    if let Some(burst) = burst {
        own = own.with_burst(burst)?;
    }
    let capacity = match algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => own.burst(),
        _ => own.limit(),
    };
    Ok((own, capacity))
}

/// What `decision` says, in the shape of the tables.
fn seen(decision: &Decision) -> Result<Seen, String> {
    Ok(Seen {
        limit: decision.capacity,
        expect: Expect {
            allowed: decision.allowed,
            remaining: decision.remaining,
            reset_after_us: micros(decision.reset_after)?,
            retry_after_us: decision.retry_after.map(micros).transpose()?,
            delay_us: micros(decision.delay)?,
            blocked_us: decision.blocked_for.map(micros).transpose()?,
        },
    })
}

/// Runs `scenario` against a fresh store built by `make_store`, then fails listing
/// every step whose decision differs from the table (later steps may differ only
/// because an earlier one did; the first is the one to read).
pub async fn run<S: Store>(
    scenario: &Scenario,
    make_store: impl FnOnce(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    let clock = ManualClock::new(BASE);
    let (policy, capacity) = limit_of(scenario)?;
    let limiter = Limiter::builder()
        .limit(policy)
        .store(make_store(clock.clone()))
        .build()?;
    let key = Key::from("scenario-subject");
    let mut failures = String::new();
    // Each check's (and settle's) decision, by step, for the refunds and settles of
    // its charge.
    let mut decisions: Vec<Option<Decision>> = Vec::new();
    for (index, step) in scenario.steps.iter().enumerate() {
        clock.set(BASE + Duration::from_micros(step.at_us));
        decisions.push(None);
        let Some((decision, capacity, expect, cost)) = take(
            &limiter,
            scenario,
            &key,
            (index, step.op),
            capacity,
            &decisions,
            &mut failures,
        )
        .await?
        else {
            continue;
        };
        let seen = seen(&decision)?;
        let want = Seen {
            limit: capacity,
            expect,
        };
        if seen != want || decision.limit != scenario.name {
            writeln!(
                failures,
                "  step {index} (at {} µs, {:?}, cost {cost}):\n    expected {want:?}\n    \
                 got      {seen:?} (policy {:?})",
                step.at_us, step.op, decision.limit
            )?;
        }
        decisions[index] = Some(decision);
    }
    assert!(
        failures.is_empty(),
        "scenario {:?} ({}, {}) differs from its table:\n{failures}",
        scenario.name,
        scenario.algorithm,
        scenario.quota
    );
    Ok(())
}

/// What one step is: a decision to compare with its table (with the capacity and
/// cost it is compared under), or nothing to compare (a refund, a reset).
type Taken = Option<(Decision, u64, Expect, u32)>;

/// Takes step `index` (its `op`) on `limiter`, whose capacity is `capacity`.
async fn take(
    limiter: &Limiter,
    scenario: &Scenario,
    key: &Key,
    (index, op): (usize, Op),
    capacity: u64,
    decisions: &[Option<Decision>],
    failures: &mut String,
) -> Result<Taken, Box<dyn Error>> {
    Ok(Some(match op {
        Op::Refund { amount } => {
            limiter.refund(scenario.name, key, amount).await?;
            return Ok(None);
        }
        Op::RefundCharge { of, amount } => {
            let decision = decided(decisions, index, of)?;
            limiter.refund_charge(decision, key, amount).await?;
            return Ok(None);
        }
        Op::Reset => {
            limiter.reset(scenario.name, key).await?;
            return Ok(None);
        }
        Op::Peek { expect } => (limiter.peek(scenario.name, key).await?, capacity, expect, 0),
        Op::Block { us, expect } => (
            limiter
                .block(scenario.name, key, Duration::from_micros(us))
                .await?,
            capacity,
            expect,
            0,
        ),
        Op::Penalize { n, expect } => (
            limiter.penalize(scenario.name, key, n).await?,
            capacity,
            expect,
            n,
        ),
        Op::Settle {
            of,
            actual,
            expect,
            receipt,
        } => {
            let decision = decided(decisions, index, of)?;
            let settled = limiter.settle(decision, key, actual).await?;
            let cost = settled.receipt().map(|r| r.cost());
            if cost != receipt {
                writeln!(
                    failures,
                    "  step {index}: receipt {cost:?}, not {receipt:?}"
                )?;
            }
            (settled, capacity, expect, 0)
        }
        Op::Check {
            cost,
            expect,
            quota: caller,
        } => match caller {
            None => (
                limiter.check(scenario.name, key, cost).await?,
                capacity,
                expect,
                cost,
            ),
            Some((notation, burst)) => {
                let (own, capacity) = own_quota(scenario.algorithm, notation, burst)?;
                let decision = limiter.check_with(scenario.name, key, cost, own).await?;
                (decision, capacity, expect, cost)
            }
        },
    }))
}

/// The decision of step `of`, which step `index` refunds or settles.
fn decided(decisions: &[Option<Decision>], index: usize, of: usize) -> Result<&Decision, String> {
    decisions
        .get(of)
        .and_then(Option::as_ref)
        .ok_or_else(|| format!("step {index} takes step {of}'s decision: it made none"))
}

/// A decision's duration in whole µs; a fraction of a µs would break the contract
/// that durations are rounded up to whole microseconds.
fn micros(d: Duration) -> Result<u64, String> {
    if !d.subsec_nanos().is_multiple_of(1_000) {
        return Err(format!("{d:?} is not a whole number of microseconds"));
    }
    u64::try_from(d.as_micros()).map_err(|e| e.to_string())
}
