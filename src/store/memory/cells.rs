//! How a table holds each key's state: a plain state changed under the shard's write
//! lock, the same with the instant of its last charge, or the one-word TAT of GCRA and
//! the leaky bucket, changed by compare-and-swap under the read lock.
//!
//! A cell may keep part of its state in the table rather than in each entry (its
//! [`Cell::Side`]): the GCRA and leaky-bucket TAT's emission interval `T` is the
//! table's usual one for nearly every key, so the entry holds only the TAT and the
//! table holds the `T` of the few keys counted in another (see [`Emissions`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use foldhash::fast::RandomState;
use hashbrown::HashMap;

use super::footprint::{Footprint, slot_bytes};
use crate::Key;
use crate::algorithm::{Params, gcra};

/// How a table holds each key's state.
///
/// Every method that reads or writes the state takes the table's [`Side`](Cell::Side)
/// and the entry's key: a cell whose state is partly kept per table finds its part
/// there.
pub(super) trait Cell {
    type State;
    /// What the table keeps for its cells besides the entries (`()` for most).
    type Side;
    /// The side of a new table of these parameters.
    fn side(p: &Params) -> Self::Side;
    /// A cell holding `state` for `key`, about to be stored.
    fn new(side: &mut Self::Side, key: &Key, state: Self::State) -> Self;
    /// Runs `f` on the state, with the shard's write lock held.
    fn with_mut<T>(
        &mut self,
        side: &mut Self::Side,
        key: &Key,
        f: impl FnOnce(&mut Self::State) -> T,
    ) -> T;
    fn with<T>(&self, side: &Self::Side, key: &Key, f: impl FnOnce(&Self::State) -> T) -> T;
    /// Runs `f` on the state to look at it brought up to date (normalised), with the
    /// shard's write lock held: what `f` changes in the table's side is not kept, so
    /// looking changes no byte count (the entry's own part may be changed in place).
    fn inspect<T>(
        &mut self,
        side: &Self::Side,
        key: &Key,
        f: impl FnOnce(&mut Self::State) -> T,
    ) -> T;
    /// Bytes the side holds for `key`.
    fn side_bytes(side: &Self::Side, key: &Key) -> usize {
        let _ = (side, key);
        0
    }
    /// Drops what the side holds for `key`, whose entry was removed.
    fn forget(&self, side: &mut Self::Side, key: &Key) {
        let _ = (side, key);
    }
    /// Records that the state was charged at `at` (cells that keep a stamp).
    fn stamp(&mut self, at: u64) {
        let _ = at;
    }
    /// When the state was last charged, for cells that keep a stamp; 0 otherwise.
    fn stamped(&self) -> u64 {
        0
    }
}

/// Bytes an entry holding `cell` for `key` takes: its slot, its state's heap part and
/// what the table's side holds for it.
pub(super) fn entry_bytes<C: Cell>(cell: &C, side: &C::Side, key: &Key) -> usize
where
    C::State: Footprint,
{
    slot_bytes::<C>() + cell.with(side, key, Footprint::heap_bytes) + C::side_bytes(side, key)
}

/// A state changed only under the shard's write lock.
pub(super) struct Plain<S>(S);

impl<S> Cell for Plain<S> {
    type State = S;
    type Side = ();

    fn side(_: &Params) {}

    fn new((): &mut (), _: &Key, state: S) -> Self {
        Self(state)
    }

    #[inline]
    fn with_mut<T>(&mut self, (): &mut (), _: &Key, f: impl FnOnce(&mut S) -> T) -> T {
        f(&mut self.0)
    }

    fn with<T>(&self, (): &(), _: &Key, f: impl FnOnce(&S) -> T) -> T {
        f(&self.0)
    }

    fn inspect<T>(&mut self, (): &(), _: &Key, f: impl FnOnce(&mut S) -> T) -> T {
        f(&mut self.0)
    }
}

