//! Leaky bucket as a queue: GCRA's admission rule, but admitted requests wait their
//! turn (`delay`) so the inner service sees one request per `T`.
//!
//! A queue whose burst is large against its rate makes its tail wait long (1/h with
//! burst 1000: 41 days for the last place). The limit's `max_delay` bounds that wait
//! inside the rule: a request that would wait longer is denied, charging nothing, in
//! the same step that would have charged it (on Redis, in the same script call).

use super::gcra::{self, Gcra, NS_PER_US, State, start_ns};
use super::{Params, Rule, div_ceil};
use crate::decision::Receipt;

/// See [`Algorithm::LeakyBucket`](crate::Algorithm::LeakyBucket).
#[derive(Debug)]
pub(crate) struct LeakyBucket;

/// The latest instant (ns) the queue ahead of a request may drain at for the request
/// to be admitted now: served at `ceil(start / 1 µs)`, it waits at most `max_delay`
/// exactly when `start ≤ (now + max_delay)·1 µs`.
fn latest_start_ns(p: &Params, now: u64) -> u64 {
    (now + p.max_delay_us) * NS_PER_US
}

impl Rule for LeakyBucket {
    /// The TAT of the queue's tail.
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        Gcra::normalize(p, s, now)
    }

    fn admits(p: &Params, s: &State, now: u64, cost: u64) -> bool {
        // max(TAT, now) + c·T − now ≤ B·T (GCRA's rule), and the queue ahead drains
        // within max_delay.
        Gcra::admits(p, s, now, cost) && start_ns(*s, now) <= latest_start_ns(p, now)
    }

    fn charge(p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        // The request is served when the queue ahead of it has drained.
        let served_ns = start_ns(*s, now);
        Gcra::charge(p, s, now, cost);
        div_ceil(served_ns, NS_PER_US)
    }

    fn remaining(p: &Params, s: &State, now: u64) -> u64 {
        // The queue's free places, as GCRA's, whether or not max_delay lets the far
        // ones be taken now: so `remaining` is the capacity again exactly when the
        // queue has drained (`reset_after`), and a place refused by the bound has its
        // `retry_after`.
        Gcra::remaining(p, s, now)
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        Gcra::reset_at(p, s, now)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        // The later of: when GCRA's rule holds, and when the queue ahead is within
        // max_delay, ceil(start / 1 µs) − max_delay (the start stays where it is while
        // it is ahead of the clock). GCRA's instant is only defined when its rule fails.
        let within_bound = div_ceil(start_ns(*s, now), NS_PER_US).saturating_sub(p.max_delay_us);
        if Gcra::admits(p, s, now, cost) {
            within_bound
        } else {
            Gcra::retry_at(p, s, now, cost).max(within_bound)
        }
    }

    fn refund(p: &Params, s: &mut State, now: u64, amount: u64) {
        Gcra::refund(p, s, now, amount);
    }

    fn refund_charge(p: &Params, s: &mut State, now: u64, amount: u64, receipt: Receipt) {
        // A queued request's place is its share of the TAT, as a GCRA charge; places
        // are ahead once the TAT is past the request being served (`queue_ahead_ns`).
        gcra::refund_charge_behind(p, s, now, amount, receipt);
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        Gcra::idle_at(p, s)
    }
}
