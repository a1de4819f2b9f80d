//! Escalating penalties: a key that trips its penalty box again within `remember` of
//! its previous trip is blocked for longer. Each table runs on every algorithm (the
//! penalty does not depend on it: every step is an admission from idle, a trip, a
//! blocked rejection, a plain rejection of a quota spent long ago, or a look at the
//! key's offences), by [`run_escalation`](super::run_escalation).
//!
//! The quota is one request per hour (per day for the extremes): after the first
//! admission every check within the tables is rejected by the quota, so with
//! `after(1)` every check made while the key is not blocked trips the box. Times are
//! seconds from [`BASE`](super::BASE), written in µs.

use std::time::Duration;

use tollgate::Penalty;

/// One step of an escalation table, at `BASE + at_us`.
#[derive(Debug, Clone, Copy)]
pub struct EscalationStep {
    /// Offset from `BASE`.
    pub at_us: u64,
    /// What is asked at that instant.
    pub op: EscalationOp,
}

/// What a step does, and what it must answer.
#[derive(Debug, Clone, Copy)]
#[allow(
    missing_docs,
    reason = "each variant's fields are named in its own doc"
)]
pub enum EscalationOp {
    /// `Limiter::check(1)`.
    Check { expect: Standing },
    /// `Limiter::peek` (its `Standing`) and `Limiter::offences` (the same trips and
    /// block, and the next trip's block, µs).
    Offences {
        expect: Standing,
        next_block_us: u64,
    },
    /// `Limiter::reset`.
    Reset,
    /// `Limiter::block(us)`: an operator's block.
    Block { us: u64, expect: Standing },
    /// `Limiter::reload` with the table's limit under another penalty.
    Reload { penalty: fn() -> Penalty },
}

/// What a decision says about the key's penalty: admitted or not, its block (µs
/// left; then `retry_after` and `reset_after` are that too) and the trips remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(
    missing_docs,
    reason = "each field is the `Decision` field of its name, in µs"
)]
pub struct Standing {
    pub allowed: bool,
    pub blocked_us: Option<u64>,
    pub trips: u32,
}

/// An escalation table: its penalty at the start, its quota and its steps.
#[derive(Debug)]
pub struct EscalationScenario {
    /// Also the limit's name.
    pub name: &'static str,
    /// Parsed with `str::parse::<Quota>()`.
    pub quota: &'static str,
    /// The limit's penalty until a step reloads another.
    pub penalty: fn() -> Penalty,
    /// In order.
    pub steps: &'static [EscalationStep],
}

const S: u64 = 1_000_000;

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

const fn step(at_us: u64, op: EscalationOp) -> EscalationStep {
    EscalationStep { at_us, op }
}

/// An admitted check (from idle: nothing remembered matters to it but the trips).
const fn admitted(at_us: u64, trips: u32) -> EscalationStep {
    let expect = Standing {
        allowed: true,
        blocked_us: None,
        trips,
    };
    step(at_us, EscalationOp::Check { expect })
}

/// A check the quota rejects without tripping the box.
const fn rejected(at_us: u64, trips: u32) -> EscalationStep {
    let expect = Standing {
        allowed: false,
        blocked_us: None,
        trips,
    };
    step(at_us, EscalationOp::Check { expect })
}

/// A check that trips the box (the `trips`-th remembered trip), or is denied while
/// the key is blocked: blocked for `left_us`.
const fn blocked(at_us: u64, left_us: u64, trips: u32) -> EscalationStep {
    let expect = Standing {
        allowed: false,
        blocked_us: Some(left_us),
        trips,
    };
    step(at_us, EscalationOp::Check { expect })
}

/// The key's offences: `trips`, its block (`None`: not blocked, so a peek admits),
/// and the next trip's block.
const fn offences(
    at_us: u64,
    trips: u32,
    blocked_us: Option<u64>,
    next_block_us: u64,
) -> EscalationStep {
    let expect = Standing {
        allowed: blocked_us.is_none(),
        blocked_us,
        trips,
    };
    step(
        at_us,
        EscalationOp::Offences {
            expect,
            next_block_us,
        },
    )
}

