//! The one rule for answering a denial without asking the store. Every local answer
//! of a denial goes through it: [`LeasedStore`](super::LeasedStore)'s lease table, the
//! Redis denial cache (`DenialCache`), and `Fallback`'s carried blocks (kept per
//! limit name and key, whatever the quota). The rule:
//!
//! - **What may be repeated.** Once a store denies a key until T, a request for the same
//!   or a larger cost is denied here until T (a blocked key: every cost), the waits
//!   counted from when the denied request was sent — stricter, never looser, than
//!   asking. Each user bounds how long it trusts the answer (`trust_us`): the store's
//!   state can change under it without this process knowing.
//! - **A penalty box sees every rejection.** A rejection of a limit with a penalty box
//!   is an offence the store must count: it is never answered here, unless the key is
//!   blocked (a blocked key's rejections count for nothing, on every store). The rule
//!   asks the limit as it is when the request comes (a reload may have added a box
//!   since the denial was recorded), not as it was.
//! - **A batch is answered here only if the store would count nothing more.** A store
//!   decides every charge of a denied batch and counts each one that denies in its box;
//!   so a batch with a charge under a penalty box that no block answers here goes to
//!   the store that made the denials, even when another of its charges is denied here
//!   ([`answer_batch`] with [`Asked::TheSameStore`]). A denial carried to a store that
//!   never saw it (`Fallback`'s insurance, [`Asked::Another`]) answers the batch
//!   whatever else it holds: asked, that store would admit what the denial denies.

