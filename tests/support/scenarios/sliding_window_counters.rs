//! [`Algorithm::SlidingWindowCounters`] with `N` buckets: sum of sub-windows
//! `i−N+1 ..= i`; at boundary `j` the sub-window `j − N` leaves.

use super::{Algorithm, Scenario, deny, never, ok, peek, refund};

/// L = 8, P = 1 s, N = 4: sub-windows of 250 ms.
pub const SLIDING_WINDOW_COUNTERS_EDGES: Scenario = Scenario {
    name: "sliding_window_counters/edges",
    quota: "8/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 4 },
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 8, 0),
        // s0 = 3. reset: s0 leaves at boundary 4 → 1 000 000
        ok(100_000, 3, 5, 900_000),
        // s1 = 2, sum 5. reset: s1 leaves at 5 → 1 250 000
        ok(300_000, 2, 3, 950_000),
        // 1 µs before s3: s2 = 3, sum 8. reset: s2 leaves at 6 → 1 500 000
        ok(749_999, 3, 0, 750_001),
        // s3, sum 8. retry (sum ≤ 7): at 4 s0 leaves → 5 → 1 000 000. reset → 1 500 000
        deny(999_999, 1, 0, 500_001, 1),
        // sum ≤ 4: at 4 → 5, at 5 s1 leaves → 3 → 1 250 000
        deny(999_999, 4, 0, 500_001, 250_001),
        never(999_999, 9, 0, 500_001),
        // at boundary 4: s1..s4 = 2 + 3 + 0 + 0 = 5; s4 = 3, sum 8. reset: 5 → 6,
        // 6 → 3, 7 → 3, 8 (s4 leaves) → 0 → 2 000 000
        ok(1_000_000, 3, 0, 1_000_000),
        // c = L: retry = reset = 2 000 000 − 1 000 001
        deny(1_000_001, 8, 0, 999_999, 999_999),
        // s5: s2..s5 = 3 + 0 + 3 + 0 = 6 → 2; reset → 2 000 000
        peek(1_250_000, 2, 750_000),
    ],
};

/// L = 12, P = 1 min, N = 6: sub-windows of 10 s; refunds and a clock that goes back.
pub const SLIDING_WINDOW_COUNTERS_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "sliding_window_counters/refund-backwards",
    quota: "12/min",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 6 },
    max_delay_us: None,
    penalty: None,
    steps: &[
        // s0 = 4. reset: s0 leaves at 6 → 60 000 000
        ok(5_000_000, 4, 8, 55_000_000),
        // s2 = 5, sum 9. reset: s2 leaves at 8 → 80 000 000
        ok(25_000_000, 5, 3, 55_000_000),
        // newest first: s2 5 → 3, sum 7
        refund(25_000_000, 2),
        peek(25_000_000, 5, 55_000_000),
        // s2 3 → 0, s1 has none, s0 4 → 3: sum 3
        refund(25_000_000, 4),
        // reset: s0 leaves at 6 → 60 000 000
        peek(25_000_000, 9, 35_000_000),
        // s3 = 9, sum 12. reset: s3 leaves at 9 → 90 000 000
        ok(35_000_000, 9, 0, 55_000_000),
        // Back to 12 s (s1): stands at s3's start, sum 12. retry (sum ≤ 11): 4 → 12,
        // 5 → 12, 6 (s0 leaves) → 9 → 60 000 000. reset 90 000 000 − 12 000 000
        deny(12_000_000, 1, 0, 78_000_000, 48_000_000),
        // newest first: s3 9 → 7, sum 10
        refund(12_000_000, 2),
        peek(12_000_000, 2, 78_000_000),
        // charged to s3 (where the key stands), not s1: s3 = 9, sum 12
        ok(12_000_000, 2, 0, 78_000_000),
        // boundary 6: s1..s6 = s3 9 → s6 = 3, sum 12. reset: s6 leaves at 12 → 120 000 000
        ok(60_000_000, 3, 0, 60_000_000),
        // s7: s2..s7 = 9 + 3 = 12 (had the backwards charge gone to s1, it would have
        // left at 7). retry (sum ≤ 11): 8 → 12, 9 (s3 leaves) → 3 → 90 000 000
        deny(70_000_000, 1, 0, 50_000_000, 20_000_000),
    ],
};

/// L = 12, P = 1 min, N = 6: a key refunded to zero while the clock is behind it.
pub const SLIDING_WINDOW_COUNTERS_BACKWARDS_EMPTY: Scenario = Scenario {
    name: "sliding_window_counters/backwards-empty",
    quota: "12/min",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 6 },
    max_delay_us: None,
    penalty: None,
    steps: &[
        // s3 = 12. reset: s3 leaves at 9 → 90 000 000
        ok(35_000_000, 12, 0, 55_000_000),
        // back to 12 s: stands at s3's start; retry = reset = 90 000 000 − 12 000 000
        deny(12_000_000, 1, 0, 78_000_000, 78_000_000),
        // s3 → 0, sum 0
        refund(12_000_000, 20),
        // sum 0: remaining is already L, so reset is 0
        peek(12_000_000, 12, 0),
    ],
};
