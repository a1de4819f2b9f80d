//! One shard of the memory store: the states of the keys that hash to it, one table
//! per (limit name, algorithm, period), and one record per (limit name, key) for
//! blocks, penalty counts and reservations; bounded and swept of idle state as it is
//! used. This file holds the shard's state and its decision entry points (`evaluate`,
//! `evaluate_shared`, `decide_at`); the rules run on a state in `evaluate.rs`; the
//! bookkeeping of names, tables and shares (and the room they make) in `names.rs`;
//! victim choice in `eviction.rs`; a key's record and its block in `blocks.rs`;
//! reservations in `reservations.rs`; what operators and the penalty box do (blocks,
//! resets, penalties, refunds) in `operations.rs`.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use foldhash::fast::RandomState;
use hashbrown::HashMap;

use super::cells::{Cell, entry_bytes};
use super::evaluate::{evaluate_atomic, evaluate_fresh, evaluate_stored, fresh_verdict};
use super::given_back::GivenBack;
use super::names::Name;
use super::tables::{States, Table, with_rule};
use crate::algorithm::{
    Verdict, fixed_window::FixedWindow, gcra::Gcra, leaky_bucket::LeakyBucket,
    sliding_window::SlidingWindow, sliding_window_counters::SlidingWindowCounters,
    sliding_window_log::SlidingWindowLog, token_bucket::TokenBucket,
};
use crate::decision::Receipt;
use crate::store::known::Known;
use crate::{Key, Limit};

/// Up to this many tables, a shard finds a table by scanning their ids, kept in the
/// shard's first cache line (what is left of it after the fields a decision reads).
const SCAN_TABLES: usize = 4;
/// How often (µs of store time) a shard drops idle state as it is touched.
pub(super) const SWEEP_INTERVAL_US: u64 = 1_000_000;

/// The states of one shard.
///
/// Aligned to a cache line so that, behind its lock, it starts on a line of its own:
/// read-locked decisions write the lock word on every call, and would otherwise take
/// the line holding `latest`, `next_sweep` and the tables away from each other's core.
///
/// **Budgets.** The shard holds at most `capacity` entries and `max_bytes` bytes, and
/// each limit *name* in use here has an equal share of both, whatever number of
/// tables (periods, algorithms) it counts in: a name that has reached its share makes
/// room among its own states only, so a flood of new keys through one limit never
/// evicts another limit's state, and a caller making many periods under one name
/// competes only within that name. Only a name holding more than its share (possible
/// when a name first used after the others shrinks every share) gives room to the
/// others. Records (blocks, counts, reservations) have per-name shares of their own
/// (see `record_for`).
///
/// **Layout.** `repr(C)`, the fields a read-locked decision reads first: `tables`,
/// `records`, `latest`, `next_sweep` and the first tables' ids are the struct's first
/// cache line, so that a
/// decision touches the shard's lock, this line, its table's first line (see
/// [`Table`]), and the key's control bytes and bucket; the rest (bounds, totals, the
/// maps of names and table ids) is read only under the write lock.
#[repr(C, align(64))]
pub(crate) struct Shard {
    pub(super) tables: Vec<Table>,
    /// Records across all names: the hot path's one check while there is none.
    pub(super) records: usize,
    /// The latest instant this shard has seen. Time never runs backwards for the keys
    /// in it: a clock that steps back is treated as standing still here.
    latest: AtomicU64,
    /// When the next sweep is due. Atomic, like `latest`, so the read-locked path can
    /// see it; written under the write lock only.
    pub(super) next_sweep: AtomicU64,
    /// The ids of the first [`SCAN_TABLES`] tables, in the same order (the slots past
    /// `tables.len()` mean nothing): a shard holding a few tables (one per limit, the
    /// common case) finds one by scanning these, in the line it reads anyway.
    pub(super) first_ids: [u32; SCAN_TABLES],
    /// [`Limit::table`] → index in `tables`: one lookup per decision, however many
    /// tables there are (used past [`SCAN_TABLES`]; up to that, `first_ids` is
    /// scanned).
    pub(super) index: HashMap<u32, usize, RandomState>,
    /// [`Limit::record`] → the name's tables, totals and records.
    pub(super) names: HashMap<u32, Name, RandomState>,
    pub(super) capacity: usize,
    pub(super) max_bytes: usize,
    /// States stored across all tables (kept here: summing the tables per decision
    /// showed up in profiles).
    pub(super) entries: usize,
    /// Bytes across all tables, their overhead included.
    pub(super) bytes: usize,
    /// New records for penalty-box offences refused because the name's share held
    /// only blocks and pending reservations.
    pub(super) refused_trips: u64,
    /// Whether this sweep interval has logged a refusal already (one line per shard
    /// per second at most, however large the flood).
    pub(super) warned: bool,
    pub(super) hasher: RandomState,
    /// Picks eviction samples. Seeded from the OS-seeded generator of the thread that
    /// built the store: callers cannot predict which entries a sample will hold.
    pub(super) rng: fastrand::Rng,
    /// The receipts given back by here, so that each gives back once.
    pub(super) given_back: GivenBack,
    /// The (algorithm, period) pairs the store has decided each limit name under,
    /// shared by its shards (a penalty reaches the key under each, as on Redis, even
    /// where this shard has dropped the table).
    pub(crate) known: std::sync::Arc<Known>,
}

