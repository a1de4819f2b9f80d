//! One shard of the memory store: the states of the keys that hash to it, one table
//! per policy, bounded and swept of idle state as it is used.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::memory_footprint::{Footprint, slot_bytes};

use crate::Algorithm;
use crate::algorithm::{
    self, Params, Refund, Rule, Verdict, fixed_window::FixedWindow, gcra, gcra::Gcra,
    leaky_bucket::LeakyBucket, sliding_window::SlidingWindow,
    sliding_window_counters::SlidingWindowCounters, sliding_window_log::SlidingWindowLog,
    token_bucket::TokenBucket,
};
use crate::{Key, Limit};

/// How often (µs of store time) a shard drops idle state as it is touched.
const SWEEP_INTERVAL_US: u64 = 1_000_000;
/// How many entries an eviction compares, drawn at random from the victim's table.
/// A state is evicted only when it forgives the least of its sample: for a flood to
/// reach a spent key, every entry drawn must be at least as spent, which happens with
/// probability `f^16` when a fraction `f` of the table is.
const EVICTION_SAMPLE: usize = 16;
/// A table of at most this many buckets is compared whole instead of sampled.
const SMALL_TABLE_BUCKETS: usize = 64;
/// The most random buckets an eviction probes for its sample; a table emptier than
/// that (after a sweep) is walked from a random bucket instead.
const MAX_EVICTION_PROBES: usize = 1024;

/// One policy's states: (key, state) pairs found by a hash the store computes once
/// per decision (it also picks the shard), so a key is hashed once, not twice.
type Map<C> = HashTable<(Key, C)>;

/// How a table holds each key's state.
trait Cell {
    type State;
    fn new(state: Self::State) -> Self;
    /// Runs `f` on the state, with the shard's write lock held.
    fn with_mut<T>(&mut self, f: impl FnOnce(&mut Self::State) -> T) -> T;
    fn with<T>(&self, f: impl FnOnce(&Self::State) -> T) -> T;
    /// Records that the state was charged at `at` (cells that keep a stamp).
    fn stamp(&mut self, at: u64) {
        let _ = at;
    }
    /// When the state was last charged, for cells that keep a stamp; 0 otherwise.
    fn stamped(&self) -> u64 {
        0
    }
}

/// Bytes an entry holding `cell` takes: its slot and its state's heap part.
fn entry_bytes<C: Cell>(cell: &C) -> usize
where
    C::State: Footprint,
{
    slot_bytes::<C>() + cell.with(Footprint::heap_bytes)
}

/// A state changed only under the shard's write lock.
struct Plain<S>(S);

impl<S> Cell for Plain<S> {
    type State = S;

    fn new(state: S) -> Self {
        Self(state)
    }

    #[inline]
    fn with_mut<T>(&mut self, f: impl FnOnce(&mut S) -> T) -> T {
        f(&mut self.0)
    }

    fn with<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&self.0)
    }
}

/// A state changed only under the shard's write lock, with the instant of its last
/// charge: the window algorithms' states say which window they count, not when in it
/// they were charged, and eviction needs to tell a key spent an hour ago from one a
/// flood spent a moment ago (see [`Forgiveness`]). Eight bytes a key.
struct Stamped<S> {
    state: S,
    charged_at: u64,
}

impl<S> Cell for Stamped<S> {
    type State = S;

    fn new(state: S) -> Self {
        Self {
            state,
            charged_at: 0,
        }
    }

    #[inline]
    fn with_mut<T>(&mut self, f: impl FnOnce(&mut S) -> T) -> T {
        f(&mut self.state)
    }

    fn with<T>(&self, f: impl FnOnce(&S) -> T) -> T {
        f(&self.state)
    }

    fn stamp(&mut self, at: u64) {
        self.charged_at = at;
    }

    fn stamped(&self) -> u64 {
        self.charged_at
    }
}

/// The one-word state of GCRA and the leaky bucket (the TAT), which a decision for a
/// stored key updates by compare-and-swap under the shard's *read* lock: threads
/// deciding for keys of one shard, even for one hot key, do not wait for each other.
/// Same size as the plain word.
struct AtomicTat(AtomicU64);

