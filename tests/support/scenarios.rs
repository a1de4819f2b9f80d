//! Hand-computed scenario tables: the exact answer of every algorithm, step by step.
//!
//! Every expected value below was worked out by hand from the contract the crate
//! documents, not copied from the implementation: each algorithm's rule, notation
//! (`L`, `P`, `B`, `T = P/L`) and bound on [`tollgate::Algorithm`]; what `remaining`,
//! `reset_after`, `retry_after` and `delay` mean on the fields of
//! [`tollgate::Decision`]; refunds by receipt on [`tollgate::Limiter::refund_charge`].
//! The arithmetic is in the comment on each step. The tables are an independent check,
//! and every store (memory, Redis, Redis Cluster) must reproduce them to the
//! microsecond.
//!
//! Times are offsets in µs from [`BASE`], a multiple of 86 400 s, so windows of 1 s,
//! 10 s, 1 min, 1 h and 1 day all start there. In the comments, `e` is the offset in the
//! current window, `w0`, `w1`, … the windows, `s0`, `s1`, … the sub-windows, and
//! `→ X` gives the instant (offset) whose distance from the step's time is reported.
//!
//! Invoke [`scenario_tests!`](crate::scenario_tests) once per store, in the module
//! that should hold the tests, with anything callable as
//! `make_store(clock: ManualClock) -> impl Store` (a path or a closure):
//!
//! ```ignore
//! support::scenario_tests!(tollgate::MemoryStore::with_clock);
//! // or, e.g.: support::scenario_tests!(|clock| redis_store_for_test(clock))
//! ```

use std::error::Error;
use std::fmt::Write as _;
use std::time::Duration;

use tollgate::{Algorithm, Decision, Key, Limit, Limiter, ManualClock, Penalty, Quota, Store};

/// Every scenario starts here: 2023-11-14T00:00:00Z, a multiple of one day.
pub const BASE: Duration = Duration::from_secs(1_699_920_000);

/// One hand-computed scenario: a policy and the requests made under it, in order.
#[derive(Debug)]
pub struct Scenario {
    /// Also the policy's name, so failures and Redis keys say which table it is.
    pub name: &'static str,
    /// Parsed with `str::parse::<Quota>()`.
    pub quota: &'static str,
    /// Applied with `Quota::with_burst` (token bucket, GCRA and leaky bucket only).
    pub burst: Option<u64>,
    /// The algorithm under test.
    pub algorithm: Algorithm,
    /// Applied with `Limit::max_delay` (the leaky bucket's bound on delays, µs);
    /// `None` keeps the default, one period.
    pub max_delay_us: Option<u64>,
    /// Applied with `Limit::penalty`: `Penalty::after(n).within(p).block_for(d)` as
    /// `(n, p µs, d µs)`; `None`: no penalty box.
    pub penalty: Option<(u32, u64, u64)>,
    /// The requests and refunds, in order.
    pub steps: &'static [Step],
}

/// One request (or refund) at `BASE + at_us`.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// Offset from [`BASE`]; may be earlier than the previous step's (clock went back).
    pub at_us: u64,
    /// What is asked at that instant.
    pub op: Op,
}

/// What a step does.
#[derive(Debug, Clone, Copy)]
#[allow(
    missing_docs,
    reason = "each variant's fields are named in its own doc"
)]
pub enum Op {
    /// `Limiter::check(cost)`, or `Limiter::check_with(cost, quota)` when `quota` is
    /// a caller's own (quota notation and burst), and the decision it must return.
    Check {
        cost: u32,
        expect: Expect,
        quota: Option<(&'static str, Option<u64>)>,
    },
    /// `Limiter::refund(amount)`: the key's newest charges.
    Refund { amount: u32 },
    /// `Limiter::refund_charge(amount)` of the decision that step `of` (an earlier
    /// check) returned: that charge only, by its receipt.
    RefundCharge { of: usize, amount: u32 },
    /// `Limiter::peek`, and the decision it must return.
    Peek { expect: Expect },
    /// `Limiter::reset`: the key is idle and unblocked.
    Reset,
    /// `Limiter::block(us)`, and the decision it must return.
    Block { us: u64, expect: Expect },
    /// `Limiter::penalize(n)`, and the decision it must return.
    Penalize { n: u32, expect: Expect },
}

/// The expected decision of a check, durations in µs. `limit` is not listed: it is
/// always the capacity, derived from the scenario's quota and burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the `Decision` field of its name, in µs"
)]
pub struct Expect {
    pub allowed: bool,
    pub remaining: u64,
    pub reset_after_us: u64,
    pub retry_after_us: Option<u64>,
    pub delay_us: u64,
    pub blocked_us: Option<u64>,
}

// Step constructors, named for what the step expects, so a table reads as a story.

/// An admitted check without delay.
const fn ok(at_us: u64, cost: u32, remaining: u64, reset_after_us: u64) -> Step {
    queued(at_us, cost, remaining, reset_after_us, 0)
}

/// An admitted check with a delay (leaky bucket).
const fn queued(at_us: u64, cost: u32, remaining: u64, reset_after_us: u64, delay_us: u64) -> Step {
    check(at_us, cost, true, remaining, reset_after_us, None, delay_us)
}

/// A denied check that fits later, after exactly `retry_after_us`.
const fn deny(
    at_us: u64,
    cost: u32,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: u64,
) -> Step {
    check(
        at_us,
        cost,
        false,
        remaining,
        reset_after_us,
        Some(retry_after_us),
        0,
    )
}

/// A denied check whose cost exceeds the capacity: it can never fit.
const fn never(at_us: u64, cost: u32, remaining: u64, reset_after_us: u64) -> Step {
    check(at_us, cost, false, remaining, reset_after_us, None, 0)
}

/// A cost-0 check: always allowed, charges nothing, reports the current state.
const fn peek(at_us: u64, remaining: u64, reset_after_us: u64) -> Step {
    ok(at_us, 0, remaining, reset_after_us)
}

const fn refund(at_us: u64, amount: u32) -> Step {
    Step {
        at_us,
        op: Op::Refund { amount },
    }
}

/// A refund of `amount` of what the check at step `of` charged, by its receipt.
const fn refund_of(at_us: u64, of: usize, amount: u32) -> Step {
    Step {
        at_us,
        op: Op::RefundCharge { of, amount },
    }
}

const fn check(
    at_us: u64,
    cost: u32,
    allowed: bool,
    remaining: u64,
    reset_after_us: u64,
    retry_after_us: Option<u64>,
    delay_us: u64,
) -> Step {
    Step {
        at_us,
        op: Op::Check {
            cost,
            expect: Expect {
                allowed,
                remaining,
                reset_after_us,
                retry_after_us,
                delay_us,
                blocked_us: None,
            },
            quota: None,
        },
    }
}

/// What a blocked key answers, `left_us` before its block ends: denied, nothing
/// left, both waits the block's end.
const fn blocked_answer(left_us: u64) -> Expect {
    Expect {
        allowed: false,
        remaining: 0,
        reset_after_us: left_us,
        retry_after_us: Some(left_us),
        delay_us: 0,
        blocked_us: Some(left_us),
    }
}

/// A check of `cost` denied because the key is blocked for `left_us` more (or
/// because this very rejection tripped its penalty box).
const fn blocked(at_us: u64, cost: u32, left_us: u64) -> Step {
    Step {
        at_us,
        op: Op::Check {
            cost,
            expect: blocked_answer(left_us),
            quota: None,
        },
    }
}

