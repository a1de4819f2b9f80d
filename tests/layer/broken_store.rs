//! A store that always fails, to exercise the layer's fail modes. Not a mock of any
//! backend: a deliberately broken `Store`, counting how often it was asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tollgate::store::{Charge, InFlightSlot, Store};
use tollgate::{
    Decision, Key, Limit, Policy, RateLimitLayer, StoreError, StoreErrorKind, store::StoreCall,
};

/// Fails every `acquire` and `acquire_in_flight` with a connection error; counts the
/// calls in its `Arc`.
#[derive(Debug)]
pub(crate) struct BrokenStore(pub(crate) Arc<AtomicUsize>);

/// A layer of `policy` on a `BrokenStore` counting into `calls`.
pub(crate) fn broken_layer(policy: Policy, calls: &Arc<AtomicUsize>) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(BrokenStore(calls.clone()))
        .build()
        .expect("layer")
}

impl Store for BrokenStore {
    fn decide<'a>(&'a self, _: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        // Counted when the call runs, not when it is made: a store does nothing
        // until its call is polled (see `StoreCall`).
        StoreCall::future(async {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::new(
                StoreErrorKind::Connection,
                "down for the test",
            ))
        })
    }

    fn refund<'a>(&'a self, _: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async { Ok(()) })
    }

    fn acquire_in_flight<'a>(
        &'a self,
        _: &'a Limit,
        _: &'a Key,
        _: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        // Counted when the call runs, not when it is made: a store does nothing
        // until its call is polled (see `StoreCall`).
        StoreCall::future(async {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(StoreError::new(
                StoreErrorKind::Connection,
                "down for the test",
            ))
        })
    }

    fn supports_in_flight(&self) -> bool {
        true
    }
}
