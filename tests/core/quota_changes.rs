//! Property test: for any sequence of checks under changing quotas (a caller's plan
//! changing, a reload), a key is never admitted more than the most generous quota it
//! held could allow. All quotas share one period (a quota over another period counts
//! in state of its own); `L*` and `B*` are the largest limit and capacity among them.
//!
//! Bounds, per algorithm, on the admitted cost:
//! - fixed window, sliding window, sliding window counters: at most `L*` in each
//!   epoch-aligned window of length `P` (each admits only while the count of its
//!   current window, or of its sub-windows, stays within the quota in force);
//! - sliding window log: at most `L*` in any interval of length `P`;
//! - token bucket, GCRA, leaky bucket: at most `B* + L*·t/P` in any interval of length
//!   `t` (usage is re-counted in whole requests, rounded up: never in the caller's
//!   favour).

use std::time::Duration;

use proptest::prelude::*;
use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

const BASE_US: u64 = 1_699_920_000_000_000;
const PERIOD_US: u64 = 1_000_000;

/// The quotas a caller may hold, all over one second: (limit, burst).
const QUOTAS: [(u64, u64); 4] = [(10, 10), (20, 20), (5, 5), (10, 15)];

fn quota(index: usize, fluid: bool) -> Quota {
    let (limit, burst) = QUOTAS[index];
    let quota = Quota::new(limit, Duration::from_micros(PERIOD_US)).expect("quota");
    if fluid {
        quota.with_burst(burst).expect("burst")
    } else {
        quota
    }
}

/// (gap µs, cost, index of the quota in force).
fn steps() -> impl Strategy<Value = Vec<(u64, u32, usize)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0_u64), 5 => 0..150_000_u64, 1 => 150_000..1_500_000_u64],
            1..=4_u32,
            0..QUOTAS.len(),
        ),
        1..120,
    )
}

fn algorithms() -> impl Strategy<Value = Algorithm> {
    prop_oneof![
        Just(Algorithm::FixedWindow),
        Just(Algorithm::SlidingWindow),
        Just(Algorithm::SlidingWindowCounters { buckets: 4 }),
        Just(Algorithm::SlidingWindowLog),
        Just(Algorithm::TokenBucket),
        Just(Algorithm::Gcra),
        Just(Algorithm::LeakyBucket),
    ]
}

/// The most cost admitted in any interval `[t, t + span)` (`span` 0: at one instant).
fn max_in_span(admitted: &[(u64, u64)], span: u64) -> u64 {
    let mut best = 0;
    for (i, &(start, _)) in admitted.iter().enumerate() {
        let total: u64 = admitted[i..]
            .iter()
            .take_while(|(t, _)| *t < start + span.max(1))
            .map(|(_, c)| c)
            .sum();
        best = best.max(total);
    }
    best
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_caller_never_gets_more_than_its_most_generous_quota_allows(
        algorithm in algorithms(),
        steps in steps(),
    ) {
        let fluid = matches!(
            algorithm,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
        );
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let limiter = Limiter::builder()
            .limit(Limit::new("plan", quota(0, fluid)).expect("limit").algorithm(algorithm))
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("limiter");
        let key = Key::from("caller");
        let (mut now, mut admitted) = (BASE_US, Vec::new());
        let (mut most_limit, mut most_capacity) = (0, 0);
        for &(gap, cost, index) in &steps {
            now += gap;
            clock.set(Duration::from_micros(now));
            let own = quota(index, fluid);
            most_limit = most_limit.max(own.limit());
            most_capacity = most_capacity.max(if fluid { own.burst() } else { own.limit() });
            let decision = immediate(limiter.check_with("plan", &key, cost, own))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(decision.remaining <= decision.capacity);
            prop_assert_eq!(decision.quota, own);
            if decision.allowed {
                admitted.push((now - BASE_US, u64::from(cost)));
            }
        }
        match algorithm {
            Algorithm::FixedWindow
            | Algorithm::SlidingWindow
            | Algorithm::SlidingWindowCounters { .. } => {
                let mut windows = std::collections::BTreeMap::<u64, u64>::new();
                for &(t, c) in &admitted {
                    *windows.entry(t / PERIOD_US).or_default() += c;
                }
                for (window, total) in windows {
                    prop_assert!(
                        total <= most_limit,
                        "window {} admitted {} > L* = {}", window, total, most_limit
                    );
                }
            }
            Algorithm::SlidingWindowLog => {
                let most = max_in_span(&admitted, PERIOD_US);
                prop_assert!(most <= most_limit, "{} in one period > L* = {}", most, most_limit);
            }
            _ => {
                for span in [0, 50_000, 100_000, 250_000, 500_000, 1_000_000, 3_000_000] {
                    let most = max_in_span(&admitted, span);
                    // B* + L*·t/P, t = the span (an interval shorter than `span`).
                    let bound = most_capacity + (most_limit * span).div_ceil(PERIOD_US);
                    prop_assert!(
                        most <= bound,
                        "{} in {} µs > B* + L*·t/P = {}", most, span, bound
                    );
                }
            }
        }
    }
}
