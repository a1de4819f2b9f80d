//! One limit name's records in a shard: a caller's block, penalty count and trips, and
//! queue of reservations, one record per (limit name, key), whatever quota, period or
//! algorithm the key is decided under.
//!
//! Records live apart from the rate states because every rate state is typed by its
//! algorithm and kept as small as it allows (GCRA: one word, changed by
//! compare-and-swap); a block is rare, so keys that never had one pay nothing but a
//! check that the shard holds no record.
//!
//! **What may be evicted.** A record that still denies something is never evicted:
//! not a block that has not ended (an operator's or a penalty's), not a queue of
//! reservations still ahead of the clock (its charges run ahead of the clock in the
//! key's state, and a request that does not wait must still be answered from behind
//! it). Only a record that says nothing any more, a mere count of rejections, or
//! remembered penalty trips (the fewest first: losing them only makes the key's next
//! block the first one again) makes room; when none is there, the caller (see `Shard::record_for`) refuses to
//! make a new record rather than lift an existing one.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::shard::{Hashed, Shard};
use crate::Key;
use crate::Limit;
use crate::algorithm::Verdict;
use crate::decision::Receipt;
use crate::penalty::OffenceRecord;

/// How many records an eviction compares (as for rate states, see `eviction.rs`).
const SAMPLE: usize = 16;

/// One key's block, count, trips and queue under one limit name.
pub(super) struct Record {
    key: Key,
    pub(super) offences: OffenceRecord,
    /// From then on the record says nothing: dropped by sweeps and evicted first.
    pub(super) expires_at: u64,
    /// The instant the key's latest reservation proceeds at (`Limiter::reserve`): the
    /// tail of its queue; 0 when it has none. Until then the key's state runs ahead of
    /// the clock, and a request that does not wait is answered from behind the queue.
    pub(super) queue_until: u64,
    /// Places given back while a later one was still reserved (GCRA and the leaky
    /// bucket, whose queue is one TAT): each waits here, by its receipt, until the
    /// places after it are given back too, then comes off the TAT's end (see
    /// `Shard::refund_place`). At most [`MAX_PARKED`]; more are lost, which only
    /// keeps their places spent until their time.
    pub(super) parked: Vec<(Receipt, u64)>,
    /// When an operator last reset the key (0: never, or long enough ago that no
    /// charge from before it still counts): a receipt decided at or before then names
    /// a charge the reset already forgot, and gives nothing back.
    pub(super) reset_at: u64,
    /// Until then the record must stay for `reset_at` (no writer sets `expires_at`
    /// earlier).
    pub(super) reset_until: u64,
}

/// The most places a record keeps given back out of order.
pub(super) const MAX_PARKED: usize = 64;

impl Record {
    /// The penalty trips the record remembers under `limit`'s penalty at `now`.
    #[inline]
    pub(super) fn trips(&self, limit: &Limit, now: u64) -> u32 {
        self.offences.remembered(limit.penalty_box(), now)
    }

    /// Whether losing the record at `now` would lift nothing: no block running, no
    /// reservation pending (a count of rejections or remembered trips may go).
    fn evictable(&self, now: u64) -> bool {
        self.expires_at <= now
            || (self.offences.blocked_until <= now && self.queue_until <= now && self.reset_at == 0)
    }
}

/// One limit name's records in a shard.
#[derive(Default)]
pub(super) struct Records {
    records: HashTable<Record>,
}