impl Cell for AtomicTat {
    type State = gcra::State;

    fn new(state: gcra::State) -> Self {
        Self(AtomicU64::new(state.tat_ns))
    }

    #[inline]
    fn with_mut<T>(&mut self, f: impl FnOnce(&mut gcra::State) -> T) -> T {
        let tat = self.0.get_mut();
        let mut state = gcra::State { tat_ns: *tat };
        let result = f(&mut state);
        *tat = state.tat_ns;
        result
    }

    fn with<T>(&self, f: impl FnOnce(&gcra::State) -> T) -> T {
        f(&gcra::State {
            tat_ns: self.0.load(Relaxed),
        })
    }
}

/// One policy's states in this shard, typed by algorithm so each entry is as small as
/// its algorithm allows (GCRA: 16-byte key + 8-byte state).
enum States {
    FixedWindow(Map<Stamped<<FixedWindow as Rule>::State>>),
    SlidingWindow(Map<Stamped<<SlidingWindow as Rule>::State>>),
    SlidingWindowCounters(Map<Stamped<<SlidingWindowCounters as Rule>::State>>),
    SlidingWindowLog(Map<Plain<<SlidingWindowLog as Rule>::State>>),
    TokenBucket(Map<Plain<<TokenBucket as Rule>::State>>),
    Gcra(Map<AtomicTat>),
    LeakyBucket(Map<AtomicTat>),
}

/// Runs `$body` with `$map` bound to the typed map and `$rule` to its rule type.
macro_rules! with_rule {
    ($states:expr, |$map:ident, $rule:ident| $body:expr) => {
        match $states {
            States::FixedWindow($map) => {
                #[allow(dead_code)]
                type $rule = FixedWindow;
                $body
            }
            States::SlidingWindow($map) => {
                #[allow(dead_code)]
                type $rule = SlidingWindow;
                $body
            }
            States::SlidingWindowCounters($map) => {
                #[allow(dead_code)]
                type $rule = SlidingWindowCounters;
                $body
            }
            States::SlidingWindowLog($map) => {
                #[allow(dead_code)]
                type $rule = SlidingWindowLog;
                $body
            }
            States::TokenBucket($map) => {
                #[allow(dead_code)]
                type $rule = TokenBucket;
                $body
            }
            States::Gcra($map) => {
                #[allow(dead_code)]
                type $rule = Gcra;
                $body
            }
            States::LeakyBucket($map) => {
                #[allow(dead_code)]
                type $rule = LeakyBucket;
                $body
            }
        }
    };
}

impl States {
    fn new(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::FixedWindow => Self::FixedWindow(Map::new()),
            Algorithm::SlidingWindow => Self::SlidingWindow(Map::new()),
            Algorithm::SlidingWindowCounters { .. } => Self::SlidingWindowCounters(Map::new()),
            Algorithm::SlidingWindowLog => Self::SlidingWindowLog(Map::new()),
            Algorithm::TokenBucket => Self::TokenBucket(Map::new()),
            Algorithm::Gcra => Self::Gcra(Map::new()),
            Algorithm::LeakyBucket => Self::LeakyBucket(Map::new()),
        }
    }

    fn len(&self) -> usize {
        with_rule!(self, |map, R| map.len())
    }
}

struct Table {
    /// [`Limit::table`]: equal (name, parameters) share a table.
    id: u32,
    params: Params,
    states: States,
    /// Bytes of this table's entries (see [`entry_bytes`]).
    bytes: usize,
}

impl Table {
    fn len(&self) -> usize {
        self.states.len()
    }
}

