//! Settling (`Limiter::settle`): a charge made on an estimate moved to what the work
//! cost. `settle(at, step, actual, …)` settles the decision step `step` returned (a
//! check's, or an earlier settle's: a chain) and expects the key's standing as a peek
//! reports it, `allowed` always (a settled request is never denied after the fact),
//! and a receipt of cost `actual`.
//!
//! Less gives back by receipt, as a refund of that charge does (only what the key
//! still counts of it); more charges the difference whether or not it fits, as a
//! penalty does (a debt); equal changes nothing; a decision that charged nothing
//! settles nothing. After a settle up, the receipt names the extra, where it was
//! charged: a later settle gives back at most that extra, and the estimate before it
//! stays counted (the limiter's favour). On the fixed window, the sliding window
//! counters and the log one settle charges at most `Quota::MAX_COUNT` more (the
//! largest capacity of any quota, so that the debt holds under a per-caller quota of
//! a larger count too).

use super::{Algorithm, Expect, Op, Scenario, Step, block, deny, ok, peek_op, queued, reset};

/// A settle of the decision of step `of` to `actual`, answered with the key's
/// `remaining` and `reset_after_us`.
const fn settle(at_us: u64, of: usize, actual: u64, remaining: u64, reset_after_us: u64) -> Step {
    settled(
        at_us,
        of,
        actual,
        Expect {
            allowed: true,
            remaining,
            reset_after_us,
            retry_after_us: None,
            delay_us: 0,
            blocked_us: None,
        },
        if actual == 0 { None } else { Some(actual) },
    )
}

/// A settle of a key blocked for `left_us` more: still settled, still allowed, the
/// block reported (nothing left, reset at its end).
const fn settle_blocked(at_us: u64, of: usize, actual: u64, left_us: u64) -> Step {
    settled(
        at_us,
        of,
        actual,
        Expect {
            allowed: true,
            remaining: 0,
            reset_after_us: left_us,
            retry_after_us: None,
            delay_us: 0,
            blocked_us: Some(left_us),
        },
        Some(actual),
    )
}

/// A settle of the decision of step `of`, which charged nothing: that decision back,
/// unchanged (as `same`, the step that made it, expected it), without a receipt.
const fn settle_nothing(of: usize, actual: u64, same: Step) -> Step {
    let Op::Check { expect, .. } = same.op else {
        unreachable!()
    };
    settled(same.at_us, of, actual, expect, None)
}

const fn settled(at_us: u64, of: usize, actual: u64, expect: Expect, receipt: Option<u64>) -> Step {
    Step {
        at_us,
        op: Op::Settle {
            of,
            actual,
            expect,
            receipt,
        },
    }
}

