//! The lab figures quoted in [`Algorithm`]'s rustdoc, recomputed.
//!
//! Each variant's docs say what the accuracy lab measured for it on the default run
//! (`Lab::default()`: 100/min, burst = limit, ten periods, seed 42; the run
//! `docs/choosing-an-algorithm.md` tabulates). The run is seeded and replays on a manual
//! clock, so the figures are exact: these tests pin them as counts (the most requests
//! one client had admitted in any window of one minute), so a change of rule or pattern
//! that moves a figure fails here instead of leaving the docs stale.

use std::sync::OnceLock;

use super::{Lab, PatternReport, Report, admitted_times, respects_fluid_bound};
use tollgate::Algorithm;

/// The quota's limit and period, as the default lab runs them.
const LIMIT: u64 = 100;
const MINUTE_US: u64 = 60_000_000;

/// The default run, computed once for every test of this file.
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| Lab::default().run().expect("the default lab run"))
}

/// The pattern of the default run named `name`.
fn pattern(name: &str) -> &'static PatternReport {
    report()
        .patterns
        .iter()
        .find(|p| p.pattern.name() == name)
        .unwrap_or_else(|| panic!("no pattern {name}"))
}

/// The lab's index of `algorithm` in every pattern's results.
fn index(algorithm: Algorithm) -> usize {
    report()
        .summary
        .iter()
        .position(|s| s.algorithm == algorithm)
        .unwrap_or_else(|| panic!("{algorithm} is not in the default run"))
}

/// The most `algorithm` admitted to one client in one window on the pattern `name`.
fn worst_window_on(name: &str, algorithm: Algorithm) -> u64 {
    pattern(name).results[index(algorithm)].1.max_window
}

/// The most `algorithm` admitted to one client in one window, over every pattern, and
/// the pattern where it did.
fn worst_window(algorithm: Algorithm) -> (u64, &'static str) {
    let i = index(algorithm);
    report()
        .patterns
        .iter()
        .map(|p| (p.results[i].1.max_window, p.pattern.name()))
        .max_by_key(|&(count, _)| count)
        .expect("the default run has patterns")
}

const COUNTERS: Algorithm = Algorithm::SlidingWindowCounters {
    buckets: super::DEFAULT_BUCKETS,
};

#[test]
fn fixed_window_admits_two_quotas_in_one_minute_under_the_boundary_attack() {
    // "2.00 × L in one interval of length P under the boundary attack"
    assert_eq!(
        worst_window_on("boundary-attack", Algorithm::FixedWindow),
        2 * LIMIT
    );
}

#[test]
fn sliding_window_admits_1_50_quotas_on_bursts_and_1_01_under_the_boundary_attack() {
    // "at most 1.50 × L in any interval of length P (on/off bursts), 1.01 × L under the
    // boundary attack"
    assert_eq!(worst_window(Algorithm::SlidingWindow), (150, "on-off"));
    assert_eq!(
        worst_window_on("boundary-attack", Algorithm::SlidingWindow),
        101
    );
}

#[test]
fn ten_sliding_window_counters_admit_at_most_1_12_quotas_in_one_minute() {
    // "with 10 buckets: at most 1.12 × L in any interval of length P (on/off bursts)"
    assert_eq!(super::DEFAULT_BUCKETS, 10);
    assert_eq!(worst_window(COUNTERS), (112, "on-off"));
}

#[test]
fn sliding_log_takes_the_ideal_limiters_decision_on_every_request() {
    // "never above L, and the same decision as the ideal sliding window on every request
    // of every pattern"
    let i = index(Algorithm::SlidingWindowLog);
    for p in &report().patterns {
        assert_eq!(p.results[i].0.admitted, p.ideal, "{}", p.pattern.name());
    }
    assert!(worst_window(Algorithm::SlidingWindowLog).0 <= LIMIT);
}

#[test]
fn fluid_algorithms_admit_1_99_quotas_from_idle_at_twice_the_rate() {
    // Token bucket and GCRA: "up to 1.99 × L in one interval of length P (traffic at
    // twice the rate from idle), never above B + L·t/P"; leaky bucket: "up to 1.99 × L".
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ] {
        assert_eq!(worst_window(algorithm).0, 199, "{algorithm}");
        assert_eq!(worst_window_on("steady-2x", algorithm), 199, "{algorithm}");
        let i = index(algorithm);
        for p in &report().patterns {
            for times in admitted_times(&p.pattern, &p.results[i].0.admitted) {
                assert!(
                    respects_fluid_bound(&times, LIMIT, LIMIT, MINUTE_US),
                    "{algorithm} on {}",
                    p.pattern.name()
                );
            }
        }
    }
}

#[test]
fn leaky_bucket_admits_exactly_as_gcra() {
    // "admits exactly as Gcra"
    let (leaky, gcra) = (index(Algorithm::LeakyBucket), index(Algorithm::Gcra));
    for p in &report().patterns {
        assert_eq!(
            p.results[leaky].0.admitted,
            p.results[gcra].0.admitted,
            "{}",
            p.pattern.name()
        );
    }
}