/// The states of one shard.
///
/// Aligned to a cache line so that, behind its lock, it starts on a line of its own:
/// read-locked decisions write the lock word on every call, and would otherwise take
/// the line holding `latest`, `next_sweep` and the tables away from each other's core.
///
/// **Budgets.** The shard holds at most `capacity` entries and `max_bytes` bytes, and
/// each table (policy) has an equal share of both: a table that has reached its share
/// makes room among its own states only, so a flood of new keys through one policy
/// never evicts another policy's state. Only a table holding more than its share
/// (possible when a policy first used after the others shrinks every share) gives
/// room to the others.
#[repr(align(64))]
pub(crate) struct Shard {
    tables: Vec<Table>,
    capacity: usize,
    max_bytes: usize,
    /// States stored across all tables (kept here: summing the tables per decision
    /// showed up in profiles).
    entries: usize,
    /// Bytes across all tables.
    bytes: usize,
    /// When the next sweep is due. Atomic, like `latest`, so the read-locked path can
    /// see it; written under the write lock only.
    next_sweep: AtomicU64,
    /// The latest instant this shard has seen. Time never runs backwards for the keys
    /// in it: a clock that steps back is treated as standing still here.
    latest: AtomicU64,
    hasher: RandomState,
    /// Picks eviction samples. Seeded from the OS-seeded generator of the thread that
    /// built the store: callers cannot predict which entries a sample will hold.
    rng: fastrand::Rng,
}

/// A key and its hash under the store's hasher, computed once per decision: it picks
/// the shard (bits 32..) and the bucket in the shard's table (the low bits and top 7).
#[derive(Clone, Copy)]
pub(crate) struct Hashed<'a> {
    pub(crate) key: &'a Key,
    pub(crate) hash: u64,
}

/// Decides in `map` for a key it holds; `None` when the key is not stored. Also
/// returns by how many bytes the entry grew (a log that took a new entry).
fn run_stored<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    cost: u64,
    charge: bool,
) -> Option<(Verdict, isize)>
where
    R::State: Footprint,
{
    let (_, cell) = map.find_mut(key.hash, |(k, _)| k == key.key)?;
    let before = entry_bytes(cell);
    let verdict = cell.with_mut(|state| {
        let verdict = algorithm::evaluate::<R>(p, state, now, floor, cost, charge);
        state.compact();
        verdict
    });
    if charge && cost > 0 && verdict.allowed {
        cell.stamp(now.max(floor));
    }
    let grown = entry_bytes(cell).cast_signed() - before.cast_signed();
    Some((verdict, grown))
}

/// Decides for a key with no state: on a fresh state, stored only by `insert`.
fn run_fresh<R: Rule>(
    p: &Params,
    (now, floor): (u64, u64),
    cost: u64,
    charge: bool,
) -> (Verdict, R::State) {
    let mut state = R::State::default();
    let verdict = algorithm::evaluate::<R>(p, &mut state, now, floor, cost, charge);
    (verdict, state)
}

fn refund_in<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    what: Refund,
) {
    if let Some((_, cell)) = map.find_mut(key.hash, |(k, _)| k == key.key) {
        cell.with_mut(|state| algorithm::refund::<R>(p, state, now, floor, what));
    }
}

/// How much a state's eviction would forgive, as an order: the *greatest* is the
/// cheapest to lose. An idle state forgives nothing; then the more capacity a state
/// has left, the less its loss gives back; among states with as much left, the one
/// that resets last is the newest spender (what a flood of fresh keys charged to the
/// full looks like next to keys that spent their quota earlier); window states all
/// reset at their window's end, so for them the last charge decides.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Forgiveness {
    idle: bool,
    remaining: u64,
    reset_at: u64,
    charged_at: u64,
}

fn forgiveness<R: Rule, C: Cell<State = R::State>>(
    p: &Params,
    cell: &mut C,
    now: u64,
) -> Forgiveness {
    let charged_at = cell.stamped();
    cell.with_mut(|s| {
        if <R as Rule>::idle_at(p, s) <= now {
            return Forgiveness {
                idle: true,
                remaining: p.capacity,
                reset_at: now,
                charged_at,
            };
        }
        // Normalising brings the state up to `now` without changing what it admits.
        let t = R::normalize(p, s, now);
        Forgiveness {
            idle: false,
            remaining: R::remaining(p, s, t),
            reset_at: R::reset_at(p, s, t),
            charged_at,
        }
    })
}

