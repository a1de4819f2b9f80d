//! How big a key's next slice is: capped by the builder's limits and by the key's
//! capacity over `4 × processes`, grown when leases run out early, shrunk when they
//! expire unused (see [`SliceSizing`]).

use super::slice::{Kind, Lease};
use super::table::Entry;
use super::{LeasedStore, SliceSizing};
use crate::algorithm::Params;

impl<S> LeasedStore<S> {
    /// The largest slice for a limit of `capacity` under the configured caps.
    pub(super) fn cap(&self, capacity: u64) -> u64 {
        let share = capacity / (4 * self.inner.processes).max(1);
        let own = match self.inner.sizing {
            SliceSizing::Adaptive => self.inner.max_slice,
            SliceSizing::Fixed(n) => n.min(self.inner.max_slice),
        };
        own.min(share).max(1)
    }

    /// The slice a refill of `entry` charges for a request of `cost` (never less).
    pub(super) fn next_slice(&self, entry: &Entry, cost: u64, cap: u64) -> u64 {
        let mut slice = match self.inner.sizing {
            SliceSizing::Adaptive => entry.slice.clamp(1, cap),
            SliceSizing::Fixed(_) => cap,
        };
        if let Some(left) = entry.left {
            // Never park more than half of what the store last said was left: near
            // the limit slices shrink to the request's cost.
            slice = slice.min(left / 2);
        }
        slice.max(cost)
    }

    /// The next slice after `lease` was used up at local `now`, before it expired: the
    /// key is hotter than its slice (`size` so far).
    pub(super) fn grown_after_use(&self, size: u64, lease: &Lease, now: u64, cap: u64) -> u64 {
        // Unused fluid units are lost when the lease ends (not returned), so their
        // slices grow by one unless used up within a quarter of the longest lease.
        let quick = now.saturating_sub(lease.sent) * 4 < self.inner.max_lease_us;
        let size = size.max(lease.slice);
        let grown = match lease.kind {
            Kind::Window { .. } => size * 2,
            Kind::Fluid { .. } if quick => size + 1,
            Kind::Fluid { .. } => size,
        };
        grown.min(cap)
    }
}

/// The next slice after `lease` expired before it was used up (`size` so far): the
/// key's demand per lease is what it served. (Unused fluid units are not returned: an
/// oversized slice costs quota, so the size falls at once.)
pub(super) fn shrunk_after_expiry(size: u64, lease: &Lease) -> u64 {
    match lease.kind {
        Kind::Window { .. } => lease.used.clamp(1, size.max(1)),
        Kind::Fluid { .. } if lease.unused() > 0 => 1,
        Kind::Fluid { .. } => size,
    }
}

/// Requests arrived while a slice was on its way with too few units to spare for
/// them (concurrent demand): the next slice can be larger.
pub(super) fn grow_under_demand(entry: &mut Entry, cap: u64) {
    entry.slice = (entry.slice.max(entry.spare + 1) * 2).min(cap);
}

/// The slice leasing resumes with after plain decisions of `cost` that a larger slice
/// would have served (`size` so far): as after a lease of `cost` used up by them
/// ([`grown_after_use`](LeasedStore::grown_after_use): window slices double, fluid ones
/// grow by one).
pub(super) fn resumed(size: u64, cost: u64, p: &Params, cap: u64) -> u64 {
    let size = size.max(cost);
    let grown = match Kind::of(p, 0) {
        Some(Kind::Window { .. }) => size * 2,
        _ => size + 1,
    };
    grown.min(cap)
}
