//! The seven algorithms, each a pure state transition in its own file.
//!
//! No file here reads a clock, does I/O or knows which store holds its state: each
//! algorithm is a [`Rule`] over its own state type, driven by [`evaluate`] and
//! [`refund`] with an explicit `now` in whole microseconds since the Unix epoch. The
//! Redis store runs a Lua twin of each file (same stem) with the same arithmetic.
//!
//! A refund either returns the key's newest charges (an operator's refund, which
//! knows no charge) or one charge named by its [`Receipt`]: the
//! charge's reset instant says which window, sub-window or log entry holds it, or
//! when its debt ends, so the rule returns only what of that charge it still counts.

mod divisor;
pub(crate) mod fixed_window;
pub(crate) mod gcra;
pub(crate) mod leaky_bucket;
mod params;
pub(crate) mod sliding_window;
pub(crate) mod sliding_window_counters;
pub(crate) mod sliding_window_log;
pub(crate) mod token_bucket;

use std::fmt;

use crate::decision::Receipt;
pub(crate) use divisor::Divisor;
pub(crate) use params::{Params, gcd};

/// How a limit counts. Every variant works on every store with identical answers.
///
/// Notation: limit `L` per period `P`, burst `B` (defaults to `L`), `T = P/L`. The
/// window algorithms have capacity `L` (a custom burst is a configuration error); the
/// token bucket, GCRA and leaky bucket have capacity `B`. Each variant states the most
/// cost it can admit in any interval, the bound the property tests check.
///
/// "Measured by the accuracy lab" figures come from its default run (the workspace crate `tollgate-lab`:
/// 100/min with `B = L`, ten periods, seed 42), tabulated with charts in
/// `docs/choosing-an-algorithm.md`; the run is seeded and replays on a manual clock,
/// and the lab's unit tests recompute every figure quoted here.
///
/// ```
/// use tollgate::{Algorithm, Limit, Quota};
/// let limit = Limit::new("uploads", Quota::per_hour(60))?
///     .algorithm(Algorithm::SlidingWindowCounters { buckets: 60 });
/// assert_eq!(limit.get_algorithm(), Algorithm::SlidingWindowCounters { buckets: 60 });
/// assert_eq!(Algorithm::default(), Algorithm::Gcra);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// A counter per epoch-aligned window of length `P`, reset at each window edge.
    ///
    /// Memory: 24 bytes of state per key (16 for the count and its window, 8 for the
    /// instant of its last charge, which eviction reads). Bound: at most `L` within one
    /// window, but up to `2L`
    /// in an interval of length `P` that straddles an edge (the "boundary attack").
    /// Pick it when simplicity and cheap state matter more than smoothness.
    /// Measured by the accuracy lab: 2.00 × `L` in one interval of length `P` under the
    /// boundary attack.
    FixedWindow,
    /// Sliding tail: the previous window's count, weighted by how much of it still
    /// overlaps the sliding window, plus the current window's count.
    ///
    /// Memory: 32 bytes of state per key (with the instant of its last charge). An
    /// approximation of a true sliding window that assumes
    /// the previous window's requests were spread evenly; over `P` it can admit more
    /// than `L` only when the previous window's traffic was bunched at its end (at most
    /// `2L` in the worst case, far less for steady traffic). A good default for
    /// "N per minute" APIs. Measured by the accuracy lab: at most 1.50 × `L` in any
    /// interval of length `P` (on/off bursts), 1.01 × `L` under the boundary attack.
    SlidingWindow,
    /// A sliding window at sub-window resolution: the sum of the last `buckets`
    /// sub-windows of length `P / buckets` (`buckets` must divide `P` in microseconds).
    ///
    /// Memory: `8 × buckets + 40` bytes of state per key. Bound: at most `L` in any `buckets`
    /// consecutive sub-windows; an interval of length `P` that starts inside a
    /// sub-window also sees that sub-window's admissions, so the worst case is `2L`
    /// (a full quota at the end of the oldest sub-window, another just after it leaves).
    /// More buckets make that case narrower, not smaller. Measured by the accuracy lab
    /// with 10 buckets: at most 1.12 × `L` in any interval of length `P` (on/off bursts).
    SlidingWindowCounters {
        /// Sub-windows per period (1 to 1024).
        buckets: u32,
    },
    /// The exact sliding window: a log of admitted requests' times.
    ///
    /// Memory: 16 bytes per distinct admission instant (up to `16·L` bytes per key).
    /// Bound: never more than `L` in any interval of length `P`. Pick it when exactness
    /// matters and limits are small. Measured by the accuracy lab: never above `L`, and
    /// the same decision as the ideal sliding window on every request of every pattern.
    SlidingWindowLog,
    /// Tokens refill continuously at `L/P` up to `B`; a request takes `cost` tokens.
    ///
    /// Memory: 24 bytes of state per key (the deficit, its last refill and the limit it
    /// is counted under, so that usage carries over a quota change). Bound: at most
    /// `B + L·t/P` in any interval of length
    /// `t`. Exact rational arithmetic: no rounding of the refill rate. Measured by the
    /// accuracy lab with `B = L`: up to 1.99 × `L` in one interval of length `P` (traffic
    /// at twice the rate from idle), never above `B + L·t/P`.
    TokenBucket,
    /// The generic cell rate algorithm: one "theoretical arrival time" per key.
    ///
    /// Memory: 16 bytes of state per key (the TAT and the `T` it is counted in, so that
    /// usage carries over a quota change). Bound: at most `B + L·t/P` in any
    /// interval of length `t`, with `T` rounded up to the next nanosecond. The default:
    /// smooth, exact, cheapest state. Measured by the accuracy lab with `B = L`: up to
    /// 1.99 × `L` in one interval of length `P` (traffic at twice the rate from idle),
    /// never above `B + L·t/P`.
    #[default]
    Gcra,
    /// A queue drained at `L/P`, holding up to `B` requests: admitted requests are
    /// delayed (see [`Decision::delay`](crate::Decision::delay)) so the inner service
    /// sees a steady stream.
    ///
    /// Memory: 16 bytes of state per key, as GCRA. Bound: at most `B + L·t/P` admitted
    /// in any interval of
    /// length `t`; served at most one per `T` after their delays. Measured by the
    /// accuracy lab with `B = L`: admits exactly as [`Gcra`](Algorithm::Gcra), up to
    /// 1.99 × `L` in one interval of length `P`.
    LeakyBucket,
}