/// `Limiter::peek` of a key that is not blocked (the answer of a cost-0 check).
const fn peek_op(at_us: u64, remaining: u64, reset_after_us: u64) -> Step {
    let Op::Check { expect, .. } = peek(at_us, remaining, reset_after_us).op else {
        unreachable!()
    };
    Step {
        at_us,
        op: Op::Peek { expect },
    }
}

/// `Limiter::peek` of a key blocked for `left_us` more.
const fn peek_blocked(at_us: u64, left_us: u64) -> Step {
    Step {
        at_us,
        op: Op::Peek {
            expect: blocked_answer(left_us),
        },
    }
}

/// `Limiter::block` for `us`: the key is blocked for exactly that.
const fn block(at_us: u64, us: u64) -> Step {
    Step {
        at_us,
        op: Op::Block {
            us,
            expect: blocked_answer(us),
        },
    }
}

/// `Limiter::penalize(n)`: charged whatever fits, answered as a peek.
const fn penalize(at_us: u64, n: u32, remaining: u64, reset_after_us: u64) -> Step {
    let Op::Check { expect, .. } = peek(at_us, remaining, reset_after_us).op else {
        unreachable!()
    };
    Step {
        at_us,
        op: Op::Penalize { n, expect },
    }
}

const fn reset(at_us: u64) -> Step {
    Step {
        at_us,
        op: Op::Reset,
    }
}

/// The check `step` made with the caller's own quota `quota` (and `burst`):
/// `Limiter::check_with`.
const fn under(quota: &'static str, burst: Option<u64>, step: Step) -> Step {
    match step.op {
        Op::Check { cost, expect, .. } => Step {
            at_us: step.at_us,
            op: Op::Check {
                cost,
                expect,
                quota: Some((quota, burst)),
            },
        },
        _ => step,
    }
}

// ---------------------------------------------------------------------------------------
// FixedWindow: k += c while k + c ≤ L; retry/reset = start of next window − now.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// SlidingWindow: used = floor(p·(P−e)/P) + k. For a previous count p alone,
// floor(p·(P−e)/P) ≤ r  ⇔  p·(P−e) < (r+1)·P.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// SlidingWindowCounters{N}: sum of sub-windows i−N+1 ..= i; at boundary j the
// sub-window j − N leaves.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// SlidingWindowLog: an entry (t, c) counts while now − t < P.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// TokenBucket: τ refills at L/P up to B; retry (c − τ)·P/L, reset (B − τ)·P/L.
// ---------------------------------------------------------------------------------------

/// L = 10, P = 1 s, B = 5: one token per 100 ms.
pub const TOKEN_BUCKET_EDGES: Scenario = Scenario {
    name: "token_bucket/edges",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // starts full: τ = 5
        peek(0, 5, 0),
        // τ = 2; reset 3 × 100 000
        ok(0, 3, 2, 300_000),
        // 2 < 3; retry (3 − 2) × 100 000
        deny(0, 3, 2, 300_000, 100_000),
        never(0, 6, 2, 300_000),
        // τ = 2 + 1.5 = 3.5 → 0.5; reset 4.5 × 100 000
        ok(150_000, 3, 0, 450_000),
        // retry (1 − 0.5) × 100 000
        deny(150_000, 1, 0, 450_000, 50_000),
        // τ = 0.5 + 0.49999 = 0.99999 < 1: retry 1 µs; reset 4.00001 × 100 000
        deny(199_999, 1, 0, 400_001, 1),
        // τ = 1 → 0; reset 5 × 100 000
        ok(200_000, 1, 0, 500_000),
        peek(200_000, 0, 500_000),
        // τ = min(5, 0 + 8) = 5 → 0
        ok(1_000_000, 5, 0, 500_000),
        // c = B: retry = reset
        deny(1_000_000, 5, 0, 500_000, 500_000),
        // τ = 2.50001 → 2; reset 2.49999 × 100 000
        peek(1_250_001, 2, 249_999),
    ],
};

/// L = 3, P = 1 s, B = 3: a token every 333 333.3 µs (exact rational, rounded up
/// only in the answer), and refunds.
pub const TOKEN_BUCKET_RATIONAL_AND_REFUND: Scenario = Scenario {
    name: "token_bucket/rational-refund",
    quota: "3/s",
    burst: None,
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // τ = 1; reset 2/3 s = 666 666.7 → 666 667
        ok(0, 2, 1, 666_667),
        // retry 1/3 s = 333 333.3 → 333 334
        deny(0, 2, 1, 666_667, 333_334),
        // τ = 1 + 0.3 = 1.3; retry 0.7/3 s = 233 333.3 → 233 334;
        // reset 1.7/3 s = 566 666.7 → 566 667
        deny(100_000, 2, 1, 566_667, 233_334),
        // τ = 2.3
        refund(100_000, 1),
        // τ = 0.3; reset 2.7/3 s = 900 000
        ok(100_000, 2, 0, 900_000),
        // 1 µs before the token: τ = 0.3 + 233 333 × 3/10⁶ = 0.999999; retry
        // 10⁻⁶/3 s → 1 µs; reset (3 − 0.999999)/3 s = 666 667
        deny(333_333, 1, 0, 666_667, 1),
        // τ = 0.3 + 0.700002 = 1.000002 → 0.000002; reset 2.999998/3 s =
        // 999 999.3 → 1 000 000
        ok(333_334, 1, 0, 1_000_000),
        // retry 0.999998/3 s = 333 332.7 → 333 333
        deny(333_334, 1, 0, 1_000_000, 333_333),
        // full again long after; a refund never makes it better than full
        refund(10_000_000, 2),
        peek(10_000_000, 3, 0),
    ],
};

/// L = 3, P = 1 s, B = 3: a clock behind the last refill refills nothing, so the
/// waits are measured from that refill and come out longer from the real now.
pub const TOKEN_BUCKET_BACKWARDS: Scenario = Scenario {
    name: "token_bucket/backwards",
    quota: "3/s",
    burst: None,
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // τ = 1; reset 2/3 s → 666 667
        ok(0, 2, 1, 666_667),
        // τ = 1 + 0.3 = 1.3 → 0.3 (last refill at 100 000); reset 2.7/3 s = 900 000
        ok(100_000, 1, 0, 900_000),
        // Back to 50 000: τ stays 0.3 until 100 000, then refills. Admitted at the
        // first µs x with 0.3 + (x − 100 000)·3/10⁶ ≥ 1 ⇔ x ≥ 333 333.3 → 333 334;
        // retry 333 334 − 50 000. Full at 100 000 + 900 000 → reset 950 000
        deny(50_000, 1, 0, 950_000, 283_334),
        peek(50_000, 0, 950_000),
        // check of the retry: at 333 334, τ = 0.3 + 0.700002 ≥ 1 → 0.000002;
        // reset 2.999998/3 s → 1 000 000
        ok(333_334, 1, 0, 1_000_000),
    ],
};

// ---------------------------------------------------------------------------------------
// Gcra (ns inside, T = ceil(P_ns/L)): admit iff max(TAT, now) + c·T − B·T ≤ now;
// remaining floor((now + B·T − max(TAT, now))/T); reset TAT − now.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// LeakyBucket: GCRA's rule with the queue's tail as TAT; delay = max(TAT, now) − now.
// ---------------------------------------------------------------------------------------

