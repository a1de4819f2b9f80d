//! Property tests: for any arrival sequence, every algorithm admits no more than its
//! documented bound in any interval, reports `remaining ≤ limit`, and its
//! `retry_after` / `reset_after` are exact to the microsecond.
//!
//! Time runs on a `ManualClock`; sequences include bursts at one instant and clocks
//! that step backwards. Bounds are checked on "effective" time (the latest instant the
//! key has seen), since a clock that goes back is treated as standing still.

use std::time::Duration;

use proptest::prelude::*;
use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Quota};

pub(crate) const BASE_US: u64 = 1_699_920_000_000_000;
pub(crate) const PERIOD_US: u64 = 1_000_000;
const BUCKETS: u32 = 4;

#[derive(Debug, Clone)]
enum Op {
    /// Wait `gap` µs, then ask for `cost`.
    Arrive { gap: u64, cost: u32 },
    /// Step the clock back by up to `by` µs, then ask for `cost`.
    Backwards { by: u64, cost: u32 },
    /// Ask for `cost`; if denied, check that `retry_after` is the exact wait.
    ProbeRetry { cost: u32 },
    /// Check that `reset_after` is the exact time until full capacity.
    ProbeReset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![3 => Just(0_u64), 5 => 0..300_000_u64, 1 => 300_000..2_500_000_u64], 1..=3_u32)
            .prop_map(|(gap, cost)| Op::Arrive { gap, cost }),
        1 => (1..1_500_000_u64, 1..=2_u32).prop_map(|(by, cost)| Op::Backwards { by, cost }),
        2 => (1..=3_u32).prop_map(|cost| Op::ProbeRetry { cost }),
        1 => Just(Op::ProbeReset),
    ]
}

struct Run {
    clock: ManualClock,
    limiter: Limiter,
    key: Key,
    now: u64,
    /// The latest instant seen: effective time.
    latest: u64,
    /// Admitted (effective time, cost).
    admitted: Vec<(u64, u64)>,
    capacity: u64,
}

impl Run {
    fn new(algorithm: Algorithm, quota: Quota) -> Self {
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let policy = Limit::new("p", quota)
            .expect("valid policy")
            .algorithm(algorithm);
        let capacity = policy.capacity();
        let limiter = Limiter::builder()
            .limit(policy)
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("valid limiter");
        Self {
            clock,
            limiter,
            key: Key::from("k"),
            now: BASE_US,
            latest: BASE_US,
            admitted: Vec::new(),
            capacity,
        }
    }

    fn set(&mut self, now: u64) {
        self.now = now;
        self.latest = self.latest.max(now);
        self.clock.set(Duration::from_micros(now));
    }

    fn check(&mut self, cost: u32) -> Result<Decision, TestCaseError> {
        let d = immediate(self.limiter.check("p", &self.key, cost)).expect("memory store");
        prop_assert!(
            d.remaining <= d.capacity,
            "remaining {} > limit {}",
            d.remaining,
            d.capacity
        );
        prop_assert_eq!(d.capacity, self.capacity);
        if let Some(retry) = d.retry_after {
            prop_assert!(!d.allowed && retry > Duration::ZERO, "{:?}", d);
        }
        if u64::from(cost) > self.capacity {
            prop_assert!(!d.allowed && d.retry_after.is_none(), "{:?}", d);
        }
        if d.allowed && cost > 0 {
            self.admitted.push((self.latest, u64::from(cost)));
        }
        Ok(d)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Arrive { gap, cost } => {
                self.set(self.now + gap);
                self.check(cost)?;
            }
            Op::Backwards { by, cost } => {
                self.set(self.now - by.min(self.now - BASE_US));
                self.check(cost)?;
            }
            Op::ProbeRetry { cost } => {
                let d = self.check(cost)?;
                if let Some(retry) = d.retry_after {
                    let retry = retry.as_micros() as u64;
                    let at = self.now;
                    self.set(at + retry - 1);
                    let early = self.check(cost)?;
                    prop_assert!(
                        !early.allowed,
                        "admitted 1 µs before retry_after {retry}: {early:?}"
                    );
                    self.set(at + retry);
                    let on_time = self.check(cost)?;
                    prop_assert!(
                        on_time.allowed,
                        "denied at retry_after {retry}: {on_time:?}"
                    );
                }
            }
            Op::ProbeReset => {
                let d = self.check(0)?;
                let reset = d.reset_after.as_micros() as u64;
                if reset == 0 {
                    prop_assert_eq!(d.remaining, self.capacity);
                } else {
                    let at = self.now;
                    self.set(at + reset - 1);
                    let early = self.check(0)?;
                    prop_assert!(
                        early.remaining < self.capacity,
                        "full 1 µs before reset {reset}"
                    );
                    self.set(at + reset);
                    let on_time = self.check(0)?;
                    prop_assert_eq!(
                        on_time.remaining,
                        self.capacity,
                        "not full at reset {}",
                        reset
                    );
                }
            }
        }
        Ok(())
    }
}

