//! Reservations in a shard: a request that may wait takes its place behind the key's
//! queue, charged there and then (the state runs ahead of the clock until it is
//! served); the queue's tail lives in the key's record.

use super::names::Claim;
use super::shard::{Hashed, Shard};
use crate::Limit;
use crate::algorithm::Verdict;

impl Shard {
    /// The tail of `key`'s queue of reservations under `limit`'s name, if it is still
    /// ahead of `now`.
    #[inline]
    pub(super) fn queued(&self, limit: &Limit, key: Hashed<'_>, now: u64) -> Option<u64> {
        let tail = self.record_of(limit, key)?.queue_until;
        (tail > now).then_some(tail)
    }

    /// Reserves `cost` for `key` under `limit` at `now`: the request's place is the
    /// earliest instant, behind the key's queue of reservations, at which the rule
    /// admits it; if that is within `max_wait_us`, it is charged there and then (the
    /// state runs ahead of the clock until then) and the verdict's delay is the wait.
    /// Otherwise nothing is charged and the denial's `retry_after` says when it could.
    ///
    /// A place ahead of the clock needs the key's record (the queue's tail), made
    /// before anything is charged: when the name's share of records holds only blocks
    /// and pending reservations, the reservation is refused and charges nothing.
    pub(crate) fn reserve(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        max_wait_us: u64,
    ) -> Verdict {
        let verdict = self.reserve_behind_records(limit, key, now, cost, max_wait_us);
        verdict.with_trips(self.trips_of(limit, key, now))
    }

    /// [`reserve`](Shard::reserve) without the trips.
    fn reserve_behind_records(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        max_wait_us: u64,
    ) -> Verdict {
        let floor = self.advance_and_sweep(now);
        if let Some(blocked) = self.blocked(limit, key, now) {
            return blocked;
        }
        let tail = self.queued(limit, key, now).unwrap_or(0);
        let first = floor.max(tail);
        let probe = self.decide_at(limit, key, now, first, cost, false);
        // Measured on the caller's clock, as the Redis store measures it: a place the
        // rule gives at once is now, even when the key's latest instant is ahead.
        // Full again no earlier than where the probe stood, as Redis reports it.
        let reset_after_us = probe.reset_after_us.max(first - now);
        let at = if probe.allowed {
            now.max(tail)
        } else {
            match probe.retry_after_us {
                Some(retry) => now + retry,
                None => {
                    return Verdict {
                        reset_after_us,
                        ..probe
                    };
                }
            }
        };
        // The leaky bucket serves its place when the queue ahead has drained: the
        // wait is until then (its reset at the place), and that is what max_wait bounds.
        let served = if limit.params().algorithm == crate::Algorithm::LeakyBucket {
            let there = self.decide_at(limit, key, now, floor.max(at), cost, false);
            at.max(now + there.reset_after_us)
        } else {
            at
        };
        let refused = Verdict {
            allowed: false,
            remaining: 0,
            reset_after_us,
            retry_after_us: Some(served - now),
            delay_us: 0,
            receipt: None,
            ..probe
        };
        if served - now > max_wait_us {
            // Refused, charging nothing: a probe the rule admitted at the queue's
            // tail is still a refusal here (it used to be reported allowed, with
            // nothing charged: a caller that trusted it went uncounted).
            return Verdict {
                remaining: probe.remaining,
                ..refused
            };
        }
        if at > now
            && self
                .record_for(limit, key, now, Claim::Reservation)
                .is_none()
        {
            return refused;
        }
        let mut verdict = self.decide_at(limit, key, now, floor.max(at), cost, true);
        if !verdict.allowed {
            return verdict;
        }
        verdict.delay_us = verdict.delay_us.max(at - now);
        if at > now
            && let Some(record) = self.record_mut(limit, key)
        {
            record.queue_until = record.queue_until.max(at);
            record.expires_at = record.expires_at.max(at);
        }
        verdict
    }
}
