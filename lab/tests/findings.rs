//! The accuracy lab's findings, pinned as properties: what each algorithm may admit in
//! any window, on every standard pattern.

use tollgate::{Algorithm, Quota};
use tollgate_lab::{
    Lab, Measures, Pattern, admitted_times, ideal, max_in_window, respects_fluid_bound,
};

const MINUTE_US: u64 = 60_000_000;

/// Six periods keep the debug-build replays quick while every pattern still crosses
/// several window edges.
fn lab(quota: Quota) -> Lab {
    Lab::new(quota).periods(6)
}

fn admitted_per_client(lab: &Lab, pattern: &Pattern, algorithm: Algorithm) -> Vec<Vec<u64>> {
    let trace = lab
        .trace(pattern, algorithm)
        .unwrap_or_else(|e| panic!("{algorithm} on {}: {e}", pattern.name()));
    admitted_times(pattern, &trace.admitted)
}

#[test]
fn sliding_log_never_exceeds_the_quota_in_any_window() {
    let lab = lab(Quota::per_minute(100));
    for pattern in lab.patterns() {
        let trace = lab
            .trace(&pattern, Algorithm::SlidingWindowLog)
            .expect("replay");
        // The store's log and the lab's own ideal limiter agree on every decision.
        assert_eq!(
            trace.admitted,
            ideal(&pattern, 100, MINUTE_US),
            "{}",
            pattern.name()
        );
        for times in admitted_times(&pattern, &trace.admitted) {
            assert!(
                max_in_window(&times, MINUTE_US) <= 100,
                "{}",
                pattern.name()
            );
        }
    }
}

#[test]
fn fluid_algorithms_never_exceed_burst_plus_rate_times_interval() {
    for quota in [
        Quota::per_minute(100),
        Quota::per_minute(100).with_burst(10).expect("burst"),
        Quota::per_second(7).with_burst(3).expect("burst"),
    ] {
        let lab = lab(quota);
        let period = u64::try_from(quota.period().as_micros()).expect("period");
        for pattern in lab.patterns() {
            for algorithm in [
                Algorithm::TokenBucket,
                Algorithm::Gcra,
                Algorithm::LeakyBucket,
            ] {
                for times in admitted_per_client(&lab, &pattern, algorithm) {
                    assert!(
                        respects_fluid_bound(&times, quota.limit(), quota.burst(), period),
                        "{algorithm} at {quota} on {}",
                        pattern.name()
                    );
                }
            }
        }
    }
}

#[test]
fn window_algorithms_stay_under_twice_the_quota() {
    let lab = lab(Quota::per_minute(100));
    for pattern in lab.patterns() {
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingWindowCounters { buckets: 10 },
        ] {
            for times in admitted_per_client(&lab, &pattern, algorithm) {
                assert!(max_in_window(&times, MINUTE_US) <= 200);
            }
        }
    }
}

#[test]
fn fixed_window_admits_twice_the_quota_across_an_edge() {
    let lab = lab(Quota::per_minute(100));
    let attack = Pattern::boundary_attack(&lab.quota(), 6);
    let fixed = lab.trace(&attack, Algorithm::FixedWindow).expect("replay");
    let m = lab.measure(&attack, &fixed.admitted);
    assert_eq!(m.max_window, 200);
    assert_eq!(m.wrongly_admitted, m.requests / 2);
    // The exact and sub-window algorithms refuse the second quota entirely.
    for algorithm in [
        Algorithm::SlidingWindowLog,
        Algorithm::SlidingWindowCounters { buckets: 10 },
    ] {
        let trace = lab.trace(&attack, algorithm).expect("replay");
        assert_eq!(lab.measure(&attack, &trace.admitted).max_window, 100);
    }
    // The sliding tail lets a few through: the previous window's weight is rounded down.
    let sliding = lab
        .trace(&attack, Algorithm::SlidingWindow)
        .expect("replay");
    assert!(lab.measure(&attack, &sliding.admitted).max_window <= 101);
}

#[test]
fn burst_from_idle_is_the_capacity() {
    let lab = Lab::new(Quota::per_minute(100).with_burst(20).expect("burst"));
    for algorithm in tollgate_lab::algorithms() {
        let expected = if matches!(
            algorithm,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
        ) {
            20
        } else {
            100
        };
        let store = tollgate::MemoryStore::with_clock(lab.clock());
        assert_eq!(
            lab.burst_from_idle_on(store, algorithm).expect("burst"),
            expected,
            "{algorithm}"
        );
    }
}

/// Sliding window on Poisson traffic at `factor` × 100/min for 100 minutes, over five
/// seeds: (differs from the ideal replay, admitted over quota, rejected with room), as
/// shares of all requests.
fn sliding_window_on_poisson(factor: f64) -> (f64, f64, f64) {
    let lab = Lab::new(Quota::per_minute(100));
    let (mut requests, mut differ, mut over, mut room) = (0, 0, 0, 0);
    for seed in 0..5 {
        let pattern = Pattern::poisson(&lab.quota(), 100, factor, seed);
        let trace = lab
            .trace(&pattern, Algorithm::SlidingWindow)
            .expect("replay");
        let m: Measures = lab.measure(&pattern, &trace.admitted);
        requests += m.requests;
        differ += m.wrongly_admitted + m.wrongly_rejected;
        over += m.admitted_over_quota;
        room += m.rejected_with_room;
    }
    let share = |n: u64| n as f64 / requests as f64;
    (share(differ), share(over), share(room))
}

#[test]
fn sliding_window_error_on_steady_poisson_stays_small() {
    // Measured (docs/choosing-an-algorithm.md): no decision differs at half the limit or
    // less; at 0.8× about 0.5% differ from the ideal replay; at the limit itself, where
    // every request lands near the threshold, about 9%. The bounds leave some room and
    // pin the shape: the error appears only as traffic nears the limit.
    for (factor, max_differ, max_over) in [(0.5, 0.0, 0.0), (0.8, 0.0075, 0.015), (1.0, 0.12, 0.2)]
    {
        let (differ, over, room) = sliding_window_on_poisson(factor);
        println!(
            "poisson {factor}x: {:.4}% differ from the ideal replay; {:.4}% admitted over \
             quota, {:.4}% rejected with room",
            differ * 100.0,
            over * 100.0,
            room * 100.0
        );
        assert!(differ <= max_differ, "{factor}×: {differ}");
        assert!(over <= max_over, "{factor}×: {over}");
        assert!(room <= over, "{factor}×: mostly errs on the generous side");
    }
}

#[test]
fn leases_keep_every_bound_on_every_pattern_at_little_cost() {
    // Four processes with a LeasedStore each over one store, at the default quota
    // (where leases rarely help) and at a hot one (where they save most calls).
    for quota in [Quota::per_minute(100), Quota::per_second(1_000)] {
        let report = lab(quota).run_leases(4).expect("lease run");
        for row in &report.rows {
            assert!(row.within_bound, "{} on {}", row.algorithm, row.pattern);
        }
        for s in report.summary() {
            let lost =
                s.plain_admitted.saturating_sub(s.leased_admitted) as f64 / s.plain_admitted as f64;
            assert!(lost < 0.01, "{quota}: {} lost {lost}", s.algorithm);
        }
    }
}
