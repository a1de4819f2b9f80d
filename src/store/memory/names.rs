//! A shard's limit names: which tables each name counts in, its share of the shard's
//! bounds (keys, bytes, records), and what a full share gives up.
//!
//! **One caller, one record.** A limit name ([`Limit::record`]) owns its records
//! (block, penalty count, reservation queue per key) and its tables of rate states,
//! one per (algorithm, period) it is decided under: the limit's own, a plan's over
//! another period ([`Limiter::check_with`](crate::Limiter::check_with)), one a
//! reload replaced. Shares are per name: a caller who makes many periods under one
//! name competes only within that name.
//!
//! **Bounded tables.** A name has at most [`MAX_TABLES_PER_NAME`] tables in a shard.
//! A table left empty, with nothing stored in it for a sweep interval, is dropped at
//! the next sweep (and reused at once when the bound is reached), so the tables of a period or algorithm no longer used, or of a
//! name a reload removed, stop counting. Beyond the bound, with no table empty, a
//! charge under a plan's period that needs a new table is denied (see
//! [`Shard::no_table`]): the store never drops a table of live states (that would give
//! their keys quota back) nor decides a charge in another period's state. The
//! limit's own period always gets its table (see [`Shard::table_for`]).

use super::blocks::{Record, Records};
use super::cells::{Cell, entry_bytes};
use super::eviction::pick_victim;
use super::shard::{Hashed, SWEEP_INTERVAL_US, Shard};
use super::tables::{Map, States, TABLE_BYTES, Table, with_rule};
use crate::algorithm::{
    Rule, Verdict, fixed_window::FixedWindow, gcra::Gcra, leaky_bucket::LeakyBucket,
    sliding_window::SlidingWindow, sliding_window_counters::SlidingWindowCounters,
    sliding_window_log::SlidingWindowLog, token_bucket::TokenBucket,
};
use crate::{Key, Limit};

/// The most tables (distinct algorithm and period) one limit name has in a shard.
/// Plans rarely use more than a few periods; the bound keeps a caller who makes up
/// periods from making the shard's work or memory grow.
pub(crate) const MAX_TABLES_PER_NAME: usize = 16;

/// One limit name in a shard.
#[derive(Default)]
pub(super) struct Name {
    /// Its tables' ids, oldest first; at most [`MAX_TABLES_PER_NAME`] (an operator's
    /// `penalize` may add one past it).
    pub(super) tables: Vec<u32>,
    /// States across its tables.
    pub(super) entries: usize,
    /// Bytes across its tables, their overhead included.
    pub(super) bytes: usize,
    /// Its callers' blocks, counts and reservation queues.
    pub(super) records: Records,
}

/// Who asks for a new record, which decides what may make room for it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Claim {
    /// An operator's block: always stored.
    Operator,
    /// A penalty-box offence: refused when the name's share holds only blocks and
    /// pending reservations.
    Offence,
    /// A reservation's place ahead of the clock: refused likewise (before anything
    /// is charged).
    Reservation,
}

/// Whether `limit` counts over its own period (its own quota, or a plan's
/// of the same period, which shares the limit's table).
fn is_own_period(limit: &Limit) -> bool {
    limit.quota().period_micros() == limit.base_period_us()
}

impl Shard {
    /// Each name's share of the shard's keys and of its records (at least one).
    fn key_share(&self) -> usize {
        (self.capacity / self.names.len().max(1)).max(1)
    }

    /// Each name's share of the shard's bytes.
    fn byte_share(&self) -> usize {
        self.max_bytes / self.names.len().max(1)
    }