/// Most cost admitted in any half-open interval `[t, t + span)` of effective time.
fn max_in_span(admitted: &[(u64, u64)], span: u64) -> u64 {
    admitted
        .iter()
        .map(|&(start, _)| {
            admitted
                .iter()
                .filter(|&&(t, _)| t >= start && t < start + span)
                .map(|&(_, c)| c)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// Most cost admitted in one epoch-aligned window of `span`.
fn max_in_aligned(admitted: &[(u64, u64)], span: u64) -> u64 {
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    for &(t, c) in admitted {
        *per_window.entry(t / span).or_default() += c;
    }
    per_window.values().copied().max().unwrap_or(0)
}

/// The window algorithms' bounds on admissions `(effective time, cost)`, period
/// `PERIOD_US`: also what leases must keep (`leases.rs`).
pub(crate) fn check_window_bounds(
    admitted: &[(u64, u64)],
    algorithm: Algorithm,
    limit: u64,
) -> Result<(), TestCaseError> {
    match algorithm {
        Algorithm::SlidingWindowLog => {
            prop_assert!(
                max_in_span(admitted, PERIOD_US) <= limit,
                "log admitted more than L in a period"
            );
        }
        Algorithm::SlidingWindowCounters { buckets } => {
            // Any `buckets` consecutive sub-windows hold at most L.
            let sub = PERIOD_US / u64::from(buckets);
            let mut per_sub = std::collections::BTreeMap::<u64, u64>::new();
            for &(t, c) in admitted {
                *per_sub.entry(t / sub).or_default() += c;
            }
            for &first in per_sub.keys() {
                let sum: u64 = per_sub
                    .range(first..first + u64::from(buckets))
                    .map(|(_, c)| c)
                    .sum();
                prop_assert!(
                    sum <= limit,
                    "{} in {} sub-windows from {}",
                    sum,
                    buckets,
                    first
                );
            }
            prop_assert!(max_in_span(admitted, PERIOD_US) <= 2 * limit);
        }
        _ => {
            // FixedWindow and SlidingWindow: L per aligned window, 2L across an edge.
            prop_assert!(
                max_in_aligned(admitted, PERIOD_US) <= limit,
                "more than L in one window"
            );
            prop_assert!(
                max_in_span(admitted, PERIOD_US) <= 2 * limit,
                "more than 2L in a period"
            );
        }
    }
    Ok(())
}

/// `B + L·t/P` for every interval between two admissions (inclusive), period
/// `PERIOD_US`.
pub(crate) fn check_fluid_bound(
    admitted: &[(u64, u64)],
    limit: u64,
    burst: u64,
) -> Result<(), TestCaseError> {
    for (i, &(start, _)) in admitted.iter().enumerate() {
        let mut sum = 0_u64;
        for &(t, c) in &admitted[i..] {
            sum += c;
            let allowance = u128::from(burst) * u128::from(PERIOD_US)
                + u128::from(limit) * u128::from(t - start);
            prop_assert!(
                u128::from(sum) * u128::from(PERIOD_US) <= allowance,
                "{} admitted in {} µs with L={} B={}",
                sum,
                t - start,
                limit,
                burst
            );
        }
    }
    Ok(())
}

/// Any of the seven algorithms (counters with `BUCKETS`).
pub(crate) fn algorithms() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingWindow),
        Just(Algorithm::SlidingWindowCounters { buckets: BUCKETS }),
        Just(Algorithm::SlidingWindowLog),
        Just(Algorithm::TokenBucket),
        Just(Algorithm::Gcra),
        Just(Algorithm::LeakyBucket),
    ]
}

proptest! {
    // 256 cases by default; PROPTEST_CASES=20000 for a deeper search.

    #[test]
    fn never_admits_more_than_the_documented_bound(
        algorithm in algorithms(),
        limit in 1..=8_u64,
        burst in 1..=8_u64,
        ops in prop::collection::vec(op(), 1..120),
    ) {
        let fluid = matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket);
        let mut quota = Quota::new(limit, Duration::from_micros(PERIOD_US)).expect("valid quota");
        if fluid {
            quota = quota.with_burst(burst).expect("valid burst");
        }
        let mut run = Run::new(algorithm, quota);
        for op in &ops {
            run.step(op)?;
        }
        if fluid {
            check_fluid_bound(&run.admitted, limit, burst)?;
        } else {
            check_window_bounds(&run.admitted, algorithm, limit)?;
        }
    }

    #[test]
    fn a_full_burst_from_idle_is_admitted_at_one_instant(
        algorithm in algorithms(),
        limit in 1..=50_u64,
        offset in 0..PERIOD_US,
    ) {
        let quota = Quota::new(limit, Duration::from_micros(PERIOD_US)).expect("valid quota");
        let mut run = Run::new(algorithm, quota);
        run.set(BASE_US + offset);
        for i in 0..limit {
            let d = run.check(1)?;
            prop_assert!(d.allowed, "request {} of a burst of {} denied", i + 1, limit);
            prop_assert_eq!(d.remaining, limit - i - 1);
        }
        prop_assert!(!run.check(1)?.allowed);
    }
}
