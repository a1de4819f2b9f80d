//! One shard of the memory store: the states of the keys that hash to it, one table
//! per policy, bounded and swept of idle state as it is used.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::Algorithm;
use crate::algorithm::{
    self, Params, Refund, Rule, Verdict, fixed_window::FixedWindow, gcra, gcra::Gcra,
    leaky_bucket::LeakyBucket, sliding_window::SlidingWindow,
    sliding_window_counters::SlidingWindowCounters, sliding_window_log::SlidingWindowLog,
    token_bucket::TokenBucket,
};
use crate::{Key, Policy};

/// How often (µs of store time) a shard drops idle state as it is touched.
const SWEEP_INTERVAL_US: u64 = 1_000_000;
/// How many entries an eviction looks at when no idle state is left.
const EVICTION_SAMPLE: usize = 8;

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
    FixedWindow(Map<Plain<<FixedWindow as Rule>::State>>),
    SlidingWindow(Map<Plain<<SlidingWindow as Rule>::State>>),
    SlidingWindowCounters(Map<Plain<<SlidingWindowCounters as Rule>::State>>),
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
    /// [`Policy::table`]: equal (name, parameters) share a table.
    id: u32,
    params: Params,
    states: States,
}

/// The states of one shard.
///
/// Aligned to a cache line so that, behind its lock, it starts on a line of its own:
/// read-locked decisions write the lock word on every call, and would otherwise take
/// the line holding `latest`, `next_sweep` and the tables away from each other's core.
#[repr(align(64))]
pub(crate) struct Shard {
    tables: Vec<Table>,
    capacity: usize,
    /// States stored across all tables (kept here: summing the tables per decision
    /// showed up in profiles).
    entries: usize,
    /// When the next sweep is due. Atomic, like `latest`, so the read-locked path can
    /// see it; written under the write lock only.
    next_sweep: AtomicU64,
    /// The latest instant this shard has seen. Time never runs backwards for the keys
    /// in it: a clock that steps back is treated as standing still here.
    latest: AtomicU64,
    hasher: RandomState,
}

/// A key and its hash under the store's hasher, computed once per decision: it picks
/// the shard (bits 32..) and the bucket in the shard's table (the low bits and top 7).
#[derive(Clone, Copy)]
pub(crate) struct Hashed<'a> {
    pub(crate) key: &'a Key,
    pub(crate) hash: u64,
}