// What a read-locked decision reads of the shard is its first cache line.
const _: () = assert!(
    std::mem::offset_of!(Shard, first_ids) + std::mem::size_of::<[u32; SCAN_TABLES]>() <= 64
);

/// A key and its hash under the store's hasher, computed once per decision: it picks
/// the shard (bits 32..) and the bucket in the shard's table (the low bits and top 7).
#[derive(Clone, Copy)]
pub(crate) struct Hashed<'a> {
    pub(crate) key: &'a Key,
    pub(crate) hash: u64,
}

impl Shard {
    pub(crate) fn new(capacity: usize, max_bytes: usize, hasher: RandomState) -> Self {
        Self {
            tables: Vec::new(),
            first_ids: [0; SCAN_TABLES],
            index: HashMap::with_hasher(hasher.clone()),
            names: HashMap::with_hasher(hasher.clone()),
            capacity,
            max_bytes,
            entries: 0,
            bytes: 0,
            records: 0,
            refused_trips: 0,
            warned: false,
            next_sweep: AtomicU64::new(0),
            latest: AtomicU64::new(0),
            given_back: GivenBack::new(capacity, hasher.clone()),
            known: std::sync::Arc::default(),
            hasher,
            rng: fastrand::Rng::new(),
        }
    }

    /// How many block, penalty and reservation records the shard holds.
    pub(crate) fn blocks_len(&self) -> usize {
        self.records
    }

    /// How many tables of rate states the shard holds.
    pub(crate) fn tables_len(&self) -> usize {
        self.tables.len()
    }

    /// How many offences the shard refused to record (see `record_for`).
    pub(crate) fn refused_trips(&self) -> u64 {
        self.refused_trips
    }

    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The index of table `id`, if the shard has it.
    #[inline]
    pub(super) fn index_of(&self, id: u32) -> Option<usize> {
        // A scan of at most `SCAN_TABLES` ids is cheaper than hashing; past that the
        // map keeps the work constant however many tables the shard holds.
        let len = self.tables.len();
        if len <= SCAN_TABLES {
            // In the shard's first line, which the decision has read already (a list
            // of ids apart was one more line to miss).
            return self.first_ids[..len].iter().position(|&t| t == id);
        }
        self.index.get(&id).copied()
    }

