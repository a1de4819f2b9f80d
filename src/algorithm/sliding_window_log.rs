//! Sliding window log: the exact sliding window over a log of admissions.

use std::collections::VecDeque;

use super::{MAX_COUNTED, Params, Rule};
use crate::decision::Receipt;

/// Admitted `(instant µs, cost)` pairs, oldest first; one entry per distinct instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) entries: VecDeque<(u64, u64)>,
    /// Sum of the entries' costs.
    pub(crate) total: u64,
    /// The latest instant the log has seen: a clock behind it stands still here.
    pub(crate) last: u64,
}

/// See [`Algorithm::SlidingWindowLog`](crate::Algorithm::SlidingWindowLog).
#[derive(Debug)]
pub(crate) struct SlidingWindowLog;

impl State {
    /// The earliest instant ≥ `now` at which `total ≤ room`: when the entry whose
    /// leaving makes enough room leaves.
    fn earliest_within(&self, p: &Params, now: u64, room: u64) -> u64 {
        let mut total = self.total;
        if total <= room {
            return now;
        }
        for &(at, cost) in &self.entries {
            total -= cost;
            if total <= room {
                return at + p.period_us;
            }
        }
        now
    }
}

impl Rule for SlidingWindowLog {
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        // A clock that went back stands still at the latest instant seen, so entries
        // neither leave early nor get recorded in the past.
        let now = now.max(s.last);
        s.last = now;
        // An entry counts while `now − t < P`.
        while let Some(&(at, cost)) = s.entries.front() {
            if at + p.period_us > now {
                break;
            }
            s.entries.pop_front();
            s.total -= cost;
        }
        now
    }

    fn admits(p: &Params, s: &State, _now: u64, cost: u64) -> bool {
        s.total + cost <= p.limit
    }

    fn charge(_p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        // Each entry is part of the total: capping the total caps them all.
        let cost = cost.min(MAX_COUNTED - s.total);
        if cost == 0 {
            return now;
        }
        // `now` is never behind the newest entry (see `normalize`); charges at one
        // instant share an entry.
        match s.entries.back_mut() {
            Some((at, c)) if *at == now => *c += cost,
            _ => s.entries.push_back((now, cost)),
        }
        s.total += cost;
        now
    }

    fn remaining(p: &Params, s: &State, _now: u64) -> u64 {
        p.limit.saturating_sub(s.total)
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        s.entries.back().map_or(now, |&(at, _)| at + p.period_us)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        s.earliest_within(p, now, p.limit - cost)
    }

    fn refund(_p: &Params, s: &mut State, _now: u64, mut amount: u64) {
        while amount > 0 {
            let Some((_, cost)) = s.entries.back_mut() else {
                break;
            };
            let taken = amount.min(*cost);
            *cost -= taken;
            s.total -= taken;
            amount -= taken;
            if *cost == 0 {
                s.entries.pop_back();
            }
        }
    }

    fn refund_charge(p: &Params, s: &mut State, _now: u64, amount: u64, receipt: Receipt) {
        // Right after a charge, the key is idle when its entry leaves, one period
        // after the entry's instant: that is the reset instant.
        let Some(at) = receipt.until_us().checked_sub(p.period_us) else {
            return;
        };
        // One entry per instant, in time order; after `normalize`, an entry that left
        // the window is gone.
        let Ok(index) = s.entries.binary_search_by_key(&at, |&(t, _)| t) else {
            return;
        };
        let cost = &mut s.entries[index].1;
        let taken = amount.min(*cost);
        *cost -= taken;
        s.total -= taken;
        if *cost == 0 {
            s.entries.remove(index);
        }
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        s.entries.back().map_or(0, |&(at, _)| at + p.period_us)
    }
}
