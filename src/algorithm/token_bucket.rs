//! Token bucket: tokens refill continuously at `L/P` up to `B`.
//!
//! Exact rational arithmetic: with `g = gcd(L, P)`, one token is `P/g` units and
//! `L/g` units refill per microsecond, so no rate is ever rounded.

use super::{Params, Rule, div_ceil, still_owed};
use crate::Receipt;

/// The bucket's deficit (capacity minus tokens, in units) as of `last`.
/// The default, a zero deficit, is a full bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) deficit: u64,
    pub(crate) last: u64,
}

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
        if now > s.last {
            let refilled = (now - s.last).saturating_mul(p.units_per_us);
            s.deficit = s.deficit.saturating_sub(refilled);
            s.last = now;
        }
        // A clock behind `last` stands still there: it refills nothing.
        s.last
    }

    fn admits(p: &Params, s: &State, _now: u64, cost: u64) -> bool {
        s.deficit + cost * p.units_per_token <= p.capacity * p.units_per_token
    }

    fn charge(p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        s.deficit += cost * p.units_per_token;
        now
    }

    fn remaining(p: &Params, s: &State, _now: u64) -> u64 {
        p.per_token.div(p.capacity * p.units_per_token - s.deficit)
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
        s.last + refill_time(p, s.deficit)
    }
}
