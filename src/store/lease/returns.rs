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
    pub(super) fn refund_locally(&self, charge: &Charge<'_>, receipt: Receipt) -> bool {
        self.with_issuing_lease(charge, receipt, |lease| {
            lease.used -= charge.cost.min(receipt.cost()).min(lease.used);
        })
        .is_some()
    }

    /// Settles a request admitted from this key's live lease in it: the give-back
    /// returns units to the lease, an extra is spent from its unused units (`None`,
    /// changing nothing, when they do not cover it: the store settles it then). The
    /// decision reports the lease as a decision from it does.
    pub(super) fn settle_locally(&self, charge: &Charge<'_>, receipt: Receipt) -> Option<Decision> {
        let plan = settle::plan(charge.limit, receipt, charge.cost);
        let now = self.now();
        self.with_issuing_lease(charge, receipt, |lease| {
            if plan.extra > 0 {
                lease.spend(now, plan.extra).ok()?;
            } else {
                lease.used -= plan.give_back.min(lease.used);
            }
            // The extra was spent from the very charge the receipt names, and what was
            // given back went into the lease, not to the store, where that charge still
            // counts as it did (so its end is where it was).
            let standing = receipt.settled(charge.cost, plan, ExtraAt::Same, 0);
            Some(lease_decision(lease, now, charge.limit, standing))
        })
        .flatten()
    }

    /// Runs `f` on the key's live lease if it issued `receipt`.
    fn with_issuing_lease<T>(
        &self,
        charge: &Charge<'_>,
        receipt: Receipt,
        f: impl FnOnce(&mut Lease) -> T,
    ) -> Option<T> {
        let table_key = TableKey::of(charge);
        let mut shard = lock(self.shard(&table_key));
        let Shard {
            entries, forgotten, ..
        } = &mut *shard;
        if forgotten.contains(&(receipt.at_us(), receipt.until_us())) {
            // Maybe a forgotten lease's decision: the store decides (see `forgotten`).
            return None;
        }
        entries
            .get_mut(&table_key)
            .and_then(|entry| entry.lease.as_mut())
            .filter(|lease| lease.issued(receipt))
            .map(f)
    }
}
