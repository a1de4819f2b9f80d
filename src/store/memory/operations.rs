//! What operators and the penalty box do to a shard: offences, blocks, resets,
//! penalties and refunds. One caller, one record: each reaches the key under every
//! quota, period and algorithm of the limit's name (see `names.rs`).

use std::hash::BuildHasher;

use std::sync::atomic::Ordering::Relaxed;

use super::blocks::{MAX_PARKED, Record};
use super::cells::{Cell, entry_bytes};
use super::footprint::Footprint;
use super::names::{Claim, MAX_TABLES_PER_NAME};
use super::shard::{Hashed, Shard};
use super::tables::{Map, States, with_algorithm, with_rule};
use crate::Limit;
use crate::algorithm::gcra::{self, NS_PER_US};
use crate::algorithm::{
    self, Params, Refund, Rule, Verdict, fixed_window::FixedWindow, gcra::Gcra,
    leaky_bucket::LeakyBucket, sliding_window::SlidingWindow,
    sliding_window_counters::SlidingWindowCounters, sliding_window_log::SlidingWindowLog,
    token_bucket::TokenBucket,
};
use crate::decision::Receipt;
use crate::penalty::Penalty;

fn refund_in<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    what: Refund,
) {
    let Map { entries, side } = map;
    if let Some((k, cell)) = entries.find_mut(key.hash, |(k, _)| k == key.key) {
        cell.with_mut(side, k, |state| {
            algorithm::refund::<R>(p, state, now, floor, what);
        });
    }
}

impl Shard {
    /// The record of `key` under `limit`'s name, to change, if there is one.
    pub(super) fn record_mut(&mut self, limit: &Limit, key: Hashed<'_>) -> Option<&mut Record> {
        self.names.get_mut(&limit.record())?.records.get_mut(key)
    }

    /// Counts a rejection of `key` under `limit`'s `penalty` at `now`; the blocked
    /// answer when it trips the box. `verdict` is the rejection, returned otherwise.
    ///
    /// A key with no record needs a new one: when the name's share of records holds
    /// only blocks and pending reservations, the offence is refused (counted in
    /// [`refused_trips`](crate::MemoryStore::refused_trips), logged): the request gets
    /// its plain rejection, and no existing block is lifted to make room.
    pub(crate) fn offend(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        penalty: &Penalty,
        verdict: Verdict,
    ) -> Verdict {
        if self.over_table_bound(limit) {
            // Denied because the name has no room for another table, not by its quota:
            // not the caller's offence.
            return verdict;
        }
        let Some(record) = self.record_for(limit, key, now, Claim::Offence) else {
            self.refused_trips += 1;
            self.warn(limit, "a penalty-box offence was not recorded: the limit's share of block records holds only blocks and pending reservations");
            return verdict;
        };
        if record.offences.blocked_for(now).is_some() {
            // Blocked since the rejection was decided (another thread): not counted.
            return verdict;
        }
        let tripped = record.offences.offend(penalty, now);
        record.expires_at = record
            .offences
            .idle_at(Some(penalty))
            .max(record.queue_until)
            .max(record.reset_until);
        match tripped {
            Some(block_us) => Verdict::blocked(block_us, true).with_trips(record.trips(limit, now)),
            None => verdict,
        }
    }

    /// Blocks `key` under `limit`'s name (every quota, period and algorithm of it) for
    /// `duration_us` from `now`, replacing its block and its count; 0 lifts the block
    /// (a pending queue of reservations stays). The key's penalty trips stay: only a
    /// reset forgets them. Returns the trips remembered.
    ///
    /// An operator's block is always stored: it may evict a record that lifts nothing,
    /// and goes past the name's share of records when there is none (operators are not
    /// attackers; their blocks number what they block).
    pub(crate) fn block(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        duration_us: u64,
    ) -> u32 {
        let record = if duration_us == 0 {
            self.record_mut(limit, key)
        } else {
            self.record_for(limit, key, now, Claim::Operator)
        };
        let Some(record) = record else {
            return 0;
        };
        let until = if duration_us == 0 {
            0
        } else {
            now.saturating_add(duration_us)
        };
        record.offences.block_until(until);
        record.expires_at = record
            .offences
            .idle_at(limit.penalty_box())
            .max(record.queue_until)
            .max(record.reset_until);
        record.trips(limit, now)
    }