    /// The table of `limit`, made (empty) if the shard has none yet. A name at its
    /// bound of tables first drops one that is empty; with none empty, `None` for a
    /// quota over another period than the limit's own (a plan's), while the limit's
    /// own period, and an operator's charge (`force`), go past the bound: only a reload
    /// makes a new own period, so those tables number the reloads within their
    /// states' lifetime.
    pub(super) fn table_for(&mut self, limit: &Limit, force: bool) -> Option<usize> {
        let id = limit.table();
        if let Some(index) = self.index_of(id) {
            return Some(index);
        }
        let force = force || is_own_period(limit);
        let record = limit.record();
        let name = self.names.entry(record).or_default();
        if name.tables.len() >= MAX_TABLES_PER_NAME {
            let name = &self.names[&record];
            let empty = name.tables.iter().copied().find(|&table| {
                self.index_of(table)
                    .is_some_and(|i| self.tables[i].len() == 0)
            });
            match empty {
                Some(table) => self.drop_table(table),
                None if force => {}
                None => return None,
            }
        }
        // Every pair with a table here is known, so that `penalize` reaches it: a
        // decision that finds the table does not look again.
        self.known.note(limit);
        let params = *limit.params();
        self.tables.push(Table {
            id,
            name: record,
            params,
            states: States::new(&params),
            bytes: 0,
            stored: false,
        });
        let index = self.tables.len() - 1;
        self.index.insert(id, index);
        if let Some(slot) = self.first_ids.get_mut(index) {
            *slot = id;
        }
        if let Some(name) = self.names.get_mut(&record) {
            name.tables.push(id);
            name.bytes += TABLE_BYTES;
        }
        self.bytes += TABLE_BYTES;
        crate::observe::memory_changed(0, TABLE_BYTES.cast_signed());
        Some(index)
    }

    /// Whether `limit`'s charges find no table and the name has no room for one.
    pub(super) fn over_table_bound(&self, limit: &Limit) -> bool {
        !is_own_period(limit)
            && self.index_of(limit.table()).is_none()
            && self.names.get(&limit.record()).is_some_and(|name| {
                name.tables.len() >= MAX_TABLES_PER_NAME
                    && name.tables.iter().all(|table| {
                        self.index_of(*table)
                            .is_some_and(|i| self.tables[i].len() > 0)
                    })
            })
    }

    /// The answer to a charge that needs a new table of a name already at its bound
    /// with none empty: denied, charging nothing, to be retried after the next sweep
    /// (which drops the tables left empty). Denying is the one safe answer: dropping a
    /// table of live states would give their keys quota back, and another period's
    /// state does not count this quota.
    pub(super) fn no_table(&mut self, limit: &Limit) -> Verdict {
        self.warn(
            limit,
            "a charge was denied: the limit has as many tables (periods, algorithms) \
             with live states in this shard as it may",
        );
        Verdict {
            allowed: false,
            remaining: 0,
            reset_after_us: SWEEP_INTERVAL_US,
            retry_after_us: Some(SWEEP_INTERVAL_US),
            delay_us: 0,
            receipt: None,
            blocked_us: None,
            tripped: false,
            trips: 0,
        }
    }

    /// Logs `what` about `limit` once per shard and sweep interval at most.
    pub(super) fn warn(&mut self, limit: &Limit, what: &'static str) {
        if self.warned {
            return;
        }
        self.warned = true;
        #[cfg(feature = "tracing")]
        tracing::warn!(target: "tollgate", policy = limit.name(), refused_trips = self.refused_trips, "{what}");
        #[cfg(not(feature = "tracing"))]
        let _ = (limit, what);
    }

    /// Drops table `id` and what it holds (the shard calls it on empty tables).
    fn drop_table(&mut self, id: u32) {
        let Some(index) = self.index.remove(&id) else {
            return;
        };
        let table = self.tables.swap_remove(index);
        if let Some(moved) = self.tables.get(index) {
            self.index.insert(moved.id, index);
            if let Some(slot) = self.first_ids.get_mut(index) {
                *slot = moved.id;
            }
        }
        if let Some(name) = self.names.get_mut(&table.name) {
            name.tables.retain(|&t| t != id);
            name.entries -= table.len();
            name.bytes -= table.bytes + TABLE_BYTES;
        }
        self.entries -= table.len();
        self.bytes -= table.bytes + TABLE_BYTES;
        crate::observe::memory_changed(
            -table.len().cast_signed(),
            -(table.bytes + TABLE_BYTES).cast_signed(),
        );
    }

    /// Counts `entries` more states and `bytes` more bytes in table `index`, its name
    /// and the shard.
    pub(super) fn account(&mut self, index: usize, entries: isize, bytes: isize) {
        let table = &mut self.tables[index];
        table.bytes = table.bytes.saturating_add_signed(bytes);
        table.stored |= entries > 0;
        if let Some(name) = self.names.get_mut(&table.name) {
            name.entries = name.entries.saturating_add_signed(entries);
            name.bytes = name.bytes.saturating_add_signed(bytes);
        }
        self.entries = self.entries.saturating_add_signed(entries);
        self.bytes = self.bytes.saturating_add_signed(bytes);
        crate::observe::memory_changed(entries, bytes);
    }