impl Algorithm {
    /// Every algorithm, each once (the sliding window counters with one bucket
    /// standing for every bucket count).
    ///
    /// The Redis store derives its scripts, its function library and its wire codes
    /// from this list, in this order (the leaky bucket after GCRA, whose Lua functions
    /// it builds on).
    ///
    /// ```
    /// use tollgate::Algorithm;
    /// let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.name()).collect();
    /// assert_eq!(names.len(), 7);
    /// assert!(names.contains(&"gcra"));
    /// ```
    pub const ALL: [Algorithm; 7] = [
        Self::FixedWindow,
        Self::SlidingWindow,
        Self::SlidingWindowCounters { buckets: 1 },
        Self::SlidingWindowLog,
        Self::TokenBucket,
        Self::Gcra,
        Self::LeakyBucket,
    ];

    /// The algorithm's place in [`ALL`](Self::ALL): its number on the wire to Redis
    /// (`lean.lua`'s `LEAN_ALGORITHMS`, one-based there) and the index of its script.
    /// The leaky bucket comes after GCRA, whose Lua functions it builds on.
    pub(crate) const fn code(self) -> usize {
        match self {
            Self::FixedWindow => 0,
            Self::SlidingWindow => 1,
            Self::SlidingWindowCounters { .. } => 2,
            Self::SlidingWindowLog => 3,
            Self::TokenBucket => 4,
            Self::Gcra => 5,
            Self::LeakyBucket => 6,
        }
    }

    /// Whether the algorithm accepts a burst different from the limit.
    pub(crate) fn takes_burst(self) -> bool {
        // Exhaustive: a new algorithm says whether it has a capacity of its own.
        match self {
            Self::TokenBucket | Self::Gcra | Self::LeakyBucket => true,
            Self::FixedWindow
            | Self::SlidingWindow
            | Self::SlidingWindowCounters { .. }
            | Self::SlidingWindowLog => false,
        }
    }