const fn reset(at_us: u64) -> EscalationStep {
    step(at_us, EscalationOp::Reset)
}

const fn block(at_us: u64, us: u64, trips: u32) -> EscalationStep {
    let expect = Standing {
        allowed: false,
        blocked_us: Some(us),
        trips,
    };
    step(at_us, EscalationOp::Block { us, expect })
}

/// `Limiter::block(0)`: the block lifted, answered as a peek (admitted).
const fn lift(at_us: u64, trips: u32) -> EscalationStep {
    let expect = Standing {
        allowed: true,
        blocked_us: None,
        trips,
    };
    step(at_us, EscalationOp::Block { us: 0, expect })
}

const fn reload(at_us: u64, penalty: fn() -> Penalty) -> EscalationStep {
    step(at_us, EscalationOp::Reload { penalty })
}

/// 2 s, then 5 s, then 10 s for every later trip within a minute of the one before.
fn two_five_ten() -> Penalty {
    Penalty::after(1)
        .block_for(secs(2))
        .escalate(&[secs(5), secs(10)])
        .remember(secs(60))
}

/// Explicit steps: 2 → 5 → 10 → 10 s; forgotten a minute after the latest trip;
/// reset forgets; an operator's block keeps the trips.
pub const ESCALATION_STEPS: EscalationScenario = EscalationScenario {
    name: "escalation/steps",
    quota: "1/h",
    penalty: two_five_ten,
    steps: &[
        admitted(0, 0),
        // 1st trip: 2 s, until 3
        blocked(S, 2 * S, 1),
        // blocked: not counted, not extended
        blocked(2 * S, S, 1),
        offences(2 * S, 1, Some(S), 5 * S),
        // free at 3: the quota rejects, the 2nd trip: 5 s, until 8
        blocked(3 * S, 5 * S, 2),
        // 3rd: 10 s, until 18; 4th: the last step again, until 28
        blocked(8 * S, 10 * S, 3),
        blocked(18 * S, 10 * S, 4),
        offences(28 * S, 4, None, 10 * S),
        // the latest trip at 18, remembered until 78
        offences(77 * S, 4, None, 10 * S),
        offences(78 * S, 0, None, 2 * S),
        // forgotten: the first block again
        blocked(78 * S, 2 * S, 1),
        // reset: idle, unblocked, nothing remembered
        reset(80 * S),
        offences(80 * S, 0, None, 2 * S),
        admitted(80 * S, 0),
        blocked(81 * S, 2 * S, 1),
        // an operator's block replaces the block and keeps the trip (at 81, until 141)
        block(90 * S, 30 * S, 1),
        offences(90 * S, 1, Some(30 * S), 5 * S),
        blocked(120 * S, 5 * S, 2),
        // a lifted block (0) keeps them too
        lift(121 * S, 2),
        offences(121 * S, 2, None, 10 * S),
    ],
};

/// 1 s, ×3 up to 20 s, the 2nd rejection within 10 s trips; remembered 100 s.
fn times_three() -> Penalty {
    Penalty::after(2)
        .within(secs(10))
        .block_for(secs(1))
        .escalate_by(3, secs(20))
        .remember(secs(100))
}

/// A factor and a cap: 1 → 3 → 9 → 20 → 20 s; each trip still needs its two
/// rejections within 10 s; the count's window and the trips' memory are apart.
pub const ESCALATION_FACTOR: EscalationScenario = EscalationScenario {
    name: "escalation/factor",
    quota: "1/h",
    penalty: times_three,
    steps: &[
        admitted(0, 0),
        rejected(S, 0),
        // the 2nd rejection within 10 s: 1 s, until 3
        blocked(2 * S, S, 1),
        blocked(2 * S + S / 2, S / 2, 1),
        rejected(3 * S, 1),
        // 3 s, until 7
        blocked(4 * S, 3 * S, 2),
        rejected(7 * S, 2),
        // 9 s, until 17
        blocked(8 * S, 9 * S, 3),
        rejected(17 * S, 3),
        // 27 s capped at 20, until 38; then 20 again, until 59
        blocked(18 * S, 20 * S, 4),
        rejected(38 * S, 4),
        blocked(39 * S, 20 * S, 5),
        offences(59 * S, 5, None, 20 * S),
        // a count of one at 100; 111 is past its window: one again, no trip
        rejected(100 * S, 5),
        rejected(111 * S, 5),
        // the latest trip at 39, remembered until 139
        offences(138 * S, 5, None, 20 * S),
        offences(139 * S, 0, None, S),
        rejected(139 * S, 0),
        blocked(140 * S, S, 1),
    ],
};

