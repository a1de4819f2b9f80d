//! Penalty box: `after(3).within(500 000 µs).block_for(2 000 000 µs)`, L = 1, P = 1 s
//! (token bucket, GCRA, leaky bucket: B = 1, T = 1 s). One admission at 0; rejections at
//! 100 000 and 200 000 (the window opened at 100 000 closes at 600 000), a third at
//! 700 000 starts a new count (1), 800 000 (2), 900 000 (3) trips: blocked until
//! 2 900 000. Rejections while blocked neither count nor extend it. Free at 2 900 000,
//! where the rate state is idle again; the count started over, so one more rejection
//! does not block.

use super::{Algorithm, Scenario, blocked, deny, ok, peek_op, queued};

/// Fixed window: every rejection of w0 waits for 1 000 000.
pub const FIXED_WINDOW_PENALTY: Scenario = Scenario {
    name: "fixed_window/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        ok(0, 1, 0, 1_000_000),
        // 1st, 2nd
        deny(100_000, 1, 0, 900_000, 900_000),
        deny(200_000, 1, 0, 800_000, 800_000),
        // 700 000 ≥ 100 000 + 500 000: a new count, 1st, 2nd
        deny(700_000, 1, 0, 300_000, 300_000),
        deny(800_000, 1, 0, 200_000, 200_000),
        // 3rd within 500 000 of 700 000: blocked 2 000 000
        blocked(900_000, 1, 2_000_000),
        // not extended: 2 900 000 − 1 500 000, − 2 000 000
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        // free; w2 empty: k = 1, reset → 3 000 000
        ok(2_900_000, 1, 0, 100_000),
        // a 1st rejection again
        deny(2_950_000, 1, 0, 50_000, 50_000),
        peek_op(2_950_000, 0, 50_000),
    ],
};

/// Sliding window: with p = 1, c = 1 fits in w1 from e > 0, 1 000 001.
pub const SLIDING_WINDOW_PENALTY: Scenario = Scenario {
    name: "sliding_window/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        ok(0, 1, 0, 1_000_001),
        deny(100_000, 1, 0, 900_001, 900_001),
        deny(200_000, 1, 0, 800_001, 800_001),
        deny(700_000, 1, 0, 300_001, 300_001),
        deny(800_000, 1, 0, 200_001, 200_001),
        blocked(900_000, 1, 2_000_000),
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        // w2, p = 0 (w1 was empty): k = 1; in w3 with p = 1 from e > 0, 3 000 001
        ok(2_900_000, 1, 0, 100_001),
        deny(2_950_000, 1, 0, 50_001, 50_001),
        peek_op(2_950_000, 0, 50_001),
    ],
};

/// Sliding window counters, N = 5: s0 leaves at 1 000 000.
pub const SLIDING_WINDOW_COUNTERS_PENALTY: Scenario = Scenario {
    name: "sliding_window_counters/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 5 },
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        ok(0, 1, 0, 1_000_000),
        deny(100_000, 1, 0, 900_000, 900_000),
        deny(200_000, 1, 0, 800_000, 800_000),
        deny(700_000, 1, 0, 300_000, 300_000),
        deny(800_000, 1, 0, 200_000, 200_000),
        blocked(900_000, 1, 2_000_000),
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        // s14 = 1 (2 800 000 .. 3 000 000); it leaves when s19 starts, 3 800 000
        ok(2_900_000, 1, 0, 900_000),
        deny(2_950_000, 1, 0, 850_000, 850_000),
        peek_op(2_950_000, 0, 850_000),
    ],
};

/// Sliding window log: the entry at 0 leaves at 1 000 000.
pub const SLIDING_WINDOW_LOG_PENALTY: Scenario = Scenario {
    name: "sliding_window_log/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        ok(0, 1, 0, 1_000_000),
        deny(100_000, 1, 0, 900_000, 900_000),
        deny(200_000, 1, 0, 800_000, 800_000),
        deny(700_000, 1, 0, 300_000, 300_000),
        deny(800_000, 1, 0, 200_000, 200_000),
        blocked(900_000, 1, 2_000_000),
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        // (2 900 000, 1) leaves at 3 900 000
        ok(2_900_000, 1, 0, 1_000_000),
        deny(2_950_000, 1, 0, 950_000, 950_000),
        peek_op(2_950_000, 0, 950_000),
    ],
};

