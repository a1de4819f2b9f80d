//! The lease table: one entry per (limit as charged, key), in shards behind short
//! locks; which shard a key lives in, what makes room in a full one, and what an
//! operator's call drops.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;
use tokio::sync::Notify;

use super::LeasedStore;
use super::moved::Moved;
use super::returns::Release;
use super::slice::{Lease, Shadow};
use crate::algorithm::Params;
use crate::store::Charge;
use crate::store::denial::Denial;
use crate::{Key, Limit};

/// Shards of the lease table: tasks on different keys rarely share a lock.
pub(super) const SHARDS: usize = 32;

/// The most dropped leases a shard remembers (cleared past it: a collision needs a new
/// lease charged in the very microsecond of the old one, so only the latest matter).
const MAX_FORGOTTEN: usize = 1024;

/// What one shard of the table holds.
#[derive(Debug, Default)]
pub(super) struct Shard {
    pub(super) entries: HashMap<TableKey, Entry, RandomState>,
    /// Stamps entries as they are created or refilled: the smallest is the oldest.
    pub(super) tick: u64,
    /// When each lease an operator's call dropped was charged and until when it
    /// counted (its receipt but the cost; at most [`MAX_FORGOTTEN`]): a later lease of
    /// the same key charged in the same microsecond carries the same instants, and a
    /// refund by them could be one of the forgotten lease's decisions. Such a refund
    /// goes to the store, which knows the reset, and is never taken from the new lease.
    pub(super) forgotten: HashSet<(u64, u64)>,
    /// Counts the operators' calls that dropped entries here: a plain decision made
    /// across one is not recorded (it may predate a reset or a block).
    pub(super) epoch: u64,
    /// The receipts this shard's leases moved (gave back into a lease, settled in
    /// one): a copy used again moves nothing, during the lease and after it.
    pub(super) moved: Moved,
}

/// A lease's identity: the limit exactly as charged (name and every parameter, so a
/// caller's own quota never spends a lease charged under another) and the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct TableKey {
    pub(super) name: &'static str,
    pub(super) params: Params,
    pub(super) key: Key,
}

impl TableKey {
    /// The key of the entry `charge` spends from.
    pub(super) fn of(charge: &Charge<'_>) -> Self {
        Self {
            name: charge.limit.name(),
            params: *charge.limit.params(),
            key: *charge.key,
        }
    }
}

/// One key's lease state.
#[derive(Debug)]
pub(super) struct Entry {
    /// To return unused units when the entry is evicted or released.
    pub(super) limit: Limit,
    pub(super) lease: Option<Lease>,
    /// The next slice's size (adaptive sizing).
    pub(super) slice: u64,
    /// The store's `remaining` at its last answer: a slice takes at most half of it.
    pub(super) left: Option<u64>,
    pub(super) denied: Option<Denial>,
    /// Set while one task charges the next slice; the others wait for it.
    pub(super) refill: Option<Arc<Notify>>,
    /// Units that slice will leave over, less those promised to waiting tasks.
    pub(super) spare: u64,
    pub(super) stamp: u64,
    /// Decided by plain store calls, not leases: a lease here would serve nothing but
    /// the request that charges it (see `pass.rs`).
    pub(super) passing: bool,
    /// The last plain decision's charge (while passing).
    pub(super) last: Option<Shadow>,
    /// Plain decisions in a row that a larger slice would have served (while passing).
    pub(super) hits: u32,
    /// Leases in a row that ended having served nothing.
    pub(super) idle_leases: u32,
    /// Whether some lease served a request since leasing last resumed.
    pub(super) served: bool,
    /// Times in a row leasing resumed and served nothing before passing again: each
    /// doubles the hits it takes to resume.
    pub(super) strikes: u32,
}

impl Entry {
    /// A key's first entry: no lease; plain decisions (`passing`) until a larger
    /// slice would have served a request, or leasing at once (fixed slices).
    pub(super) fn new(limit: Limit, stamp: u64, passing: bool) -> Self {
        Self {
            limit,
            lease: None,
            slice: 1,
            left: None,
            denied: None,
            refill: None,
            spare: 0,
            stamp,
            passing,
            last: None,
            hits: 0,
            idle_leases: 0,
            served: false,
            strikes: 0,
        }
    }

    /// Whether `refill` is the task charging this entry's next slice.
    pub(super) fn refilled_by(&self, refill: &Arc<Notify>) -> bool {
        self.refill.as_ref().is_some_and(|r| Arc::ptr_eq(r, refill))
    }
}

/// Locks a shard; a poisoned lock is used as it is, as the crate's other locks are.
pub(super) fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S> LeasedStore<S> {
    /// The shard of `table_key`: chosen by its name and key only, so that every lease of
    /// one (limit name, key), whatever quota it was charged under (a plan caller's
    /// own), lives in one shard, where an operator's call finds them all.
    pub(super) fn shard(&self, table_key: &TableKey) -> &Mutex<Shard> {
        self.shard_of(table_key.name, &table_key.key)
    }

    pub(super) fn shard_of(&self, name: &str, key: &Key) -> &Mutex<Shard> {
        let hash = self.inner.hasher.hash_one((name, key));
        &self.inner.shards[(hash >> 32) as usize % SHARDS]
    }

    /// Makes room for one more entry in a full shard: takes out the oldest entry not
    /// being refilled, and its lease to return.
    pub(super) fn make_room(&self, shard: &mut Shard) -> Option<Release> {
        if shard.entries.len() < self.inner.per_shard {
            return None;
        }
        let oldest = shard
            .entries
            .iter()
            .filter(|(_, e)| e.refill.is_none())
            .min_by_key(|(_, e)| e.stamp)
            .map(|(table_key, _)| table_key.clone())?;
        let entry = shard.entries.remove(&oldest)?;
        Some(Release {
            limit: entry.limit,
            key: oldest.key,
            lease: entry.lease?,
        })
    }

    /// Drops every local lease, cached denial and slice on its way for `key` under the
    /// limit named `name` (any quota it was charged under), without returning their
    /// units: an operator's block, reset or penalty makes them wrong to spend (blocked,
    /// forgotten by the store, or owed), and returning units by a receipt from before a
    /// reset could take back charges made after it. A slice still on its way finds its
    /// entry gone and installs nothing (see [`install`](Self::install)).
    pub(super) fn forget(&self, name: &str, key: &Key) {
        let mut shard = lock(self.shard_of(name, key));
        let Shard {
            entries,
            forgotten,
            epoch,
            ..
        } = &mut *shard;
        *epoch += 1;
        entries.retain(|table_key, entry| {
            let dropped = table_key.key == *key && table_key.name == name;
            if dropped && let Some(lease) = &entry.lease {
                if forgotten.len() >= MAX_FORGOTTEN {
                    forgotten.clear();
                }
                forgotten.insert((lease.receipt.at_us(), lease.receipt.until_us()));
            }
            !dropped
        });
    }
}