/// L = 10, P = 1 s, B = 3: T = 100 ms, B·T = 300 ms.
pub const LEAKY_BUCKET_EDGES: Scenario = Scenario {
    name: "leaky_bucket/edges",
    quota: "10/s",
    burst: Some(3),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 3, 0),
        // B requests at one instant: delays 0, T, 2T; TAT 100, 200, 300 ms
        queued(0, 1, 2, 100_000, 0),
        queued(0, 1, 1, 200_000, 100_000),
        queued(0, 1, 0, 300_000, 200_000),
        // 300 + 100 − 0 > 300; retry 300 + 100 − 300 − 0 = 100 ms
        deny(0, 1, 0, 300_000, 100_000),
        never(0, 4, 0, 300_000),
        // 1 µs early: 400 − 99.999 = 300.001 > 300; retry 1 µs; remaining
        // floor((99.999 + 300 − 300)/100) = 0; reset 300 000 − 99 999
        deny(99_999, 1, 0, 200_001, 1),
        // 400 − 100 = 300 ≤ 300: delay 300 − 100 = 200 ms, TAT 400 ms
        queued(100_000, 1, 0, 300_000, 200_000),
        // floor((250 + 300 − 400)/100) = 1; reset 400 − 250 ms
        peek(250_000, 1, 150_000),
        // 400 + 200 − 250 = 350 > 300; retry 400 + 200 − 300 − 250 = 50 ms
        deny(250_000, 2, 1, 150_000, 50_000),
        // 400 + 200 − 300 = 300 ≤ 300: delay 400 − 300 = 100 ms, TAT 600 ms
        queued(300_000, 2, 0, 300_000, 100_000),
        // idle again (TAT 600 < 1000): c = B from idle, delay 0, TAT 1300 ms
        queued(1_000_000, 3, 0, 300_000, 0),
    ],
};

/// L = 3, P = 1 s, B = 2: T = 333 333 334 ns, B·T = 666 666 668 ns; delays rounded
/// up to µs, refunds, and a clock that goes back.
pub const LEAKY_BUCKET_REFUND_AND_BACKWARDS: Scenario = Scenario {
    name: "leaky_bucket/refund-backwards",
    quota: "3/s",
    burst: Some(2),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = T; remaining floor((B·T − T)/T) = 1; reset 333 333.334 → 333 334
        queued(0, 1, 1, 333_334, 0),
        // T + T ≤ B·T: delay T = 333 333.334 → 333 334; TAT = 666 666 668;
        // reset 666 666.668 → 666 667
        queued(0, 1, 0, 666_667, 333_334),
        // retry 666 666 668 + T − B·T = 333 333 334 ns → 333 334
        deny(0, 1, 0, 666_667, 333_334),
        // c = B: retry 666 666 668 + 2T − B·T = 666 666 668 ns → 666 667 = reset
        deny(0, 2, 0, 666_667, 666_667),
        // TAT = max(0, 666 666 668 − T) = 333 333 334
        refund(0, 1),
        peek(0, 1, 333_334),
        // 333 333 334 + T − 200 000 000 = 466 666 668 ≤ B·T: delay
        // 133 333 334 ns → 133 334; TAT = 666 666 668; remaining floor(200 000 000/T)
        // = 0; reset 666 667 − 200 000
        queued(200_000, 1, 0, 466_667, 133_334),
        // Back to 100 ms: 666 666 668 + T − 100 000 000 = 900 000 002 > B·T; retry
        // 1 000 000 002 − B·T − 100 000 000 = 233 333 334 ns → 233 334;
        // reset 666 667 − 100 000
        deny(100_000, 1, 0, 566_667, 233_334),
        // 1 µs early: 1 000 000 002 − 333 333 000 = 666 667 002 > B·T; retry 334 ns → 1;
        // reset 666 667 − 333 333
        deny(333_333, 1, 0, 333_334, 1),
        // 1 000 000 002 − 333 334 000 = 666 666 002 ≤ B·T: delay 666 666 668 −
        // 333 334 000 = 333 332 668 ns → 333 333; TAT = 1 000 000 002;
        // reset 1 000 001 − 333 334
        queued(333_334, 1, 0, 666_667, 333_333),
        // TAT = max(333 334 000, 1 000 000 002 − 2T = 333 333 334) = 333 334 000 = now:
        // idle, not better
        refund(333_334, 2),
        peek(333_334, 2, 0),
        peek(5_000_000, 2, 0),
    ],
};

/// L = 10, P = 1 s, B = 2 (T = 100 ms, B·T = 200 ms): a request queued while the
/// clock is behind the latest instant seen; its delay runs on the caller's clock.
pub const LEAKY_BUCKET_BACKWARDS_DELAY: Scenario = Scenario {
    name: "leaky_bucket/backwards-delay",
    quota: "10/s",
    burst: Some(2),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = 100 ms; remaining floor((200 − 100)/100) = 1
        queued(0, 1, 1, 100_000, 0),
        // floor((50 + 200 − 100)/100) = 1; reset 100 − 50 ms
        peek(50_000, 1, 50_000),
        // Back to 20 ms: max(TAT, now) = 100; 100 + 100 − 20 = 180 ≤ 200: the request
        // waits for the queue ahead of it, delay 100 − 20 = 80 ms. TAT = 200 ms;
        // remaining floor((20 + 200 − 200)/100) = 0; reset 200 − 20 ms
        queued(20_000, 1, 0, 180_000, 80_000),
        // 200 + 100 − 200 − 20 = 80 ms
        deny(20_000, 1, 0, 180_000, 80_000),
    ],
};

/// L = 10, P = 1 s, B = 10 (T = 100 ms, B·T = 1 s), `max_delay` 250 ms: a place is
/// given only if the queue ahead drains within 250 ms, `start ≤ now + 250 ms`;
/// `remaining` counts the queue's free places as GCRA does.
pub const LEAKY_BUCKET_MAX_DELAY: Scenario = Scenario {
    name: "leaky_bucket/max-delay",
    quota: "10/s",
    burst: Some(10),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: Some(250_000),
    penalty: None,
    steps: &[
        peek(0, 10, 0),
        // start 0: delay 0, TAT 100 ms; remaining floor((1000 − 100)/100)
        queued(0, 1, 9, 100_000, 0),
        // start 100 ≤ 250: delay 100 ms, TAT 200
        queued(0, 1, 8, 200_000, 100_000),
        // start 200 ≤ 250: delay 200 ms, TAT 300
        queued(0, 1, 7, 300_000, 200_000),
        // start 300 > 250: denied, although GCRA's rule holds (300 + 100 ≤ 1000);
        // retry when 300 − 250 = 50 ms; nothing charged (reset still 300 ms)
        deny(0, 1, 7, 300_000, 50_000),
        // the bound is on when a request is served, whatever its cost
        deny(0, 2, 7, 300_000, 50_000),
        // 300 + 800 > 1000 too: GCRA's retry 300 + 800 − 1000 = 100 ms is the later
        deny(0, 8, 7, 300_000, 100_000),
        never(0, 11, 7, 300_000),
        // at the retry: start 300 ≤ 50 + 250, delay exactly 250 ms; TAT 400;
        // remaining floor((50 + 1000 − 400)/100) = 6; reset 400 − 50
        queued(50_000, 1, 6, 350_000, 250_000),
        // 1 µs early: start 400 > 399.999; retry 400 000 − 250 000 − 149 999 = 1 µs;
        // remaining floor((149.999 + 1000 − 400)/100) = 7; reset 400 000 − 149 999
        deny(149_999, 1, 7, 250_001, 1),
        // cost 4 served at 400 ≤ 150 + 250 (delay 250 ms) although its units drain
        // until 800: 800 ≤ 150 + 1000; TAT 800; remaining floor((1150 − 800)/100) = 3;
        // reset 800 − 150
        queued(150_000, 4, 3, 650_000, 250_000),
        // TAT = max(150, 800 − 400) = 400
        refund(150_000, 4),
        // floor((150 + 1000 − 400)/100) = 7; reset 400 − 150
        peek(150_000, 7, 250_000),
        // a place 250 ms away again: 400 ≤ 150 + 250; TAT 500
        queued(150_000, 1, 6, 350_000, 250_000),
        peek(1_000_000, 10, 0),
    ],
};