/// A state changed only under the shard's write lock, with the instant of its last
/// charge: the window algorithms' states say which window they count, not when in it
/// they were charged, and eviction needs to tell a key spent an hour ago from one a
/// flood spent a moment ago (see [`Forgiveness`]). Eight bytes a key.
pub(super) struct Stamped<S> {
    state: S,
    charged_at: u64,
}

impl<S> Cell for Stamped<S> {
    type State = S;
    type Side = ();

    fn side(_: &Params) {}

    fn new((): &mut (), _: &Key, state: S) -> Self {
        Self {
            state,
            charged_at: 0,
        }
    }

    #[inline]
    fn with_mut<T>(&mut self, (): &mut (), _: &Key, f: impl FnOnce(&mut S) -> T) -> T {
        f(&mut self.state)
    }

    fn with<T>(&self, (): &(), _: &Key, f: impl FnOnce(&S) -> T) -> T {
        f(&self.state)
    }

    fn inspect<T>(&mut self, (): &(), _: &Key, f: impl FnOnce(&mut S) -> T) -> T {
        f(&mut self.state)
    }

    fn stamp(&mut self, at: u64) {
        self.charged_at = at;
    }

    fn stamped(&self) -> u64 {
        self.charged_at
    }
}

/// The state of GCRA and the leaky bucket: the TAT, which a decision for a stored key
/// updates by compare-and-swap under the shard's *read* lock (threads deciding for
/// keys of one shard, even for one hot key, do not wait for each other). Eight bytes:
/// the `T` the TAT is counted in (which a caller whose quota changed re-counts it
/// from, see `gcra::carry_over`) is the table's [`Emissions`].
pub(super) struct AtomicTat {
    pub(super) tat: AtomicU64,
}

/// The `T` a GCRA or leaky-bucket table's TATs are counted in: the table's usual one
/// (its limit's), and the few keys counted in another, a plan's of the same period,
/// or a state not yet counted (0). Changed only under the shard's write lock.
///
/// Recording `T` in each entry would make it 16 bytes instead of 8 (a 32-byte bucket
/// instead of 24) for every key, though nearly every key of a table is counted in
/// the same `T`; here a key counted in another costs an entry of `others` (25 bytes,
/// counted in the store's bytes) and the usual keys nothing.
pub(super) struct Emissions {
    usual_ns: u64,
    /// Boxed, and `None` while empty: every table's `States` is as large as its
    /// largest variant, and a map inline here made every table (of any algorithm)
    /// 48 bytes larger, which cost each new key's bookkeeping a few instructions.
    others: Option<Box<HashMap<Key, u64, RandomState>>>,
}

/// Bytes of one key's entry in [`Emissions::others`]: the pair and its control byte.
const OTHER_BYTES: usize = size_of::<(Key, u64)>() + 1;

impl Emissions {
    /// The `T` `key`'s TAT is counted in.
    #[inline]
    pub(super) fn of(&self, key: &Key) -> u64 {
        // A table with no exception (the common case) reads one word.
        match &self.others {
            None => self.usual_ns,
            Some(others) => Self::other_of(others, key, self.usual_ns),
        }
    }

    /// [`of`](Emissions::of) in a table with exceptions. Apart, so that the lookup's
    /// code stays out of the read-locked path it is inlined into (there it cost the
    /// rule's own inlining: 40 instructions a decision).
    #[cold]
    #[inline(never)]
    fn other_of(others: &HashMap<Key, u64, RandomState>, key: &Key, usual_ns: u64) -> u64 {
        others.get(key).copied().unwrap_or(usual_ns)
    }

    /// Records that `key`'s TAT is counted in `emission_ns`.
    #[inline]
    fn set(&mut self, key: &Key, emission_ns: u64) {
        if emission_ns == self.usual_ns {
            // Every new key of a table with no exception: two compares.
            self.forget(key);
        } else {
            self.set_other(key, emission_ns);
        }
    }

