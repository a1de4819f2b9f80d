//! Late refunds: a refund of one charge, by its receipt (`refund_of(at, step, amount)`
//! takes back what the check at `step` charged). Only what of *that* charge the key
//! still counts comes back: a charge is named by its decision's reset instant (its
//! window, sub-window, log entry, or the end of its debt), and each table ends its
//! charge's life in a later window, or repays it by time, before refunding it. A
//! refund of the newest charges, as before, would take back a later charge instead
//! (the comments say what it would have given).

use super::{Algorithm, Scenario, deny, ok, peek, queued, refund, refund_of};

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
