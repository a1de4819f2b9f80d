//! [`Algorithm::Gcra`] (ns inside, `T = ceil(P_ns/L)`): admit iff
//! `max(TAT, now) + c·T − B·T ≤ now`; remaining `floor((now + B·T − max(TAT, now))/T)`;
//! reset `TAT − now`.

use super::{Algorithm, Scenario, deny, never, ok, peek, refund};

/// L = 10, P = 1 s, B = 5: T = 100 ms exactly, B·T = 500 ms.
pub const GCRA_EDGES: Scenario = Scenario {
    name: "gcra/edges",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 5, 0),
        // TAT = 0 + 100 = 100 ms; remaining floor((500 − 100)/100) = 4
        ok(0, 1, 4, 100_000),
        // 100 + 300 − 500 ≤ 0; TAT = 400 ms; floor(100/100) = 1
        ok(0, 3, 1, 400_000),
        // 400 + 200 − 500 = 100 ms > 0; retry 100 ms
        deny(0, 2, 1, 400_000, 100_000),
        never(0, 6, 1, 400_000),
        // 1 µs early: 100 ms > 99.999 ms; remaining floor(199.999/100) = 1;
        // reset 400 000 − 99 999
        deny(99_999, 2, 1, 300_001, 1),
        // 100 ≤ 100: TAT = 600 ms; floor((100 + 500 − 600)/100) = 0
        ok(100_000, 2, 0, 500_000),
        peek(100_000, 0, 500_000),
        // c = B: 600 + 500 − 500 = 600 ms; retry 500 ms = reset
        deny(100_000, 5, 0, 500_000, 500_000),
        // TAT 600 < now: 1000 + 500 − 500 ≤ 1000; TAT = 1500 ms
        ok(1_000_000, 5, 0, 500_000),
        // floor((1100.001 + 500 − 1500)/100) = 1; reset 1 500 000 − 1 100 001
        peek(1_100_001, 1, 399_999),
    ],
};

/// L = 3, P = 1 s, B = 3: T = ceil(10⁹/3) = 333 333 334 ns, B·T = 1 000 000 002 ns;
/// rounding of an inexact T, refunds, and a clock that goes back.
pub const GCRA_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "gcra/refund-backwards",
    quota: "3/s",
    burst: None,
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = 333 333 334 ns; floor((1 000 000 002 − 333 333 334)/T) = 2;
        // reset 333 333.334 µs → 333 334
        ok(0, 1, 2, 333_334),
        // 333 333 334 + 666 666 668 − 1 000 000 002 = 0 ≤ 0: TAT = 1 000 000 002 ns;
        // reset 1 000 000.002 µs → 1 000 001
        ok(0, 2, 0, 1_000_001),
        // TAT + T − B·T = 333 333 334 ns → 333 334 µs
        deny(0, 1, 0, 1_000_001, 333_334),
        // 333 333 334 > 333 333 000: retry 334 ns → 1 µs; remaining
        // floor(333 333 000/T) = 0; reset 1 000 001 − 333 333
        deny(333_333, 1, 0, 666_668, 1),
        // 333 333 334 ≤ 333 334 000: TAT = 1 333 333 336; remaining floor(666/T) = 0;
        // reset ceil(1 333 333.336) − 333 334
        ok(333_334, 1, 0, 1_000_000),
        // Back to 100 ms: max(TAT, now) = TAT; TAT + T − B·T = 666 666 668 ns >
        // 100 000 000: denied, retry 566 666 668 ns → 566 667; remaining 0;
        // reset 1 333 334 − 100 000
        deny(100_000, 1, 0, 1_233_334, 566_667),
        peek(100_000, 0, 1_233_334),
        // TAT = max(333 334 000, 1 333 333 336 − 666 666 668) = 666 666 668
        refund(333_334, 2),
        // floor((333 334 000 + 1 000 000 002 − 666 666 668)/T) = floor(666 667 334/T)
        // = 2; reset ceil(666 666.668) − 333 334 = 666 667 − 333 334
        peek(333_334, 2, 333_333),
        // 666 666 668 + T − B·T = 0: TAT = 1 000 000 002; remaining
        // floor(333 334 000/T) = 1; reset 1 000 001 − 333 334
        ok(333_334, 1, 1, 666_667),
        // TAT = max(now, TAT − 10T) = now: idle, not better
        refund(333_334, 10),
        peek(333_334, 3, 0),
        peek(2_000_000, 3, 0),
    ],
};

/// L = 3, P = 1 s, B = 3 (T = 333 333 334 ns): a request while the clock is behind
/// the latest instant seen, with quota left at that instant. The store treats the
/// clock as standing still at that instant (333 334 µs), so going back neither adds
/// nor removes quota; durations are measured from the caller's (earlier) `now`.
pub const GCRA_BACKWARDS_WITH_QUOTA_LEFT: Scenario = Scenario {
    name: "gcra/backwards-quota-left",
    quota: "3/s",
    burst: None,
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = 3T = 1 000 000 002 ns
        ok(0, 3, 0, 1_000_001),
        // 1 000 000 002 + T − B·T = 333 333 334 ≤ 333 334 000: TAT = 1 333 333 336;
        // reset ceil(1 333 333.336) − 333 334
        ok(333_334, 1, 0, 1_000_000),
        // TAT = max(333 334 000, 1 333 333 336 − 2T) = 666 666 668
        refund(333_334, 2),
        // floor((333 334 000 + B·T − 666 666 668)/T) = 2; reset 666 667 − 333 334
        peek(333_334, 2, 333_333),
        // Back to 100 ms, evaluated at 333 334 000 ns: 666 666 668 + T − B·T = 0 ≤ t:
        // TAT = 1 000 000 002; remaining floor((333 334 000 + B·T − TAT)/T) = 1;
        // reset ceil(1 000 000.002) − 100 000 (the caller's clock)
        ok(100_000, 1, 1, 900_001),
        // 1 000 000 002 + T − B·T = 333 333 334 ≤ 333 334 000: admitted, TAT =
        // 1 333 333 336; remaining floor(666/T) = 0; reset 1 333 334 − 100 000
        ok(100_000, 1, 0, 1_233_334),
        // 1 333 333 336 + T − B·T = 666 666 668 > 333 334 000: retry
        // ceil(666 666.668) − 100 000 = 566 667
        deny(100_000, 1, 0, 1_233_334, 566_667),
    ],
};