/// 2 s then 5 s, remembered a minute.
fn two_five() -> Penalty {
    Penalty::after(1)
        .block_for(secs(2))
        .escalate(&[secs(5)])
        .remember(secs(60))
}

/// 3 s, 7 s, 11 s, remembered a minute.
fn three_seven_eleven() -> Penalty {
    Penalty::after(1)
        .block_for(secs(3))
        .escalate(&[secs(7), secs(11)])
        .remember(secs(60))
}

/// The same, remembered 20 s.
fn three_seven_eleven_briefly() -> Penalty {
    three_seven_eleven().remember(secs(20))
}

/// No escalation: every trip 2 s, none remembered.
fn plain() -> Penalty {
    Penalty::after(1).block_for(secs(2))
}

/// Reloads that change the escalation mid-way reach the key at once: the trips it
/// has are counted under the new steps; a shorter memory forgets at once, a longer
/// one keeps what the record still holds; a penalty that remembers nothing keeps
/// nothing.
pub const ESCALATION_RELOAD: EscalationScenario = EscalationScenario {
    name: "escalation/reload",
    quota: "1/h",
    penalty: two_five,
    steps: &[
        admitted(0, 0),
        blocked(S, 2 * S, 1),
        // until 8
        blocked(3 * S, 5 * S, 2),
        // two trips remembered: the 3rd trip's block under the new steps is 11 s
        reload(8 * S, three_seven_eleven),
        offences(8 * S, 2, None, 11 * S),
        // until 19
        blocked(8 * S, 11 * S, 3),
        // remembered 20 s from the trip at 8: until 28
        reload(19 * S, three_seven_eleven_briefly),
        offences(19 * S, 3, None, 11 * S),
        offences(28 * S, 0, None, 3 * S),
        // a minute again: the record still holds the trips (until 68)
        reload(28 * S, three_seven_eleven),
        offences(28 * S, 3, None, 11 * S),
        // nothing remembered: the first block, no trips kept
        reload(29 * S, plain),
        offences(29 * S, 0, None, 2 * S),
        blocked(30 * S, 2 * S, 0),
        reload(32 * S, three_seven_eleven),
        offences(32 * S, 0, None, 3 * S),
        blocked(32 * S, 3 * S, 1),
    ],
};

/// The longest a cap may be below the longest memory, a century.
const CAP_US: u64 = 100 * 365 * 86_400 * S - S;

/// From 1 µs, each block 2^32 − 1 times the one before, capped a second short of a
/// century; remembered a century.
fn extreme() -> Penalty {
    Penalty::after(1)
        .block_for(Duration::from_micros(1))
        .escalate_by(u32::MAX, Duration::from_micros(CAP_US))
        .remember(Penalty::MAX_DENIAL)
}

/// The extremes: the largest factor reaches the cap on the third trip, exactly, with
/// no overflow on any store (Lua's doubles included); reset forgets a century.
pub const ESCALATION_EXTREMES: EscalationScenario = EscalationScenario {
    name: "escalation/extremes",
    quota: "1/d",
    penalty: extreme,
    steps: &[
        admitted(0, 0),
        blocked(1, 1, 1),
        blocked(2, u32::MAX as u64, 2),
        blocked(2 + u32::MAX as u64, CAP_US, 3),
        offences(2 + u32::MAX as u64, 3, Some(CAP_US), CAP_US),
        blocked(3 + u32::MAX as u64, CAP_US - 1, 3),
        reset(4 + u32::MAX as u64),
        offences(4 + u32::MAX as u64, 0, None, 1),
    ],
};
