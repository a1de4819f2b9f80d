//! A shard's blocks and penalty counts: one record per (policy table, key) that was
//! blocked or rejected under a penalty box, beside the rate states and bounded like
//! them.
//!
//! Records live apart from the rate states because every rate state is typed by its
//! algorithm and kept as small as it allows (GCRA: one word, changed by
//! compare-and-swap); a block is rare, so keys that never had one pay nothing but a
//! check that this table is empty.
//!
//! **Bounded:** at most as many records as the shard holds rate states (`capacity`),
//! so the store's records number at most [`max_keys`](crate::MemoryStore::max_keys).
//! A full table drops a record that says nothing any more (block over, window
//! closed) or, of a random sample, the one whose loss forgives the least: a count
//! before a block, the lowest count first, and of blocks the one ending soonest. A
//! flood of distinct offending keys therefore recycles its own records; and since
//! only a rejection makes a record, each of its keys must first spend its quota.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::shard::Hashed;
use crate::Key;
use crate::penalty::Offences;

/// How many records an eviction compares (as for rate states, see `eviction.rs`).
const SAMPLE: usize = 16;

/// One key's block and count under one policy table.
pub(super) struct Record {
    table: u32,
    key: Key,
    pub(super) offences: Offences,
    /// From then on the record says nothing: dropped by sweeps and evicted first.
    pub(super) expires_at: u64,
    /// The instant the key's latest reservation proceeds at (`Limiter::reserve`): the
    /// tail of its queue; 0 when it has none. Until then the key's state runs ahead of
    /// the clock, and a request that does not wait is answered from behind the queue.
    pub(super) queue_until: u64,
}

/// A shard's records.
#[derive(Default)]
pub(super) struct Blocks {
    records: HashTable<Record>,
}

/// The record's hash: the key's (computed once per decision) mixed with its table.
fn mix(key_hash: u64, table: u32) -> u64 {
    key_hash ^ u64::from(table).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Blocks {
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The record of `key` under `table`, if any.
    pub(super) fn get(&self, table: u32, key: Hashed<'_>) -> Option<&Record> {
        self.records.find(mix(key.hash, table), |r| {
            r.table == table && r.key == *key.key
        })
    }

    /// Drops the record of `key` under `table`.
    pub(super) fn remove(&mut self, table: u32, key: Hashed<'_>) {
        if let Ok(entry) = self.records.find_entry(mix(key.hash, table), |r| {
            r.table == table && r.key == *key.key
        }) {
            entry.remove();
        }
    }

    /// The record of `key` under `table`, made (empty) if there is none; a full table
    /// (`capacity` records) first makes room.
    pub(super) fn entry(
        &mut self,
        table: u32,
        key: Hashed<'_>,
        (capacity, now): (usize, u64),
        hasher: RandomState,
        rng: &mut fastrand::Rng,
    ) -> &mut Record {
        let hash = mix(key.hash, table);
        let found = self
            .records
            .find(hash, |r| r.table == table && r.key == *key.key)
            .is_some();
        if !found {
            while self.records.len() >= capacity.max(1) {
                if !self.evict_one(now, rng) {
                    break;
                }
            }
        }
        self.records
            .entry(
                hash,
                |r| r.table == table && r.key == *key.key,
                |r| mix(hasher.hash_one(r.key), r.table),
            )
            .or_insert_with(|| Record {
                table,
                key: *key.key,
                offences: Offences::default(),
                expires_at: 0,
                queue_until: 0,
            })
            .into_mut()
    }

    /// Drops every record that says nothing at `now`.
    pub(super) fn sweep(&mut self, now: u64) {
        self.records.retain(|r| r.expires_at > now);
    }

    /// Evicts one record: of a random sample, the one whose loss forgives the least.
    fn evict_one(&mut self, now: u64, rng: &mut fastrand::Rng) -> bool {
        let buckets = self.records.num_buckets();
        if self.records.is_empty() || buckets == 0 {
            return false;
        }
        // Greatest first: said nothing any more; then not blocked; then the lowest
        // count; then the block that ends soonest.
        let score = |r: &Record| {
            (
                r.expires_at <= now,
                r.offences.blocked_until <= now && r.queue_until <= now,
                u32::MAX - r.offences.count,
                u64::MAX - r.offences.blocked_until,
            )
        };
        let mut best: Option<(_, usize)> = None;
        let mut consider = |index: usize, records: &HashTable<Record>| -> bool {
            match records.get_bucket(index) {
                Some(r) => {
                    let s = score(r);
                    if best.is_none_or(|(b, _)| s > b) {
                        best = Some((s, index));
                    }
                    true
                }
                None => false,
            }
        };
        let mut sampled = 0;
        let probes = (4 * SAMPLE * buckets.div_ceil(self.records.len())).min(4 * buckets);
        for _ in 0..probes {
            if sampled == SAMPLE {
                break;
            }
            sampled += usize::from(consider(rng.usize(..buckets), &self.records));
        }
        if sampled == 0 {
            let start = rng.usize(..buckets);
            for offset in 0..buckets {
                if consider((start + offset) % buckets, &self.records) {
                    break;
                }
            }
        }
        let Some((_, index)) = best else {
            return false;
        };
        match self.records.get_bucket_entry(index) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }
}