/// Picks, from a random sample of `map`'s entries other than `keep`, the bucket of
/// the one whose loss forgives the least.
fn pick_victim<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    now: u64,
    keep: Option<&Key>,
    rng: &mut fastrand::Rng,
) -> Option<usize> {
    let buckets = map.num_buckets();
    if map.is_empty() || buckets == 0 {
        return None;
    }
    let mut best: Option<(Forgiveness, usize)> = None;
    let mut consider = |index: usize, map: &mut Map<C>| -> bool {
        match map.get_bucket_mut(index) {
            Some((key, cell)) if keep != Some(&*key) => {
                let score = forgiveness::<R, C>(p, cell, now);
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, index));
                }
                true
            }
            _ => false,
        }
    };
    if buckets <= SMALL_TABLE_BUCKETS {
        // A small table: compare every entry (bounded work, and no sampling luck).
        for index in 0..buckets {
            consider(index, map);
        }
        return best.map(|(_, index)| index);
    }
    // Enough probes to draw the whole sample at this table's occupancy, twice over:
    // a table churned by evictions rehashes into more buckets than it fills.
    let probes = (2 * EVICTION_SAMPLE * buckets.div_ceil(map.len())).min(MAX_EVICTION_PROBES);
    let mut sampled = 0;
    for _ in 0..probes {
        if sampled == EVICTION_SAMPLE {
            break;
        }
        sampled += usize::from(consider(rng.usize(..buckets), map));
    }
    if sampled == 0 {
        // A sparse table: walk from a random bucket to the first entry. Rare (only
        // after a sweep emptied most of a table that is then full of one policy's
        // share again) and bounded by the table's size.
        let start = rng.usize(..buckets);
        for offset in 0..buckets {
            if consider((start + offset) % buckets, map) {
                break;
            }
        }
    }
    best.map(|(_, index)| index)
}

/// Decides one charge for a stored key of a GCRA or leaky-bucket table under the
/// shard's read lock: the new TAT is computed from the one read and installed by
/// compare-and-swap, again from the fresh value when another thread got there first.
/// `None` when the key is not stored (inserting needs the write lock).
fn run_atomic<R: Rule<State = gcra::State>>(
    map: &Map<AtomicTat>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    cost: u64,
) -> Option<Verdict> {
    let (_, AtomicTat(tat)) = map.find(key.hash, |(k, _)| k == key.key)?;
    let mut seen = tat.load(Relaxed);
    loop {
        let mut state = gcra::State { tat_ns: seen };
        let step = algorithm::apply::<R>(p, &mut state, now, floor, cost, true);
        // A denial (or a zero cost) changes nothing: its verdict holds for the TAT
        // read. A charge holds once its TAT is installed over the one it started from.
        if state.tat_ns != seen
            && let Err(current) = tat.compare_exchange_weak(seen, state.tat_ns, Relaxed, Relaxed)
        {
            seen = current;
            continue;
        }
        return Some(algorithm::report::<R>(p, &state, now, cost, step));
    }
}

