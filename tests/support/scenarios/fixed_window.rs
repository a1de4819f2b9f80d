//! [`Algorithm::FixedWindow`]: `k += c` while `k + c ≤ L`; retry/reset = start of the
//! next window − now.

use super::{Algorithm, Scenario, deny, never, ok, peek, refund};

/// L = 5, P = 1 s: edges, costs, peeks, retry and reset.
pub const FIXED_WINDOW_EDGES: Scenario = Scenario {
    name: "fixed_window/edges",
    quota: "5/s",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // no state: remaining L, reset 0
        peek(0, 5, 0),
        // w0, k = 2; reset → 1 000 000
        ok(0, 2, 3, 1_000_000),
        // k = 5; reset 1 000 000 − 250 000
        ok(250_000, 3, 0, 750_000),
        // 5 + 1 > 5; retry = reset = 1 000 000 − 400 000
        deny(400_000, 1, 0, 600_000, 600_000),
        // 6 > L: never fits, no retry
        never(400_000, 6, 0, 600_000),
        // 1 µs before the edge: still w0
        deny(999_999, 1, 0, 1, 1),
        // k = 5 − 2 = 3
        refund(999_999, 2),
        peek(999_999, 2, 1),
        // k = 5
        ok(999_999, 2, 0, 1),
        // at the edge: w1 starts empty; k = 4; reset → 2 000 000
        ok(1_000_000, 4, 1, 1_000_000),
        // 4 + 2 > 5; retry = reset = 2 000 000 − 1 000 001
        deny(1_000_001, 2, 1, 999_999, 999_999),
        // c = L waits for the next window too
        deny(1_000_001, 5, 1, 999_999, 999_999),
        // k = 5
        ok(1_000_001, 1, 0, 999_999),
        // w2: the count of w1 is gone, refund has nothing to return
        refund(2_100_000, 3),
        peek(2_100_000, 5, 0),
        // c = L from an empty window; reset 3 000 000 − 2 100 000
        ok(2_100_000, 5, 0, 900_000),
    ],
};

/// L = 3, P = 1 min: refunds, and a clock that goes back into the previous window.
pub const FIXED_WINDOW_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "fixed_window/refund-backwards",
    quota: "3/min",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // w0 = [0, 60 s): k = 2; reset → 60 000 000
        ok(59_000_000, 2, 1, 1_000_000),
        // w1 = [60 s, 120 s): k = 3; reset → 120 000 000
        ok(60_000_000, 3, 0, 60_000_000),
        // k = 2
        refund(61_000_000, 1),
        peek(61_000_000, 1, 59_000_000),
        // Back to 30 s, inside w0: the key stands at the start of w1 (k = 2), not in
        // w0 (where 1 would be left). 2 + 2 > 3; retry = reset = 120 000 000 − 30 000 000
        deny(30_000_000, 2, 1, 90_000_000, 90_000_000),
        // k = 3, charged to w1
        ok(30_000_000, 1, 0, 90_000_000),
        // 1 µs before w1 ends
        deny(119_999_999, 1, 0, 1, 1),
        // at the edge: w2 empty
        peek(120_000_000, 3, 0),
    ],
};

/// L = 3, P = 1 min: a key refunded to zero while the clock is behind its window.
pub const FIXED_WINDOW_BACKWARDS_EMPTY: Scenario = Scenario {
    name: "fixed_window/backwards-empty",
    quota: "3/min",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // w1: k = 3; reset → 120 000 000
        ok(60_000_000, 3, 0, 60_000_000),
        // back into w0: stands at w1's start; retry = reset = 120 000 000 − 30 000 000
        deny(30_000_000, 1, 0, 90_000_000, 90_000_000),
        // same window (w1): k = 0
        refund(30_000_000, 5),
        // k = 0: remaining is already L, so reset is 0 ("0 if k = 0"), however far back
        // the clock stands
        peek(30_000_000, 3, 0),
        // k = 1 in w1; reset measured from the real now: 120 000 000 − 30 000 000
        ok(30_000_000, 1, 2, 90_000_000),
    ],
};
