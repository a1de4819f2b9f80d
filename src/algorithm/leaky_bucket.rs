//! Leaky bucket as a queue: GCRA's admission rule, but admitted requests wait their
//! turn (`delay`) so the inner service sees one request per `T`.

use super::gcra::{Gcra, NS_PER_US, State, start_ns};
use super::{Params, Rule, div_ceil};
use crate::Receipt;

/// See [`Algorithm::LeakyBucket`](crate::Algorithm::LeakyBucket).
#[derive(Debug)]
pub(crate) struct LeakyBucket;

impl Rule for LeakyBucket {
    /// The TAT of the queue's tail.
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        Gcra::normalize(p, s, now)
    }

    fn admits(p: &Params, s: &State, now: u64, cost: u64) -> bool {
        // max(TAT, now) + c·T − now ≤ B·T: the same rule as GCRA.
        Gcra::admits(p, s, now, cost)
    }

    fn charge(p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        // The request is served when the queue ahead of it has drained.
        let served_ns = start_ns(*s, now);
        Gcra::charge(p, s, now, cost);
        div_ceil(served_ns, NS_PER_US)
    }

    fn remaining(p: &Params, s: &State, now: u64) -> u64 {
        Gcra::remaining(p, s, now)
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        Gcra::reset_at(p, s, now)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        Gcra::retry_at(p, s, now, cost)
    }

    fn refund(p: &Params, s: &mut State, now: u64, amount: u64) {
        Gcra::refund(p, s, now, amount);
    }

    fn refund_charge(p: &Params, s: &mut State, now: u64, amount: u64, receipt: Receipt) {
        // A queued request's place is its share of the TAT, as a GCRA charge.
        Gcra::refund_charge(p, s, now, amount, receipt);
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        Gcra::idle_at(p, s)
    }
}
