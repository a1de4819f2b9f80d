//! The store-conformance suite: everything a store must answer exactly like every
//! other, run by each store's binary with one line.
//!
//! [`store_conformance!`](crate::store_conformance) expands, in the invoking module,
//! to the scenario tables ([`scenario_tests!`](crate::scenario_tests): every
//! algorithm's edges, refunds by receipt, quota changes, operations — peek, penalize,
//! block, reset — and penalty boxes) and, in a `waiting` module, the shared waiting
//! tests ([`waiting_tests!`](crate::waiting_tests): reservations and places given
//! back). The memory store (`tests/core/conformance.rs`), a standalone Redis
//! (`tests/redis/conformance.rs`) and a three-master Redis Cluster
//! (`tests/cluster/conformance.rs`) each invoke it once, so a store cannot pass a
//! table the others skip, and a new table reaches all three by being listed once.
//!
//! ```ignore
//! fn store(clock: ManualClock) -> RedisStore { /* a store on that clock */ }
//! support::store_conformance!(store);
//! ```

/// Expands to the whole store-conformance suite (see [the module](crate::conformance))
/// on stores built by `$make_store`, anything callable as
/// `make_store(clock: ManualClock) -> impl Store` (a path or a closure). The invoking
/// crate needs `tokio` with its `macros` feature.
#[macro_export]
macro_rules! store_conformance {
    ($make_store:expr) => {
        /// The store under test, named so the `waiting` module below can reach it.
        fn conformance_store(
            clock: ::tollgate::clock::ManualClock,
        ) -> impl ::tollgate::store::Store {
            ($make_store)(clock)
        }

        $crate::scenario_tests!(conformance_store);

        /// Reservations (`Limiter::reserve`) on the same store.
        mod waiting {
            $crate::waiting_tests!(super::conformance_store);
        }
    };
}