    /// The table of name `record` with the most bytes. At most
    /// [`MAX_TABLES_PER_NAME`] to compare.
    fn largest_table(&self, record: u32) -> Option<usize> {
        self.names
            .get(&record)?
            .tables
            .iter()
            .filter_map(|id| self.index_of(*id))
            .max_by_key(|&i| self.tables[i].bytes)
    }

    /// The name furthest over `share` by `over`, if any is. Names are the limits in
    /// use, a handful: comparing them is done only when a name within its share
    /// finds the shard full.
    fn most_over_share(&self, over: impl Fn(&Name) -> usize, share: usize) -> Option<u32> {
        self.names
            .iter()
            .filter(|(_, name)| over(name) > share)
            .max_by_key(|(_, name)| over(name))
            .map(|(&record, _)| record)
    }

    /// Frees room for one more entry in table `index`.
    ///
    /// - The name at its share makes room in that table only: a flood of new keys
    ///   under one period (a plan's, a reloaded limit's) never evicts the states of
    ///   another table of its name, where the keys that spent their quota may be all
    ///   there is to sample. A table's first state (the table empty) evicts nothing
    ///   and goes past the name's share: a name holds at most one state per table
    ///   beyond its share (15 with 16 tables).
    /// - The name within its share, the shard full: room comes from a name over its
    ///   share, from that name's smallest table that has states (the tables whose
    ///   first state took it past its share).
    ///
    /// Every eviction picks, from a sample, the state whose loss forgives the least.
    pub(super) fn make_room_for_one(&mut self, index: usize, now: u64) {
        let record = self.tables[index].name;
        loop {
            let share = self.key_share();
            let own = self.names.get(&record).map_or(0, |n| n.entries);
            let victim = if own >= share {
                if self.tables[index].len() == 0 {
                    break;
                }
                index
            } else if self.entries >= self.capacity {
                match self
                    .most_over_share(|n| n.entries, share)
                    .and_then(|other| self.smallest_table(other))
                {
                    Some(table) => table,
                    None => break,
                }
            } else {
                break;
            };
            if !self.evict_one(victim, None, now) {
                break;
            }
            crate::observe::memory_evicted(crate::observe::Eviction::Keys);
        }
    }

    /// The table of name `record` with the fewest states, of those that have any.
    fn smallest_table(&self, record: u32) -> Option<usize> {
        self.names
            .get(&record)?
            .tables
            .iter()
            .filter_map(|id| self.index_of(*id))
            .filter(|&i| self.tables[i].len() > 0)
            .min_by_key(|&i| self.tables[i].len())
    }

    /// After table `index` grew in bytes: evicts (never `keep`, the key just decided)
    /// until its name is within its byte share and the shard within its bound.
    pub(super) fn fit_bytes(&mut self, index: usize, keep: &Key, now: u64) {
        let share = self.byte_share();
        let record = self.tables[index].name;
        while self.names.get(&record).is_some_and(|n| n.bytes > share) {
            if !self.evict_one(index, Some(keep), now) {
                break;
            }
            crate::observe::memory_evicted(crate::observe::Eviction::Bytes);
        }
        while self.bytes > self.max_bytes {
            let victim = self
                .most_over_share(|n| n.bytes, share)
                .and_then(|name| self.largest_table(name))
                .unwrap_or(index);
            if !self.evict_one(victim, Some(keep), now) {
                break;
            }
            crate::observe::memory_evicted(crate::observe::Eviction::Bytes);
        }
    }

    /// Evicts one entry of table `index` (never `keep`): of a random sample, the one
    /// whose loss forgives the least. False when there is nothing to evict.
    fn evict_one(&mut self, index: usize, keep: Option<&Key>, now: u64) -> bool {
        let rng = &mut self.rng;
        let table = &mut self.tables[index];
        let p = table.params;
        let freed = with_rule!(&mut table.states, |map, R| {
            pick_victim::<R, _>(map, &p, now, keep, rng)
                .and_then(|bucket| map.entries.get_bucket_entry(bucket).ok())
                .map(|entry| {
                    let (key, cell) = entry.remove().0;
                    let bytes = entry_bytes(&cell, &map.side, &key);
                    cell.forget(&mut map.side, &key);
                    bytes
                })
        });
        let Some(bytes) = freed else {
            return false;
        };
        self.account(index, -1, -bytes.cast_signed());
        true
    }

