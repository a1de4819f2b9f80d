//! How a table holds each key's state: a plain state changed under the shard's write
//! lock, the same with the instant of its last charge, or the one-word TAT of GCRA and
//! the leaky bucket, changed by compare-and-swap under the read lock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::footprint::{Footprint, slot_bytes};
use crate::algorithm::gcra;

/// How a table holds each key's state.
pub(super) trait Cell {
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
pub(super) fn entry_bytes<C: Cell>(cell: &C) -> usize
where
    C::State: Footprint,
{
    slot_bytes::<C>() + cell.with(Footprint::heap_bytes)
}

/// A state changed only under the shard's write lock.
pub(super) struct Plain<S>(S);

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
pub(super) struct Stamped<S> {
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

/// The state of GCRA and the leaky bucket: the TAT, which a decision for a stored key
/// updates by compare-and-swap under the shard's *read* lock (threads deciding for
/// keys of one shard, even for one hot key, do not wait for each other), and the `T`
/// it is counted in, which only changes under the write lock (a caller whose quota
/// changed: see `gcra::carry_over`).
pub(super) struct AtomicTat {
    pub(super) tat: AtomicU64,
    pub(super) emission_ns: u64,
}

impl Cell for AtomicTat {
    type State = gcra::State;

    fn new(state: gcra::State) -> Self {
        Self {
            tat: AtomicU64::new(state.tat_ns),
            emission_ns: state.emission_ns,
        }
    }

    #[inline]
    fn with_mut<T>(&mut self, f: impl FnOnce(&mut gcra::State) -> T) -> T {
        let tat = self.tat.get_mut();
        let mut state = gcra::State {
            tat_ns: *tat,
            emission_ns: self.emission_ns,
        };
        let result = f(&mut state);
        *tat = state.tat_ns;
        self.emission_ns = state.emission_ns;
        result
    }

    fn with<T>(&self, f: impl FnOnce(&gcra::State) -> T) -> T {
        f(&gcra::State {
            tat_ns: self.tat.load(Relaxed),
            emission_ns: self.emission_ns,
        })
    }
}
