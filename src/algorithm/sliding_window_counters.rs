//! Sliding window counters: the sum of the last `N` sub-windows of length `P/N`.

use super::{MAX_COUNTED, Params, Rule};
use crate::decision::Receipt;

/// A ring of `N` sub-window counts ending at sub-window `index`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct State {
    /// Index `i = floor(t / (P/N))` of the newest sub-window.
    pub(crate) index: u64,
    /// Sum of all counts in the ring.
    pub(crate) total: u64,
    /// Counts of sub-windows `i−N+1 ..= i`, sub-window `j` at `j mod N`. Empty until
    /// the first charge, so peeks and denials of unknown keys allocate nothing.
    pub(crate) counts: Box<[u64]>,
}

/// See [`Algorithm::SlidingWindowCounters`](crate::Algorithm::SlidingWindowCounters).
#[derive(Debug)]
pub(crate) struct SlidingWindowCounters;

/// The ring position of sub-window `index`.
fn slot(p: &Params, index: u64) -> usize {
    (index % p.buckets) as usize
}

impl State {
    /// The earliest instant ≥ `now` at which `total ≤ room`, with nothing arriving:
    /// walk the sub-window boundaries ahead, dropping the oldest count at each.
    fn earliest_within(&self, p: &Params, now: u64, room: u64) -> u64 {
        if self.total <= room {
            return now;
        }
        let mut total = self.total;
        for ahead in 1..=p.buckets {
            // At boundary `index + ahead`, sub-window `index + ahead − N` leaves.
            total -= self.counts[slot(p, self.index + ahead)];
            if total <= room {
                return (self.index + ahead) * p.bucket_us;
            }
        }
        (self.index + p.buckets) * p.bucket_us
    }
}

impl Rule for SlidingWindowCounters {
    type State = State;

    fn normalize(p: &Params, s: &mut State, now: u64) -> u64 {
        let index = p.per_bucket.div(now);
        if index > s.index {
            if index - s.index >= p.buckets || s.total == 0 {
                s.counts.iter_mut().for_each(|c| *c = 0);
                s.total = 0;
            } else {
                for gone in s.index + 1..=index {
                    let slot = slot(p, gone);
                    s.total -= s.counts[slot];
                    s.counts[slot] = 0;
                }
            }
            s.index = index;
        }
        now.max(s.index * p.bucket_us)
    }

    fn admits(p: &Params, s: &State, _now: u64, cost: u64) -> bool {
        s.total + cost <= p.limit
    }

    fn charge(p: &Params, s: &mut State, now: u64, cost: u64) -> u64 {
        // Each count is part of the total: capping the total caps them all.
        let cost = cost.min(MAX_COUNTED - s.total);
        if s.counts.is_empty() {
            s.counts = vec![0; p.buckets as usize].into_boxed_slice();
        }
        let slot = slot(p, s.index);
        s.counts[slot] += cost;
        s.total += cost;
        now
    }

    fn remaining(p: &Params, s: &State, _now: u64) -> u64 {
        p.limit.saturating_sub(s.total)
    }

    fn reset_at(p: &Params, s: &State, now: u64) -> u64 {
        s.earliest_within(p, now, 0)
    }

    fn retry_at(p: &Params, s: &State, now: u64, cost: u64) -> u64 {
        s.earliest_within(p, now, p.limit - cost)
    }

    fn refund(p: &Params, s: &mut State, _now: u64, mut amount: u64) {
        for back in 0..p.buckets.min(s.index + 1) {
            if amount == 0 || s.total == 0 {
                break;
            }
            let slot = slot(p, s.index - back);
            let taken = amount.min(s.counts[slot]);
            s.counts[slot] -= taken;
            s.total -= taken;
            amount -= taken;
        }
    }

    fn refund_charge(p: &Params, s: &mut State, _now: u64, amount: u64, receipt: Receipt) {
        // Right after a charge in sub-window `j`, the key is idle when `j` leaves, at
        // boundary `j + N`: that is the reset instant.
        let Some(charged_in) = p.per_bucket.div(receipt.until_us()).checked_sub(p.buckets) else {
            return;
        };
        // Only from the charge's own sub-window, while it is in the window (after
        // `normalize`, a sub-window that left is already zero, its slot reused).
        if charged_in > s.index || s.index - charged_in >= p.buckets || s.counts.is_empty() {
            return;
        }
        let slot = slot(p, charged_in);
        let taken = amount.min(s.counts[slot]);
        s.counts[slot] -= taken;
        s.total -= taken;
    }

    fn idle_at(p: &Params, s: &State) -> u64 {
        if s.total == 0 {
            0
        } else {
            (s.index + p.buckets) * p.bucket_us
        }
    }
}