    #[cold]
    #[inline(never)]
    fn set_other(&mut self, key: &Key, emission_ns: u64) {
        self.others
            .get_or_insert_with(Box::default)
            .insert(*key, emission_ns);
    }

    /// Drops `key`'s exception, if it has one (and the map with the last one).
    /// Always inlined, one test: a sweep calls it for every state it drops (as a call
    /// it cost 15 instructions each), a new key's cell for every insert; the lookup
    /// itself is apart (inline, it made a new key's decision 15 instructions longer).
    #[allow(clippy::inline_always)] // callgrind: out of line, +15 instructions a dropped state
    #[inline(always)]
    fn forget(&mut self, key: &Key) {
        if self.others.is_some() {
            self.forget_other(key);
        }
    }

    #[cold]
    #[inline(never)]
    fn forget_other(&mut self, key: &Key) {
        if let Some(others) = &mut self.others {
            others.remove(key);
            if others.is_empty() {
                self.others = None;
            }
        }
    }

    /// How many keys are counted in another `T` than the usual one.
    #[cfg(test)]
    pub(super) fn others(&self) -> usize {
        self.others.as_ref().map_or(0, |others| {
            assert!(!others.is_empty(), "an empty map of exceptions is dropped");
            others.len()
        })
    }
}

impl Cell for AtomicTat {
    type State = gcra::State;
    type Side = Emissions;

    fn side(p: &Params) -> Emissions {
        Emissions {
            usual_ns: p.emission_ns,
            others: None,
        }
    }

    #[inline]
    fn new(side: &mut Emissions, key: &Key, state: gcra::State) -> Self {
        side.set(key, state.emission_ns);
        Self {
            tat: AtomicU64::new(state.tat_ns),
        }
    }

    #[inline]
    fn with_mut<T>(
        &mut self,
        side: &mut Emissions,
        key: &Key,
        f: impl FnOnce(&mut gcra::State) -> T,
    ) -> T {
        let emission_ns = side.of(key);
        let tat = self.tat.get_mut();
        let mut state = gcra::State {
            tat_ns: *tat,
            emission_ns,
        };
        let result = f(&mut state);
        *tat = state.tat_ns;
        if state.emission_ns != emission_ns {
            side.set(key, state.emission_ns);
        }
        result
    }

    #[inline]
    fn with<T>(&self, side: &Emissions, key: &Key, f: impl FnOnce(&gcra::State) -> T) -> T {
        f(&gcra::State {
            tat_ns: self.tat.load(Relaxed),
            emission_ns: side.of(key),
        })
    }

    fn inspect<T>(
        &mut self,
        side: &Emissions,
        key: &Key,
        f: impl FnOnce(&mut gcra::State) -> T,
    ) -> T {
        // A copy: a TAT re-counted in another `T` is the next decision's to store (at
        // its own instant, as the Redis store re-counts it).
        f(&mut gcra::State {
            tat_ns: self.tat.load(Relaxed),
            emission_ns: side.of(key),
        })
    }

    #[inline]
    fn side_bytes(side: &Emissions, key: &Key) -> usize {
        if side
            .others
            .as_ref()
            .is_some_and(|others| others.contains_key(key))
        {
            OTHER_BYTES
        } else {
            0
        }
    }

