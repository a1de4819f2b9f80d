//! GCRA, the generic cell rate algorithm: one theoretical arrival time (TAT) per key.
//!
//! Internally in nanoseconds so `T = P/L` stays exact up to 10^9 per second; results
//! are rounded up to whole microseconds.
//!
//! The Lua twin (`src/store/redis/lua/gcra/decide.lua`) computes the same rule in
//! other terms, on purpose: Lua's numbers are doubles, exact only below 2^53, and
//! nanoseconds since the epoch are not, so it keeps every instant as a (µs, ns) pair,
//! and decides a quota whose `T` and `B·T` are whole µs in plain µs (its cheaper
//! common case). Here `u64` nanoseconds are exact and one path serves every quota.
//!
//! The state records the `T` its TAT was counted in, so that a caller whose quota
//! changes (a plan, a reload) keeps its usage: see [`carry_over`].

use super::{Params, Rule, div_ceil, still_owed};
use crate::decision::Receipt;

/// The theoretical arrival time in nanoseconds since the epoch (0: idle), and the
/// emission interval `T` it was counted in (0: not yet counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) tat_ns: u64,
    pub(crate) emission_ns: u64,
}

/// The most debt a quota change can leave, in µs: a century, as for the tolerance
/// (`Params`), so `now + debt` stays exact in Lua's doubles.
pub(crate) const MAX_DEBT_US: u64 = 100 * 365 * 86_400 * 1_000_000;

/// Re-counts the debt of a TAT counted in `T_old` in the current `T` (a quota whose
/// count changed; the period, hence the key, is the same): the usage, `(TAT − now) /
/// T_old` requests rounded up to a whole request (in the limiter's favour), is owed
/// again under the new `T`, capped at [`MAX_DEBT_US`]. The Lua twin is
/// `gcra_carry_over` in `gcra/decide.lua`.
pub(crate) fn carry_over(p: &Params, s: &mut State, now: u64) {
    if s.emission_ns == p.emission_ns {
        return;
    }
    let now_ns = now * NS_PER_US;
    if s.emission_ns != 0 && s.tat_ns > now_ns {
        let used = div_ceil(s.tat_ns - now_ns, s.emission_ns);
        let most = MAX_DEBT_US / (p.emission_ns / NS_PER_US + 1);
        s.tat_ns = now_ns + used.min(most) * p.emission_ns;
    }
    s.emission_ns = p.emission_ns;
}

/// See [`Algorithm::Gcra`](crate::Algorithm::Gcra).
#[derive(Debug)]
pub(crate) struct Gcra;

pub(crate) const NS_PER_US: u64 = 1_000;

/// `max(TAT, now)` in nanoseconds: where the next charge starts.
pub(crate) fn start_ns(s: State, now: u64) -> u64 {
    s.tat_ns.max(now * NS_PER_US)
}

impl Rule for Gcra {
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        carry_over(p, s, now);
        // `max(TAT, now)` already treats a clock that went back as standing still.
        now
    }

    fn admits(p: &Params, s: &State, now: u64, cost: u64) -> bool {
        // max(TAT, now) + c·T − B·T ≤ now
        start_ns(*s, now).saturating_add(cost * p.emission_ns) <= now * NS_PER_US + p.tolerance_ns
    }

    fn charge(p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        // Saturating: a penalty charges past the capacity (bounded by `max_penalty`,
        // but repeated), and a TAT stuck at the end of time denies, never wraps.
        s.tat_ns = start_ns(*s, now).saturating_add(cost.saturating_mul(p.emission_ns));
        now
    }

    fn remaining(p: &Params, s: &State, now: u64) -> u64 {
        // floor((now + B·T − TAT) / T)
        let headroom = (now * NS_PER_US + p.tolerance_ns).saturating_sub(start_ns(*s, now));
        p.per_emission.div(headroom)
    }

    fn reset_at(_p: &Params, s: &State, now: u64) -> u64 {
        div_ceil(start_ns(*s, now), NS_PER_US)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        // max(TAT, now) + c·T − B·T, the instant the same request would fit.
        div_ceil(
            start_ns(*s, now).saturating_add(cost * p.emission_ns) - p.tolerance_ns,
            NS_PER_US,
        )
    }

    fn refund(p: &Params, s: &mut State, now: u64, amount: u64) {
        // TAT = max(now, TAT − r·T)
        s.tat_ns = s
            .tat_ns
            .saturating_sub(amount.saturating_mul(p.emission_ns))
            .max(now * NS_PER_US);
    }

    fn refund_charge(p: &Params, s: &mut State, now: u64, amount: u64, receipt: Receipt) {
        refund_charge_behind(p, s, now, amount, receipt);
    }

    fn idle_at(_p: &Params, s: &State) -> u64 {
        div_ceil(s.tat_ns, NS_PER_US)
    }
}

/// How far past the clock a GCRA or leaky-bucket TAT runs before a place is reserved
/// ahead of it (waiters, held requests): GCRA, its burst; the leaky bucket, the
/// request being served (one `T`). `None` for the other algorithms, whose charges are
/// given back where they were counted.
pub(crate) fn queue_ahead_ns(p: &Params) -> Option<u64> {
    match p.algorithm {
        crate::Algorithm::Gcra => Some(p.tolerance_ns),
        crate::Algorithm::LeakyBucket => Some(p.emission_ns),
        crate::Algorithm::FixedWindow
        | crate::Algorithm::SlidingWindow
        | crate::Algorithm::SlidingWindowCounters { .. }
        | crate::Algorithm::SlidingWindowLog
        | crate::Algorithm::TokenBucket => None,
    }
}

/// Whether the charge of `receipt` is a place with later ones reserved behind it at
/// `now`: places are ahead of the clock (the TAT more than `queue_ahead_ns` past it)
/// and the charge is not the newest (its receipt's end is not the TAT). A refund
/// takes from the TAT's end, so giving such a place back would free the newest one's,
/// which is still taken: the next request would be given that very instant as well
/// (two where the rule allows one). The Lua twin is the test in `gcra_refund_charge`
/// (`gcra/steps.lua`).
pub(crate) fn behind_later_places(p: &Params, s: &State, now: u64, receipt: Receipt) -> bool {
    let ahead_ns = queue_ahead_ns(p).unwrap_or(p.tolerance_ns);
    s.tat_ns > (now * NS_PER_US).saturating_add(ahead_ns)
        && receipt.until_us() != div_ceil(s.tat_ns, NS_PER_US)
}

/// Gives back the charge of `receipt` (see `Rule::refund_charge`), GCRA's and the
/// leaky bucket's: nothing while it is [`behind_later_places`] (an older place stays
/// spent until its time, which never over-admits; the memory store parks it to give
/// back once the later ones are).
pub(crate) fn refund_charge_behind(
    p: &Params,
    s: &mut State,
    now: u64,
    amount: u64,
    receipt: Receipt,
) {
    if behind_later_places(p, s, now, receipt) {
        return;
    }
    let now_ns = now * NS_PER_US;
    // Time repays the debt up to the TAT oldest first: the charge is repaid by its
    // reset instant, the part still owed at `now` is all that comes back. With a
    // whole-µs `T` every TAT is a whole µs, so the reset instant is exact.
    let mut back = amount.saturating_mul(p.emission_ns);
    let exact = p.emission_ns.is_multiple_of(NS_PER_US);
    if let Some(owed) = still_owed(receipt, now, NS_PER_US, exact) {
        back = back.min(owed);
    }
    s.tat_ns = s.tat_ns.saturating_sub(back).max(now_ns);
}