impl Shard {
    pub(crate) fn new(capacity: usize, max_bytes: usize, hasher: RandomState) -> Self {
        Self {
            tables: Vec::new(),
            capacity,
            max_bytes,
            entries: 0,
            bytes: 0,
            next_sweep: AtomicU64::new(0),
            latest: AtomicU64::new(0),
            hasher,
            rng: fastrand::Rng::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The table of `policy`, created (empty) if the shard has none yet.
    pub(crate) fn table_index(&mut self, policy: &Limit) -> usize {
        let id = policy.table();
        if let Some(i) = self.tables.iter().position(|t| t.id == id) {
            return i;
        }
        let params = *policy.params();
        self.tables.push(Table {
            id,
            params,
            states: States::new(params.algorithm),
            bytes: 0,
        });
        self.tables.len() - 1
    }

    /// Decides a charge of `cost` for `key` under `policy` at `now` with only the
    /// shard's read lock, when the policy's states are atomic (GCRA, leaky bucket)
    /// and the key is stored. `None` when the write lock is needed: the table or the
    /// key is not there yet, or a sweep is due.
    pub(crate) fn run_shared(
        &self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
    ) -> Option<Verdict> {
        let floor = self.advance(now);
        if floor >= self.next_sweep.load(Relaxed) {
            return None;
        }
        let id = policy.table();
        let table = self.tables.iter().find(|t| t.id == id)?;
        match &table.states {
            States::Gcra(map) => run_atomic::<Gcra>(map, &table.params, key, (now, floor), cost),
            States::LeakyBucket(map) => {
                run_atomic::<LeakyBucket>(map, &table.params, key, (now, floor), cost)
            }
            _ => None,
        }
    }

    /// Decides `cost` for `key` under `policy` at `now`, with the write lock held.
    ///
    /// A key with no state is decided on a fresh one first; only an admitted charge
    /// stores it, and only then is room made, so a request that is denied (or peeks)
    /// never evicts anything.
    pub(crate) fn run(
        &mut self,
        policy: &Limit,
        key: Hashed<'_>,
        now: u64,
        cost: u64,
        charge: bool,
    ) -> Verdict {
        let floor = self.advance(now);
        if floor >= *self.next_sweep.get_mut() {
            self.sweep(floor);
        }
        let index = self.table_index(policy);
        let at = (now, floor);
        let table = &mut self.tables[index];
        let stored = with_rule!(&mut table.states, |map, R| run_stored::<R, _>(
            map,
            &table.params,
            key,
            at,
            cost,
            charge
        ));
        if let Some((verdict, grown)) = stored {
            if grown != 0 {
                self.tables[index].bytes = self.tables[index].bytes.saturating_add_signed(grown);
                self.bytes = self.bytes.saturating_add_signed(grown);
                if grown > 0 {
                    self.fit_bytes(index, key.key, floor);
                }
            }
            return verdict;
        }
        let params = self.tables[index].params;
        let verdict = with_rule!(&self.tables[index].states, |_map, R| {
            run_fresh::<R>(&params, at, cost, false).0
        });
        if !(charge && cost > 0 && verdict.allowed) {
            return verdict;
        }
        self.make_room_for_one(index, floor);
        let hasher = self.hasher;
        let table = &mut self.tables[index];
        let (verdict, bytes) = with_rule!(&mut table.states, |map, R| {
            let (verdict, state) = run_fresh::<R>(&table.params, at, cost, true);
            let (_, cell) = map
                .insert_unique(key.hash, (*key.key, Cell::new(state)), |(k, _)| {
                    hasher.hash_one(k)
                })
                .into_mut();
            cell.stamp(floor);
            (verdict, entry_bytes(cell))
        });
        table.bytes += bytes;
        self.entries += 1;
        self.bytes += bytes;
        self.fit_bytes(index, key.key, floor);
        verdict
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
    fn advance(&self, now: u64) -> u64 {
        let latest = self.latest.load(Relaxed);
        if now <= latest {
            return latest;
        }
        self.latest.store(now, Relaxed);
        now
    }

    /// Refunds `amount` of `key`'s newest charges under `policy` at `now`.
    pub(crate) fn refund(&mut self, policy: &Limit, key: Hashed<'_>, now: u64, amount: u64) {
        self.refund_as(policy, key, now, Refund::Newest(amount));
    }

    /// Refunds to `key` under `policy` at `now`: its newest charges or one charge.
    pub(crate) fn refund_as(&mut self, policy: &Limit, key: Hashed<'_>, now: u64, what: Refund) {
        let floor = self.advance(now);
        let index = self.table_index(policy);
        let table = &mut self.tables[index];
        with_rule!(&mut table.states, |map, R| refund_in::<R, _>(
            map,
            &table.params,
            key,
            (now, floor),
            what
        ));
    }

    /// Each table's share of the shard's keys (at least one).
    fn key_share(&self) -> usize {
        (self.capacity / self.tables.len().max(1)).max(1)
    }

    /// Each table's share of the shard's bytes.
    fn byte_share(&self) -> usize {
        self.max_bytes / self.tables.len().max(1)
    }

    /// Frees room for one more entry in table `index`: from the table itself when it
    /// has reached its share, else from a table holding more than its own.
    fn make_room_for_one(&mut self, index: usize, now: u64) {
        let share = self.key_share();
        while self.entries >= self.capacity || self.tables[index].len() >= share {
            let victim_table = if self.tables[index].len() >= share {
                index
            } else {
                match self.most_over_share(|t, share| t.len() > share, share) {
                    Some(other) => other,
                    None => break,
                }
            };
            if !self.evict_one(victim_table, None, now) {
                break;
            }
        }
    }

    /// After table `index` grew in bytes: evicts (never `keep`, the key just decided)
    /// until the table is within its byte share and the shard within its bound.
    fn fit_bytes(&mut self, index: usize, keep: &Key, now: u64) {
        let share = self.byte_share();
        while self.tables[index].bytes > share {
            if !self.evict_one(index, Some(keep), now) {
                break;
            }
        }
        while self.bytes > self.max_bytes {
            let victim_table = self
                .most_over_share(|t, share| t.bytes > share, share)
                .unwrap_or(index);
            if !self.evict_one(victim_table, Some(keep), now) {
                break;
            }
        }
    }

    /// The table furthest over its share by `over`, if any is.
    fn most_over_share(&self, over: impl Fn(&Table, usize) -> bool, share: usize) -> Option<usize> {
        self.tables
            .iter()
            .enumerate()
            .filter(|(_, t)| over(t, share))
            .max_by_key(|(_, t)| (t.len(), t.bytes))
            .map(|(i, _)| i)
    }

    /// Evicts one entry of table `index` (never `keep`): of a random sample, the one
    /// whose loss forgives the least. False when there is nothing to evict.
    fn evict_one(&mut self, index: usize, keep: Option<&Key>, now: u64) -> bool {
        let rng = &mut self.rng;
        let table = &mut self.tables[index];
        let p = table.params;
        let freed = with_rule!(&mut table.states, |map, R| {
            pick_victim::<R, _>(map, &p, now, keep, rng)
                .and_then(|bucket| map.get_bucket_entry(bucket).ok())
                .map(|entry| entry_bytes(&entry.remove().0.1))
        });
        let Some(bytes) = freed else {
            return false;
        };
        table.bytes -= bytes;
        self.bytes -= bytes;
        self.entries -= 1;
        true
    }

    /// Drops every state that is indistinguishable from a fresh one.
    fn sweep(&mut self, now: u64) {
        *self.next_sweep.get_mut() = now.saturating_add(SWEEP_INTERVAL_US);
        for table in &mut self.tables {
            let p = &table.params;
            table.bytes = with_rule!(&mut table.states, |map, R| {
                map.retain(|(_, cell)| cell.with(|s| <R as Rule>::idle_at(p, s)) > now);
                map.iter().map(|(_, cell)| entry_bytes(cell)).sum()
            });
        }
        self.entries = self.tables.iter().map(Table::len).sum();
        self.bytes = self.tables.iter().map(|t| t.bytes).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;

    fn run(shard: &mut Shard, policy: &Limit, key: u64, now: u64, cost: u64) -> Verdict {
        let key = Key::from(key);
        let hash = shard.hasher.hash_one(key);
        shard.run(policy, Hashed { key: &key, hash }, now, cost, cost > 0)
    }

    #[test]
    fn a_full_shard_evicts_one_state_per_new_key_between_sweeps() {
        // Regression: a full shard used to sweep itself on every new key, a scan of
        // the whole shard per request under a flood of distinct keys.
        let policy = Limit::new("api", Quota::per_second(1_000)).expect("policy");
        let mut shard = Shard::new(4, usize::MAX, RandomState::default());
        let start = 10_000_000;
        for i in 0..4_u64 {
            assert!(run(&mut shard, &policy, i, start, 1).allowed);
        }
        // Every state is idle 1 ms later, but the next sweep is due only at
        // `start + 1 s`: before it, a new key evicts one state and leaves the others.
        let before_sweep = start + SWEEP_INTERVAL_US / 2;
        assert!(run(&mut shard, &policy, 4, before_sweep, 1).allowed);
        assert_eq!(shard.len(), 4);
        // The sweep, when due, drops what is idle.
        run(&mut shard, &policy, 5, start + SWEEP_INTERVAL_US, 0);
        assert_eq!(shard.len(), 0);
    }
}