/// Decides in `map`; also says whether a state was inserted.
fn run_in<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    hasher: RandomState,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    cost: u64,
    charge: bool,
) -> (Verdict, bool) {
    if let Some((_, cell)) = map.find_mut(key.hash, |(k, _)| k == key.key) {
        return (
            cell.with_mut(|state| algorithm::evaluate::<R>(p, state, now, floor, cost, charge)),
            false,
        );
    }
    let mut state = R::State::default();
    let verdict = algorithm::evaluate::<R>(p, &mut state, now, floor, cost, charge);
    // Only a charge creates state: peeks and denials of unknown keys store nothing.
    let insert = charge && verdict.allowed && cost > 0;
    if insert {
        map.insert_unique(key.hash, (*key.key, C::new(state)), |(k, _)| {
            hasher.hash_one(k)
        });
    }
    (verdict, insert)
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
    pub(crate) fn new(capacity: usize, hasher: RandomState) -> Self {
        Self {
            tables: Vec::new(),
            capacity,
            entries: 0,
            next_sweep: AtomicU64::new(0),
            latest: AtomicU64::new(0),
            hasher,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.entries
    }

    fn table_index(&mut self, policy: &Policy) -> usize {
        let id = policy.table();
        if let Some(i) = self.tables.iter().position(|t| t.id == id) {
            return i;
        }
        let params = *policy.params();
        self.tables.push(Table {
            id,
            params,
            states: States::new(params.algorithm),
        });
        self.tables.len() - 1
    }

    /// Decides a charge of `cost` for `key` under `policy` at `now` with only the
    /// shard's read lock, when the policy's states are atomic (GCRA, leaky bucket)
    /// and the key is stored. `None` when the write lock is needed: the table or the
    /// key is not there yet, or a sweep is due.
    pub(crate) fn run_shared(
        &self,
        policy: &Policy,
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
    pub(crate) fn run(
        &mut self,
        policy: &Policy,
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
        if charge && cost > 0 && self.len() >= self.capacity && !self.contains(index, key) {
            self.make_room();
        }
        let table = &mut self.tables[index];
        let hasher = self.hasher;
        let (verdict, inserted) = with_rule!(&mut table.states, |map, R| run_in::<R, _>(
            map,
            hasher,
            &table.params,
            key,
            (now, floor),
            cost,
            charge
        ));
        self.entries += usize::from(inserted);
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
    pub(crate) fn refund(&mut self, policy: &Policy, key: Hashed<'_>, now: u64, amount: u64) {
        self.refund_as(policy, key, now, Refund::Newest(amount));
    }

    /// Refunds to `key` under `policy` at `now`: its newest charges or one charge.
    pub(crate) fn refund_as(&mut self, policy: &Policy, key: Hashed<'_>, now: u64, what: Refund) {
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

    fn contains(&self, index: usize, key: Hashed<'_>) -> bool {
        with_rule!(&self.tables[index].states, |map, R| map
            .find(key.hash, |(k, _)| k == key.key)
            .is_some())
    }

    /// Drops every state that is indistinguishable from a fresh one.
    fn sweep(&mut self, now: u64) {
        *self.next_sweep.get_mut() = now.saturating_add(SWEEP_INTERVAL_US);
        for table in &mut self.tables {
            let p = &table.params;
            with_rule!(&mut table.states, |map, R| {
                map.retain(|(_, cell)| cell.with(|s| <R as Rule>::idle_at(p, s)) > now);
            });
        }
        self.entries = self.tables.iter().map(|t| t.states.len()).sum();
    }

    /// Frees one slot: the sampled state closest to going idle (an idle one if the
    /// sample holds one).
    ///
    /// No sweep here: `run` already sweeps once a second, and a sweep scans the whole
    /// shard. Sweeping on every insertion into a full shard would make each request of
    /// a flood of new keys cost a scan of the shard under its lock.
    fn make_room(&mut self) {
        let mut victim: Option<(u64, usize, Key)> = None;
        for (index, table) in self.tables.iter().enumerate() {
            let p = &table.params;
            with_rule!(&table.states, |map, R| {
                for (key, cell) in map.iter().take(EVICTION_SAMPLE) {
                    let idle_at = cell.with(|s| <R as Rule>::idle_at(p, s));
                    if victim.is_none_or(|(best, _, _)| idle_at < best) {
                        victim = Some((idle_at, index, *key));
                    }
                }
            });
        }
        if let Some((_, index, key)) = victim {
            let hash = self.hasher.hash_one(key);
            with_rule!(&mut self.tables[index].states, |map, R| {
                if let Ok(entry) = map.find_entry(hash, |(k, _)| *k == key) {
                    entry.remove();
                    self.entries -= 1;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;

    fn run(shard: &mut Shard, policy: &Policy, key: u64, now: u64, cost: u64) -> Verdict {
        let key = Key::from(key);
        let hash = shard.hasher.hash_one(key);
        shard.run(policy, Hashed { key: &key, hash }, now, cost, cost > 0)
    }

    #[test]
    fn a_full_shard_evicts_one_state_per_new_key_between_sweeps() {
        // Regression: a full shard used to sweep itself on every new key, a scan of
        // the whole shard per request under a flood of distinct keys.
        let policy = Policy::new("api", Quota::per_second(1_000)).expect("policy");
        let mut shard = Shard::new(4, RandomState::default());
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
