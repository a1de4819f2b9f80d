//! Charging the backing store: a key's next slice (or, when it does not fit, the
//! request's cost alone), and installing what the answer says (a lease, or a denial to
//! repeat) into the key's entry.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::Notify;

use super::LeasedStore;
use super::slice::{Kind, Lease};
use super::table::{TableKey, lock};
use crate::store::denial::Denial;
use crate::store::{Charge, Store};
use crate::{Decision, StoreError};

impl<S: Store> LeasedStore<S> {
    /// Charges a slice (or, if it does not fit, the cost alone) and installs the lease.
    pub(super) async fn charge_slice(
        &self,
        charge: &Charge<'_>,
        slice: u64,
        table_key: &TableKey,
        refill: &Arc<Notify>,
    ) -> Result<Decision, StoreError> {
        let cost = charge.cost;
        let sent = self.now();
        let mut charged = slice;
        // A slice is quota charged ahead of requests, not a request: one that does not
        // fit is no rejection, so a penalty box must not count it (it counted one for a
        // request then admitted at its own cost, and two for a request then denied).
        // Charged under the limit without its box, it still meets every block; only
        // the request's own cost, charged as itself, can be an offence, once.
        let unboxed = charge
            .limit
            .penalty_box()
            .map(|_| charge.limit.without_penalty());
        let ahead = Charge {
            limit: unboxed.as_ref().unwrap_or(charge.limit),
            ..*charge
        };
        let mut decision = self.acquire_one(&ahead, slice).await?;
        if !decision.allowed && slice > cost {
            charged = cost;
            decision = self.acquire_one(charge, cost).await?;
        }
        let answered = self.now();
        if self.install(
            &mut decision,
            charge,
            charged,
            (sent, answered),
            (table_key, refill),
        ) {
            Ok(decision)
        } else {
            // Forgotten meanwhile by an operator's call (block, reset, penalize): the
            // request keeps its cost, decided before the call reached the store; the
            // rest of the slice is neither installed nor returned (see `forget`).
            if let Some(receipt) = decision.receipt {
                decision.receipt = receipt.with_cost(charge.cost);
            }
            Ok(decision)
        }
    }

    /// Records what a charge of the request's own cost, made alongside a refill, says
    /// about the key: what is left, and a denial to repeat.
    pub(super) fn note(
        &self,
        charge: &Charge<'_>,
        decision: &Decision,
        sent: u64,
        table_key: &TableKey,
    ) {
        let mut shard = lock(self.shard(table_key));
        if let Some(entry) = shard.entries.get_mut(table_key) {
            entry.left = Some(decision.remaining);
            if let Some(denial) = Denial::of(decision, charge, sent, self.inner.max_lease_us) {
                entry.denied = Some(denial);
            }
        }
    }

    /// Installs the lease (or the denial) a charge of `charged` units answered, and
    /// turns the store's decision into the request's; `false` if the key's entry this
    /// charge refills has left the table meanwhile (an operator's call forgot it; a
    /// new entry for the key is not this charge's to fill).
    fn install(
        &self,
        decision: &mut Decision,
        charge: &Charge<'_>,
        charged: u64,
        (sent, answered): (u64, u64),
        (table_key, refill): (&TableKey, &Arc<Notify>),
    ) -> bool {
        let cost = charge.cost;
        let mut shard = lock(self.shard(table_key));
        let Some(entry) = shard
            .entries
            .get_mut(table_key)
            .filter(|entry| entry.refilled_by(refill))
        else {
            return false;
        };
        entry.left = Some(decision.remaining);
        if decision.allowed {
            if let Some(receipt) = decision.receipt
                && let Some(kind) = Kind::of(charge.limit.params(), receipt.at_us())
            {
                let lease = Lease::new(
                    kind,
                    receipt,
                    cost,
                    (sent, answered),
                    decision.remaining,
                    self.inner.max_lease_us,
                );
                crate::observe::lease_slice();
                decision.remaining = (decision.remaining + (charged - cost)).min(decision.capacity);
                decision.receipt = lease.issue(cost);
                entry.lease = Some(lease);
            }
        } else if let Some(denial) = Denial::of(decision, charge, sent, self.inner.max_lease_us) {
            entry.denied = Some(denial);
        }
        true
    }

    /// Charges `cost` of `charge` to the backing store: one call.
    pub(super) async fn acquire_one(
        &self,
        charge: &Charge<'_>,
        cost: u64,
    ) -> Result<Decision, StoreError> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let charges = [Charge { cost, ..*charge }];
        let mut decisions = self.inner.store.decide(&charges).await?;
        if decisions.is_empty() {
            return Err(crate::store::refund_dropped(
                "the store answered no decision",
            ));
        }
        Ok(decisions.swap_remove(0))
    }
}