/// L = 1, P = 1 h, B = 1000 (T = 1 h, B·T = 1000 h), the default `max_delay` of one
/// period: the 1000th place would wait 999 h (41 days); the bound gives only the
/// places served within 1 h.
pub const LEAKY_BUCKET_DEFAULT_MAX_DELAY: Scenario = Scenario {
    name: "leaky_bucket/default-max-delay",
    quota: "1/h",
    burst: Some(1_000),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        peek(0, 1_000, 0),
        // delay 0, TAT 1 h
        queued(0, 1, 999, 3_600_000_000, 0),
        // start 1 h ≤ 0 + 1 h: delay 1 h, TAT 2 h
        queued(0, 1, 998, 7_200_000_000, 3_600_000_000),
        // start 2 h > 1 h: denied, retry 2 h − 1 h; nothing charged
        deny(0, 1, 998, 7_200_000_000, 3_600_000_000),
        // c = B: GCRA's rule too, 2 h + 1000 h − 1000 h = 2 h is the later
        deny(0, 1_000, 998, 7_200_000_000, 7_200_000_000),
        // at the retry: start 2 h ≤ 1 h + 1 h, delay 1 h; TAT 3 h; remaining
        // floor((1 h + 1000 h − 3 h)/1 h) = 998; reset 3 h − 1 h
        queued(3_600_000_000, 1, 998, 7_200_000_000, 3_600_000_000),
    ],
};

/// L = 10, P = 1 s, B = 3 (T = 100 ms), `max_delay` 0: only a request served at once is
/// admitted, so the queue never holds anyone.
pub const LEAKY_BUCKET_ZERO_MAX_DELAY: Scenario = Scenario {
    name: "leaky_bucket/zero-max-delay",
    quota: "10/s",
    burst: Some(3),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: Some(0),
    penalty: None,
    steps: &[
        // TAT 100 ms
        queued(0, 1, 2, 100_000, 0),
        // start 100 > 0: retry 100 − 0 = 100 ms, although GCRA's rule holds
        deny(0, 1, 2, 100_000, 100_000),
        // start 100 = now: served at once; TAT 200 ms; floor((100 + 300 − 200)/100)
        queued(100_000, 1, 2, 100_000, 0),
        // TAT = max(100, 200 − 100) = 100 ms: idle
        refund(100_000, 1),
        peek(100_000, 3, 0),
    ],
};

/// L = 10, P = 1 s, B = 2 (T = 100 ms, B·T = 200 ms), `max_delay` 60 ms: the bound is
/// measured from the latest instant the key's store has seen (the instant the rule
/// computes at), so a caller whose clock is behind it hears a longer delay (the layer
/// never holds a request longer than `max_delay` all the same).
pub const LEAKY_BUCKET_MAX_DELAY_BACKWARDS: Scenario = Scenario {
    name: "leaky_bucket/max-delay-backwards",
    quota: "10/s",
    burst: Some(2),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: Some(60_000),
    penalty: None,
    steps: &[
        // TAT 100 ms; floor((200 − 100)/100) = 1
        queued(0, 1, 1, 100_000, 0),
        // start 100 > 0 + 60: denied; retry 100 − 60
        deny(0, 1, 1, 100_000, 40_000),
        // floor((50 + 200 − 100)/100) = 1; reset 100 − 50
        peek(50_000, 1, 50_000),
        // Back to 20 ms, computed at 50 ms: start 100 ≤ 50 + 60, admitted; its delay
        // runs on the caller's clock, 100 − 20 = 80 ms. TAT 200; reset 200 − 20
        queued(20_000, 1, 0, 180_000, 80_000),
        // GCRA's rule fails (200 + 100 > 50 + 200), its retry at 100 ms; the bound's
        // at 200 − 60 = 140 ms, the later: 140 − 20 = 120 ms
        deny(20_000, 1, 0, 180_000, 120_000),
    ],
};

// ---------------------------------------------------------------------------------------
// Late refunds: a refund of one charge, by its receipt (`refund_of(at, step, amount)`
// takes back what the check at `step` charged). Only what of *that* charge the key
// still counts comes back: a charge is named by its decision's reset instant (its
// window, sub-window, log entry, or the end of its debt), and each table ends its
// charge's life in a later window, or repays it by time, before refunding it. A
// refund of the newest charges, as before, would take back a later charge instead
// (the comments say what it would have given).
// ---------------------------------------------------------------------------------------

/// L = 3, P = 1 min: a charge counts in its own window only.
pub const FIXED_WINDOW_LATE_REFUNDS: Scenario = Scenario {
    name: "fixed_window/late-refunds",
    quota: "3/min",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // w0: k = 1; reset → 60 000 000
        ok(59_000_000, 1, 2, 1_000_000),
        // k = 2
        ok(59_500_000, 1, 1, 500_000),
        // step 1's window is this one: k = 1
        refund_of(59_600_000, 1, 1),
        peek(59_600_000, 2, 400_000),
        // w1: k = 3; reset → 120 000 000
        ok(60_000_000, 3, 0, 60_000_000),
        // step 0 was charged in w0, which has ended: nothing comes back (a refund of
        // the newest charge would have taken one of w1's, leaving 1)
        refund_of(60_100_000, 0, 1),
        deny(60_100_000, 1, 0, 59_900_000, 59_900_000),
        // step 4's own window: k = 1
        refund_of(60_200_000, 4, 2),
        peek(60_200_000, 2, 59_800_000),
        // a denial (step 6) and a peek (step 8) charged nothing: no receipt, nothing back
        refund_of(60_200_000, 6, 1),
        refund_of(60_200_000, 8, 1),
        peek(60_200_000, 2, 59_800_000),
        // Back to 30 s (w0): the key stands at w1's start, so the charge goes to w1:
        // k = 2; reset 120 000 000 − 30 000 000
        ok(30_000_000, 1, 1, 90_000_000),
        // its receipt names w1, where it is: k = 1
        refund_of(30_000_000, 12, 1),
        peek(30_000_000, 2, 90_000_000),
        // w2: k = 3; reset → 180 000 000
        ok(120_000_000, 3, 0, 60_000_000),
        // step 12 (w1) is gone: nothing from w2
        refund_of(120_500_000, 12, 1),
        deny(120_500_000, 1, 0, 59_500_000, 59_500_000),
    ],
};