/// L = 10, P = 1 min: a charge settles in its own window only; a settle up counts in
/// the window it is made in. Also: a blocked key is settled, and a receipt from
/// before a reset gives nothing back (its extra is still charged).
pub const FIXED_WINDOW_SETTLE: Scenario = Scenario {
    name: "fixed_window/settle",
    quota: "10/min",
    burst: None,
    algorithm: Algorithm::FixedWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. w0: k = 4; reset → 60 000 000
        ok(1_000_000, 4, 6, 59_000_000),
        // 1. 4 → 1, same window: k = 1
        settle(2_000_000, 0, 1, 9, 58_000_000),
        // 2. 1 → 1: nothing changes
        settle(2_000_000, 1, 1, 9, 58_000_000),
        // 3. 1 → 0: k = 0, idle: reset 0, no receipt left
        settle(3_000_000, 2, 0, 10, 0),
        // 4. k = 2
        ok(10_000_000, 2, 8, 50_000_000),
        // 5. 2 → 11: 9 more whether or not it fits: k = 11 > L
        settle(11_000_000, 4, 11, 0, 49_000_000),
        // 6. 11 + 1 > 10 until the window ends
        deny(12_000_000, 1, 0, 48_000_000, 48_000_000),
        // 7. the denial charged nothing: settled to nothing, answered unchanged
        settle_nothing(6, 5, deny(12_000_000, 1, 0, 48_000_000, 48_000_000)),
        // 8. step 5's receipt names its extra (9): 11 → 5 gives back 6: k = 5
        settle(13_000_000, 5, 5, 5, 47_000_000),
        // 9. 5 → 0: only the extra's last 3 come back (the estimate, 2, stays): k = 2
        settle(13_000_000, 8, 0, 8, 47_000_000),
        // 10. k = 5
        ok(50_000_000, 3, 5, 10_000_000),
        // 11. w1: k = 2; reset → 120 000 000
        ok(61_000_000, 2, 8, 59_000_000),
        // 12. step 10 was charged in w0, which has ended: nothing back
        settle(62_000_000, 10, 0, 8, 58_000_000),
        // 13. 2 → 6: k = 6
        settle(62_000_000, 11, 6, 4, 58_000_000),
        // 14. 6 → 1 000: 994 more, in full: k = 1 000
        settle(62_000_000, 13, 1_000, 0, 58_000_000),
        // 15. 1 000 → 6: what step 14 charged (994) comes back, no more: k = 6
        settle(63_000_000, 14, 6, 4, 57_000_000),
        // 16. k = 7
        ok(63_000_000, 1, 3, 57_000_000),
        // 17. blocked until 64 000 000
        block(63_000_000, 1_000_000),
        // 18. a blocked key is settled (accounting, not admission): 1 → 3, k = 9;
        // answered with the block
        settle_blocked(63_500_000, 16, 3, 500_000),
        // 19. the block has ended: k = 9
        peek_op(64_000_000, 1, 56_000_000),
        // 20. idle, unblocked
        reset(64_000_000),
        // 21. step 18's receipt is from before the reset: 3 → 1 gives nothing back
        settle(65_000_000, 18, 1, 10, 0),
        // 22. 1 → 4: the work happened, the extra is charged: k = 3
        settle(65_000_000, 21, 4, 7, 55_000_000),
        // 23. 4 → 1: step 22's extra (3) comes back: k = 0
        settle(66_000_000, 22, 1, 10, 0),
    ],
};

/// L = 10, P = 10 s: a charge settles from `k` during its window, from `p` during the
/// next, and not after.
pub const SLIDING_WINDOW_SETTLE: Scenario = Scenario {
    name: "sliding_window/settle",
    quota: "10 per 10 seconds",
    burst: None,
    algorithm: Algorithm::SlidingWindow,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. w0: k = 6. reset: in w1 p = 6: 6(P−e) < P ⇔ e > 8 333 333.3 → 18 333 334
        ok(1_000_000, 6, 4, 17_333_334),
        // 1. 6 → 2, same window: k = 2. reset: 2(P−e) < P ⇔ e > 5 000 000 → 15 000 001
        settle(2_000_000, 0, 2, 8, 13_000_001),
        // 2. 2 → 2: nothing changes
        settle(2_000_000, 1, 2, 8, 13_000_001),
        // 3. k = 5. reset: 5(P−e) < P ⇔ e > 8 000 000 → 18 000 001
        ok(3_000_000, 3, 5, 15_000_001),
        // 4. w1, e = 2 000 000: p = 5, k = 0. Step 3 (w0) is in p: 3 → 1 gives back 2,
        // p = 3: used floor(3·8/10) = 2. reset: 3(P−e) < P ⇔ e > 6 666 666.7 →
        // 16 666 667
        settle(12_000_000, 3, 1, 8, 4_666_667),
        // 5. w2: step 4's charge (w0) counts nowhere: nothing back; p = 0, k = 0
        settle(21_000_000, 4, 0, 10, 0),
        // 6. k = 4. reset: in w3 p = 4: e > 7 500 000 → 37 500 001
        ok(21_000_000, 4, 6, 16_500_001),
        // 7. 4 → 14: 10 more, k = 14 > L. reset: in w3 p = 14: 14(P−e) < P ⇔
        // e > 9 285 714.3 → 39 285 715
        settle(22_000_000, 6, 14, 0, 17_285_715),
        // 8. room 9: in w3 floor(14(P−e)/P) ≤ 9 ⇔ 14(P−e) < 10P ⇔ e > 2 857 142.9 →
        // 32 857 143
        deny(23_000_000, 1, 0, 16_285_715, 9_857_143),
        // 9. the denial charged nothing
        settle_nothing(8, 0, deny(23_000_000, 1, 0, 16_285_715, 9_857_143)),
        // 10. step 7's receipt names its extra (10), in w2: 14 → 9 gives back 5 from
        // k = 9. reset: 9(P−e) < P ⇔ e > 8 888 888.9 → 38 888 889
        settle(24_000_000, 7, 9, 1, 14_888_889),
        // 11. 9 → 0: the extra's last 5 come back, the estimate (4) stays: k = 4
        settle(24_000_000, 10, 0, 6, 13_500_001),
        // 12.
        peek_op(24_000_000, 6, 13_500_001),
    ],
};