    /// Makes `key` idle under `limit`'s name: its record (block, count, queue) and
    /// its rate state in every table of the name are gone, whatever quota, period or
    /// algorithm they were counted under.
    ///
    /// Decisions made before the reset keep their receipts; their charges are gone with
    /// the state, so a give-back by such a receipt (a `count_when` refund of a slow
    /// request, a cancelled waiter) must not take from the fresh quota: the key's
    /// record remembers the reset's instant until every forgotten charge would have
    /// stopped counting anyway (the latest instant a removed state was idle at).
    pub(crate) fn reset(&mut self, limit: &Limit, key: Hashed<'_>, now: u64) {
        let Some(name) = self.names.get_mut(&limit.record()) else {
            return;
        };
        if name.records.remove(key) {
            self.records -= 1;
        }
        let ids = name.tables.clone();
        let mut forgotten_until = None;
        for id in ids {
            if let Some(index) = self.index_of(id) {
                let table = &mut self.tables[index];
                let p = table.params;
                let freed = with_rule!(&mut table.states, |map, R| {
                    map.entries
                        .find_entry(key.hash, |(k, _)| k == key.key)
                        .ok()
                        .map(|entry| {
                            let (k, cell) = entry.remove().0;
                            let idle = cell.with(&map.side, &k, |s| <R as Rule>::idle_at(&p, s));
                            let bytes = entry_bytes(&cell, &map.side, &k);
                            cell.forget(&mut map.side, &k);
                            (bytes, idle)
                        })
                });
                if let Some((bytes, idle)) = freed {
                    self.account(index, -1, -bytes.cast_signed());
                    forgotten_until = Some(forgotten_until.unwrap_or(0).max(idle));
                }
            }
        }
        // Whenever a state was forgotten, as the Redis store keeps its record while the
        // forgotten keys would have lived: a charge decided in the reset's very µs
        // counts as forgotten too (never refunded from the fresh quota).
        let floor = self.advance(now);
        if let Some(until) = forgotten_until
            && let Some(record) = self.record_for(limit, key, floor, Claim::Operator)
        {
            record.reset_at = floor;
            record.reset_until = until.max(floor + 1);
            record.expires_at = record.expires_at.max(record.reset_until);
        }
    }

    /// Charges `cost` to `key` under `limit` at `now` whether or not it fits, and
    /// reports the key as a peek would (blocked, if it is).
    ///
    /// One caller, one record: the charge also goes to the key under every other
    /// (algorithm, period) the store has decided the limit's name under (a plan
    /// caller's quota over another period, an algorithm a reload replaced: the
    /// store's known pairs, as the Redis store's), each in the parameters of the
    /// limit first seen with it, and clamped as a penalty is under them. A state is
    /// made there when the key has none yet (a plan caller whose first request under
    /// that period comes later owes it too), and a table where this shard has none
    /// (within the name's bound on tables).
    pub(crate) fn penalize(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
    ) -> Verdict {
        self.known.note(limit);
        let (verdict, floor) = self.force(limit, key, now, cost);
        if cost > 0 {
            for other in self.known.with_others(limit).iter().skip(1) {
                let cost = cost.min(algorithm::max_penalty(other.params()));
                // Its table here, or a new one while the name has room (never past
                // the name's bound on tables, as the limit's own charge may go).
                let index = self.index_of(other.table()).or_else(|| {
                    let room = self
                        .names
                        .get(&other.record())
                        .is_none_or(|name| name.tables.len() < MAX_TABLES_PER_NAME);
                    room.then(|| self.table_for(other, false)).flatten()
                });
                if let Some(i) = index {
                    self.penalize_in(i, other.params(), key, (now, floor), cost);
                }
            }
        }
        self.blocked(limit, key, now)
            .unwrap_or_else(|| verdict.with_trips(self.trips_of(limit, key, now)))
    }

