//! Operating the key space: peek, penalize (a debt beyond the capacity), block (denied
//! until its end whatever the rate state: remaining 0, retry = reset = blocked = the
//! time left; a later block replaces it), reset (idle and unblocked). Each table: L = 5,
//! P = 1 s (token bucket, GCRA, leaky bucket: B = 5, T = 200 000 µs); 2 charged at 0,
//! 6 more by penalize at 100 000, a denial at 200 000, the debt partly repaid; blocked
//! 500 000 at 1 000 000 (resp. 1 100 000), re-blocked for 100 000 at + 200 000, free
//! again at its end; blocked for 2 s, then reset.

use super::{
    Algorithm, Scenario, block, blocked, deny, ok, peek_blocked, peek_op, penalize, queued, reset,
};

/// The count simply exceeds L and the next window starts empty.
pub const FIXED_WINDOW_OPERATIONS: Scenario = Scenario {
    name: "fixed_window/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        // k = 2; reset → 1 000 000
        ok(0, 2, 3, 1_000_000),
        // k = 8 > L: max(5 − 8, 0); reset 1 000 000 − 100 000
        penalize(100_000, 6, 0, 900_000),
        // 8 + 1 > 5: the next window
        deny(200_000, 1, 0, 800_000, 800_000),
        // w1 starts empty: the debt went with w0
        peek_op(1_000_000, 5, 0),
        // until 1 500 000
        block(1_000_000, 500_000),
        // 1 500 000 − 1 200 000, for a check and a peek alike
        blocked(1_200_000, 1, 300_000),
        peek_blocked(1_200_000, 300_000),
        // replaced: until 1 300 000
        block(1_200_000, 100_000),
        // the block ended at 1 300 000: k = 1 of w1; reset → 2 000 000
        ok(1_300_000, 1, 4, 700_000),
        block(1_300_000, 2_000_000),
        // idle and unblocked
        reset(1_400_000),
        peek_op(1_400_000, 5, 0),
        ok(1_400_000, 5, 0, 600_000),
    ],
};

/// The count exceeds L; its weight carries into the next window.
pub const SLIDING_WINDOW_OPERATIONS: Scenario = Scenario {
    name: "sliding_window/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        // k = 2; reset (c = L) in w1 with p = 2: floor(2·(P − e)/P) = 0 from
        // e > 500 000 → 1 500 001
        ok(0, 2, 3, 1_500_001),
        // k = 8: reset in w1 with p = 8: e > 7/8 P = 875 000 → 1 875 001 − 100 000
        penalize(100_000, 6, 0, 1_775_001),
        // room L − c = 4: in w1, floor(8·(P − e)/P) ≤ 4 from e > 375 000 →
        // 1 375 001 − 200 000; reset 1 875 001 − 200 000
        deny(200_000, 1, 0, 1_675_001, 1_175_001),
        // w1, e = 500 000: floor(8 · 0.5) = 4 → 5 − 4; reset 1 875 001 − 1 500 000
        peek_op(1_500_000, 1, 375_001),
        block(1_500_000, 500_000),
        blocked(1_700_000, 1, 300_000),
        peek_blocked(1_700_000, 300_000),
        block(1_700_000, 100_000),
        // free at 1 800 000: floor(8 · 0.2) = 1, 1 + 0 + 1 ≤ 5, k = 1 → 5 − 1 − 1;
        // reset (c = L) in w2 with p = 1: e > 0 → 2 000 001 − 1 800 000
        ok(1_800_000, 1, 3, 200_001),
        block(1_800_000, 2_000_000),
        reset(1_900_000),
        peek_op(1_900_000, 5, 0),
        // k = 5 of w1 (p = 0, the state is gone); reset in w2 with p = 5:
        // e > 4/5 P = 800 000 → 2 800 001 − 1 900 000
        ok(1_900_000, 5, 0, 900_001),
    ],
};

/// N = 5 sub-windows of 200 000 µs; the debt sits in its sub-window until it leaves.
pub const SLIDING_WINDOW_COUNTERS_OPERATIONS: Scenario = Scenario {
    name: "sliding_window_counters/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 5 },
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        // s0 = 2; it leaves when s5 starts, 1 000 000
        ok(0, 2, 3, 1_000_000),
        // s0 = 8 > L
        penalize(100_000, 6, 0, 900_000),
        // 8 + 1 > 5 until s0 leaves
        deny(200_000, 1, 0, 800_000, 800_000),
        // s1..s5 hold nothing
        peek_op(1_000_000, 5, 0),
        block(1_000_000, 500_000),
        blocked(1_200_000, 1, 300_000),
        peek_blocked(1_200_000, 300_000),
        block(1_200_000, 100_000),
        // s6 = 1; it leaves when s11 starts, 2 200 000
        ok(1_300_000, 1, 4, 900_000),
        block(1_300_000, 2_000_000),
        reset(1_400_000),
        peek_op(1_400_000, 5, 0),
        // s7 = 5; leaves at s12, 2 400 000
        ok(1_400_000, 5, 0, 1_000_000),
    ],
};

