//! [`Algorithm::SlidingWindow`]: used = `floor(p·(P−e)/P) + k`. For a previous count
//! `p` alone, `floor(p·(P−e)/P) ≤ r  ⇔  p·(P−e) < (r+1)·P`.

use super::{Algorithm, Scenario, deny, never, ok, peek, refund};

/// L = 10, P = 1 s: the weighted tail, its rounding down, and rolling windows.
pub const SLIDING_WINDOW_EDGES: Scenario = Scenario {
    name: "sliding_window/edges",
    quota: "10/s",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 10, 0),
        // w0: p = 0, k = 4. reset: never 0 in w0 (k = 4); in w1 p = 4:
        // 4(P−e) < P ⇔ e > 750 000 → e = 750 001 → 1 750 001
        ok(0, 4, 6, 1_750_001),
        // used 4 + 6 = 10 ≤ 10, k = 10. reset: in w1 p = 10: 10(P−e) < P ⇔
        // e > 900 000 → 1 900 001; 1 900 001 − 500 000
        ok(500_000, 6, 0, 1_400_001),
        // 1 µs before the edge: used 10. retry: need used ≤ 9; never in w0; in w1
        // 10(P−e) < 10P ⇔ e > 0 → 1 000 001 → 2. reset 1 900 001 − 999 999
        deny(999_999, 1, 0, 900_002, 2),
        // at the edge: p = 10, k = 0, e = 0 → used floor(10·P/P) = 10; retry → 1 000 001
        deny(1_000_000, 1, 0, 900_001, 1),
        // e = 1: floor(10·999 999/10⁶) = 9, + 1 = 10, k = 1. reset: never 0 in w1
        // (k = 1); in w2 p = 1: (P−e) < P ⇔ e > 0 → 2 000 001
        ok(1_000_001, 1, 0, 1_000_000),
        // e = 250 000: floor(10·750 000/10⁶) = 7, + k 1 = 8; 8 + 3 > 10. retry: need
        // floor(10(P−e)/P) ≤ 6 ⇔ 10(P−e) < 7P ⇔ e > 300 000 → 1 300 001 → 50 001.
        // reset → 2 000 001
        deny(1_250_000, 3, 2, 750_001, 50_001),
        // e = 300 001: floor(10·699 999/10⁶) = 6, + 1 + 3 = 10, k = 4.
        // reset: in w2 p = 4: e > 750 000 → 2 750 001; − 1 300 001
        ok(1_300_001, 3, 0, 1_450_000),
        // c > L
        never(1_300_001, 11, 0, 1_450_000),
        // c = L: retry when used = 0, i.e. the reset
        deny(1_300_001, 10, 0, 1_450_000, 1_450_000),
    ],
};

/// L = 20, P = 10 s: refunds from k then p, and a clock that goes back.
pub const SLIDING_WINDOW_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "sliding_window/refund-backwards",
    quota: "20 per 10 seconds",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // w0, k = 8. reset: in w1 p = 8: 8(P−e) < P ⇔ e > 8 750 000 → 18 750 001
        ok(9_000_000, 8, 12, 9_750_001),
        // w1, p = 8, k = 0, e = 2 000 000: floor(8·8/10) = 6 → remaining 14;
        // reset → 18 750 001
        peek(12_000_000, 14, 6_750_001),
        // 6 + 5 = 11, k = 5, remaining 9. reset: in w2 p = 5: 5(P−e) < P ⇔
        // e > 8 000 000 → 28 000 001
        ok(12_000_000, 5, 9, 16_000_001),
        // from k: k = 2
        refund(12_000_000, 3),
        // used 6 + 2 = 8. reset: in w2 p = 2: e > 5 000 000 → 25 000 001
        peek(12_000_000, 12, 13_000_001),
        // k 2 → 0, then p 8 → 6
        refund(12_000_000, 4),
        // floor(6·8/10) = 4 → 16. reset: in w1 (k = 0): 6(P−e) < P ⇔
        // e > 8 333 333.3 → 8 333 334 → 18 333 334
        peek(12_000_000, 16, 6_333_334),
        // c = L: 4 + 20 > 20; retry = reset
        deny(12_000_000, 20, 16, 6_333_334, 6_333_334),
        // 4 + 16 = 20, k = 16. reset: in w2 p = 16: 16(P−e) < P ⇔ e > 9 375 000
        // → 29 375 001
        ok(12_000_000, 16, 0, 17_375_001),
        // Back to 5 s (w0): stands at w1's start, e = 0: used 6 + 16 = 22 > L →
        // remaining 0. retry: need floor(6(P−e)/P) ≤ 3 ⇔ 6(P−e) < 4P ⇔
        // e > 3 333 333.3 → 13 333 334 − 5 000 000. reset 29 375 001 − 5 000 000
        deny(5_000_000, 1, 0, 24_375_001, 8_333_334),
        peek(5_000_000, 0, 24_375_001),
        // w2 edge: p = 16, k = 0, e = 0 → used 16; k = 4. reset: in w3 p = 4:
        // e > 7 500 000 → 37 500 001
        ok(20_000_000, 4, 0, 17_500_001),
        // w3 edge: p = 4, e = 0 → used 4
        peek(30_000_000, 16, 7_500_001),
        // w5: two windows on, p = k = 0
        peek(50_000_000, 20, 0),
    ],
};

/// L = 20, P = 10 s: a key refunded to zero while the clock is behind its window.
pub const SLIDING_WINDOW_BACKWARDS_EMPTY: Scenario = Scenario {
    name: "sliding_window/backwards-empty",
    quota: "20 per 10 seconds",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // w2, k = 4. reset: in w3 p = 4: 4(P−e) < P ⇔ e > 7 500 000 → 37 500 001
        ok(20_000_000, 4, 16, 17_500_001),
        // w3 edge: p = 4, k = 0, used 4 → 37 500 001
        peek(30_000_000, 16, 7_500_001),
        // back to 25 s: stands at w3's start, used 4; reset 37 500 001 − 25 000 000
        peek(25_000_000, 16, 12_500_001),
        // k = 0, then p 4 → 0
        refund(25_000_000, 4),
        // used 0: remaining is already L, so reset is 0
        peek(25_000_000, 20, 0),
    ],
};