/// L = 12, P = 1 min, N = 6 (10 s sub-windows): a charge settles in its own
/// sub-window while that is in the window.
pub const SLIDING_WINDOW_COUNTERS_SETTLE: Scenario = Scenario {
    name: "sliding_window_counters/settle",
    quota: "12/min",
    burst: None,
    algorithm: Algorithm::SlidingWindowCounters { buckets: 6 },
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. s0 = 5. reset: s0 leaves at 6 → 60 000 000
        ok(5_000_000, 5, 7, 55_000_000),
        // 1. 5 → 2: s0 = 2
        settle(6_000_000, 0, 2, 10, 54_000_000),
        // 2. s1 = 4, sum 6. reset: s1 leaves at 7 → 70 000 000
        ok(15_000_000, 4, 6, 55_000_000),
        // 3. 4 → 4: nothing changes
        settle(16_000_000, 2, 4, 6, 54_000_000),
        // 4. s6: s0 has left. Step 1's receipt names s0: nothing back; sum 4
        settle(61_000_000, 1, 0, 8, 9_000_000),
        // 5. step 3's receipt names s1, still in the window: 4 → 1, s1 = 1
        settle(61_000_000, 3, 1, 11, 9_000_000),
        // 6. s6 = 5, sum 6. reset: s6 leaves at 12 → 120 000 000
        ok(62_000_000, 5, 6, 58_000_000),
        // 7. 5 → 30: 25 more, in full: s6 = 30, sum 31
        settle(63_000_000, 6, 30, 0, 57_000_000),
        // 8. room 11: s1 leaves at 7 (30), s6 at 12 → 120 000 000
        deny(64_000_000, 1, 0, 56_000_000, 56_000_000),
        // 9. the denial charged nothing
        settle_nothing(8, 1, deny(64_000_000, 1, 0, 56_000_000, 56_000_000)),
        // 10. 30 → 10: 20 of what step 7 charged (25) comes back: s6 = 10, sum 11
        settle(65_000_000, 7, 10, 1, 55_000_000),
        // 11. 10 → 10: nothing changes
        settle(65_000_000, 10, 10, 1, 55_000_000),
        // 12. 10 → 0: the extra's last 5 come back; the estimate (5) stays: sum 6
        settle(65_000_000, 11, 0, 6, 55_000_000),
    ],
};

