//! [`Algorithm::TokenBucket`]: `τ` refills at `L/P` up to `B`; retry `(c − τ)·P/L`,
//! reset `(B − τ)·P/L`.

use super::{Algorithm, Scenario, deny, never, ok, peek, refund};

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
