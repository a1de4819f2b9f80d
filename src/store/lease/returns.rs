//! Giving units back: leases that end (expired, evicted, released) return their
//! unused units to the backing store (window algorithms), and a refund or a settle of
//! a request admitted from a live lease goes back into that lease.

use std::sync::atomic::Ordering;

use super::LeasedStore;
use super::decide::lease_decision;
use super::slice::{Kind, Lease};
use super::table::{Shard, TableKey, lock};
use crate::decision::{ExtraAt, Receipt};
use crate::store::{Charge, Store, settle};
use crate::{Decision, Key, Limit, StoreError};

/// Where a refund or a settle by a receipt is answered.
pub(super) enum Local<T> {
    /// In the live lease that issued the receipt: moved there, now.
    Moved(T),
    /// Nowhere: the receipt moved its charge before, and moves nothing more. The
    /// answer of the lease that issued it, while it lives.
    Again(Option<T>),
    /// By the backing store.
    Store,
}

/// A lease taken out of the table, to return.
pub(super) struct Release {
    pub(super) limit: Limit,
    pub(super) key: Key,
    pub(super) lease: Lease,
}

impl<S: Store> LeasedStore<S> {
    /// Ends every lease (`all`) or every expired one, and returns their units.
    pub(super) async fn release(&self, all: bool) -> Result<u64, StoreError> {
        let now = self.now();
        let mut out = Vec::new();
        for shard in &*self.inner.shards {
            let mut shard = lock(shard);
            for (table_key, entry) in &mut shard.entries {
                let over = entry
                    .lease
                    .as_ref()
                    .is_some_and(|lease| all || lease.clone().spend(now, 0).is_err());
                if over && let Some(lease) = entry.lease.take() {
                    out.push(Release {
                        limit: entry.limit.clone(),
                        key: table_key.key,
                        lease,
                    });
                }
            }
        }
        let mut returned = 0;
        let mut failure = None;
        for release in out {
            match self.give_back(release, now).await {
                Ok(units) => returned += units,
                Err(error) => failure = Some(error),
            }
        }
        failure.map_or(Ok(returned), Err)
    }

    /// Returns a window lease's unused units to the backing store; how many it sent
    /// back. A fluid lease's are left for time to repay (see the module docs).
    pub(super) async fn give_back(&self, release: Release, now: u64) -> Result<u64, StoreError> {
        if matches!(release.lease.kind, Kind::Fluid { .. }) {
            return Ok(0);
        }
        let unused = release.lease.unused();
        let (Some(receipt), true) = (
            release.lease.receipt.with_cost(unused),
            release.lease.counts_any(now),
        ) else {
            return Ok(0);
        };
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let charge = Charge {
            limit: &release.limit,
            key: &release.key,
            cost: unused,
        };
        self.inner.store.refund_charge(charge, receipt).await?;
        crate::observe::lease_units_returned(unused);
        Ok(unused)
    }

    /// Takes the key's expired lease out of the table, if it has one.
    pub(super) fn take_expired(&self, charge: &Charge<'_>, now: u64) -> Option<Release> {
        let table_key = TableKey::of(charge);
        let mut shard = lock(self.shard(&table_key));
        let entry = shard.entries.get_mut(&table_key)?;
        if entry.lease.clone()?.spend(now, 0).is_ok() {
            return None;
        }
        Some(Release {
            limit: charge.limit.clone(),
            key: *charge.key,
            lease: entry.lease.take()?,
        })
    }

    /// Takes a refund of a request admitted from this key's live lease back into it.
    pub(super) fn refund_locally(&self, charge: &Charge<'_>, receipt: Receipt) -> Local<()> {
        let now = self.now();
        self.in_issuing_lease(
            charge,
            receipt,
            now,
            |lease| {
                lease.used -= charge.cost.min(receipt.cost()).min(lease.used);
                Some(())
            },
            |_| (),
        )
    }

    /// Settles a request admitted from this key's live lease in it: the give-back
    /// returns units to the lease, an extra is spent from its unused units (the store
    /// settles it when they do not cover it, nothing changed here). The decision
    /// reports the lease as a decision from it does; a receipt moved before moves
    /// nothing, and no receipt stands for it.
    pub(super) fn settle_locally(&self, charge: &Charge<'_>, receipt: Receipt) -> Local<Decision> {
        let plan = settle::plan(charge.limit, receipt, charge.cost);
        let now = self.now();
        self.in_issuing_lease(
            charge,
            receipt,
            now,
            |lease| {
                if plan.extra > 0 {
                    lease.spend(now, plan.extra).ok()?;
                } else {
                    lease.used -= plan.give_back.min(lease.used);
                }
                // The extra was spent from the very charge the receipt names, and what
                // was given back went into the lease, not to the store, where that
                // charge still counts as it did (so its end is where it was).
                let standing = receipt.settled(charge.cost, plan, ExtraAt::Same, 0);
                Some(lease_decision(lease, now, charge.limit, standing))
            },
            |lease| lease_decision(lease, now, charge.limit, None),
        )
    }

    /// Moves `receipt`'s charge in the key's live lease that issued it by `move_it`
    /// (`None`: it cannot, the store moves it) and records that it did; a receipt
    /// moved before is answered by `again` from the lease, if it still lives.
    fn in_issuing_lease<T>(
        &self,
        charge: &Charge<'_>,
        receipt: Receipt,
        now: u64,
        move_it: impl FnOnce(&mut Lease) -> Option<T>,
        again: impl FnOnce(&Lease) -> T,
    ) -> Local<T> {
        if receipt.lease() == 0 {
            // A charge the store made itself: its record is the store's.
            return Local::Store;
        }
        let table_key = TableKey::of(charge);
        let mut shard = lock(self.shard(&table_key));
        let Shard {
            entries,
            forgotten,
            moved,
            ..
        } = &mut *shard;
        let lease = entries
            .get_mut(&table_key)
            .and_then(|entry| entry.lease.as_mut())
            .filter(|lease| lease.issued(receipt));
        if moved.contains(&receipt) {
            // Settled or refunded before (a decision used twice, a retry): nothing
            // more moves, in the lease or, once it has ended, at the store, which never
            // saw the first move.
            return Local::Again(lease.map(|lease| again(lease)));
        }
        if forgotten.contains(&(receipt.at_us(), receipt.until_us())) {
            // Maybe a forgotten lease's decision: the store decides (see `forgotten`).
            return Local::Store;
        }
        let Some(lease) = lease else {
            return Local::Store;
        };
        let Some(done) = move_it(lease) else {
            return Local::Store;
        };
        let until = lease.counts_until_local(&receipt, charge.limit.params().period_us);
        moved.record(&receipt, until, now);
        Local::Moved(done)
    }

    /// Records that the store moved `receipt`'s charge, if the lease that issued it
    /// still lives: a copy used again must not move it in the lease (the store's own
    /// record sees only what reaches the store).
    pub(super) fn moved_at_store(&self, charge: &Charge<'_>, receipt: Receipt) {
        if receipt.lease() == 0 {
            return;
        }
        let now = self.now();
        let table_key = TableKey::of(charge);
        let mut shard = lock(self.shard(&table_key));
        let Shard { entries, moved, .. } = &mut *shard;
        if let Some(lease) = entries
            .get(&table_key)
            .and_then(|entry| entry.lease.as_ref())
            .filter(|lease| lease.issued(receipt))
        {
            let until = lease.counts_until_local(&receipt, charge.limit.params().period_us);
            moved.record(&receipt, until, now);
        }
    }
}