    /// Decides a charge of `cost` for `key` under `limit` at `now` with only the
    /// shard's read lock, when the limit's states are atomic (GCRA, leaky bucket)
    /// and the key is stored. `None` when the write lock is needed: the table or the
    /// key is not there yet, or a sweep is due.
    pub(crate) fn evaluate_shared(
        &self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
    ) -> Option<Verdict> {
        let floor = self.advance(now);
        if floor >= self.next_sweep.load(Relaxed) {
            return None;
        }
        // One look at the key's record (none in the common case, no record at all):
        // a block answers, a queue of reservations needs the write lock.
        if let Some(record) = self.record_of(limit, key) {
            let trips = record.trips(limit, now);
            if let Some(left) = record.offences.blocked_for(now) {
                return Some(Verdict::blocked(left, false).with_trips(trips));
            }
            if record.queue_until > now {
                return None;
            }
            if trips != 0 {
                return self.evaluate_atomic_with_trips(limit, key, (now, floor), cost, trips);
            }
        }
        // The common answer is the tail call's, written once where the caller wants it
        // (held in a local to attach trips, it could be copied once more).
        self.evaluate_atomic(limit, key, (now, floor), cost)
    }

    /// [`evaluate_atomic`](Shard::evaluate_atomic) for a key with penalty trips
    /// remembered. Apart, so that the common path has one copy of the rule, inlined.
    #[cold]
    #[inline(never)]
    fn evaluate_atomic_with_trips(
        &self,
        limit: &Limit,
        key: Hashed<'_>,
        at: (u64, u64),
        cost: u64,
        trips: u32,
    ) -> Option<Verdict> {
        self.evaluate_atomic(limit, key, at, cost)
            .map(|verdict| verdict.with_trips(trips))
    }

    /// The rule of `limit`'s atomic table on `key`'s TAT (see [`evaluate_atomic`]).
    /// Always inlined, like the rule itself: it is the read-locked path.
    #[allow(clippy::inline_always)] // callgrind: out of line, +30 instructions a decision
    #[inline(always)]
    fn evaluate_atomic(
        &self,
        limit: &Limit,
        key: Hashed<'_>,
        at: (u64, u64),
        cost: u64,
    ) -> Option<Verdict> {
        let table = &self.tables[self.index_of(limit.table())?];
        match &table.states {
            States::Gcra(map) => evaluate_atomic::<Gcra>(map, limit.params(), key, at, cost),
            States::LeakyBucket(map) => {
                evaluate_atomic::<LeakyBucket>(map, limit.params(), key, at, cost)
            }
            _ => None,
        }
    }

    /// Decides `cost` for `key` under `limit` at `now`, with the write lock held.
    ///
    /// A key with no state is decided on a fresh state first; only an admitted charge
    /// stores it, and only then is room made, so a request that is denied (or peeks)
    /// never evicts anything (and never makes a table).
    pub(crate) fn evaluate(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        charge: bool,
    ) -> Verdict {
        // Changed in place, not rebuilt (`with_trips`): the verdict is then written
        // once, where the caller wants it. Rebuilt for every answer, it was copied once
        // more: most of the 22 instructions this function gained with trips (callgrind,
        // a new key's decision: 42 at 7c0771f, 64 with trips, 50 in place).
        let mut verdict = self.evaluate_behind_records(limit, key, now, cost, charge);
        if self.records != 0 {
            verdict.trips = self.trips_of(limit, key, now);
        }
        verdict
    }

    /// [`evaluate`](Shard::evaluate) without the trips.
    fn evaluate_behind_records(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        charge: bool,
    ) -> Verdict {
        let floor = self.advance_and_sweep(now);
        // A blocked key is denied whatever its rate state says, and charged nothing.
        if let Some(blocked) = self.blocked(limit, key, now) {
            return blocked;
        }
        if let Some(tail) = self.queued(limit, key, now) {
            if cost == 0 {
                // A peek while places are ahead answers as of the queue's tail, as the
                // Redis store does: there the state's latest instant is the latest
                // place, and decisions stand still there until the clock catches up.
                return self.decide_at(limit, key, now, floor.max(tail), 0, false);
            }
            // Reservations ahead: the request's place is behind them, so it is denied
            // now, with the wait until that place (it asked not to wait).
            let behind = self.decide_at(limit, key, now, floor.max(tail), cost, false);
            return Verdict {
                allowed: false,
                retry_after_us: if behind.allowed {
                    Some(tail - now)
                } else {
                    behind.retry_after_us
                },
                delay_us: 0,
                receipt: None,
                // Full again no earlier than the queue's tail, as Redis reports it.
                reset_after_us: behind.reset_after_us.max(tail - now),
                ..behind
            };
        }
        self.decide_at(limit, key, now, floor, cost, charge)
    }