    /// A short lowercase name, as used in Redis script names and logs.
    ///
    /// ```
    /// assert_eq!(tollgate::Algorithm::SlidingWindowLog.name(), "sliding_window_log");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindow => "sliding_window",
            Self::SlidingWindowCounters { .. } => "sliding_window_counters",
            Self::SlidingWindowLog => "sliding_window_log",
            Self::TokenBucket => "token_bucket",
            Self::Gcra => "gcra",
            Self::LeakyBucket => "leaky_bucket",
        }
    }
}

// `ALL` lists the algorithms in the order of their codes, each once: checked at compile
// time. (A new variant must be added to `ALL` by hand: `code`'s exhaustive match makes
// its author give it the next code, next to this list.)
const _: () = {
    let mut i = 0;
    while i < Algorithm::ALL.len() {
        assert!(Algorithm::ALL[i].code() == i);
        i += 1;
    }
};

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SlidingWindowCounters { buckets } => {
                write!(f, "sliding_window_counters({buckets})")
            }
            other => f.write_str(other.name()),
        }
    }
}

/// The outcome of one algorithm step, in microseconds; the store turns it into a
/// [`Decision`](crate::Decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) reset_after_us: u64,
    pub(crate) retry_after_us: Option<u64>,
    pub(crate) delay_us: u64,
    /// For a step that charged: what it charged, for a refund of that charge.
    pub(crate) receipt: Option<Receipt>,
    /// For a blocked key (an operator's block or a tripped penalty box): µs until the
    /// block ends.
    pub(crate) blocked_us: Option<u64>,
    /// Whether this very decision tripped the key's penalty box.
    pub(crate) tripped: bool,
    /// The penalty trips the key's record remembers (see `Decision::trips`).
    pub(crate) trips: u32,
}

impl Verdict {
    /// The answer for a key blocked for `left_us` more µs, whatever its rate state:
    /// denied, nothing left, and both waits are the block's end.
    pub(crate) fn blocked(left_us: u64, tripped: bool) -> Self {
        Self {
            allowed: false,
            remaining: 0,
            reset_after_us: left_us,
            retry_after_us: Some(left_us),
            delay_us: 0,
            receipt: None,
            blocked_us: Some(left_us),
            tripped,
            trips: 0,
        }
    }

    /// The same verdict, with `trips` remembered.
    #[inline]
    pub(crate) fn with_trips(self, trips: u32) -> Self {
        Self { trips, ..self }
    }
}

/// What a refund takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refund {
    /// Up to this much of the key's newest charges: an operator's refund, which knows
    /// no charge.
    Newest(u64),
    /// Up to `amount` of the one charge of a [`Receipt`]: only what of it the state
    /// still counts.
    Charge { amount: u64, receipt: Receipt },
}

/// One algorithm: a state type and its transitions.
///
/// `now` is in microseconds since the Unix epoch. Every method but `normalize` receives
/// the *effective* now returned by `normalize`, which is never earlier than the state's
/// own notion of time: a clock that steps backwards is treated as standing still, so
/// it can never add quota.
pub(crate) trait Rule {
    type State: Default + Send + 'static;

