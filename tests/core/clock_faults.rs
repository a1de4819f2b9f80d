//! Clock faults against every algorithm, on a `ManualClock`: steps backwards and
//! forwards in random patterns, a jump of years and back, and readings at the edges of
//! `u64` (the epoch, the far future, `Duration::MAX`).
//!
//! What must hold: no panic, ever; a clock that steps back is read as standing still
//! at the latest instant seen (so it never adds quota); and, against a monotonic
//! reference clock, a clock off by up to half a period over-admits at most one
//! period's quota.

use std::time::Duration;

use proptest::prelude::*;
use support::immediate::immediate;
use support::rng::Rng;
use tollgate::clock::{Clock, ManualClock};
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Quota};

const BASE_US: u64 = 1_700_000_000_000_000;
const PERIOD_US: u64 = 1_000_000;
const LIMIT: u64 = 10;
const BURST: u64 = 5;
const YEAR_US: u64 = 365 * 86_400 * 1_000_000;

/// Every algorithm, at 10 per second (burst 5 for those that take one).
fn algorithms() -> [(Algorithm, Quota); 7] {
    let rate = Quota::per_second(LIMIT);
    let bursty = rate.with_burst(BURST).expect("burst");
    [
        (Algorithm::FixedWindow, rate),
        (Algorithm::SlidingWindow, rate),
        (Algorithm::SlidingWindowCounters { buckets: 10 }, rate),
        (Algorithm::SlidingWindowLog, rate),
        (Algorithm::TokenBucket, bursty),
        (Algorithm::Gcra, bursty),
        (Algorithm::LeakyBucket, bursty),
    ]
}

/// The most cost each algorithm may admit in any interval of one period, on a clock
/// that never goes back (the bounds stated on `Algorithm`).
fn bound_per_period(algorithm: Algorithm) -> u64 {
    match algorithm {
        Algorithm::SlidingWindowLog => LIMIT,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => BURST + LIMIT,
        _ => 2 * LIMIT,
    }
}

struct Subject {
    clock: ManualClock,
    limiter: Limiter,
    key: Key,
}

impl Subject {
    fn new(algorithm: Algorithm, quota: Quota, at: u64) -> Self {
        let clock = ManualClock::new(Duration::from_micros(at));
        let limiter = Limiter::builder()
            .limit(Limit::new("p", quota).expect("policy").algorithm(algorithm))
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("limiter");
        Self {
            clock,
            limiter,
            key: Key::from("k"),
        }
    }

    fn at(&self, micros: u64) -> &Self {
        self.clock.set(Duration::from_micros(micros));
        self
    }

    fn check(&self, cost: u32) -> Decision {
        immediate(self.limiter.check("p", &self.key, cost)).expect("memory store")
    }
}