    /// Decides `cost` for `key` under `limit`, on the caller's clock `now` but at the
    /// instant `max(now, floor)` (the latest seen, or a reservation's place).
    pub(super) fn decide_at(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        floor: u64,
        cost: u64,
        charge: bool,
    ) -> Verdict {
        let at = (now, floor);
        // The charge's own parameters, not the table's: a caller's quota may differ from
        // the limit's (a plan), and its state carries its usage over between them.
        let params = limit.params();
        if let Some(index) = self.index_of(limit.table()) {
            let table = &mut self.tables[index];
            let stored = with_rule!(&mut table.states, |map, R| evaluate_stored::<R, _>(
                map, params, key, at, cost, charge
            ));
            if let Some((verdict, grown)) = stored {
                self.grown(index, grown, key.key, floor);
                return verdict;
            }
        } else {
            // No table here yet: the first decision of this pair in the shard (its
            // later ones find the table, a new key included), so the store learns it
            // off the hot path.
            self.known.note(limit);
        }
        let verdict = fresh_verdict(params, at, cost, false);
        if !(charge && cost > 0 && verdict.allowed) {
            return verdict;
        }
        let Some(index) = self.table_for(limit, false) else {
            return self.no_table(limit);
        };
        self.make_room_for_one(index, floor);
        // Borrowed apart from the table, not cloned: foldhash 0.2's hasher is two
        // words and no longer `Copy`, and its clone was part of every new key's cost.
        let hasher = &self.hasher;
        let table = &mut self.tables[index];
        let (verdict, bytes) = with_rule!(&mut table.states, |map, R| {
            let (verdict, state) = evaluate_fresh::<R>(params, at, cost, true);
            let cell = Cell::new(&mut map.side, key.key, state);
            let (k, cell) = map
                .entries
                .insert_unique(key.hash, (*key.key, cell), |(k, _)| hasher.hash_one(k))
                .into_mut();
            cell.stamp(floor);
            (verdict, entry_bytes(cell, &map.side, k))
        });
        self.account(index, 1, bytes.cast_signed());
        self.fit_bytes(index, key.key, floor);
        verdict
    }

    /// Whether the charge of `receipt` may give back to `key` under `limit` at `now`:
    /// it was made under this very limit (name, algorithm with its parameters, period:
    /// a charge made under another counts in state this one does not use), and it has
    /// not given back before. Records that it now does: each receipt gives back once.
    pub(crate) fn may_give_back(
        &mut self,
        limit: &Limit,
        key: Hashed<'_>,
        now: u64,
        receipt: &Receipt,
    ) -> bool {
        let floor = self.advance(now);
        let until = receipt.counts_until(limit.params().period_us);
        receipt.charged_under(limit.table())
            && self
                .given_back
                .first_use((limit.record(), key.key), receipt, until, floor)
    }

    /// Records `now` and returns the latest instant seen, `max(now, latest)`.
    ///
    /// A plain store, not a `fetch_max`: with keys spread over the shards, most
    /// decisions find their shard's instant behind, and a locked read-modify-write here
    /// cost two threads more than the rest of a read-locked GCRA decision. Two
    /// read-locked decisions storing at once may leave the earlier of their two
    /// readings; a floor a little behind only makes a clock that steps back stand still
    /// a little earlier, which for GCRA and the leaky bucket (the only states decided
    /// under the read lock) is stricter, never more lenient. Under the write lock
    /// nobody else is in the shard.
    #[inline]
    pub(super) fn advance(&self, now: u64) -> u64 {
        let latest = self.latest.load(Relaxed);
        if now <= latest {
            return latest;
        }
        self.latest.store(now, Relaxed);
        now
    }