/// L = 10, P = 10 s: a charge settles in its own log entry while that is in the log;
/// a settle up is an entry of its own.
pub const SLIDING_WINDOW_LOG_SETTLE: Scenario = Scenario {
    name: "sliding_window_log/settle",
    quota: "10/10s",
    burst: None,
    algorithm: Algorithm::SlidingWindowLog,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. [(1 s, 6)]; reset → 11 000 000
        ok(1_000_000, 6, 4, 10_000_000),
        // 1. 6 → 2: [(1 s, 2)]
        settle(2_000_000, 0, 2, 8, 9_000_000),
        // 2. [(1 s, 2), (3 s, 3)]; reset → 13 000 000
        ok(3_000_000, 3, 5, 10_000_000),
        // 3. 3 → 3: nothing changes
        settle(3_000_000, 2, 3, 5, 10_000_000),
        // 4. (1 s) has left: step 1's entry is gone, nothing back; [(3 s, 3)]
        settle(11_000_000, 1, 0, 7, 2_000_000),
        // 5. step 3's entry (3 s): 3 → 1, [(3 s, 1)]
        settle(11_000_000, 3, 1, 9, 2_000_000),
        // 6. [(3 s, 1), (12 s, 4)]; reset → 22 000 000
        ok(12_000_000, 4, 5, 10_000_000),
        // 7. 4 → 20: 16 more, in full, an entry at 13 s:
        // [(3 s, 1), (12 s, 4), (13 s, 16)], sum 21; reset → 23 000 000
        settle(13_000_000, 6, 20, 0, 10_000_000),
        // 8. (3 s) left at 13 s: sum 20; room 9 when (13 s, 16) leaves → 23 000 000
        deny(14_000_000, 1, 0, 9_000_000, 9_000_000),
        // 9. the denial charged nothing
        settle_nothing(8, 3, deny(14_000_000, 1, 0, 9_000_000, 9_000_000)),
        // 10. 20 → 4: step 7's entry (16) comes back, no more: [(12 s, 4)];
        // reset → 22 000 000
        settle(14_000_000, 7, 4, 6, 8_000_000),
        // 11. 4 → 0: nothing of the extra is left; the estimate (12 s, 4) stays
        settle(14_000_000, 10, 0, 6, 8_000_000),
    ],
};

/// L = 10, P = 1 s, B = 5: one token (100 000 units) per 100 ms, one unit per µs. A
/// settle down gives back only what of the charge the refill has not repaid, and moves
/// the charge's end earlier by what it gave back (so a second settle cannot take what
/// a later charge still owes).
pub const TOKEN_BUCKET_SETTLE: Scenario = Scenario {
    name: "token_bucket/settle",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::TokenBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. deficit 300 000 (3 tokens); reset → 300 000
        ok(0, 3, 2, 300_000),
        // 1. at 100 000 the deficit is 200 000, all of it the charge's: 3 → 2 gives
        // back 100 000: 100 000 left. The charge now ends at 200 000
        settle(100_000, 0, 2, 4, 100_000),
        // 2. 2 → 2: nothing changes
        settle(100_000, 1, 2, 4, 100_000),
        // 3. another request: deficit 200 000
        ok(100_000, 1, 3, 200_000),
        // 4. at 150 000 the deficit is 150 000; step 2's charge owes 200 000 − 150 000
        // = 50 000 of it: 2 → 0 gives back 50 000 (not the later request's 100 000)
        settle(150_000, 2, 0, 4, 100_000),
        // 5. deficit 300 000
        ok(150_000, 2, 2, 300_000),
        // 6. at 160 000: 290 000; 2 → 12: 10 tokens more: 1 290 000 > B, a debt.
        // Its receipt names the extra, which ends at 1 450 000
        settle(160_000, 5, 12, 0, 1_290_000),
        // 7. 1 250 000 left; a token fits at 1 250 000 − 400 000 of refill
        deny(200_000, 1, 0, 1_250_000, 850_000),
        // 8. the denial charged nothing
        settle_nothing(7, 1, deny(200_000, 1, 0, 1_250_000, 850_000)),
        // 9. at 300 000: 1 150 000 owed; 12 → 7 gives back 5 tokens: 650 000. The
        // extra now ends at 950 000
        settle(300_000, 6, 7, 0, 650_000),
        // 10. denied until repaid: 550 000 − 400 000
        deny(400_000, 1, 0, 550_000, 150_000),
        // 11. 400 000 left: a token fits, 500 000
        ok(550_000, 1, 0, 500_000),
        // 12. 7 → 0: of the extra (5 left), what is owed by its end: 950 000 − 550 000
        // = 400 000 (step 11's token stays owed): 100 000
        settle(550_000, 9, 0, 4, 100_000),
    ],
};