/// A random walk of the clock: mostly forwards, often backwards, sometimes far.
fn steps() -> impl Strategy<Value = Vec<(i64, u32)>> {
    let p = PERIOD_US.cast_signed();
    let step = prop_oneof![
        4 => 0..p / 4,
        3 => -p..0,
        1 => -3 * p..-p,
        1 => p..4 * p,
        1 => Just(0),
    ];
    proptest::collection::vec((step, 0..=3_u32), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// The store computes at the latest instant it has seen: a limiter whose clock
    /// wanders back and forth decides exactly like one whose clock only ever shows the
    /// running maximum, and never reports a shorter wait than it.
    #[test]
    fn a_clock_stepping_back_decides_as_if_standing_still(walk in steps()) {
        for (algorithm, quota) in algorithms() {
            let wandering = Subject::new(algorithm, quota, BASE_US);
            let standing = Subject::new(algorithm, quota, BASE_US);
            let (mut now, mut latest) = (BASE_US, 0);
            for &(step, cost) in &walk {
                now = now.saturating_add_signed(step);
                latest = latest.max(now);
                let got = wandering.at(now).check(cost);
                let reference = standing.at(latest).check(cost);
                prop_assert_eq!(got.allowed, reference.allowed, "{} at {}", algorithm, now);
                prop_assert_eq!(got.remaining, reference.remaining, "{}", algorithm);
                prop_assert!(got.reset_after >= reference.reset_after, "{}", algorithm);
                prop_assert_eq!(got.retry_after.is_some(), reference.retry_after.is_some());
                if let (Some(got), Some(reference)) = (got.retry_after, reference.retry_after) {
                    prop_assert!(got >= reference, "{}", algorithm);
                }
            }
        }
    }
}

/// Walks per algorithm, and requests per walk.
const WALKS: usize = 300;
const REQUESTS: usize = 200;

/// Real time runs forwards in small steps; the limiter's clock is off by a random
/// offset of up to half a period that changes at every step (NTP steps, a VM
/// pausing). In any interval of one period of real time, no algorithm admits more
/// than its bound plus one period's quota.
#[test]
fn a_clock_off_by_half_a_period_over_admits_at_most_one_period() {
    let mut rng = Rng(0x636c_6f63_6b73_2121);
    for (algorithm, quota) in algorithms() {
        let mut worst = 0;
        for _ in 0..WALKS {
            let subject = Subject::new(algorithm, quota, BASE_US);
            let mut real = BASE_US;
            let mut admitted: Vec<(u64, u64)> = Vec::with_capacity(REQUESTS);
            for _ in 0..REQUESTS {
                real += rng.below(PERIOD_US / 8);
                let reading = real - PERIOD_US / 2 + rng.below(PERIOD_US + 1);
                let cost = 1 + rng.below(2);
                if subject.at(reading).check(cost as u32).allowed {
                    admitted.push((real, cost));
                }
            }
            worst = worst.max(most_in_any_period(&admitted));
        }
        let bound = bound_per_period(algorithm);
        eprintln!(
            "{algorithm}: at most {worst} admitted in one period of real time \
             (bound on a true clock {bound}, allowed {})",
            bound + LIMIT
        );
        assert!(worst <= bound + LIMIT, "{algorithm}: {worst} in one period");
    }
}

/// The largest total cost admitted in any half-open interval `[t, t + P)` of real time.
fn most_in_any_period(admitted: &[(u64, u64)]) -> u64 {
    admitted
        .iter()
        .map(|&(start, _)| {
            admitted
                .iter()
                .filter(|&&(at, _)| at >= start && at < start + PERIOD_US)
                .map(|&(_, cost)| cost)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn a_jump_of_years_forward_and_back_admits_one_capacity_more_then_stands_still() {
    for (algorithm, quota) in algorithms() {
        let capacity = Limit::new("p", quota)
            .expect("policy")
            .algorithm(algorithm)
            .capacity();
        let subject = Subject::new(algorithm, quota, BASE_US);
        let spend = |subject: &Subject| {
            (0..2 * capacity)
                .filter(|_| subject.check(1).allowed)
                .count() as u64
        };

        assert_eq!(spend(subject.at(BASE_US)), capacity, "{algorithm}");
        // Ten years ahead looks like ten years of refill: one capacity more.
        let future = BASE_US + 10 * YEAR_US;
        assert_eq!(spend(subject.at(future)), capacity, "{algorithm}");
        // Back to the present: time stands still at the future instant, where the
        // quota is spent. Nothing more passes, however often the clock moves here.
        let mut now = BASE_US + 1;
        for _ in 0..50 {
            now += PERIOD_US / 5;
            let decision = subject.at(now).check(1);
            assert!(
                !decision.allowed,
                "{algorithm} admitted after the jump back"
            );
            // The wait is honest: measured from the clock the caller will wait on.
            let retry = decision.retry_after.expect("a cost of 1 fits later");
            assert!(retry >= Duration::from_micros(future - now), "{algorithm}");
        }
        // Once the clock passes the future instant, the quota refills as usual.
        assert!(
            subject.at(future + 2 * PERIOD_US).check(1).allowed,
            "{algorithm}"
        );
    }
}

/// Clock readings where arithmetic in microseconds, or GCRA's nanoseconds, would
/// overflow if nothing saturated.
fn edge_readings() -> Vec<Duration> {
    let micros = [
        0,
        1,
        PERIOD_US - 1,
        PERIOD_US,
        BASE_US,
        1 << 53,
        10_000_000_000_000_000, // where the stores saturate
        10_000_000_000_000_001,
        u64::MAX / 1_000 - 1,
        u64::MAX / 1_000,
        u64::MAX / 1_000 + 1,
        u64::MAX / 2,
        u64::MAX - PERIOD_US,
        u64::MAX - 1,
        u64::MAX,
    ];
    let mut readings: Vec<Duration> = micros.iter().map(|&m| Duration::from_micros(m)).collect();
    readings.push(Duration::MAX);
    readings
}

/// The quotas at the edges of what each algorithm accepts.
fn edge_quotas() -> Vec<(Algorithm, Quota)> {
    let century = Duration::from_secs(100 * 365 * 86_400);
    let mut all: Vec<(Algorithm, Quota)> = algorithms().to_vec();
    for (algorithm, _) in algorithms() {
        for quota in [
            Quota::new(1, Duration::from_micros(1)).expect("quota"),
            Quota::new(Quota::MAX_COUNT, Duration::from_micros(1)).expect("quota"),
            Quota::new(Quota::MAX_COUNT, century).expect("quota"),
            Quota::new(1, century).expect("quota"),
            Quota::new(1, century)
                .expect("quota")
                .with_burst(1)
                .expect("burst"),
        ] {
            all.push((algorithm, quota));
        }
    }
    all
}

#[test]
fn readings_at_the_edges_of_u64_saturate_instead_of_panicking() {
    let readings = edge_readings();
    let mut built = 0;
    for (algorithm, quota) in edge_quotas() {
        let Ok(limiter) = Limiter::builder()
            .limit(Limit::new("p", quota).expect("policy").algorithm(algorithm))
            .store(MemoryStore::with_clock(ManualClock::default()))
            .build()
        else {
            continue; // e.g. a burst that takes more than a century to refill
        };
        drop(limiter);
        built += 1;
        let capacity = Limit::new("p", quota)
            .expect("policy")
            .algorithm(algorithm)
            .capacity();
        // Forwards through the edges, then backwards, then in a zigzag.
        let mut order = readings.clone();
        order.extend(readings.iter().rev());
        order.extend(
            readings
                .iter()
                .step_by(2)
                .chain(readings.iter().skip(1).step_by(2)),
        );
        let subject = Subject::new(algorithm, quota, 0);
        for reading in order {
            subject.clock.set(reading);
            for cost in [0, 1, 2, u32::MAX] {
                let d = subject.check(cost);
                assert!(
                    d.remaining <= capacity,
                    "{algorithm} {quota:?} at {reading:?}"
                );
                if u64::from(cost) > capacity {
                    assert!(!d.allowed && d.retry_after.is_none());
                }
            }
            immediate(subject.limiter.refund("p", &subject.key, 1)).expect("refund");
        }
        // Far in the future, time saturates and stands still: the key still has a
        // limit, it only stops refilling.
        let far = Subject::new(algorithm, quota, u64::MAX);
        far.clock.set(Duration::MAX);
        let admitted = (0..=capacity.min(64))
            .filter(|_| far.check(1).allowed)
            .count() as u64;
        assert_eq!(admitted, capacity.min(64 + 1), "{algorithm} {quota:?}");
    }
    eprintln!(
        "edges: {built} (algorithm, quota) pairs through {} readings each way",
        readings.len()
    );
    assert!(built >= 30, "only {built} edge policies could be built");
}

#[test]
fn advancing_past_the_end_of_time_saturates_instead_of_wrapping() {
    let clock = ManualClock::new(Duration::from_micros(5));
    clock.advance(Duration::MAX);
    assert_eq!(clock.now(), Duration::from_micros(u64::MAX));
    clock.advance(Duration::from_micros(1));
    assert_eq!(clock.now(), Duration::from_micros(u64::MAX));
}