    /// Brings the state up to `now` (rolls windows, drops expired entries) without
    /// changing what it admits; returns the effective now.
    fn normalize(p: &Params, s: &mut Self::State, now: u64) -> u64;
    /// Whether `cost` (1 ≤ cost ≤ capacity) fits now.
    fn admits(p: &Params, s: &Self::State, now: u64, cost: u64) -> bool;
    /// Charges `cost`; returns the instant (µs, rounded up) from which the request may
    /// be served: `now` for every algorithm but the leaky bucket, whose requests wait
    /// for the queue ahead of them.
    fn charge(p: &Params, s: &mut Self::State, now: u64, cost: u64) -> u64;
    /// Capacity left now.
    fn remaining(p: &Params, s: &Self::State, now: u64) -> u64;
    /// The earliest instant (µs, ≥ now) at which, with nothing else arriving, the full
    /// capacity is available again.
    fn reset_at(p: &Params, s: &Self::State, now: u64) -> u64;
    /// The earliest instant (µs, > now) at which `cost` fits, given that it does not
    /// fit now and `cost ≤ capacity`.
    fn retry_at(p: &Params, s: &Self::State, now: u64, cost: u64) -> u64;
    /// Returns up to `amount` of the newest charges; never better than idle.
    fn refund(p: &Params, s: &mut Self::State, now: u64, amount: u64);
    /// Returns up to `amount` (at most the receipt's cost) of the one charge `receipt`
    /// names, and only what of it the state still counts at `now`: nothing once the
    /// charge has left the window or time has repaid it. Never better than idle.
    fn refund_charge(p: &Params, s: &mut Self::State, now: u64, amount: u64, receipt: Receipt);
    /// The instant (µs) from which the state is indistinguishable from a fresh one, so
    /// a store may drop it.
    fn idle_at(p: &Params, s: &Self::State) -> u64;
}

/// Runs one request of `cost` through rule `R`.
///
/// `now` is the caller's clock reading; `floor` is the latest instant the store has
/// seen. A store passes its floor so that a clock stepping backwards is treated as
/// standing still at the floor: the algorithm computes at `max(now, floor)`, while the
/// durations it reports are measured from `now`, the clock the caller will wait on.
///
/// With `charge == false` the verdict says whether the request *would* be admitted
/// but nothing is charged (the first phase of an all-or-nothing multi-limit check,
/// and the peek of a cost-0 check).
pub(crate) fn evaluate<R: Rule>(
    p: &Params,
    s: &mut R::State,
    now: u64,
    floor: u64,
    cost: u64,
    charge: bool,
) -> Verdict {
    let step = apply::<R>(p, s, now, floor, cost, charge);
    report::<R>(p, s, now, cost, step)
}

/// What [`apply`] decided, for [`report`].
#[derive(Clone, Copy)]
pub(crate) struct Step {
    /// The effective instant, `max(now, floor)` as the state sees it.
    t: u64,
    allowed: bool,
    charged: bool,
    delay_us: u64,
}

/// The part of [`evaluate`] that changes the state. A store that installs the new
/// state by compare-and-swap calls this in its retry loop, and [`report`] once the
/// state is installed, keeping the loop short.
#[inline]
pub(crate) fn apply<R: Rule>(
    p: &Params,
    s: &mut R::State,
    now: u64,
    floor: u64,
    cost: u64,
    charge: bool,
) -> Step {
    let t = R::normalize(p, s, now.max(floor));
    let allowed = cost == 0 || (cost <= p.capacity && R::admits(p, s, t, cost));
    let charged = allowed && charge && cost > 0;
    // Like every duration, the delay is measured from the caller's `now`; a request
    // servable at the effective instant is servable right away.
    let delay_us = if charged {
        match R::charge(p, s, t, cost) {
            at if at <= t => 0,
            at => at - now,
        }
    } else {
        0
    };
    Step {
        t,
        allowed,
        charged,
        delay_us,
    }
}

/// The verdict on the state `apply` left.
///
/// Always inlined: called from a few sites per rule (the memory store's read-locked
/// path and its cold twin for keys with trips among them), it was left out of line,
/// and returning the verdict through memory cost a hot key's decision 40 instructions.
#[allow(clippy::inline_always)] // callgrind: out of line, +40 instructions a decision
#[inline(always)]
pub(crate) fn report<R: Rule>(
    p: &Params,
    s: &R::State,
    now: u64,
    cost: u64,
    Step {
        t,
        allowed,
        charged,
        delay_us,
    }: Step,
) -> Verdict {
    let retry_after_us =
        (!allowed && cost <= p.capacity).then(|| R::retry_at(p, s, t, cost).saturating_sub(now));
    let reset_at = R::reset_at(p, s, t);
    Verdict {
        allowed,
        remaining: R::remaining(p, s, t).min(p.capacity),
        // Already full at the effective instant means full now: a clock that is behind
        // stands still at `t`.
        reset_after_us: if reset_at <= t { 0 } else { reset_at - now },
        retry_after_us,
        delay_us,
        // Right after a charge the reset instant is later than `t`, so it is also
        // `now + reset_after_us`: what the Redis store rebuilds from its reply.
        receipt: if charged {
            Receipt::new(now, reset_at, cost)
        } else {
            None
        },
        blocked_us: None,
        tripped: false,
        trips: 0,
    }
}