/// L = 10, P = 1 s, B = 5: T = 100 ms, B·T = 500 ms. As the token bucket, on the TAT.
pub const GCRA_SETTLE: Scenario = Scenario {
    name: "gcra/settle",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::Gcra,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. TAT = 300 000
        ok(0, 3, 2, 300_000),
        // 1. 3 → 2 at 100 000: 200 000 owed, 100 000 back: TAT = 200 000
        settle(100_000, 0, 2, 4, 100_000),
        // 2. 2 → 2: nothing changes
        settle(100_000, 1, 2, 4, 100_000),
        // 3. TAT = 300 000
        ok(100_000, 1, 3, 200_000),
        // 4. the charge ends at 200 000 now: 50 000 owed at 150 000, back: TAT = 250 000
        settle(150_000, 2, 0, 4, 100_000),
        // 5. TAT = 450 000
        ok(150_000, 2, 2, 300_000),
        // 6. 2 → 12: 10 · T more, TAT = 1 450 000: a debt of 1 290 000
        settle(160_000, 5, 12, 0, 1_290_000),
        // 7. fits at TAT + T − B·T = 1 050 000
        deny(200_000, 1, 0, 1_250_000, 850_000),
        // 8. the denial charged nothing
        settle_nothing(7, 1, deny(200_000, 1, 0, 1_250_000, 850_000)),
        // 9. 12 → 7 at 300 000: 5 · T back, TAT = 950 000 (the extra's end)
        settle(300_000, 6, 7, 0, 650_000),
        // 10. fits at 950 000 + T − B·T = 550 000
        deny(400_000, 1, 0, 550_000, 150_000),
        // 11. TAT = 1 050 000
        ok(550_000, 1, 0, 500_000),
        // 12. 7 → 0: of the extra, 950 000 − 550 000 owed: TAT = 650 000
        settle(550_000, 9, 0, 4, 100_000),
    ],
};

/// L = 10, P = 1 s, B = 5: T = 100 ms; a request is served at its place in the queue.
/// A settle down gives its place back only while no later place is queued behind it.
pub const LEAKY_BUCKET_SETTLE: Scenario = Scenario {
    name: "leaky_bucket/settle",
    quota: "10/s",
    burst: Some(5),
    algorithm: Algorithm::LeakyBucket,
    max_delay_us: None,
    penalty: None,
    steps: &[
        // 0. TAT = 300 000, served at once
        queued(0, 3, 2, 300_000, 0),
        // 1. 3 → 2 at 100 000: the newest place: 100 000 back, TAT = 200 000
        settle(100_000, 0, 2, 4, 100_000),
        // 2. 2 → 2: nothing changes
        settle(100_000, 1, 2, 4, 100_000),
        // 3. queued behind it: served at 200 000, TAT = 300 000
        queued(100_000, 1, 3, 200_000, 100_000),
        // 4. 2 → 0: a later place is queued behind this charge: nothing back
        settle(150_000, 2, 0, 3, 150_000),
        // 5. TAT = 500 000
        queued(300_000, 2, 3, 200_000, 0),
        // 6. 2 → 12: 10 · T more, TAT = 1 500 000
        settle(310_000, 5, 12, 0, 1_190_000),
        // 7. room in the queue at TAT + T − B·T = 1 100 000
        deny(400_000, 1, 0, 1_100_000, 700_000),
        // 8. the denial charged nothing
        settle_nothing(7, 2, deny(400_000, 1, 0, 1_100_000, 700_000)),
        // 9. 12 → 7 at 500 000: the newest place, 5 · T back: TAT = 1 000 000
        settle(500_000, 6, 7, 0, 500_000),
        // 10. room at 1 000 000 + T − B·T = 600 000
        deny(550_000, 1, 0, 450_000, 50_000),
        // 11. served at 1 000 000: TAT = 1 100 000
        queued(600_000, 1, 0, 500_000, 400_000),
        // 12. 7 → 0: step 11's place is queued behind the extra: nothing back
        settle(600_000, 9, 0, 0, 500_000),
    ],
};
