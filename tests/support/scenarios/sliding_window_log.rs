//! [`Algorithm::SlidingWindowLog`]: an entry `(t, c)` counts while `now − t < P`.

use super::{Algorithm, Scenario, deny, never, ok, peek, refund};

/// L = 5, P = 1 s: entries leaving exactly at t + P, merged same-instant charges.
pub const SLIDING_WINDOW_LOG_EDGES: Scenario = Scenario {
    name: "sliding_window_log/edges",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 5, 0),
        // [(100 000, 2)]; reset → 1 100 000
        ok(100_000, 2, 3, 1_000_000),
        // same µs: merged into [(100 000, 3)]
        ok(100_000, 1, 2, 1_000_000),
        // [(100 000, 3), (600 000, 2)], Σ 5; reset → 1 600 000
        ok(600_000, 2, 0, 1_000_000),
        // Σ + 1 > 5; room when (100 000, 3) leaves → 1 100 000
        deny(700_000, 1, 0, 900_000, 400_000),
        never(700_000, 6, 0, 900_000),
        // 1 µs before the oldest leaves: now − t = 999 999 < P, still counts
        deny(1_099_999, 1, 0, 500_001, 1),
        // at its edge: now − t = P, gone; Σ 2 + 3 = 5:
        // [(600 000, 2), (1 100 000, 3)]; reset → 2 100 000
        ok(1_100_000, 3, 0, 1_000_000),
        // c = L: room for 5 only when both leave → 2 100 000 − 1 100 001
        deny(1_100_001, 5, 0, 999_999, 999_999),
        // (600 000, 2) leaves: Σ 3; reset → 2 100 000
        peek(1_600_000, 2, 500_000),
    ],
};

/// L = 4, P = 10 s: refunds of the newest entries, a clock that goes back.
pub const SLIDING_WINDOW_LOG_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "sliding_window_log/refund-backwards",
    quota: "4/10s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // [(1 s, 1)]; reset → 11 000 000
        ok(1_000_000, 1, 3, 10_000_000),
        // [(1 s, 1), (3 s, 2)]; reset → 13 000 000
        ok(3_000_000, 2, 1, 10_000_000),
        // newest first: [(1 s, 1), (3 s, 1)]
        refund(3_000_000, 1),
        peek(3_000_000, 2, 10_000_000),
        // [(1 s, 1)]; reset → 11 000 000
        refund(4_000_000, 1),
        peek(4_000_000, 3, 7_000_000),
        // [(1 s, 1), (6 s, 3)], Σ 4; reset → 16 000 000
        ok(6_000_000, 3, 0, 10_000_000),
        // Back to 2 s: the entry at 6 s is "in the future" and still counts, Σ 4.
        // room when (1 s, 1) leaves → 11 000 000; reset 16 000 000 − 2 000 000
        deny(2_000_000, 1, 0, 14_000_000, 9_000_000),
        // [(1 s, 1), (6 s, 2)]
        refund(2_000_000, 1),
        // Admitted at 2 s while the log's newest entry is at 6 s: the log stays in time
        // order and the charge joins (6 s, ·) — the clock stands still at the newest
        // entry, as window algorithms stand at their window's start — so it leaves at
        // 16 s, not 12 s: [(1 s, 1), (6 s, 3)]; reset → 16 000 000
        ok(2_000_000, 1, 0, 14_000_000),
        // (1 s, 1) leaves at exactly 11 s: Σ 3
        peek(11_000_000, 1, 5_000_000),
        // Σ 3 + 2 > 4 until (6 s, 3) leaves at 16 s (a charge logged at 2 s would
        // have left at 12 s and let this pass)
        deny(15_999_999, 2, 1, 1, 1),
        peek(16_000_000, 4, 0),
    ],
};