/// Charges `cost` to rule `R`'s state whether or not it fits (an operator's penalty):
/// usage may exceed the capacity, a debt that time repays as it repays any usage.
/// Reports the state afterwards as a peek (cost 0) would.
pub(crate) fn penalize<R: Rule>(
    p: &Params,
    s: &mut R::State,
    now: u64,
    floor: u64,
    cost: u64,
) -> Verdict {
    let t = R::normalize(p, s, now.max(floor));
    let cost = cost.min(max_penalty(p));
    if cost > 0 {
        R::charge(p, s, t, cost);
    }
    let step = Step {
        t,
        allowed: true,
        charged: false,
        delay_us: 0,
    };
    report::<R>(p, s, now, 0, step)
}

/// The most one forced charge (a penalty) takes under `p`, so that every store
/// counts the debt exactly and alike: GCRA and the leaky bucket, a century of debt
/// (`cost × T` within [`MAX_DENIAL`](crate::Penalty::MAX_DENIAL)); the token bucket, 2^52 units
/// (as a quota change's carried deficit); the sliding window, `cost × period` below
/// 2^53 (Lua's exact integers); the other windows count any `u32` exactly. A larger
/// penalty charges this much: the key is denied as long as the algorithm can say.
pub(crate) fn max_penalty(p: &Params) -> u64 {
    const LUA_EXACT: u128 = 1 << 53;
    let century_us = gcra::MAX_DEBT_US;
    match p.algorithm {
        Algorithm::Gcra | Algorithm::LeakyBucket => century_us / (p.emission_ns / 1_000 + 1),
        Algorithm::TokenBucket => (1_u64 << 52) / p.units_per_token.max(1),
        Algorithm::SlidingWindow => {
            u64::try_from((LUA_EXACT - 1) / u128::from(p.period_us.max(1))).unwrap_or(u64::MAX)
        }
        Algorithm::FixedWindow
        | Algorithm::SlidingWindowCounters { .. }
        | Algorithm::SlidingWindowLog => u64::MAX,
    }
}

/// The most a window algorithm's state counts: far above any quota
/// ([`Quota::MAX_COUNT`](crate::Quota::MAX_COUNT) is 2^40), low enough that a count
/// plus any admissible cost never overflows. Only forced charges (penalties, settles),
/// repeated without end in one window, could reach it; the count then stays there.
pub(crate) const MAX_COUNTED: u64 = 1 << 62;

/// The most one settle charges on top of its estimate under `p`: what a penalty
/// charges ([`max_penalty`]), and on the fixed window, the sliding window counters and
/// the log, the largest capacity any quota has ([`Quota::MAX_COUNT`]), since a charge
/// that alone fills the capacity keeps its key denied while it counts (its window,
/// sub-window or entry), however large it is. Not the capacity of `p`'s own quota: the
/// key's usage carries over to every quota of the same period (a per-caller quota of
/// another count), so an extra capped at a small quota's capacity would forgive a
/// larger quota the rest. More would only let repeated settles grow a count towards
/// the end of `u64` (and past the integers Lua holds exactly).
///
/// [`Quota::MAX_COUNT`]: crate::Quota::MAX_COUNT
pub(crate) fn max_settle_extra(p: &Params) -> u64 {
    match p.algorithm {
        Algorithm::FixedWindow
        | Algorithm::SlidingWindowCounters { .. }
        | Algorithm::SlidingWindowLog => crate::Quota::MAX_COUNT,
        Algorithm::SlidingWindow
        | Algorithm::TokenBucket
        | Algorithm::Gcra
        | Algorithm::LeakyBucket => max_penalty(p),
    }
}

/// Refunds to rule `R`'s state at `max(now, floor)`.
pub(crate) fn refund<R: Rule>(p: &Params, s: &mut R::State, now: u64, floor: u64, what: Refund) {
    let t = R::normalize(p, s, now.max(floor));
    match what {
        Refund::Newest(amount) => R::refund(p, s, t, amount),
        Refund::Charge { amount, receipt } => {
            R::refund_charge(p, s, t, amount.min(receipt.cost()), receipt);
        }
    }
}

