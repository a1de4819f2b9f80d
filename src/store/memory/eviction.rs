//! Which state a full table gives up: of a random sample, the one whose loss forgives
//! the least; and the room made when a stored entry grows.

use hashbrown::HashTable;

use super::cells::Cell;
use super::shard::Shard;
use super::tables::Map;
use crate::Key;
use crate::algorithm::{Params, Rule};

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
    (key, cell, side): (&Key, &mut C, &C::Side),
    now: u64,
) -> Forgiveness {
    let charged_at = cell.stamped();
    cell.inspect(side, key, |s| {
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
pub(super) fn pick_victim<R: Rule, C: Cell<State = R::State>>(
    map: &mut Map<C>,
    p: &Params,
    now: u64,
    keep: Option<&Key>,
    rng: &mut fastrand::Rng,
) -> Option<usize> {
    let Map { entries: map, side } = map;
    let side = &*side;
    let buckets = map.num_buckets();
    if map.is_empty() || buckets == 0 {
        return None;
    }
    let mut best: Option<(Forgiveness, usize)> = None;
    let mut consider = |index: usize, map: &mut HashTable<(Key, C)>| -> bool {
        match map.get_bucket_mut(index) {
            Some((key, cell)) if keep != Some(&*key) => {
                let score = forgiveness::<R, C>(p, (key, cell, side), now);
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
        // after a sweep emptied most of a table that is then full of one limit's
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

impl Shard {
    /// After an entry of table `index` changed by `grown` bytes: counts it, and makes
    /// room when it grew (never evicting `keep`, the key just decided).
    #[inline]
    pub(super) fn grown(&mut self, index: usize, grown: isize, keep: &Key, now: u64) {
        if grown != 0 {
            self.account(index, 0, grown);
            if grown > 0 {
                self.fit_bytes(index, keep, now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use foldhash::fast::RandomState;

    use super::super::shard::{Hashed, SWEEP_INTERVAL_US, Shard};
    use crate::algorithm::Verdict;
    use crate::{Key, Limit, Quota};

    fn evaluate(shard: &mut Shard, limit: &Limit, key: u64, now: u64, cost: u64) -> Verdict {
        let key = Key::from(key);
        let hash = shard.hasher.hash_one(key);
        shard.evaluate(limit, Hashed { key: &key, hash }, now, cost, cost > 0)
    }

    #[test]
    fn a_full_shard_evicts_one_state_per_new_key_between_sweeps() {
        // Regression: a full shard used to sweep itself on every new key, a scan of
        // the whole shard per request under a flood of distinct keys.
        let limit = Limit::new("api", Quota::per_second(1_000)).expect("limit");
        let mut shard = Shard::new(4, usize::MAX, RandomState::default());
        let start = 10_000_000;
        for i in 0..4_u64 {
            assert!(evaluate(&mut shard, &limit, i, start, 1).allowed);
        }
        // Every state is idle 1 ms later, but the next sweep is due only at
        // `start + 1 s`: before it, a new key evicts one state and leaves the others.
        let before_sweep = start + SWEEP_INTERVAL_US / 2;
        assert!(evaluate(&mut shard, &limit, 4, before_sweep, 1).allowed);
        assert_eq!(shard.len(), 4);
        // The sweep, when due, drops what is idle.
        evaluate(&mut shard, &limit, 5, start + SWEEP_INTERVAL_US, 0);
        assert_eq!(shard.len(), 0);
    }
}
