//! Fixed window: one counter per epoch-aligned window of length `P`.

use super::{MAX_COUNTED, Params, Rule};
use crate::decision::Receipt;

/// The counter of the key's current window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// Window index `floor(t / P)` the count belongs to.
    pub(crate) window: u64,
    /// Cost admitted in that window.
    pub(crate) count: u64,
}

/// See [`Algorithm::FixedWindow`](crate::Algorithm::FixedWindow).
#[derive(Debug)]
pub(crate) struct FixedWindow;

impl State {
    fn window_end(&self, p: &Params) -> u64 {
        (self.window + 1) * p.period_us
    }
}

impl Rule for FixedWindow {
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        let window = p.per_period.div(now);
        if window > s.window {
            *s = State { window, count: 0 };
        }
        // A clock behind the stored window stands at the window's start.
        now.max(s.window * p.period_us)
    }

    fn admits(p: &Params, s: &State, _now: u64, cost: u64) -> bool {
        s.count + cost <= p.limit
    }

    fn charge(_p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        s.count = s.count.saturating_add(cost).min(MAX_COUNTED);
        now
    }

    fn remaining(p: &Params, s: &State, _now: u64) -> u64 {
        p.limit.saturating_sub(s.count)
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        if s.count == 0 { now } else { s.window_end(p) }
    }

    fn retry_at(p: &Params, s: &State, _now: u64, _cost: u64) -> u64 {
        // The next window starts empty and cost ≤ L.
        s.window_end(p)
    }

    fn refund(_p: &Params, s: &mut State, _now: u64, amount: u64) {
        // After `normalize`, a count from an earlier window is already gone.
        s.count -= amount.min(s.count);
    }

    fn refund_charge(p: &Params, s: &mut State, now: u64, amount: u64, receipt: Receipt) {
        // A charge counts until its window's end: only a refund in that same window
        // finds it (a later window's count holds other charges).
        if s.window_end(p) == receipt.until_us() {
            Self::refund(p, s, now, amount);
        }
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        if s.count == 0 { 0 } else { s.window_end(p) }
    }
}