/// L = 10, P = 10 s: a charge is in `k` during its window, in `p` during the next,
/// and nowhere after.
pub const SLIDING_WINDOW_LATE_REFUNDS: Scenario = Scenario {
    name: "sliding_window/late-refunds",
    quota: "10 per 10 seconds",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // w0: k = 4. reset: in w1 p = 4: 4(P−e) < P ⇔ e > 7 500 000 → 17 500 001
        ok(9_000_000, 4, 6, 8_500_001),
        // k = 6. reset: 6(P−e) < P ⇔ e > 8 333 333.3 → 18 333 334
        ok(9_500_000, 2, 4, 8_833_334),
        // step 1's reset 18 333 334 names w0, this window: from k, k = 4
        refund_of(9_600_000, 1, 2),
        // reset → 17 500 001
        peek(9_600_000, 6, 7_900_001),
        // w1, p = 4, e = 2 000 000: floor(4·8/10) = 3; 3 + 3 ≤ 10, k = 3, remaining 4.
        // reset: in w2 p = 3: 3(P−e) < P ⇔ e > 6 666 666.7 → 26 666 667
        ok(12_000_000, 3, 4, 14_666_667),
        // step 0 (w0, reset 17 500 001) is in p now: p = 0 (the newest charges would
        // have been step 4's, from k)
        refund_of(12_000_000, 0, 4),
        // used 0 + 3; reset → 26 666 667
        peek(12_000_000, 7, 14_666_667),
        // w2, p = 3, e = 1 000 000: floor(3·9/10) = 2; 2 + 8 ≤ 10, k = 8, remaining 0.
        // reset: in w3 p = 8: 8(P−e) < P ⇔ e > 8 750 000 → 38 750 001
        ok(21_000_000, 8, 0, 17_750_001),
        // step 4 (w1) is in p: p = 0
        refund_of(21_000_000, 4, 3),
        peek(21_000_000, 2, 17_750_001),
        // w3, p = 8, e = 0: used 8. reset: in w3 (k = 0): e > 8 750 000 → 38 750 001
        peek(30_000_000, 2, 8_750_001),
        // w4: p = 0 (w3 charged nothing), k = 5. reset: in w5 p = 5: 5(P−e) < P ⇔
        // e > 8 000 000 → 58 000 001
        ok(41_000_000, 5, 5, 17_000_001),
        // step 7 (w2) counts nowhere now: nothing back (the newest charges would have
        // been step 11's)
        refund_of(41_000_000, 7, 8),
        peek(41_000_000, 5, 17_000_001),
        // w5, p = 5, e = 1 000 000: floor(5·9/10) = 4; k = 2, remaining 4. reset: in w6
        // p = 2: 2(P−e) < P ⇔ e > 5 000 000 → 65 000 001
        ok(51_000_000, 2, 4, 14_000_001),
        // the newest charges: k = 1
        refund(51_000_000, 1),
        // step 14's receipt takes from k only, where it is: k = 0, p stays 5 (a refund
        // of the newest 2 would have spilled into p: remaining 7)
        refund_of(51_000_000, 14, 2),
        // used 4. reset: in w5 (k = 0): 5(P−e) < P ⇔ e > 8 000 000 → 58 000 001
        peek(51_000_000, 6, 7_000_001),
    ],
};

/// L = 12, P = 1 min, N = 6 (10 s sub-windows): a charge comes back from its own
/// sub-window only, while that is in the window.
pub const SLIDING_WINDOW_COUNTERS_LATE_REFUNDS: Scenario = Scenario {
    name: "sliding_window_counters/late-refunds",
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
        // s3 = 2, sum 11. reset: s3 leaves at 9 → 90 000 000
        ok(35_000_000, 2, 1, 55_000_000),
        // step 0's reset 60 000 000 names s0 (6 − 6): s0 = 0, sum 7 (the newest
        // charges would have come from s3, then s2)
        refund_of(35_000_000, 0, 4),
        // reset: s2 leaves at 8 → 2, s3 at 9 → 0 → 90 000 000
        peek(35_000_000, 5, 55_000_000),
        // s6: s1..s6 = 5 + 2 = 7; s6 = 5, sum 12. reset: 8 → 7, 9 → 5, 12 → 0 →
        // 120 000 000
        ok(61_000_000, 5, 0, 59_000_000),
        // s8: s3..s8 = 2 + 5 = 7 (s2 left at 8); s8 = 5, sum 12. reset: 9 → 10,
        // 12 → 5, 14 → 0 → 140 000 000
        ok(85_000_000, 5, 0, 55_000_000),
        // step 1 was s2, which has left: nothing back
        refund_of(85_000_000, 1, 5),
        // sum ≤ 11 at 9 (s3 leaves) → 90 000 000
        deny(85_000_000, 1, 0, 55_000_000, 5_000_000),
        // step 2 is s3, still in the window: s3 = 1, sum 11
        refund_of(85_000_000, 2, 1),
        peek(85_000_000, 1, 55_000_000),
        // Back to 70 s (s7): the key stands at s8, so the charge goes to s8 = 6, sum 12;
        // reset 140 000 000 − 70 000 000
        ok(70_000_000, 1, 0, 70_000_000),
        // its receipt (140 000 000) names s8: s8 = 5, sum 11
        refund_of(70_000_000, 11, 1),
        peek(70_000_000, 1, 70_000_000),
    ],
};

/// L = 4, P = 10 s: a charge comes back from its own log entry only, while that is in
/// the log.
pub const SLIDING_WINDOW_LOG_LATE_REFUNDS: Scenario = Scenario {
    name: "sliding_window_log/late-refunds",
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
        // step 0's reset 11 000 000 names the entry at 1 s: [(3 s, 2)] (the newest
        // charge was step 1's)
        refund_of(4_000_000, 0, 1),
        peek(4_000_000, 2, 9_000_000),
        // [(3 s, 2), (8 s, 2)]; reset → 18 000 000
        ok(8_000_000, 2, 0, 10_000_000),
        // (3 s, 2) leaves at 13 s: [(8 s, 2), (13 s, 2)]; reset → 23 000 000
        ok(13_000_000, 2, 0, 10_000_000),
        // step 1's entry (3 s) has left: nothing back (the newest was step 5's)
        refund_of(13_000_000, 1, 2),
        // room when (8 s, 2) leaves → 18 000 000
        deny(13_000_000, 1, 0, 10_000_000, 5_000_000),
        // step 4's entry: [(8 s, 1), (13 s, 2)]
        refund_of(13_000_000, 4, 1),
        peek(13_000_000, 1, 10_000_000),
        // step 5's entry, the newest, goes: [(8 s, 1)]; reset → 18 000 000
        refund_of(13_000_000, 5, 2),
        peek(13_000_000, 3, 5_000_000),
        // (8 s, 1) leaves at 18 s: empty
        peek(18_000_000, 4, 0),
        // [(18 s, 1)]; reset → 28 000 000
        ok(18_000_000, 1, 3, 10_000_000),
        // Back to 15 s: stands at 18 s, the charge joins (18 s, ·): [(18 s, 3)];
        // reset 28 000 000 − 15 000 000
        ok(15_000_000, 2, 1, 13_000_000),
        // its receipt (28 000 000) names the entry at 18 s: [(18 s, 1)]
        refund_of(15_000_000, 14, 2),
        peek(15_000_000, 3, 13_000_000),
    ],
};

