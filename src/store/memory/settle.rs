//! The memory store's settle: the charge's give-back and its extra, under the key's
//! shard lock, in one evaluation (see [`Store::settle`](crate::store::Store::settle)).

use super::shard::Hashed;
use super::{MemoryStore, write};
use crate::algorithm::{Refund, Verdict};
use crate::decision::{ExtraAt, Receipt, Settlement};
use crate::store::{Charge, settle};
use crate::{Decision, Limit};

impl MemoryStore {
    /// Settles the charge of `receipt` to `charge.cost` at once.
    pub(crate) fn settle_now(&self, charge: &Charge<'_>, receipt: Receipt) -> Decision {
        let key = self.hashed(charge.key);
        let now = self.now();
        let mut shard = write(self.shard(key));
        // A receipt that gave back before (a decision settled twice, a retry), or
        // whose limit changed since, moves nothing: no give-back, no extra, and no
        // receipt stands for the caller to move again.
        let fresh = shard.may_give_back(charge.limit, key, now, &receipt);
        let plan = if fresh {
            settle::plan(charge.limit, receipt, charge.cost)
        } else {
            Settlement {
                give_back: 0,
                extra: 0,
            }
        };
        let (state, blocked_us) = shard.settle(charge.limit, key, now, receipt, plan);
        drop(shard);
        let extra_at = ExtraAt::Own {
            at_us: now,
            until_us: now.saturating_add(state.reset_after_us),
        };
        let standing = fresh
            .then(|| settle::after(charge.limit, receipt, charge.cost, plan, extra_at))
            .flatten();
        settle::standing(charge.limit, state, blocked_us, standing)
    }
}

impl super::shard::Shard {
    /// Gives back `plan.give_back` of the charge of `receipt` (as a refund by receipt
    /// does: nothing from before a reset, a place behind later ones parked) and charges
    /// `plan.extra` to the key's state under `limit` whether or not it fits (as a
    /// penalty does, but in this one table). Returns the state's verdict afterwards, as
    /// a peek reports it, and the µs left of the key's block, if it is blocked: a block
    /// does not stop a settle, which is accounting, not admission.
    pub(super) fn settle(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        receipt: Receipt,
        plan: Settlement,
    ) -> (Verdict, Option<u64>) {
        if plan.give_back > 0 {
            let what = Refund::Charge {
                amount: plan.give_back,
                receipt,
            };
            self.refund_as(limit, key, now, what);
        }
        let (state, _) = self.force(limit, key, now, plan.extra);
        let blocked_us = self.blocked(limit, key, now).and_then(|v| v.blocked_us);
        (state.with_trips(self.trips_of(limit, key, now)), blocked_us)
    }
}
