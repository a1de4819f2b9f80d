//! In-flight slots in memory: per (limit name, key), the count of requests running,
//! in shards behind mutexes.
//!
//! A key's entry exists only while it has a request running: the slot that brings its
//! count to zero removes it. The table therefore holds at most as many entries as
//! there are requests running, whatever keys callers make up, and needs no bound or
//! sweep of its own.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;

use crate::store::InFlightSlot;
use crate::{Key, Limit};

type Counts = HashMap<(&'static str, Key), u32, RandomState>;

/// The slots taken, per (limit name, key).
pub(super) struct InFlightTable {
    shards: Box<[Mutex<Counts>]>,
    hasher: RandomState,
}

impl InFlightTable {
    /// A table of `shards` shards (a power of two, as the store's).
    pub(super) fn new(shards: usize, hasher: RandomState) -> Self {
        Self {
            shards: (0..shards)
                .map(|_| Mutex::new(HashMap::with_hasher(hasher.clone())))
                .collect(),
            hasher,
        }
    }

    fn shard(&self, entry: &(&'static str, Key)) -> MutexGuard<'_, Counts> {
        let hash = self.hasher.hash_one(entry);
        let shard = &self.shards[(hash >> 32) as usize & (self.shards.len() - 1)];
        // The counts are plain integers that every step leaves consistent: a panic
        // elsewhere while the lock was held leaves nothing half done.
        shard.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One of `key`'s `max` slots under `limit`, if one is free.
    pub(super) fn enter(
        self: &Arc<Self>,
        limit: &Limit,
        key: &Key,
        max: u32,
    ) -> Option<InFlightSlot> {
        let entry = (limit.name(), *key);
        match self.shard(&entry).entry(entry) {
            Entry::Occupied(mut running) if *running.get() < max => *running.get_mut() += 1,
            // No entry for a key without slots (`max` 0): none is left behind.
            Entry::Vacant(free) if max > 0 => {
                free.insert(1);
            }
            _ => return None,
        }
        let table = Arc::clone(self);
        Some(InFlightSlot::new(move || table.leave(entry)))
    }

    fn leave(&self, entry: (&'static str, Key)) {
        let mut counts = self.shard(&entry);
        if let Some(running) = counts.get_mut(&entry) {
            *running -= 1;
            if *running == 0 {
                counts.remove(&entry);
            }
        }
    }

    /// How many (limit, key) have requests running.
    pub(super) fn keys(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }
}