    /// The record of `key` under `limit`'s name, made if there is none and there is
    /// room for it.
    ///
    /// **Shares of records.** Each name may hold as many records as its share of the
    /// shard's keys, and the shard as many as its keys. A new record makes room by
    /// evicting one that lifts nothing (a record that says nothing any more, or a mere
    /// count; see `blocks.rs`): its own name's when the name is at its share, else a
    /// name's over its own. A block that has not ended and a reservation still pending
    /// are never evicted, so a flood of offenders (of this limit or another) never
    /// lifts a block nor loses a queue: when a name at its share holds only those, an
    /// offence or a reservation gets `None` (refused). An operator's block is stored
    /// anyway, past the share, and so is a record of a name within its share when the
    /// others hold blocks past theirs: the shard's records exceed its keys by at most
    /// the blocks held past a share.
    pub(super) fn record_for(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        claim: Claim,
    ) -> Option<&mut Record> {
        let record = limit.record();
        let exists = self
            .names
            .entry(record)
            .or_default()
            .records
            .get(key)
            .is_some();
        if !exists {
            loop {
                let share = self.key_share();
                let own = self.names.get(&record).map_or(0, |n| n.records.len());
                if own < share && self.records < self.capacity {
                    break;
                }
                let from = if own >= share {
                    Some(record)
                } else {
                    self.most_over_share(|n| n.records.len(), share)
                };
                let rng = &mut self.rng;
                let evicted = from
                    .and_then(|name| self.names.get_mut(&name))
                    .is_some_and(|name| name.records.evict_one(now, rng));
                if evicted {
                    self.records -= 1;
                } else if own < share || claim == Claim::Operator {
                    // Within its share, a name is not refused for others' blocks held
                    // past theirs (an operator's, or shares that shrank as a name
                    // came into use): the shard goes past its bound by those.
                    break;
                } else {
                    return None;
                }
            }
            self.records += 1;
            return Some(
                self.names
                    .get_mut(&record)?
                    .records
                    .insert(key, &self.hasher),
            );
        }
        self.names.get_mut(&record)?.records.get_mut(key)
    }

    /// Drops every state that is indistinguishable from a fresh one, every record that
    /// says nothing, every table left empty with nothing stored since the last sweep,
    /// and every name left with neither tables nor records.
    pub(super) fn sweep(&mut self, now: u64) {
        *self.next_sweep.get_mut() = now.saturating_add(SWEEP_INTERVAL_US);
        self.warned = false;
        self.given_back.sweep(now);
        for table in &mut self.tables {
            let p = &table.params;
            table.bytes = with_rule!(&mut table.states, |map, R| {
                let Map { entries, side } = map;
                entries.retain(|(key, cell)| {
                    let live = cell.with(side, key, |s| <R as Rule>::idle_at(p, s)) > now;
                    if !live {
                        cell.forget(side, key);
                    }
                    live
                });
                entries
                    .iter()
                    .map(|(key, cell)| entry_bytes(cell, side, key))
                    .sum()
            });
        }
        let unused: Vec<u32> = self
            .tables
            .iter()
            .filter(|t| t.len() == 0 && !t.stored)
            .map(|t| t.id)
            .collect();
        for id in unused {
            self.drop_table(id);
        }
        let before = (self.entries, self.bytes);
        for table in &mut self.tables {
            table.stored = false;
        }
        for name in self.names.values_mut() {
            name.entries = 0;
            name.bytes = 0;
            self.records -= name.records.sweep(now);
        }
        for table in &self.tables {
            if let Some(name) = self.names.get_mut(&table.name) {
                name.entries += table.len();
                name.bytes += table.bytes + TABLE_BYTES;
            }
        }
        self.names
            .retain(|_, name| !name.tables.is_empty() || !name.records.is_empty());
        self.entries = self.tables.iter().map(Table::len).sum();
        self.bytes = self
            .tables
            .iter()
            .map(|t| t.bytes + TABLE_BYTES)
            .sum::<usize>();
        // drop_table reported the tables it dropped; this is what the sweep freed.
        let (entries, bytes) = before;
        crate::observe::memory_changed(
            self.entries.cast_signed() - entries.cast_signed(),
            self.bytes.cast_signed() - bytes.cast_signed(),
        );
    }
}