impl Records {
    pub(super) fn len(&self) -> usize {
        self.records.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The record of `key`, if any.
    #[inline]
    pub(super) fn get(&self, key: Hashed<'_>) -> Option<&Record> {
        self.records.find(key.hash, |r| r.key == *key.key)
    }

    /// The record of `key`, if any, to change.
    pub(super) fn get_mut(&mut self, key: Hashed<'_>) -> Option<&mut Record> {
        self.records.find_mut(key.hash, |r| r.key == *key.key)
    }

    /// Drops the record of `key`; whether there was one.
    pub(super) fn remove(&mut self, key: Hashed<'_>) -> bool {
        match self.records.find_entry(key.hash, |r| r.key == *key.key) {
            Ok(entry) => {
                entry.remove();
                true
            }
            Err(_) => false,
        }
    }

    /// Adds an empty record for `key`, which has none (no bound checked here: the
    /// shard decides whether there is room).
    pub(super) fn insert(&mut self, key: Hashed<'_>, hasher: &RandomState) -> &mut Record {
        self.records
            .insert_unique(
                key.hash,
                Record {
                    key: *key.key,
                    offences: OffenceRecord::default(),
                    expires_at: 0,
                    queue_until: 0,
                    parked: Vec::new(),
                    reset_at: 0,
                    reset_until: 0,
                },
                |r| hasher.hash_one(r.key),
            )
            .into_mut()
    }

    /// Drops every record that says nothing at `now`; how many went.
    pub(super) fn sweep(&mut self, now: u64) -> usize {
        let before = self.records.len();
        self.records.retain(|r| r.expires_at > now);
        before - self.records.len()
    }

    /// Evicts one record that lifts nothing (see [`Record::evictable`]): of a random
    /// sample, the one whose loss forgives the least (said nothing any more, then the
    /// fewest trips remembered, then the lowest count). False when the sample holds none: only blocks and pending
    /// reservations, which are never evicted.
    pub(super) fn evict_one(&mut self, now: u64, rng: &mut fastrand::Rng) -> bool {
        let buckets = self.records.num_buckets();
        if self.records.is_empty() || buckets == 0 {
            return false;
        }
        // Greatest first: said nothing any more; then the fewest trips; then the lowest
        // count.
        let score = |r: &Record| {
            (
                r.expires_at <= now,
                u32::MAX - r.offences.trips,
                u32::MAX - r.offences.count,
            )
        };
        let mut best: Option<(_, usize)> = None;
        let mut consider = |index: usize, records: &HashTable<Record>| -> bool {
            match records.get_bucket(index) {
                Some(r) => {
                    if r.evictable(now) {
                        let s = score(r);
                        if best.is_none_or(|(b, _)| s > b) {
                            best = Some((s, index));
                        }
                    }
                    true
                }
                None => false,
            }
        };
        if buckets <= 4 * SAMPLE {
            // A small table: look at every record (bounded work, no sampling luck).
            for index in 0..buckets {
                consider(index, &self.records);
            }
        } else {
            let mut sampled = 0;
            let probes = (4 * SAMPLE * buckets.div_ceil(self.records.len())).min(4 * buckets);
            for _ in 0..probes {
                if sampled == SAMPLE {
                    break;
                }
                sampled += usize::from(consider(rng.usize(..buckets), &self.records));
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

impl Shard {
    /// The record of `key` under `limit`'s name, if any. One check while the shard
    /// holds no record at all.
    #[inline]
    pub(super) fn record_of(&self, limit: &Limit, key: Hashed<'_>) -> Option<&Record> {
        if self.records == 0 {
            return None;
        }
        self.names.get(&limit.record())?.records.get(key)
    }

    /// The answer for `key` under `limit` at `now` if the key is blocked (under any
    /// quota, period or algorithm of the limit's name), with its remembered trips.
    #[inline]
    pub(super) fn blocked(&self, limit: &Limit, key: Hashed<'_>, now: u64) -> Option<Verdict> {
        let record = self.record_of(limit, key)?;
        let left = record.offences.blocked_for(now)?;
        Some(Verdict::blocked(left, false).with_trips(record.trips(limit, now)))
    }

    /// The penalty trips `key`'s record remembers under `limit` at `now`.
    #[inline]
    pub(super) fn trips_of(&self, limit: &Limit, key: Hashed<'_>, now: u64) -> u32 {
        self.record_of(limit, key)
            .map_or(0, |record| record.trips(limit, now))
    }
}
