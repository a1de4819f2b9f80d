//! Denials repeated locally: after the store denies a key with a `retry_after`, the
//! same or a larger cost is denied here, without a round trip, until then (at most
//! `max_lease`): stricter, never looser, than asking.

use std::time::Duration;

use super::LeasedStore;
use crate::{Decision, Limit};

/// A denial to repeat without a round trip until `until` (local).
#[derive(Debug)]
pub(super) struct Denial {
    pub(super) until: u64,
    /// The cost denied: as much or more is denied too.
    pub(super) cost: u64,
    /// Local instant the denied call was sent (durations count from there).
    pub(super) sent: u64,
    pub(super) decision: Decision,
}

impl Denial {
    /// Whether a request of `cost` at local `now` gets this denial again.
    pub(super) fn covers(&self, now: u64, cost: u64) -> bool {
        now < self.until && cost >= self.cost
    }

    /// The denial again at local `now`, its waits shortened by the time since.
    pub(super) fn repeat(&self, now: u64, limit: &Limit) -> Decision {
        let since = Duration::from_micros(now.saturating_sub(self.sent));
        Decision {
            reset_after: self.decision.reset_after.saturating_sub(since),
            retry_after: self
                .decision
                .retry_after
                .map(|retry| retry.saturating_sub(since).max(Duration::from_micros(1))),
            limit: limit.name(),
            quota: limit.quota(),
            ..self.decision.clone()
        }
    }
}

impl<S> LeasedStore<S> {
    /// The denial to repeat after `decision`, if it is one that can pass later.
    pub(super) fn denial(&self, decision: &Decision, cost: u64, sent: u64) -> Option<Denial> {
        let retry = decision.retry_after.filter(|_| !decision.allowed)?;
        let retry = crate::time::micros(retry);
        Some(Denial {
            until: sent.saturating_add(retry.min(self.inner.max_lease_us)),
            cost,
            sent,
            decision: decision.clone(),
        })
    }
}
