//! Giving units back: leases that end (expired, evicted, released) return their
//! unused units to the backing store (window algorithms), and a refund of a request
//! admitted from a live lease goes back into that lease.

use std::sync::atomic::Ordering;

use super::LeasedStore;
use super::slice::{Kind, Lease};
use super::table::{Shard, TableKey, lock};
use crate::decision::Receipt;
use crate::store::{Charge, Store};
use crate::{Key, Limit, StoreError};

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
        let table_key = TableKey::of(charge);
        let mut shard = lock(self.shard(&table_key));
        let Shard {
            entries, forgotten, ..
        } = &mut *shard;
        if forgotten.contains(&(receipt.at_us(), receipt.until_us())) {
            // Maybe a forgotten lease's decision: the store decides (see `forgotten`).
            return false;
        }
        let Some(lease) = entries
            .get_mut(&table_key)
            .and_then(|entry| entry.lease.as_mut())
            .filter(|lease| lease.issued(receipt))
        else {
            return false;
        };
        lease.used -= charge.cost.min(receipt.cost()).min(lease.used);
        true
    }
}