    #[allow(clippy::inline_always)] // callgrind: out of line, +15 instructions a dropped state
    #[inline(always)]
    fn forget(&self, side: &mut Emissions, key: &Key) {
        side.forget(key);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;
    use std::time::Duration;

    use foldhash::fast::RandomState;

    use super::super::shard::{Hashed, Shard};
    use super::super::tables::States;
    use crate::algorithm::{self, Rule, gcra::Gcra, leaky_bucket::LeakyBucket};
    use crate::{Algorithm, Key, Limit, Quota};

    /// The GCRA / leaky-bucket tables' keys counted in another `T` than the usual one,
    /// checked against the entries: each is a stored key, and the shard's bytes count
    /// it (25 bytes over the entry's 25).
    fn exceptions(shard: &Shard) -> usize {
        let mut total = 0;
        for table in &shard.tables {
            if let States::Gcra(map) | States::LeakyBucket(map) = &table.states {
                let others = map.side.others();
                assert!(others <= map.entries.len());
                let bytes: usize = map
                    .entries
                    .iter()
                    .map(|(key, cell)| super::entry_bytes(cell, &map.side, key))
                    .sum();
                assert_eq!(bytes, table.bytes);
                assert_eq!(bytes, map.entries.len() * 25 + others * 25);
                total += others;
            }
        }
        total
    }

    fn hashed<'a>(shard: &Shard, key: &'a Key) -> Hashed<'a> {
        Hashed {
            key,
            hash: shard.hasher.hash_one(key),
        }
    }

    /// A key's usage carries over every quota change of one period (plans of other
    /// counts, the limit's own again), decided on the 8-byte entry and the table's
    /// `T`s exactly as on a whole 16-byte state kept on the side: every verdict
    /// equal, over many periods and changes.
    fn carries_over_like_a_whole_state<R: Rule<State = crate::algorithm::gcra::State>>(
        algorithm: Algorithm,
    ) {
        let base = Limit::new("api", Quota::per_second(10))
            .expect("limit")
            .algorithm(algorithm);
        let counts = [10, 3, 7, 1_000, 10, 2];
        let limits: Vec<Limit> = counts
            .iter()
            .map(|&n| base.with_quota(Quota::new(n, Duration::from_secs(1)).expect("quota")))
            .collect();
        let mut shard = Shard::new(1_024, usize::MAX, RandomState::default());
        let keys: Vec<Key> = (0..8_u64).map(Key::from).collect();
        let mut whole = vec![crate::algorithm::gcra::State::default(); keys.len()];
        let mut rng = fastrand::Rng::with_seed(30);
        let mut now = 5_000_000_u64;
        for step in 0..20_000 {
            now += rng.u64(0..150_000);
            let k = rng.usize(..keys.len());
            // Mostly the key's own plan, sometimes another: a change every few calls.
            let limit = &limits[if step % 5 == 0 {
                rng.usize(..limits.len())
            } else {
                k % limits.len()
            }];
            let cost = rng.u64(0..3);
            let key = hashed(&shard, &keys[k]);
            // As the store decides: under the read lock when it can, else the write lock.
            let got = match shard.evaluate_shared(limit, key, now, cost) {
                Some(verdict) if cost > 0 => verdict,
                _ => shard.evaluate(limit, key, now, cost, true),
            };
            let expected =
                algorithm::evaluate::<R>(limit.params(), &mut whole[k], now, 0, cost, true);
            assert_eq!(got, expected, "step {step}, key {k}");
            exceptions(&shard);
        }
    }

    #[test]
    fn gcra_usage_carries_over_quota_changes_exactly_on_the_one_word_entry() {
        carries_over_like_a_whole_state::<Gcra>(Algorithm::Gcra);
    }

    #[test]
    fn leaky_bucket_usage_carries_over_quota_changes_exactly_on_the_one_word_entry() {
        carries_over_like_a_whole_state::<LeakyBucket>(Algorithm::LeakyBucket);
    }

    #[test]
    fn hundreds_of_plans_of_one_period_each_keep_their_own_t() {
        // No small index of `T`s to run out of: 300 callers on 300 counts of one
        // period, each decided exactly as on a whole state, in one table.
        let base = Limit::new("api", Quota::per_minute(1_000)).expect("limit");
        let mut shard = Shard::new(1_024, usize::MAX, RandomState::default());
        let keys: Vec<Key> = (0..300_u64).map(Key::from).collect();
        let plans: Vec<Limit> = (0..300_u64)
            .map(|i| base.with_quota(Quota::per_minute(100 + i)))
            .collect();
        let mut whole = vec![crate::algorithm::gcra::State::default(); keys.len()];
        let mut now = 1_000_000_u64;
        for round in 0..5 {
            for (i, key) in keys.iter().enumerate() {
                now += 7;
                // Every caller moves to its neighbour's plan in the last round.
                let plan = &plans[(i + usize::from(round == 4)) % plans.len()];
                let got = shard.evaluate(plan, hashed(&shard, key), now, 3, true);
                let expected =
                    algorithm::evaluate::<Gcra>(plan.params(), &mut whole[i], now, 0, 3, true);
                assert_eq!(got, expected, "round {round}, caller {i}");
            }
        }
        assert_eq!(shard.tables_len(), 1);
        // The table's usual `T` is the first plan's: every other caller's is its own.
        assert_eq!(exceptions(&shard), 299);
    }

    #[test]
    fn a_gcra_entry_is_a_key_and_one_word() {
        // The layout this module exists for: governor's entry size (16-byte key +
        // 8-byte TAT), one control byte per bucket on top.
        assert_eq!(size_of::<(Key, super::AtomicTat)>(), 24);
        assert_eq!(
            super::super::footprint::slot_bytes::<super::AtomicTat>(),
            25
        );
    }

    #[test]
    fn a_key_counted_in_another_t_costs_bytes_until_it_is_counted_in_the_usual_one_or_gone() {
        let limit = Limit::new("api", Quota::per_minute(60)).expect("limit");
        let plan = limit.with_quota(Quota::per_minute(30));
        let mut shard = Shard::new(64, usize::MAX, RandomState::default());
        let (a, b) = (Key::from("a"), Key::from("b"));
        let now = 10_000_000;
        assert!(
            shard
                .evaluate(&limit, hashed(&shard, &a), now, 1, true)
                .allowed
        );
        assert!(
            shard
                .evaluate(&plan, hashed(&shard, &b), now, 1, true)
                .allowed
        );
        // The table is the limit's: `a` is counted in its `T`, `b` in the plan's.
        assert_eq!(exceptions(&shard), 1);
        assert_eq!(
            shard.bytes() - shard.tables_len() * super::super::tables::TABLE_BYTES,
            75
        );
        // Back under the limit's own quota, `b` is re-counted in the usual `T`.
        assert!(
            shard
                .evaluate(&limit, hashed(&shard, &b), now + 1, 1, true)
                .allowed
        );
        assert_eq!(exceptions(&shard), 0);
        assert!(
            shard
                .evaluate(&plan, hashed(&shard, &a), now + 2, 1, true)
                .allowed
        );
        assert_eq!(exceptions(&shard), 1);
        // A reset forgets the exception with the entry.
        shard.reset(&plan, hashed(&shard, &a), now + 3);
        assert_eq!(exceptions(&shard), 0);
        assert!(
            shard
                .evaluate(&plan, hashed(&shard, &a), now + 4, 1, true)
                .allowed
        );
        assert_eq!(exceptions(&shard), 1);
        // So does a sweep that drops the idle entry.
        shard.evaluate(&limit, hashed(&shard, &b), now + 3_600_000_000, 0, false);
        assert_eq!(shard.len(), 0);
        assert_eq!(exceptions(&shard), 0);
    }

    #[test]
    fn eviction_forgets_the_exceptions_of_the_keys_it_drops() {
        let limit = Limit::new("api", Quota::per_hour(10)).expect("limit");
        let plan = limit.with_quota(Quota::per_hour(5));
        let mut shard = Shard::new(16, usize::MAX, RandomState::default());
        let mut now = 10_000_000;
        for i in 0..2_000_u64 {
            now += 1_000;
            let key = Key::from(i);
            let which = if i % 3 == 0 { &limit } else { &plan };
            assert!(
                shard
                    .evaluate(which, hashed(&shard, &key), now, 1, true)
                    .allowed
            );
            assert!(shard.len() <= 16);
            assert!(exceptions(&shard) <= shard.len());
        }
    }
}