/// L = 10, P = 1 s, B = 5: one token (100 000 units) per 100 ms, one unit per µs, so
/// every reset instant is exact. The refill repays the oldest deficit first; a charge
/// gives back only what of it is still owed.
pub const TOKEN_BUCKET_LATE_REFUNDS: Scenario = Scenario {
    name: "token_bucket/late-refunds",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // deficit 200 000 (units); owed until 200 000
        ok(0, 2, 3, 200_000),
        // deficit 300 000; owed until 300 000
        ok(0, 1, 2, 300_000),
        // deficit 300 000 − 250 000 = 50 000, + 200 000; owed until 500 000
        ok(250_000, 2, 2, 250_000),
        // step 0 was repaid at 200 000: nothing back (the newest 2 tokens would have
        // left a deficit of 50 000)
        refund_of(250_000, 0, 2),
        // step 1 owes 300 000 − 250 000 = 50 000 units of its 100 000: deficit 200 000
        refund_of(250_000, 1, 1),
        peek(250_000, 3, 200_000),
        // step 2, refunded at the instant it was made, owes all 200 000: deficit 0
        refund_of(250_000, 2, 2),
        peek(250_000, 5, 0),
    ],
};

/// L = 3, P = 1 s, B = 3: one token is 10⁶ units, 3 units refill per µs, so a reset
/// instant is rounded up (by up to 2 units) and a partly repaid charge gives back up
/// to 2 units less than exact: the limiter's favour.
pub const TOKEN_BUCKET_LATE_REFUNDS_RATIONAL: Scenario = Scenario {
    name: "token_bucket/late-refunds-rational",
    quota: "3/s",
    burst: None,
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // deficit 10⁶; reset ceil(10⁶/3) = 333 334
        ok(0, 1, 2, 333_334),
        // deficit 2·10⁶; reset ceil(2·10⁶/3) = 666 667
        ok(0, 1, 1, 666_667),
        // deficit 2·10⁶ − 300 000 = 1 700 000. step 0 owes (333 334 − 100 000)·3 − 2
        // = 700 000 (exact: 10⁶ − 300 000): deficit 1 000 000
        refund_of(100_000, 0, 1),
        // reset ceil(10⁶/3)
        peek(100_000, 2, 333_334),
        // step 1 owes (666 667 − 100 000)·3 − 2 = 1 699 999 ≥ 10⁶: a whole token back
        refund_of(100_000, 1, 1),
        peek(100_000, 3, 0),
    ],
};

/// L = 10, P = 1 s, B = 5: T = 100 ms. Time repays the debt up to the TAT oldest
/// first; a charge gives back only what of it is still owed.
pub const GCRA_LATE_REFUNDS: Scenario = Scenario {
    name: "gcra/late-refunds",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = 200 ms: step 0's debt is [0, 200 ms]
        ok(0, 2, 3, 200_000),
        // TAT = 300 ms: step 1's debt is [200, 300 ms]
        ok(0, 1, 2, 300_000),
        // 300 + 200 ≤ 250 + 500: TAT = 500 ms; floor((250 + 500 − 500)/100) = 2
        ok(250_000, 2, 2, 250_000),
        // step 0 was repaid at 200 ms: nothing back (the newest would have been step
        // 2's, TAT 300 ms)
        refund_of(250_000, 0, 2),
        // step 1 still owes 300 − 250 = 50 ms of its 100: TAT = 450 ms
        refund_of(250_000, 1, 1),
        // floor((250 + 500 − 450)/100) = 3; reset 450 − 250
        peek(250_000, 3, 200_000),
        // step 2, refunded at the instant it was made, owes all 200 ms: TAT = 250 ms =
        // now, idle
        refund_of(250_000, 2, 2),
        peek(250_000, 5, 0),
    ],
};

/// L = 3, P = 1 s, B = 3: T = 333 333 334 ns, not a whole µs, so a reset instant is
/// the charge's end rounded up to the µs: a partly repaid charge gives back up to
/// 999 ns less than exact (the limiter's favour); at the instant it was made, exactly
/// its cost.
pub const GCRA_LATE_REFUNDS_INEXACT: Scenario = Scenario {
    name: "gcra/late-refunds-inexact",
    quota: "3/s",
    burst: None,
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // TAT = T = 333 333 334 ns; reset 333 334
        ok(0, 1, 2, 333_334),
        // TAT = 666 666 668; reset 666 667
        ok(0, 1, 1, 666_667),
        // at the instant it was made, step 1 owes all of T: TAT = 333 333 334
        refund_of(0, 1, 1),
        peek(0, 2, 333_334),
        // TAT = 666 666 668 again; reset 666 667
        ok(0, 1, 1, 666_667),
        // step 0 owes (333 334 − 200 000) µs − 999 ns = 133 333 001 ns (exact:
        // 133 333 334): TAT = 666 666 668 − 133 333 001 = 533 333 667;
        // floor((200 000 000 + 1 000 000 002 − 533 333 667)/T) = floor(666 666 335/T)
        // = 1 (exact: 2); reset ceil(533 333.667) − 200 000
        refund_of(200_000, 0, 1),
        peek(200_000, 1, 333_334),
        // step 4 owes (666 667 − 200 000) µs − 999 ns ≥ T: TAT − T = 200 000 333 ns;
        // floor(999 999 669/T) = 2; reset ceil(200 000.333) − 200 000
        refund_of(200_000, 4, 1),
        peek(200_000, 2, 1),
        // 333 ns later than exact, idle
        peek(200_001, 3, 0),
    ],
};

/// L = 10, P = 1 s, B = 3: T = 100 ms. A queued request's place in the queue is its
/// debt; once the queue has moved past it, its refund gives back nothing.
pub const LEAKY_BUCKET_LATE_REFUNDS: Scenario = Scenario {
    name: "leaky_bucket/late-refunds",
    quota: "10/s",
    burst: Some(3),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // places [0, 100], [100, 200], [200, 300] ms
        queued(0, 1, 2, 100_000, 0),
        queued(0, 1, 1, 200_000, 100_000),
        queued(0, 1, 0, 300_000, 200_000),
        // step 0's place was drained at 100 ms: nothing back (the newest would have
        // freed a place)
        refund_of(150_000, 0, 1),
        // step 1 still owes 200 − 150 = 50 ms, but step 2's place (served at 200 ms)
        // is still ahead and step 1 is not the newest charge: taking 50 ms off the
        // TAT's end would serve the next request at 250 ms, 50 ms after step 2's.
        // Nothing back (issue 23, item 6): TAT stays 300 ms
        refund_of(150_000, 1, 1),
        // floor((150 + 300 − 300)/100) = 1; reset 300 − 150
        peek(150_000, 1, 150_000),
        // 300 + 100 ≤ 150 + 300: delay 300 − 150, TAT = 400 ms
        queued(150_000, 1, 0, 250_000, 150_000),
        // the newest charge, refunded at the instant it was made: its whole place,
        // TAT = 300 ms
        refund_of(150_000, 6, 1),
        peek(150_000, 1, 150_000),
    ],
};

