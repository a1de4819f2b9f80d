//! What a stored state costs the memory store in bytes, for its bound in bytes.
//!
//! A key's entry is counted as its slot in the table (key, state and the table's
//! control byte) plus what the state holds on the heap: the sliding window counters'
//! sub-window counts and the sliding window log's entries. Every other algorithm's
//! state is fixed-size and holds nothing on the heap.

use std::mem::size_of;

use crate::Key;
use crate::algorithm::{
    Params, fixed_window, gcra, sliding_window, sliding_window_counters, sliding_window_log,
    token_bucket,
};

/// Bytes of one sliding-window-log entry (instant, cost).
const LOG_ENTRY_BYTES: usize = size_of::<(u64, u64)>();

/// A state's heap footprint.
pub(crate) trait Footprint {
    /// Bytes the state holds on the heap.
    fn heap_bytes(&self) -> usize {
        0
    }

    /// Gives back heap room the state no longer uses (a log that has shed most of its
    /// entries keeps its capacity otherwise, and is counted by it).
    fn compact(&mut self) {}
}

impl Footprint for fixed_window::State {}
impl Footprint for sliding_window::State {}
impl Footprint for token_bucket::State {}
impl Footprint for gcra::State {}

impl Footprint for sliding_window_counters::State {
    fn heap_bytes(&self) -> usize {
        self.counts.len() * size_of::<u64>()
    }
}

impl Footprint for sliding_window_log::State {
    fn heap_bytes(&self) -> usize {
        self.entries.capacity() * LOG_ENTRY_BYTES
    }

    fn compact(&mut self) {
        // Shrinking by half whenever a quarter is used keeps the work amortised
        // constant: a log must have grown by as much as it gives back.
        let capacity = self.entries.capacity();
        if capacity > 16 && self.entries.len() < capacity / 4 {
            self.entries.shrink_to(capacity / 2);
        }
    }
}

/// Bytes of one table entry holding a cell of type `C`, before its heap part: the
/// (key, cell) pair and the table's one control byte per bucket.
pub(crate) const fn slot_bytes<C>() -> usize {
    size_of::<(Key, C)>() + 1
}

/// The most bytes one key's state of these parameters can take: what the store's
/// byte budget must be able to hold for a single key.
pub(crate) fn worst_case_bytes(p: &Params) -> usize {
    // The largest cell is a plain state of a window algorithm; every table's slot is
    // at most that (the exact size matters little next to the heap part).
    let slot = slot_bytes::<sliding_window_log::State>();
    let heap = match p.algorithm {
        crate::Algorithm::SlidingWindowCounters { .. } => {
            usize::try_from(p.buckets).unwrap_or(usize::MAX) * size_of::<u64>()
        }
        // At most one entry per admitted unit and per microsecond of the period (one
        // instant's charges share an entry), in a ring that doubles as it grows.
        crate::Algorithm::SlidingWindowLog => usize::try_from(p.limit.min(p.period_us))
            .unwrap_or(usize::MAX)
            .checked_next_power_of_two()
            .unwrap_or(usize::MAX)
            .saturating_mul(LOG_ENTRY_BYTES),
        _ => 0,
    };
    slot.saturating_add(heap)
}