    /// Charges `cost` to `key`'s state under `limit` (its own table only) at `now`
    /// whether or not it fits; the state's verdict afterwards as a peek reports it,
    /// blocked or not, and the instant it was charged at.
    pub(super) fn force(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
    ) -> (Verdict, u64) {
        // While places are reserved ahead, the key's state runs ahead of the clock to
        // the queue's tail: the debt comes after them (as the Redis store decides it,
        // at its state's latest instant, the latest place).
        let floor = self.advance_and_sweep(now);
        let floor = floor.max(self.queued(limit, key, now).unwrap_or(0));
        let params = limit.params();
        // An operator's charge through the limit: its table is made even past the
        // name's bound on tables (`table_for` lets the limit's own period past it);
        // another period's only within the bound.
        let index = match self.index_of(limit.table()) {
            None if cost > 0 => self.table_for(limit, false),
            index => index,
        };
        let verdict = index
            .and_then(|i| self.penalize_in(i, params, key, (now, floor), cost))
            // Nothing charged to a key with no state: a peek of a fresh one.
            .unwrap_or_else(|| {
                with_algorithm!(params.algorithm, |R| {
                    let mut fresh = <R as Rule>::State::default();
                    algorithm::penalize::<R>(params, &mut fresh, now, floor, 0)
                })
            });
        (verdict, floor)
    }

    /// Charges `cost` to `key`'s state in table `index` under `params`, storing a fresh
    /// state first when the key has none there and the cost is not 0; `None` for a
    /// cost of 0 to a key with no state (nothing to report but a fresh key).
    fn penalize_in(
        &mut self,
        index: usize,
        params: &Params,
        key: Hashed<'_>,
        (now, floor): (u64, u64),
        cost: u64,
    ) -> Option<Verdict> {
        if let Some(verdict) = self.penalize_stored(index, params, key, (now, floor), cost) {
            return Some(verdict);
        }
        if cost == 0 {
            return None;
        }
        self.store_fresh(index, key, floor);
        self.penalize_stored(index, params, key, (now, floor), cost)
    }

    /// Charges `cost` to `key`'s state in table `index` under `params`, if it has one.
    fn penalize_stored(
        &mut self,
        index: usize,
        params: &Params,
        key: Hashed<'_>,
        (now, floor): (u64, u64),
        cost: u64,
    ) -> Option<Verdict> {
        let table = &mut self.tables[index];
        let (verdict, grown) = with_rule!(&mut table.states, |map, R| {
            let Map { entries, side } = map;
            entries
                .find_mut(key.hash, |(k, _)| k == key.key)
                .map(|(k, cell)| {
                    let before = entry_bytes(cell, side, k);
                    let verdict = cell.with_mut(side, k, |state| {
                        let verdict = algorithm::penalize::<R>(params, state, now, floor, cost);
                        state.compact();
                        verdict
                    });
                    if cost > 0 {
                        cell.stamp(floor);
                    }
                    (
                        verdict,
                        entry_bytes(cell, side, k).cast_signed() - before.cast_signed(),
                    )
                })
        })?;
        self.grown(index, grown, key.key, floor);
        Some(verdict)
    }

    /// Refunds `amount` of `key`'s newest charges under `limit` at `now`.
    pub(crate) fn refund(&mut self, limit: &Limit, key: Hashed<'_>, now: u64, amount: u64) {
        self.refund_as(limit, key, now, Refund::Newest(amount));
    }

    /// Refunds to `key` under `limit` at `now`: its newest charges or one charge.
    pub(crate) fn refund_as(&mut self, limit: &Limit, key: Hashed<'_>, now: u64, what: Refund) {
        let floor = self.advance(now);
        let Some(index) = self.index_of(limit.table()) else {
            return;
        };
        if let Refund::Charge { receipt, .. } = what
            && self
                .record_of(limit, key)
                .is_some_and(|r| r.reset_at > 0 && receipt.at_us() <= r.reset_at)
        {
            // Charged before an operator's reset, which forgot it already.
            return;
        }
        if let Refund::Charge { amount, receipt } = what
            && gcra::queue_ahead_ns(limit.params()).is_some()
        {
            self.refund_place(limit, index, key, (now, floor), (amount, receipt));
            return;
        }
        let table = &mut self.tables[index];
        with_rule!(&mut table.states, |map, R| refund_in::<R, _>(
            map,
            limit.params(),
            key,
            (now, floor),
            what
        ));
    }

