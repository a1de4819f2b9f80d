//! Token bucket: tokens refill continuously at `L/P` up to `B`.
//!
//! Exact rational arithmetic: with `g = gcd(L, P)`, one token is `P/g` units and
//! `L/g` units refill per microsecond, so no rate is ever rounded.
//!
//! Units depend on `L`, so the state records the `L` its deficit was counted in: a
//! caller whose quota changes (a plan, a reload) keeps its usage (see `carry_over`).

use super::{Params, Rule, div_ceil, gcd, still_owed};
use crate::decision::Receipt;

/// The bucket's deficit (capacity minus tokens, in units) as of `last`, counted under
/// limit `limit` (0: not yet counted). The default, a zero deficit, is a full bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) deficit: u64,
    pub(crate) last: u64,
    pub(crate) limit: u64,
}

/// (units per token, units refilled per µs) of limit `limit` over `period_us`.
pub(crate) fn units(limit: u64, period_us: u64) -> (u64, u64) {
    let g = gcd(limit, period_us);
    (period_us / g, limit / g)
}

/// Refills the deficit at `units_per_us` from `last` to `now`; a clock behind `last`
/// refills nothing.
fn refill(s: &mut State, now: u64, units_per_us: u64) {
    if now > s.last {
        let refilled = (now - s.last).saturating_mul(units_per_us);
        s.deficit = s.deficit.saturating_sub(refilled);
        s.last = now;
    }
}

/// Re-counts a deficit counted under another limit (same period, hence same key) in
/// the current units: refilled at the old rate up to `now`, its usage in tokens,
/// rounded up to a whole token (in the limiter's favour), is owed again under the new
/// quota, capped so that it stays exact in Lua's doubles. The Lua twin keeps the old
/// units in the state instead of the old limit; the numbers are the same.
fn carry_over(p: &Params, s: &mut State, now: u64) {
    if s.limit == p.limit {
        return;
    }
    if s.limit != 0 && s.deficit > 0 {
        let (old_per_token, old_per_us) = units(s.limit, p.period_us);
        refill(s, now, old_per_us);
        let used = div_ceil(s.deficit, old_per_token);
        s.deficit = used.min(MAX_UNITS / p.units_per_token) * p.units_per_token;
    }
    s.limit = p.limit;
}

/// The most deficit a quota change can leave, in units: exact in Lua's doubles.
const MAX_UNITS: u64 = 1 << 52;

/// See [`Algorithm::TokenBucket`](crate::Algorithm::TokenBucket).
#[derive(Debug)]
pub(crate) struct TokenBucket;

/// Microseconds for `units` to refill, rounded up.
fn refill_time(p: &Params, units: u64) -> u64 {
    div_ceil(units, p.units_per_us)
}

impl Rule for TokenBucket {
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        carry_over(p, s, now);
        refill(s, now, p.units_per_us);
        // A clock behind `last` stands still there: it refills nothing.
        s.last
    }

    fn admits(p: &Params, s: &State, _now: u64, cost: u64) -> bool {
        s.deficit + cost * p.units_per_token <= p.capacity * p.units_per_token
    }

    fn charge(p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        // Saturating, as GCRA's: repeated penalties never wrap the deficit.
        s.deficit = s
            .deficit
            .saturating_add(cost.saturating_mul(p.units_per_token));
        now
    }

    fn remaining(p: &Params, s: &State, _now: u64) -> u64 {
        // A deficit may exceed the capacity: a quota lowered under a caller's usage.
        p.per_token
            .div((p.capacity * p.units_per_token).saturating_sub(s.deficit))
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        now + refill_time(p, s.deficit)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        let allowed_deficit = (p.capacity - cost) * p.units_per_token;
        now + refill_time(p, s.deficit - allowed_deficit)
    }

    fn refund(p: &Params, s: &mut State, _now: u64, amount: u64) {
        s.deficit = s
            .deficit
            .saturating_sub(amount.saturating_mul(p.units_per_token));
    }

    fn refund_charge(p: &Params, s: &mut State, now: u64, amount: u64, receipt: Receipt) {
        // The refill repays the oldest deficit first: the charge is repaid by its
        // reset instant, the part still owed at `now` is all that comes back.
        let mut units = amount.saturating_mul(p.units_per_token);
        if let Some(owed) = still_owed(receipt, now, p.units_per_us, false) {
            units = units.min(owed);
        }
        s.deficit -= units.min(s.deficit);
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        // The deficit refills at the rate of the limit it was counted under.
        let per_us = if s.limit == 0 || s.limit == p.limit {
            p.units_per_us
        } else {
            units(s.limit, p.period_us).1
        };
        s.last + div_ceil(s.deficit, per_us)
    }
}
