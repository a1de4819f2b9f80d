//! Sliding window ("sliding tail"): the previous window's count, weighted by its
//! overlap with the sliding window, plus the current window's count.

use super::{MAX_COUNTED, Params, Rule};
use crate::decision::Receipt;

/// Counts of the current window and the one before it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// Current window index `w = floor(t / P)`.
    pub(crate) window: u64,
    /// `p`: cost admitted in window `w − 1`.
    pub(crate) previous: u64,
    /// `k`: cost admitted in window `w`.
    pub(crate) current: u64,
}

/// See [`Algorithm::SlidingWindow`](crate::Algorithm::SlidingWindow).
#[derive(Debug)]
pub(crate) struct SlidingWindow;

/// `floor(count · (P − e) / P)`: the part of the previous window still inside the
/// sliding window at offset `e`.
fn weighted(count: u64, elapsed: u64, period: u64) -> u64 {
    (u128::from(count) * u128::from(period - elapsed) / u128::from(period)) as u64
}

/// The smallest offset `x` in a window with previous count `count` at which
/// `weighted(count, x) ≤ room`. May equal `P` (the next window's start).
fn first_offset_within(count: u64, room: u64, period: u64) -> u64 {
    if count <= room {
        return 0;
    }
    // floor(c(P−x)/P) ≤ r  ⇔  c(P−x) < (r+1)P  ⇔  x > (c−r−1)P/c
    let excess = u128::from(count - room - 1) * u128::from(period);
    (excess / u128::from(count)) as u64 + 1
}

impl State {
    fn used(&self, p: &Params, now: u64) -> u64 {
        let elapsed = now - self.window * p.period_us;
        weighted(self.previous, elapsed, p.period_us) + self.current
    }

    /// The earliest instant ≥ `now` at which `used ≤ room`, with nothing arriving.
    fn earliest_within(&self, p: &Params, now: u64, room: u64) -> u64 {
        let start = self.window * p.period_us;
        if self.current <= room {
            let offset = first_offset_within(self.previous, room - self.current, p.period_us);
            if offset < p.period_us {
                return now.max(start + offset);
            }
        }
        // Roll into the next window: the current count becomes the previous one.
        start + p.period_us + first_offset_within(self.current, room, p.period_us)
    }
}

impl Rule for SlidingWindow {
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        let window = p.per_period.div(now);
        if window == s.window + 1 {
            *s = State {
                window,
                previous: s.current,
                current: 0,
            };
        } else if window > s.window + 1 {
            *s = State {
                window,
                previous: 0,
                current: 0,
            };
        }
        now.max(s.window * p.period_us)
    }

    fn admits(p: &Params, s: &State, now: u64, cost: u64) -> bool {
        s.used(p, now) + cost <= p.limit
    }

    fn charge(_p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        s.current = s.current.saturating_add(cost).min(MAX_COUNTED);
        now
    }

    fn remaining(p: &Params, s: &State, now: u64) -> u64 {
        p.limit.saturating_sub(s.used(p, now))
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        s.earliest_within(p, now, 0)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        s.earliest_within(p, now, p.limit - cost)
    }

    fn refund(_p: &Params, s: &mut State, _now: u64, amount: u64) {
        let from_current = amount.min(s.current);
        s.current -= from_current;
        s.previous -= (amount - from_current).min(s.previous);
    }

    fn refund_charge(p: &Params, s: &mut State, _now: u64, amount: u64, receipt: Receipt) {
        // Right after a charge in window `w`, its reset instant `r` is after the start
        // of window `w + 1` and no later than that of `w + 2`: `w = ⌊(r − 1)/P⌋ − 1`.
        let Some(charged_in) = p
            .per_period
            .div(receipt.until_us().saturating_sub(1))
            .checked_sub(1)
        else {
            return;
        };
        // The charge is in `k` during its own window, in `p` during the next, and
        // counts no more after that.
        if s.window == charged_in {
            s.current -= amount.min(s.current);
        } else if s.window == charged_in + 1 {
            s.previous -= amount.min(s.previous);
        }
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        if s.current > 0 {
            (s.window + 2) * p.period_us
        } else if s.previous > 0 {
            (s.window + 1) * p.period_us
        } else {
            0
        }
    }
}