    /// Gives back the charge of `receipt` to a GCRA or leaky-bucket key, whose places
    /// ahead of the clock are one TAT (see `gcra::behind_later_places`).
    ///
    /// Only the newest charge can come off the TAT's end; an older place given back
    /// while later ones are reserved is parked in the key's record, by its receipt.
    /// Once the places after it are given back (in any order), the TAT's end is a
    /// parked place again and it comes off too: ten held requests dropped in any order
    /// give all ten places back. The queue's tail then moves back to the place the
    /// TAT's end admits, so the next reservation is not sent behind places nobody
    /// holds.
    fn refund_place(
        &mut self,
        limit: &Limit,
        index: usize,
        key: Hashed<'_>,
        (now, floor): (u64, u64),
        (amount, receipt): (u64, Receipt),
    ) {
        let p = *limit.params();
        let t = now.max(floor);
        // The TAT as this quota counts it: a state last decided under another count of
        // the same period (a plan, the limit's own) is re-counted first, as the refund
        // itself would, so that "the newest charge" and "ahead" are judged in its units.
        let (States::Gcra(map) | States::LeakyBucket(map)) = &mut self.tables[index].states else {
            return;
        };
        let Some((k, cell)) = map.entries.find_mut(key.hash, |(k, _)| k == key.key) else {
            return;
        };
        let behind = cell.with_mut(&mut map.side, k, |s| {
            gcra::carry_over(&p, s, t);
            gcra::behind_later_places(&p, s, t, receipt)
        });
        if behind {
            if let Some(record) = self.record_mut(limit, key)
                && record.parked.len() < MAX_PARKED
            {
                record.parked.push((receipt, amount));
            }
            return;
        }
        let mut next = Some((receipt, amount));
        while let Some((receipt, amount)) = next.take() {
            let what = Refund::Charge { amount, receipt };
            let table = &mut self.tables[index];
            with_rule!(&mut table.states, |map, R| refund_in::<R, _>(
                map,
                &p,
                key,
                (now, floor),
                what
            ));
            let Some(tat) = self.tat_of(index, key) else {
                return;
            };
            let end = tat.div_ceil(NS_PER_US);
            let Some(record) = self.record_mut(limit, key) else {
                return;
            };
            // Places whose time has come are served, not given back.
            record.parked.retain(|(r, _)| r.until_us() > t);
            if let Some(at) = record.parked.iter().position(|(r, _)| r.until_us() == end) {
                next = Some(record.parked.swap_remove(at));
            } else {
                // The latest place still reserved is where the TAT's end admits.
                let tail = tat.saturating_sub(p.tolerance_ns).div_ceil(NS_PER_US);
                record.queue_until = record.queue_until.min(tail);
            }
        }
    }

    /// Stores a fresh state for `key` (which has none) in the table at `index`, making
    /// room for it first.
    fn store_fresh(&mut self, index: usize, key: Hashed<'_>, floor: u64) {
        self.make_room_for_one(index, floor);
        let hasher = &self.hasher;
        let table = &mut self.tables[index];
        let bytes = with_rule!(&mut table.states, |map, R| {
            let cell = Cell::new(&mut map.side, key.key, <R as Rule>::State::default());
            let (k, cell) = map
                .entries
                .insert_unique(key.hash, (*key.key, cell), |(k, _)| hasher.hash_one(k))
                .into_mut();
            entry_bytes(cell, &map.side, k)
        });
        self.account(index, 1, bytes.cast_signed());
    }

    /// The TAT (ns) of `key` in the GCRA or leaky-bucket table at `index`.
    fn tat_of(&self, index: usize, key: Hashed<'_>) -> Option<u64> {
        match &self.tables[index].states {
            States::Gcra(map) | States::LeakyBucket(map) => map
                .entries
                .find(key.hash, |(k, _)| k == key.key)
                .map(|(_, cell)| cell.tat.load(Relaxed)),
            _ => None,
        }
    }
}
