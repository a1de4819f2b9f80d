//! Running one algorithm's rule on a shard's state: a stored key's cell (under the
//! write lock), a fresh state for a key with none, or a GCRA / leaky-bucket TAT
//! changed by compare-and-swap under the read lock.

use std::sync::atomic::Ordering::Relaxed;

use super::cells::{AtomicTat, Cell, entry_bytes};
use super::footprint::Footprint;
use super::shard::Hashed;
use super::tables::{Map, with_algorithm};
use crate::algorithm::{
    self, Params, Rule, Verdict, fixed_window::FixedWindow, gcra, gcra::Gcra,
    leaky_bucket::LeakyBucket, sliding_window::SlidingWindow,
    sliding_window_counters::SlidingWindowCounters, sliding_window_log::SlidingWindowLog,
    token_bucket::TokenBucket,
};

/// Decides in `map` for a key it holds; `None` when the key is not stored. Also
/// returns by how many bytes the entry grew (a log that took a new entry).
#[inline]
pub(super) fn evaluate_stored<R: Rule, C: Cell<State = R::State>>(
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
    let Map { entries, side } = map;
    let (k, cell) = entries.find_mut(key.hash, |(k, _)| k == key.key)?;
    let before = entry_bytes(cell, side, k);
    let verdict = cell.with_mut(side, k, |state| {
        let verdict = algorithm::evaluate::<R>(p, state, now, floor, cost, charge);
        state.compact();
        verdict
    });
    if charge && cost > 0 && verdict.allowed {
        cell.stamp(now.max(floor));
    }
    let grown = entry_bytes(cell, side, k).cast_signed() - before.cast_signed();
    Some((verdict, grown))
}

/// Decides for a key with no state: on a fresh state, stored only by `insert`.
#[inline]
pub(super) fn evaluate_fresh<R: Rule>(
    p: &Params,
    (now, floor): (u64, u64),
    cost: u64,
    charge: bool,
) -> (Verdict, R::State) {
    let mut state = R::State::default();
    let verdict = algorithm::evaluate::<R>(p, &mut state, now, floor, cost, charge);
    (verdict, state)
}

/// Decides one charge for a stored key of a GCRA or leaky-bucket table under the
/// shard's read lock: the new TAT is computed from the one read and installed by
/// compare-and-swap, again from the fresh value when another thread got there first.
/// `None` when the key is not stored (inserting needs the write lock).
///
/// Always inlined: it is the read-locked path's whole work, and a call returning an
/// `Option<Verdict>` through memory cost the hot key 30 instructions.
#[allow(clippy::inline_always)] // callgrind: out of line, +30 instructions a decision
#[inline(always)]
pub(super) fn evaluate_atomic<R: Rule<State = gcra::State>>(
    map: &Map<AtomicTat>,
    p: &Params,
    key: Hashed<'_>,
    (now, floor): (u64, u64),
    cost: u64,
) -> Option<Verdict> {
    let (_, AtomicTat { tat }) = map.entries.find(key.hash, |(k, _)| k == key.key)?;
    if map.side.of(key.key) != p.emission_ns {
        // Counted under another quota: re-counting it needs the write lock.
        return None;
    }
    let mut seen = tat.load(Relaxed);
    loop {
        let mut state = gcra::State {
            tat_ns: seen,
            emission_ns: p.emission_ns,
        };
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

/// The verdict of a fresh state (a key with no state under these parameters).
#[inline]
pub(super) fn fresh_verdict(p: &Params, at: (u64, u64), cost: u64, charge: bool) -> Verdict {
    with_algorithm!(p.algorithm, |R| evaluate_fresh::<R>(p, at, cost, charge).0)
}
