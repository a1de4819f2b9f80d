//! Work the stores save: requests a `LeasedStore` admitted from a lease, the slices it
//! charged and the units it gave back, and denials the Redis store's denial cache
//! answered without a round trip.

/// A request admitted from a lease, without a store call.
#[inline]
pub(crate) fn lease_hit() {
    #[cfg(feature = "metrics")]
    super::names::emit!(counter, "tollgate_lease_hits_total", "rate_limit.lease.hits"; increment(1));
}

/// A slice charged to the store and installed as a lease.
pub(crate) fn lease_slice() {
    #[cfg(feature = "metrics")]
    super::names::emit!(counter, "tollgate_lease_slices_total", "rate_limit.lease.slices"; increment(1));
}

/// `units` unused lease units given back to the store.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn lease_units_returned(units: u64) {
    #[cfg(feature = "metrics")]
    if units > 0 {
        super::names::emit!(counter, "tollgate_lease_units_returned_total", "rate_limit.lease.units_returned"; increment(units));
    }
}

/// A denial answered by a denial cache (the Redis store's, or a `Fallback`'s blocks
/// seen on its primary).
pub(crate) fn denial_cache_hit() {
    #[cfg(feature = "metrics")]
    super::names::emit!(counter, "tollgate_denial_cache_hits_total", "rate_limit.denial_cache.hits"; increment(1));
}