/// The debt is a log entry like any other; it leaves one period after it was made.
pub const SLIDING_WINDOW_LOG_OPERATIONS: Scenario = Scenario {
    name: "sliding_window_log/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        // (0, 2); leaves at 1 000 000
        ok(0, 2, 3, 1_000_000),
        // (100 000, 6): Σ = 8; the newest leaves at 1 100 000
        penalize(100_000, 6, 0, 1_000_000),
        // Σ ≤ 4 only when the entry at 100 000 leaves, 1 100 000
        deny(200_000, 1, 0, 900_000, 900_000),
        // both entries left
        peek_op(1_100_000, 5, 0),
        block(1_100_000, 500_000),
        blocked(1_300_000, 1, 300_000),
        peek_blocked(1_300_000, 300_000),
        block(1_300_000, 100_000),
        // (1 400 000, 1); leaves at 2 400 000
        ok(1_400_000, 1, 4, 1_000_000),
        block(1_400_000, 2_000_000),
        reset(1_500_000),
        peek_op(1_500_000, 5, 0),
        ok(1_500_000, 5, 0, 1_000_000),
    ],
};

/// τ may go below 0: a deficit beyond the burst that the refill repays.
pub const TOKEN_BUCKET_OPERATIONS: Scenario = Scenario {
    name: "token_bucket/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        // τ = 3; reset 2 × 200 000
        ok(0, 2, 3, 400_000),
        // τ = 3 + 0.5 − 6 = −2.5; reset (5 + 2.5) × 200 000
        penalize(100_000, 6, 0, 1_500_000),
        // τ = −2; retry (1 + 2) × 200 000; reset 7 × 200 000
        deny(200_000, 1, 0, 1_400_000, 600_000),
        // τ = −2 + 4 = 2; reset 3 × 200 000
        peek_op(1_000_000, 2, 600_000),
        block(1_000_000, 500_000),
        blocked(1_200_000, 1, 300_000),
        peek_blocked(1_200_000, 300_000),
        block(1_200_000, 100_000),
        // τ = 2 + 1.5 − 1 = 2.5; reset 2.5 × 200 000
        ok(1_300_000, 1, 2, 500_000),
        block(1_300_000, 2_000_000),
        reset(1_400_000),
        peek_op(1_400_000, 5, 0),
        ok(1_400_000, 5, 0, 1_000_000),
    ],
};

/// The TAT moves beyond now + B·T.
pub const GCRA_OPERATIONS: Scenario = Scenario {
    name: "gcra/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        // TAT = 400 000; floor((1 000 000 − 400 000)/T)
        ok(0, 2, 3, 400_000),
        // TAT = 400 000 + 6·T = 1 600 000 > 100 000 + B·T: remaining 0;
        // reset 1 600 000 − 100 000
        penalize(100_000, 6, 0, 1_500_000),
        // TAT + T − B·T = 800 000 > 200 000: retry 800 000 − 200 000
        deny(200_000, 1, 0, 1_400_000, 600_000),
        // floor((1 000 000 + 1 000 000 − 1 600 000)/T)
        peek_op(1_000_000, 2, 600_000),
        block(1_000_000, 500_000),
        blocked(1_200_000, 1, 300_000),
        peek_blocked(1_200_000, 300_000),
        block(1_200_000, 100_000),
        // TAT = 1 800 000; floor((1 300 000 + 1 000 000 − 1 800 000)/T)
        ok(1_300_000, 1, 2, 500_000),
        block(1_300_000, 2_000_000),
        reset(1_400_000),
        peek_op(1_400_000, 5, 0),
        ok(1_400_000, 5, 0, 1_000_000),
    ],
};

/// As GCRA; the request admitted behind the debt waits for it to drain.
pub const LEAKY_BUCKET_OPERATIONS: Scenario = Scenario {
    name: "leaky_bucket/ops",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek_op(0, 5, 0),
        queued(0, 2, 3, 400_000, 0),
        // a penalty is not served: no delay to report
        penalize(100_000, 6, 0, 1_500_000),
        // GCRA's retry (the queue's start 1 600 000 is within 1 s of 800 000)
        deny(200_000, 1, 0, 1_400_000, 600_000),
        peek_op(1_000_000, 2, 600_000),
        block(1_000_000, 500_000),
        blocked(1_200_000, 1, 300_000),
        peek_blocked(1_200_000, 300_000),
        block(1_200_000, 100_000),
        // served when the queue ahead drains, 1 600 000 − 1 300 000
        queued(1_300_000, 1, 2, 500_000, 300_000),
        block(1_300_000, 2_000_000),
        reset(1_400_000),
        peek_op(1_400_000, 5, 0),
        queued(1_400_000, 5, 0, 1_000_000, 0),
    ],
};
