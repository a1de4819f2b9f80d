//! Quota changes (DESIGN §3): a caller's usage carries over when the count or the burst
//! of its quota changes (`check_with`); a change of period starts fresh. Each table:
//! the limit's own 10/s, 8 used; upgraded to 100/s; back to 10/s; downgraded to 5/s;
//! (fluid algorithms) burst raised to 20; a quota over another period.

use super::{Algorithm, Scenario, deny, ok, peek, queued, under};

/// Window counts carry over as they are: remaining = L' − k.
pub const FIXED_WINDOW_QUOTA_CHANGES: Scenario = Scenario {
    name: "fixed_window/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // k = 8 of 10
        ok(0, 8, 2, 1_000_000),
        // upgraded: 100 − 8
        under("100/s", None, peek(0, 92, 1_000_000)),
        // k = 9: 100 − 9
        under("100/s", None, ok(0, 1, 91, 1_000_000)),
        // the limit's own again: 10 − 9; reset 1 000 000 − 40 000
        peek(40_000, 1, 960_000),
        // downgraded: 9 + 1 > 5, remaining max(5 − 9, 0); the next window
        under("5/s", None, deny(40_000, 1, 0, 960_000, 960_000)),
        // another period: a state of its own, fresh
        under("600/min", None, peek(40_000, 600, 0)),
        // w1 starts empty under 5/s: k = 5; reset → 2 000 000
        under("5/s", None, ok(1_000_000, 5, 0, 1_000_000)),
    ],
};

/// Counts carry over; the weights do not depend on the count.
pub const SLIDING_WINDOW_QUOTA_CHANGES: Scenario = Scenario {
    name: "sliding_window/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // k = 8; reset: next window, x > (8 − 0 − 1)·10^6/8 = 875 000 → 1 875 001
        ok(0, 8, 2, 1_875_001),
        under("100/s", None, peek(0, 92, 1_875_001)),
        // k = 9; reset: x > 8·10^6/9 = 888 888.9 → 1 888 889
        under("100/s", None, ok(0, 1, 91, 1_888_889)),
        // 10 − 9; reset 1 888 889 − 40 000
        peek(40_000, 1, 1_848_889),
        // 5/s: room L − c = 4; next window, x > (9 − 4 − 1)·10^6/9 = 444 444.4
        // → 1 444 445, − 40 000
        under("5/s", None, deny(40_000, 1, 0, 1_848_889, 1_404_445)),
        under("600/min", None, peek(40_000, 600, 0)),
    ],
};

/// Sub-window counts carry over.
pub const SLIDING_WINDOW_COUNTERS_QUOTA_CHANGES: Scenario = Scenario {
    name: "sliding_window_counters/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 10 },
    max_delay_us: None,
    penalty: None,
    steps: &[
        // s0 = 8; it leaves when s10 starts, 1 000 000
        ok(0, 8, 2, 1_000_000),
        under("100/s", None, peek(0, 92, 1_000_000)),
        under("100/s", None, ok(0, 1, 91, 1_000_000)),
        peek(40_000, 1, 960_000),
        // 5/s: 9 + 1 > 5 until s0 leaves
        under("5/s", None, deny(40_000, 1, 0, 960_000, 960_000)),
        // 600/min, sub-windows of 6 s: fresh
        under("600/min", None, peek(40_000, 600, 0)),
    ],
};

/// Log entries carry over.
pub const SLIDING_WINDOW_LOG_QUOTA_CHANGES: Scenario = Scenario {
    name: "sliding_window_log/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // (0, 8); leaves at 1 000 000
        ok(0, 8, 2, 1_000_000),
        under("100/s", None, peek(0, 92, 1_000_000)),
        // (0, 9)
        under("100/s", None, ok(0, 1, 91, 1_000_000)),
        peek(40_000, 1, 960_000),
        // 5/s: room when the entry at 0 leaves
        under("5/s", None, deny(40_000, 1, 0, 960_000, 960_000)),
        under("600/min", None, peek(40_000, 600, 0)),
    ],
};

/// 10/s: one token is 10^5 units, 1 unit/µs; 100/s: 10^4 units, 1/µs; 5/s: 2·10^5
/// units, 1/µs. Usage in whole tokens, rounded up, is owed again under the new quota.
pub const TOKEN_BUCKET_QUOTA_CHANGES: Scenario = Scenario {
    name: "token_bucket/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // d = 8·10^5; reset 8·10^5 µs
        ok(0, 8, 2, 800_000),
        // 8 tokens: d = 8·10^4 of 10^6; reset 8·10^4 µs
        under("100/s", None, peek(0, 92, 80_000)),
        // d = 9·10^4
        under("100/s", None, ok(0, 1, 91, 90_000)),
        // refilled 4·10^4 at 100/s: d = 5·10^4, 5 tokens → 5·10^5 of 10^6
        peek(40_000, 5, 500_000),
        // 5/s: d = 10^6 of 10^6; 10^6 + 4·10^5 > 10^6; retry (10^6 − 3·2·10^5)/1
        under("5/s", None, deny(40_000, 2, 0, 1_000_000, 400_000)),
        // burst 20 at 10/s: 5 tokens, d = 5·10^5 of 2·10^6: (2·10^6 − 5·10^5)/10^5
        under("10/s", Some(20), peek(40_000, 15, 500_000)),
        under("600/min", None, peek(40_000, 600, 0)),
    ],
};

/// 10/s: T = 100 ms; 100/s: 10 ms; 5/s: 200 ms. Usage (TAT − now)/T in whole
/// requests, rounded up, is owed again under the new T.
pub const GCRA_QUOTA_CHANGES: Scenario = Scenario {
    name: "gcra/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = 800 ms; floor((1000 − 800)/100)
        ok(0, 8, 2, 800_000),
        // 8 requests at 10 ms: TAT = 80 ms; floor((1000 − 80)/10)
        under("100/s", None, peek(0, 92, 80_000)),
        // TAT = 90 ms
        under("100/s", None, ok(0, 1, 91, 90_000)),
        // (90 − 40)/10 = 5: TAT = 40 + 500; floor((40 + 1000 − 540)/100)
        peek(40_000, 5, 500_000),
        // 5/s: 5 at 200 ms, TAT = 1040 ms; 1040 + 400 − 1000 > 40;
        // floor((40 + 1000 − 1040)/200); retry 1040 + 400 − 1000 − 40
        under("5/s", None, deny(40_000, 2, 0, 1_000_000, 400_000)),
        // burst 20 at 10/s: (1040 − 40)/200 = 5, TAT = 540; floor((40 + 2000 − 540)/100)
        under("10/s", Some(20), peek(40_000, 15, 500_000)),
        under("600/min", None, peek(40_000, 600, 0)),
    ],
};

/// As GCRA; the admitted request under 100/s waits for the queue ahead (80 ms).
pub const LEAKY_BUCKET_QUOTA_CHANGES: Scenario = Scenario {
    name: "leaky_bucket/quota",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        ok(0, 8, 2, 800_000),
        under("100/s", None, peek(0, 92, 80_000)),
        // served at max(TAT, now) = 80 ms
        under("100/s", None, queued(0, 1, 91, 90_000, 80_000)),
        peek(40_000, 5, 500_000),
        // the queue's start 1040 ms is within 5/s's default bound (1 s) of now: GCRA's
        // retry
        under("5/s", None, deny(40_000, 2, 0, 1_000_000, 400_000)),
        under("10/s", Some(20), peek(40_000, 15, 500_000)),
        under("600/min", None, peek(40_000, 600, 0)),
    ],
};
