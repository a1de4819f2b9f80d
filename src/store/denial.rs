//! One rule for repeating a store's denial locally, used by the Redis denial cache
//! ([`DenialCache`](super::denial_cache::DenialCache)) and by
//! [`LeasedStore`](super::LeasedStore)'s table: once a store denies a key until T, a
//! request for the same or a larger cost is denied here until T (a blocked key: every
//! cost), the waits counted from when the denied request was sent — stricter, never
//! looser, than asking. Each user bounds how long it trusts the answer (`expires`):
//! the store's state can change under it without this process knowing.

use super::decision;
use crate::algorithm::Verdict;
use crate::{Decision, Limit};

/// A store's denial, in µs of the local clock it is repeated on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Denial {
    /// The local instant the denied request was sent: waits count from there, and a
    /// clock reading earlier (stepped back) cannot tell the denial's age.
    pub(crate) sent: u64,
    /// The store's deadline: denied until then (exclusive).
    until: u64,
    /// The end of the local trust: the deadline, or earlier.
    expires: u64,
    /// Requests of at least this cost are denied.
    min_cost: u64,
    remaining: u64,
    reset_at: u64,
    /// The key itself is blocked (an operator's block, a tripped penalty): every cost
    /// is denied, and the answer says so.
    blocked: bool,
    /// The penalty trips the store's answer reported, repeated as they were.
    trips: u32,
}

impl Denial {
    /// The denial to repeat after `denied` (a store's answer to a request of `cost`
    /// sent at `sent`), trusted for at most `trust_us`; `None` for an answer that is
    /// not a denial that can pass later.
    pub(crate) fn of(denied: &Decision, cost: u64, sent: u64, trust_us: u64) -> Option<Self> {
        let retry = denied.retry_after.filter(|_| !denied.allowed)?;
        let until = sent.saturating_add(crate::time::micros(retry));
        let blocked = denied.blocked_for.is_some();
        Some(Self {
            sent,
            until,
            expires: until.min(sent.saturating_add(trust_us)),
            min_cost: if blocked { 1 } else { cost },
            remaining: denied.remaining,
            reset_at: sent.saturating_add(crate::time::micros(denied.reset_after)),
            blocked,
            trips: denied.trips,
        })
    }

    /// Whether the denial no longer holds at local `now` (its trust ran out, or the
    /// clock reads before it was recorded).
    pub(crate) fn is_over(&self, now: u64) -> bool {
        now < self.sent || now >= self.expires
    }

    /// Whether a request of `cost` at local `now` gets this denial again.
    pub(crate) fn covers(&self, now: u64, cost: u64) -> bool {
        !self.is_over(now) && cost >= self.min_cost
    }

    /// The denial again at local `now` (one it [`covers`](Self::covers)) under
    /// `limit`, its waits shortened by the time since it was sent.
    pub(crate) fn repeat(&self, now: u64, limit: &Limit) -> Decision {
        let left = self.until.saturating_sub(now).max(1);
        decision(
            limit,
            Verdict {
                allowed: false,
                remaining: self.remaining,
                reset_after_us: self.reset_at.saturating_sub(now),
                retry_after_us: Some(left),
                delay_us: 0,
                receipt: None,
                blocked_us: self.blocked.then_some(left),
                tripped: false,
                trips: self.trips,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Quota;

    fn denied(retry: Duration, blocked: bool) -> Decision {
        Decision {
            allowed: false,
            capacity: 10,
            remaining: 0,
            reset_after: retry,
            retry_after: Some(retry),
            delay: Duration::ZERO,
            limit: "api",
            quota: Quota::per_second(10),
            receipt: None,
            blocked_for: blocked.then_some(retry),
            trips: 0,
        }
    }

    #[test]
    fn a_denial_covers_its_cost_and_more_until_its_trust_ends() {
        let limit = Limit::new("api", Quota::per_second(10)).expect("limit");
        let denial = Denial::of(&denied(Duration::from_secs(60), false), 3, 1_000, 5_000_000)
            .expect("a denial");
        assert!(!denial.covers(1_000, 2), "a smaller cost may fit");
        assert!(denial.covers(1_000, 3) && denial.covers(1_000, 4));
        assert!(
            !denial.covers(999, 3),
            "a clock stepped back trusts nothing"
        );
        assert!(!denial.covers(5_001_000, 3), "trusted for 5 s only");
        let again = denial.repeat(2_001_000, &limit);
        // The store's wait, shortened by the 2 s since: not the trust's 3 s.
        assert_eq!(again.retry_after, Some(Duration::from_secs(58)));
        assert_eq!(again.blocked_for, None);
    }

    #[test]
    fn a_blocked_key_is_denied_at_every_cost_and_its_block_counts_down() {
        let limit = Limit::new("api", Quota::per_second(10)).expect("limit");
        let denial =
            Denial::of(&denied(Duration::from_secs(60), true), 5, 0, u64::MAX).expect("a denial");
        assert!(denial.covers(0, 1));
        let again = denial.repeat(10_000_000, &limit);
        assert_eq!(again.blocked_for, Some(Duration::from_secs(50)));
        assert_eq!(again.retry_after, Some(Duration::from_secs(50)));
    }

    #[test]
    fn an_admission_or_a_denial_without_a_wait_is_not_repeated() {
        let mut allowed = denied(Duration::from_secs(1), false);
        allowed.allowed = true;
        assert!(Denial::of(&allowed, 1, 0, 10).is_none());
        let mut final_denial = denied(Duration::from_secs(1), false);
        final_denial.retry_after = None;
        assert!(Denial::of(&final_denial, 1, 0, 10).is_none());
    }
}