/// Token bucket, B = 1: τ = t/10^6 after the admission at 0; retry (1 − τ)·10^6.
pub const TOKEN_BUCKET_PENALTY: Scenario = Scenario {
    name: "token_bucket/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        ok(0, 1, 0, 1_000_000),
        deny(100_000, 1, 0, 900_000, 900_000),
        deny(200_000, 1, 0, 800_000, 800_000),
        deny(700_000, 1, 0, 300_000, 300_000),
        deny(800_000, 1, 0, 200_000, 200_000),
        blocked(900_000, 1, 2_000_000),
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        // full again: τ = 0, reset 10^6
        ok(2_900_000, 1, 0, 1_000_000),
        deny(2_950_000, 1, 0, 950_000, 950_000),
        peek_op(2_950_000, 0, 950_000),
    ],
};

/// GCRA, B = 1: TAT = 1 000 000 after the admission at 0; retry TAT + T − B·T − now.
pub const GCRA_PENALTY: Scenario = Scenario {
    name: "gcra/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        ok(0, 1, 0, 1_000_000),
        deny(100_000, 1, 0, 900_000, 900_000),
        deny(200_000, 1, 0, 800_000, 800_000),
        deny(700_000, 1, 0, 300_000, 300_000),
        deny(800_000, 1, 0, 200_000, 200_000),
        blocked(900_000, 1, 2_000_000),
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        // TAT = 3 900 000
        ok(2_900_000, 1, 0, 1_000_000),
        deny(2_950_000, 1, 0, 950_000, 950_000),
        peek_op(2_950_000, 0, 950_000),
    ],
};

/// Leaky bucket, B = 1: as GCRA (its queue's start is within the 1 s bound).
pub const LEAKY_BUCKET_PENALTY: Scenario = Scenario {
    name: "leaky_bucket/penalty",
    quota: "1/s",
    burst: None,
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: Some((3, 500_000, 2_000_000)),
    steps: &[
        queued(0, 1, 0, 1_000_000, 0),
        deny(100_000, 1, 0, 900_000, 900_000),
        deny(200_000, 1, 0, 800_000, 800_000),
        deny(700_000, 1, 0, 300_000, 300_000),
        deny(800_000, 1, 0, 200_000, 200_000),
        blocked(900_000, 1, 2_000_000),
        blocked(1_500_000, 1, 1_400_000),
        blocked(2_000_000, 1, 900_000),
        queued(2_900_000, 1, 0, 1_000_000, 0),
        deny(2_950_000, 1, 0, 950_000, 950_000),
        peek_op(2_950_000, 0, 950_000),
    ],
};

/// "Block after the quota is spent": L = 2, P = 1 s, sliding log, a penalty
/// `after(1).block_for(2 000 000 µs)` with no window (one rejection needs none). The
/// first rejection trips the box: blocked until 2 200 000; then the log is empty, two
/// more are admitted and the next rejection trips it again.
pub const SLIDING_WINDOW_LOG_FIRST_REJECTION_PENALTY: Scenario = Scenario {
    name: "sliding_window_log/penalty_on_the_first_rejection",
    quota: "2/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: Some((1, 0, 2_000_000)),
    steps: &[
        // [(0, 1)]; reset → 1 000 000
        ok(0, 1, 1, 1_000_000),
        // [(0, 1), (100 000, 1)]; reset → 1 100 000
        ok(100_000, 1, 0, 1_000_000),
        // Σ + 1 > 2: the 1st rejection trips, blocked until 2 200 000
        blocked(200_000, 1, 2_000_000),
        // the log empties at 1 100 000, the block holds
        blocked(1_200_000, 1, 1_000_000),
        // free, the log empty: [(2 200 000, 1)]
        ok(2_200_000, 1, 1, 1_000_000),
        ok(2_300_000, 1, 0, 1_000_000),
        // the count started over: the next rejection trips again
        blocked(2_400_000, 1, 2_000_000),
    ],
};