// ---------------------------------------------------------------------------------------
// Quota changes (DESIGN §3): a caller's usage carries over when the count or the burst
// of its quota changes (`check_with`); a change of period starts fresh. Each table:
// the limit's own 10/s, 8 used; upgraded to 100/s; back to 10/s; downgraded to 5/s;
// (fluid algorithms) burst raised to 20; a quota over another period.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Operating the key space: peek, penalize (a debt beyond the capacity), block (denied
// until its end whatever the rate state: remaining 0, retry = reset = blocked = the
// time left; a later block replaces it), reset (idle and unblocked). Each table: L = 5,
// P = 1 s (token bucket, GCRA, leaky bucket: B = 5, T = 200 000 µs); 2 charged at 0,
// 6 more by penalize at 100 000, a denial at 200 000, the debt partly repaid; blocked
// 500 000 at 1 000 000 (resp. 1 100 000), re-blocked for 100 000 at + 200 000, free
// again at its end; blocked for 2 s, then reset.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Penalty box: after(3).within(500 000 µs).block_for(2 000 000 µs), L = 1, P = 1 s
// (token bucket, GCRA, leaky bucket: B = 1, T = 1 s). One admission at 0; rejections at
// 100 000 and 200 000 (the window opened at 100 000 closes at 600 000), a third at
// 700 000 starts a new count (1), 800 000 (2), 900 000 (3) trips: blocked until
// 2 900 000. Rejections while blocked neither count nor extend it. Free at 2 900 000,
// where the rate state is idle again; the count started over, so one more rejection
// does not block.
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// The runner.
// ---------------------------------------------------------------------------------------

/// What a decision said, in the same shape as [`Expect`] plus the capacity.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    limit: u64,
    expect: Expect,
}

/// The scenario's limit, and its capacity.
fn limit_of(scenario: &Scenario) -> Result<(Limit, u64), Box<dyn Error>> {
    let mut quota: Quota = scenario.quota.parse()?;
    if let Some(burst) = scenario.burst {
        quota = quota.with_burst(burst)?;
    }
    let capacity = scenario.burst.unwrap_or(quota.limit());
    let mut policy = Limit::new(scenario.name, quota)?.algorithm(scenario.algorithm);
    if let Some(max_delay_us) = scenario.max_delay_us {
        policy = policy.max_delay(Duration::from_micros(max_delay_us));
    }
    if let Some((after, within_us, block_us)) = scenario.penalty {
        policy = policy.penalty(
            Penalty::after(after)
                .within(Duration::from_micros(within_us))
                .block_for(Duration::from_micros(block_us)),
        );
    }
    Ok((policy, capacity))
}

/// A caller's own quota (notation and burst), and its capacity under `algorithm`.
fn own_quota(
    algorithm: Algorithm,
    notation: &str,
    burst: Option<u64>,
) -> Result<(Quota, u64), Box<dyn Error>> {
    let mut own: Quota = notation.parse()?;
    if let Some(burst) = burst {
        own = own.with_burst(burst)?;
    }
    let capacity = match algorithm {
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => own.burst(),
        _ => own.limit(),
    };
    Ok((own, capacity))
}

/// What `decision` says, in the shape of the tables.
fn seen(decision: &Decision) -> Result<Seen, String> {
    Ok(Seen {
        limit: decision.limit,
        expect: Expect {
            allowed: decision.allowed,
            remaining: decision.remaining,
            reset_after_us: micros(decision.reset_after)?,
            retry_after_us: decision.retry_after.map(micros).transpose()?,
            delay_us: micros(decision.delay)?,
            blocked_us: decision.blocked_for.map(micros).transpose()?,
        },
    })
}

/// Runs `scenario` against a fresh store built by `make_store`, then fails listing
/// every step whose decision differs from the table (later steps may differ only
/// because an earlier one did; the first is the one to read).
pub async fn run<S: Store>(
    scenario: &Scenario,
    make_store: impl FnOnce(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    let clock = ManualClock::new(BASE);
    let (policy, capacity) = limit_of(scenario)?;
    let limiter = Limiter::builder()
        .limit(policy)
        .store(make_store(clock.clone()))
        .build()?;
    let key = Key::from("scenario-subject");
    let mut failures = String::new();
    // Each check's decision, by step, for the refunds of its charge.
    let mut decisions: Vec<Option<Decision>> = Vec::new();
    for (index, step) in scenario.steps.iter().enumerate() {
        clock.set(BASE + Duration::from_micros(step.at_us));
        decisions.push(None);
        let (decision, capacity, expect, cost) = match step.op {
            Op::Refund { amount } => {
                limiter.refund(scenario.name, &key, amount).await?;
                continue;
            }
            Op::RefundCharge { of, amount } => {
                let decision = decisions
                    .get(of)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| format!("step {index} refunds step {of}, not a check"))?;
                limiter.refund_charge(decision, &key, amount).await?;
                continue;
            }
            Op::Reset => {
                limiter.reset(scenario.name, &key).await?;
                continue;
            }
            Op::Peek { expect } => (
                limiter.peek(scenario.name, &key).await?,
                capacity,
                expect,
                0,
            ),
            Op::Block { us, expect } => (
                limiter
                    .block(scenario.name, &key, Duration::from_micros(us))
                    .await?,
                capacity,
                expect,
                0,
            ),
            Op::Penalize { n, expect } => (
                limiter.penalize(scenario.name, &key, n).await?,
                capacity,
                expect,
                n,
            ),
            Op::Check {
                cost,
                expect,
                quota: caller,
            } => match caller {
                None => (
                    limiter.check(scenario.name, &key, cost).await?,
                    capacity,
                    expect,
                    cost,
                ),
                Some((notation, burst)) => {
                    let (own, capacity) = own_quota(scenario.algorithm, notation, burst)?;
                    let decision = limiter.check_with(scenario.name, &key, cost, own).await?;
                    (decision, capacity, expect, cost)
                }
            },
        };
        let seen = seen(&decision)?;
        let want = Seen {
            limit: capacity,
            expect,
        };
        if seen != want || decision.policy != scenario.name {
            writeln!(
                failures,
                "  step {index} (at {} µs, {:?}, cost {cost}):\n    expected {want:?}\n    \
                 got      {seen:?} (policy {:?})",
                step.at_us, step.op, decision.policy
            )?;
        }
        decisions[index] = Some(decision);
    }
    assert!(
        failures.is_empty(),
        "scenario {:?} ({}, {}) differs from its table:\n{failures}",
        scenario.name,
        scenario.algorithm,
        scenario.quota
    );
    Ok(())
}

/// A decision's duration in whole µs; a fraction of a µs would break the contract
/// that durations are rounded up to whole microseconds.
fn micros(d: Duration) -> Result<u64, String> {
    if !d.subsec_nanos().is_multiple_of(1_000) {
        return Err(format!("{d:?} is not a whole number of microseconds"));
    }
    u64::try_from(d.as_micros()).map_err(|e| e.to_string())
}