    /// [`advance`](Shard::advance), then a sweep if one is due: how every write-locked
    /// decision starts. Returns the latest instant seen.
    pub(super) fn advance_and_sweep(&mut self, now: u64) -> u64 {
        let floor = self.advance(now);
        if floor >= *self.next_sweep.get_mut() {
            self.sweep(floor);
        }
        floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Penalty, Quota};

    /// The shard's running totals equal what its tables and records hold.
    fn assert_consistent(shard: &Shard) {
        use super::super::names::MAX_TABLES_PER_NAME;
        use super::super::tables::TABLE_BYTES;
        let entries: usize = shard.tables.iter().map(Table::len).sum();
        let bytes: usize = shard.tables.iter().map(|t| t.bytes + TABLE_BYTES).sum();
        assert_eq!(shard.entries, entries);
        assert_eq!(shard.bytes, bytes);
        let records: usize = shard.names.values().map(|n| n.records.len()).sum();
        assert_eq!(shard.records, records);
        assert_eq!(shard.index.len(), shard.tables.len());
        for (i, table) in shard.tables.iter().enumerate() {
            assert_eq!(shard.index[&table.id], i);
            if let Some(&first) = shard.first_ids.get(i) {
                assert_eq!(first, table.id);
            }
        }
        for (record, name) in &shard.names {
            let mine: Vec<&Table> = shard.tables.iter().filter(|t| t.name == *record).collect();
            assert_eq!(name.tables.len(), mine.len());
            assert!(name.tables.len() <= MAX_TABLES_PER_NAME + 1);
            assert_eq!(name.entries, mine.iter().map(|t| t.len()).sum::<usize>());
            assert_eq!(
                name.bytes,
                mine.iter().map(|t| t.bytes + TABLE_BYTES).sum::<usize>()
            );
        }
    }

    #[test]
    fn a_random_walk_of_every_operation_keeps_the_totals_exact() {
        let penalty = Penalty::after(2)
            .within(std::time::Duration::from_secs(10))
            .block_for(std::time::Duration::from_secs(5));
        let api = Limit::new("api", Quota::per_second(3))
            .expect("limit")
            .penalty(penalty);
        let log = Limit::new("log", Quota::per_second(2))
            .expect("limit")
            .algorithm(crate::Algorithm::SlidingWindowLog);
        let mut limits = vec![api.clone(), log.clone()];
        for secs in 2..24 {
            limits.push(
                api.with_quota(Quota::new(3, std::time::Duration::from_secs(secs)).expect("quota")),
            );
        }
        limits.push(log.with_quota(Quota::per_minute(5)));
        let mut shard = Shard::new(32, 4_096, RandomState::default());
        let mut rng = fastrand::Rng::with_seed(7);
        let mut now = 1_000_000_000_u64;
        for _ in 0..20_000 {
            now += rng.u64(0..200_000);
            let limit = &limits[rng.usize(..limits.len())];
            let key = Key::from(rng.u64(0..64));
            let key = Hashed {
                key: &key,
                hash: shard.hasher.hash_one(key),
            };
            match rng.u8(0..8) {
                0 => {
                    shard.block(limit, key, now, rng.u64(0..3) * 1_000_000);
                }
                1 => shard.reset(limit, key, now),
                2 => {
                    shard.penalize(limit, key, now, rng.u64(0..4));
                }
                3 => {
                    shard.reserve(limit, key, now, 1, rng.u64(0..2_000_000));
                }
                4 => shard.refund(limit, key, now, 1),
                _ => {
                    let verdict = shard.evaluate(limit, key, now, rng.u64(0..3), true);
                    if let Some(penalty) = limit.get_penalty()
                        && !verdict.allowed
                        && verdict.blocked_us.is_none()
                    {
                        shard.offend(limit, key, now, &penalty, verdict);
                    }
                }
            }
            assert_consistent(&shard);
        }
    }
}