/// How much of a charge's debt (in the rule's units) is still owed at `now`, for the
/// fluid algorithms, whose debt is repaid by time, oldest charge first.
///
/// `per_us` is the units repaid per µs, `exact` whether every debt is a whole number
/// of µs (then the receipt's reset instant is its charge's exact end). A receipt knows
/// its charge's end only rounded up to the µs, so otherwise the bound subtracts the
/// rounding (`per_us − 1` units): a refund of a partly repaid charge errs in the
/// limiter's favour, by less than a µs of refill. Refunded at the instant it was made,
/// a charge is owed in full (`None`: no bound).
pub(crate) fn still_owed(receipt: Receipt, now: u64, per_us: u64, exact: bool) -> Option<u64> {
    if now <= receipt.at_us() {
        return None;
    }
    let owed = receipt
        .until_us()
        .saturating_sub(now)
        .saturating_mul(per_us);
    Some(if exact || owed == 0 {
        owed
    } else {
        owed - (per_us - 1)
    })
}

/// `ceil(a / b)` for nanoseconds to microseconds and similar conversions.
pub(crate) const fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

#[cfg(test)]
mod state_sizes {
    use std::mem::size_of;

    /// The per-key state of each algorithm, in bytes, as `Algorithm`'s docs count it
    /// (the memory store adds the instant of the last charge to the window
    /// algorithms' slots, and the log's and the counters' buffers live on the heap):
    /// a field added to a state shows up here before it shows up in a benchmark.
    #[test]
    fn states_are_the_documented_size() {
        assert_eq!(size_of::<super::fixed_window::State>(), 16);
        assert_eq!(size_of::<super::sliding_window::State>(), 24);
        assert_eq!(size_of::<super::sliding_window_counters::State>(), 32);
        assert_eq!(size_of::<super::sliding_window_log::State>(), 48);
        assert_eq!(size_of::<super::token_bucket::State>(), 24);
        assert_eq!(size_of::<super::gcra::State>(), 16);
    }
}

#[cfg(test)]
mod forced_charges {
    use super::{Algorithm, MAX_COUNTED, Params, Rule, evaluate, penalize};
    use crate::Quota;

    /// The largest quota, per second.
    fn params(algorithm: Algorithm) -> Params {
        let quota = Quota::per_second(Quota::MAX_COUNT);
        Params::new(&quota, algorithm, std::time::Duration::from_secs(1)).0
    }

    /// Forced charges of the most a settle or a penalty may charge, again and again in
    /// one window: the count stops at `MAX_COUNTED`, nothing overflows, the key is
    /// denied and a refund of everything leaves it idle.
    fn hammer<R: Rule>(algorithm: Algorithm) {
        let p = params(algorithm);
        let mut s = R::State::default();
        let now = 1_700_000_000_000_000;
        for _ in 0..100_000 {
            penalize::<R>(&p, &mut s, now, now, u64::MAX);
        }
        let check = evaluate::<R>(&p, &mut s, now, now, 1, true);
        assert!(!check.allowed, "{algorithm}");
        assert_eq!(check.remaining, 0, "{algorithm}");
        super::refund::<R>(&p, &mut s, now, now, super::Refund::Newest(u64::MAX));
        assert_eq!(R::remaining(&p, &s, now), p.capacity, "{algorithm}");
        assert!(MAX_COUNTED > p.capacity.saturating_mul(2));
    }

    #[test]
    fn repeated_forced_charges_never_overflow_a_window_count() {
        hammer::<super::fixed_window::FixedWindow>(Algorithm::FixedWindow);
        hammer::<super::sliding_window::SlidingWindow>(Algorithm::SlidingWindow);
        hammer::<super::sliding_window_counters::SlidingWindowCounters>(
            Algorithm::SlidingWindowCounters { buckets: 4 },
        );
        hammer::<super::sliding_window_log::SlidingWindowLog>(Algorithm::SlidingWindowLog);
    }
}