/// Expands to one `#[tokio::test]` per scenario of [`scenarios`](crate::scenarios),
/// each on a fresh store built by `$make_store` (callable as
/// `make_store(clock: ManualClock) -> impl Store`). The invoking crate needs `tokio`
/// with its `macros` feature.
#[macro_export]
macro_rules! scenario_tests {
    ($make_store:expr) => {
        $crate::scenario_tests!(@each $make_store;
            fixed_window_counts_per_window_and_waits_for_the_edge
                => FIXED_WINDOW_EDGES,
            fixed_window_refunds_and_holds_a_backwards_clock_at_the_window_start
                => FIXED_WINDOW_REFUND_AND_BACKWARDS,
            fixed_window_empty_key_behind_its_window_resets_now
                => FIXED_WINDOW_BACKWARDS_EMPTY,
            sliding_window_weights_the_previous_window_rounding_down
                => SLIDING_WINDOW_EDGES,
            sliding_window_refunds_current_then_previous_and_never_gains_going_back
                => SLIDING_WINDOW_REFUND_AND_BACKWARDS,
            sliding_window_empty_key_behind_its_window_resets_now
                => SLIDING_WINDOW_BACKWARDS_EMPTY,
            sliding_window_counters_release_counts_at_sub_window_boundaries
                => SLIDING_WINDOW_COUNTERS_EDGES,
            sliding_window_counters_refund_newest_and_charge_where_the_key_stands
                => SLIDING_WINDOW_COUNTERS_REFUND_AND_BACKWARDS,
            sliding_window_counters_empty_key_behind_its_sub_window_resets_now
                => SLIDING_WINDOW_COUNTERS_BACKWARDS_EMPTY,
            sliding_window_log_entries_leave_exactly_one_period_later
                => SLIDING_WINDOW_LOG_EDGES,
            sliding_window_log_refunds_newest_and_keeps_future_entries
                => SLIDING_WINDOW_LOG_REFUND_AND_BACKWARDS,
            token_bucket_refills_continuously_up_to_the_burst
                => TOKEN_BUCKET_EDGES,
            token_bucket_rounds_exact_rational_waits_up_and_refunds
                => TOKEN_BUCKET_RATIONAL_AND_REFUND,
            token_bucket_behind_its_last_refill_waits_from_that_refill
                => TOKEN_BUCKET_BACKWARDS,
            gcra_admits_the_burst_then_one_per_emission_interval
                => GCRA_EDGES,
            gcra_rounds_inexact_intervals_and_never_gains_going_back
                => GCRA_REFUND_AND_BACKWARDS,
            gcra_behind_the_latest_instant_stands_still_there
                => GCRA_BACKWARDS_WITH_QUOTA_LEFT,
            leaky_bucket_queues_the_burst_with_growing_delays
                => LEAKY_BUCKET_EDGES,
            leaky_bucket_rounds_delays_up_and_never_gains_going_back
                => LEAKY_BUCKET_REFUND_AND_BACKWARDS,
            leaky_bucket_delay_behind_the_latest_instant_runs_on_the_callers_clock
                => LEAKY_BUCKET_BACKWARDS_DELAY,
            leaky_bucket_denies_a_place_beyond_max_delay_charging_nothing
                => LEAKY_BUCKET_MAX_DELAY,
            leaky_bucket_holds_no_request_longer_than_one_period_by_default
                => LEAKY_BUCKET_DEFAULT_MAX_DELAY,
            leaky_bucket_with_zero_max_delay_admits_only_requests_served_at_once
                => LEAKY_BUCKET_ZERO_MAX_DELAY,
            leaky_bucket_max_delay_counts_from_the_latest_instant_seen
                => LEAKY_BUCKET_MAX_DELAY_BACKWARDS,
            fixed_window_refund_after_the_window_rolled_over_takes_back_nothing
                => FIXED_WINDOW_LATE_REFUNDS,
            sliding_window_refund_takes_from_the_charges_own_window_then_nothing
                => SLIDING_WINDOW_LATE_REFUNDS,
            sliding_window_counters_refund_only_from_the_charges_own_sub_window
                => SLIDING_WINDOW_COUNTERS_LATE_REFUNDS,
            sliding_window_log_refund_only_from_the_charges_own_entry
                => SLIDING_WINDOW_LOG_LATE_REFUNDS,
            token_bucket_refund_returns_only_what_the_refill_has_not_repaid
                => TOKEN_BUCKET_LATE_REFUNDS,
            token_bucket_refund_of_a_partly_repaid_charge_rounds_for_the_limiter
                => TOKEN_BUCKET_LATE_REFUNDS_RATIONAL,
            gcra_refund_returns_only_the_debt_time_has_not_repaid
                => GCRA_LATE_REFUNDS,
            gcra_refund_of_a_partly_repaid_charge_rounds_for_the_limiter
                => GCRA_LATE_REFUNDS_INEXACT,
            leaky_bucket_refund_after_the_queue_moved_on_frees_nothing
                => LEAKY_BUCKET_LATE_REFUNDS,
            fixed_window_keeps_its_count_when_the_quota_changes
                => FIXED_WINDOW_QUOTA_CHANGES,
            sliding_window_keeps_its_counts_when_the_quota_changes
                => SLIDING_WINDOW_QUOTA_CHANGES,
            sliding_window_counters_keep_their_counts_when_the_quota_changes
                => SLIDING_WINDOW_COUNTERS_QUOTA_CHANGES,
            sliding_window_log_keeps_its_entries_when_the_quota_changes
                => SLIDING_WINDOW_LOG_QUOTA_CHANGES,
            token_bucket_recounts_its_usage_when_the_quota_changes
                => TOKEN_BUCKET_QUOTA_CHANGES,
            gcra_recounts_its_usage_when_the_quota_changes
                => GCRA_QUOTA_CHANGES,
            leaky_bucket_recounts_its_queue_when_the_quota_changes
                => LEAKY_BUCKET_QUOTA_CHANGES,
            fixed_window_is_peeked_penalized_blocked_and_reset
                => FIXED_WINDOW_OPERATIONS,
            sliding_window_is_peeked_penalized_blocked_and_reset
                => SLIDING_WINDOW_OPERATIONS,
            sliding_window_counters_are_peeked_penalized_blocked_and_reset
                => SLIDING_WINDOW_COUNTERS_OPERATIONS,
            sliding_window_log_is_peeked_penalized_blocked_and_reset
                => SLIDING_WINDOW_LOG_OPERATIONS,
            token_bucket_is_peeked_penalized_blocked_and_reset
                => TOKEN_BUCKET_OPERATIONS,
            gcra_is_peeked_penalized_blocked_and_reset
                => GCRA_OPERATIONS,
            leaky_bucket_is_peeked_penalized_blocked_and_reset
                => LEAKY_BUCKET_OPERATIONS,
            fixed_window_penalty_box_trips_on_the_third_rejection_within_its_window
                => FIXED_WINDOW_PENALTY,
            sliding_window_penalty_box_trips_on_the_third_rejection_within_its_window
                => SLIDING_WINDOW_PENALTY,
            sliding_window_counters_penalty_box_trips_on_the_third_rejection_within_its_window
                => SLIDING_WINDOW_COUNTERS_PENALTY,
            sliding_window_log_penalty_box_trips_on_the_third_rejection_within_its_window
                => SLIDING_WINDOW_LOG_PENALTY,
            token_bucket_penalty_box_trips_on_the_third_rejection_within_its_window
                => TOKEN_BUCKET_PENALTY,
            gcra_penalty_box_trips_on_the_third_rejection_within_its_window
                => GCRA_PENALTY,
            leaky_bucket_penalty_box_trips_on_the_third_rejection_within_its_window
                => LEAKY_BUCKET_PENALTY,
        );
    };
    (@each $make_store:expr; $($(#[$attr:meta])* $test:ident => $scenario:ident,)*) => {
        $(
            $(#[$attr])*
            #[tokio::test]
            async fn $test() -> Result<(), Box<dyn std::error::Error>> {
                $crate::scenarios::run(
                    &$crate::scenarios::$scenario,
                    $make_store,
                )
                .await
            }
        )*
    };
}