use super::{Charge, decision};
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
    /// The denial to repeat after `denied`, the store's answer to `charge` sent at local
    /// `sent`, trusted for at most `trust_us`; `None` for an answer the rule does not
    /// repeat: an admission, a denial that can never pass (no `retry_after`), or a
    /// rejection its limit's penalty box must count (not a block).
    pub(crate) fn of(
        denied: &Decision,
        charge: &Charge<'_>,
        sent: u64,
        trust_us: u64,
    ) -> Option<Self> {
        let retry = denied.retry_after.filter(|_| !denied.allowed)?;
        let blocked = denied.blocked_for.is_some();
        if !blocked && counts_rejections(charge.limit) {
            return None;
        }
        let until = sent.saturating_add(crate::time::micros(retry));
        Some(Self {
            sent,
            until,
            expires: until.min(sent.saturating_add(trust_us)),
            min_cost: if blocked { 1 } else { charge.cost },
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

    /// The answer to `charge` at local `now` by this denial, if the rule gives one: the
    /// denial still holds, covers the cost, and is a block or the charge's limit (as it
    /// is now) has no penalty box. Its waits are shortened by the time since it was
    /// sent.
    pub(crate) fn answer(&self, charge: &Charge<'_>, now: u64) -> Option<Decision> {
        if self.is_over(now)
            || charge.cost == 0
            || charge.cost < self.min_cost
            // The store's answer to a cost that can never fit is final, not this one.
            || charge.cost > charge.limit.params().capacity
            || (!self.blocked && counts_rejections(charge.limit))
        {
            return None;
        }
        Some(self.repeat(now, charge.limit))
    }

    /// The denial again at local `now` under `limit`.
    fn repeat(&self, now: u64, limit: &Limit) -> Decision {
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

/// Whether the store counts `limit`'s rejections (it has a penalty box): each must
/// reach the store.
fn counts_rejections(limit: &Limit) -> bool {
    limit.penalty_box().is_some()
}

/// Which store a request answered nowhere here is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The store that made the denials held here (the Redis denial cache): it knows
    /// them, and counts what a penalty box must count.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    TheSameStore,
    /// A store that never saw them (`Fallback`'s insurance while its primary is down):
    /// asked, it would admit what they deny.
    Another,
}

/// The local answer to an all-or-nothing batch, by `local` (each charge's denial here,
/// answered by [`Denial::answer`]): `None` unless some charge is denied here and,
/// when the same store is asked otherwise, it would count nothing more for the batch
/// (every charge under a penalty box is itself blocked here). One denied charge
/// denies the whole batch, so the others are not evaluated and nothing is charged to
/// them: each reports [`not_evaluated`].
///
/// With [`Asked::Another`] a penalty box beside a denied charge misses the rejection
/// that store would have made (it decides nothing here): a carried denial must hold,
/// and the box counts again as soon as no carried denial answers the batch.
pub(crate) fn answer_batch(
    charges: &[Charge<'_>],
    asked: Asked,
    mut local: impl FnMut(&Charge<'_>) -> Option<Decision>,
) -> Option<Vec<Decision>> {
    let mut answers: Option<Vec<Decision>> = None;
    let mut uncounted = false;
    for (i, charge) in charges.iter().enumerate() {
        let answer = local(charge);
        let counted = charge.cost > 0 && counts_rejections(charge.limit);
        // This charge's rejection, if the store made one, would be an offence.
        uncounted |= counted && answer.as_ref().is_none_or(|d| d.blocked_for.is_none());
        if let Some(denial) = answer {
            let answers =
                answers.get_or_insert_with(|| charges.iter().map(|c| not_evaluated(c)).collect());
            answers[i] = denial;
        }
    }
    if uncounted && asked == Asked::TheSameStore {
        return None;
    }
    answers
}

/// The decision of a charge that another charge of the same batch denied before it
/// was evaluated: `allowed` (this limit did not deny the request, and nothing was
/// charged to it), `capacity`, `remaining` and `reset_after` 0 (nothing is known of
/// its key, so it promises no capacity: see [`Decision::evaluated`]), no
/// `retry_after`, no delay.
fn not_evaluated(charge: &Charge<'_>) -> Decision {
    let mut unknown = decision(
        charge.limit,
        Verdict {
            allowed: true,
            remaining: 0,
            reset_after_us: 0,
            retry_after_us: None,
            delay_us: 0,
            receipt: None,
            blocked_us: None,
            tripped: false,
            trips: 0,
        },
    );
    unknown.capacity = 0;
    unknown
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Key, Penalty, Quota};

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

    fn plain() -> Limit {
        Limit::new("api", Quota::per_second(10)).expect("limit")
    }

    fn boxed() -> Limit {
        plain().penalty(Penalty::after(3).within(Duration::from_secs(1)))
    }

    fn charge<'a>(limit: &'a Limit, key: &'a Key, cost: u64) -> Charge<'a> {
        Charge { limit, key, cost }
    }

    #[test]
    fn a_denial_answers_its_cost_and_more_until_its_trust_ends() {
        let (limit, key) = (plain(), Key::from("alice"));
        let at = |cost| charge(&limit, &key, cost);
        let denial = Denial::of(
            &denied(Duration::from_secs(60), false),
            &at(3),
            1_000,
            5_000_000,
        )
        .expect("a denial");
        assert!(
            denial.answer(&at(2), 1_000).is_none(),
            "a smaller cost may fit"
        );
        assert!(denial.answer(&at(3), 1_000).is_some() && denial.answer(&at(4), 1_000).is_some());
        assert!(
            denial.answer(&at(11), 1_000).is_none(),
            "never fits: the store says so"
        );
        assert!(
            denial.answer(&at(3), 999).is_none(),
            "a clock stepped back trusts nothing"
        );
        assert!(
            denial.answer(&at(3), 5_001_000).is_none(),
            "trusted for 5 s only"
        );
        let again = denial.answer(&at(3), 2_001_000).expect("answered");
        // The store's wait, shortened by the 2 s since: not the trust's 3 s.
        assert_eq!(again.retry_after, Some(Duration::from_secs(58)));
        assert_eq!(again.blocked_for, None);
    }

    #[test]
    fn a_blocked_key_is_denied_at_every_cost_and_its_block_counts_down() {
        let (limit, key) = (plain(), Key::from("alice"));
        let denial = Denial::of(
            &denied(Duration::from_secs(60), true),
            &charge(&limit, &key, 5),
            0,
            u64::MAX,
        )
        .expect("a denial");
        assert!(denial.answer(&charge(&limit, &key, 1), 0).is_some());
        let again = denial
            .answer(&charge(&limit, &key, 1), 10_000_000)
            .expect("answered");
        assert_eq!(again.blocked_for, Some(Duration::from_secs(50)));
        assert_eq!(again.retry_after, Some(Duration::from_secs(50)));
    }

    #[test]
    fn an_admission_or_a_denial_without_a_wait_is_not_repeated() {
        let (limit, key) = (plain(), Key::from("alice"));
        let one = charge(&limit, &key, 1);
        let mut allowed = denied(Duration::from_secs(1), false);
        allowed.allowed = true;
        assert!(Denial::of(&allowed, &one, 0, 10).is_none());
        let mut final_denial = denied(Duration::from_secs(1), false);
        final_denial.retry_after = None;
        assert!(Denial::of(&final_denial, &one, 0, 10).is_none());
    }

    #[test]
    fn a_penalty_box_sees_every_rejection_but_a_blocked_keys() {
        let (limit, key) = (boxed(), Key::from("mallory"));
        let one = charge(&limit, &key, 1);
        let minute = Duration::from_secs(60);
        assert!(
            Denial::of(&denied(minute, false), &one, 0, u64::MAX).is_none(),
            "a rejection is the store's to count"
        );
        let block = Denial::of(&denied(minute, true), &one, 0, u64::MAX).expect("a block");
        assert!(
            block.answer(&one, 1).is_some(),
            "a blocked key's rejections count for nothing"
        );
        // A denial recorded before a reload gave the limit a box answers it no more.
        let unboxed = plain();
        let before = Denial::of(
            &denied(minute, false),
            &charge(&unboxed, &key, 1),
            0,
            u64::MAX,
        )
        .expect("a denial");
        assert!(before.answer(&charge(&unboxed, &key, 1), 1).is_some());
        assert!(before.answer(&one, 1).is_none());
    }

    #[test]
    fn a_batch_is_answered_here_only_if_the_store_would_count_nothing_more() {
        let (unboxed, limit, key) = (plain(), boxed(), Key::from("mallory"));
        let minute = Duration::from_secs(60);
        let rejected = denied(minute, false);
        let blocked = denied(minute, true);
        let batch = [charge(&unboxed, &key, 1), charge(&limit, &key, 1)];
        let denial = Denial::of(&rejected, &batch[0], 0, u64::MAX).expect("a denial");
        let block = Denial::of(&blocked, &batch[1], 0, u64::MAX).expect("a block");
        // The unboxed charge is denied here; the boxed one may be a rejection to count.
        let only_first = |c: &Charge<'_>| {
            (c.limit.penalty_box().is_none())
                .then(|| denial.answer(c, 1))
                .flatten()
        };
        assert!(answer_batch(&batch, Asked::TheSameStore, only_first).is_none());
        // Carried to a store that never saw it, the denial holds.
        let carried = answer_batch(&batch, Asked::Another, only_first).expect("answered here");
        assert!(!carried[0].allowed && carried[1].allowed && carried[1].capacity == 0);
        // The boxed charge is blocked here: nothing more to count.
        let both = |c: &Charge<'_>| {
            if c.limit.penalty_box().is_none() {
                denial.answer(c, 1)
            } else {
                block.answer(c, 1)
            }
        };
        let answers = answer_batch(&batch, Asked::TheSameStore, both).expect("answered here");
        assert!(!answers[0].allowed && answers[1].blocked_for.is_some());
        // A peek of a boxed limit beside a denied charge counts nothing either.
        let peeking = [charge(&unboxed, &key, 1), charge(&limit, &key, 0)];
        let answers =
            answer_batch(&peeking, Asked::TheSameStore, only_first).expect("answered here");
        assert!(!answers[0].allowed && answers[1].allowed && answers[1].capacity == 0);
    }
}
