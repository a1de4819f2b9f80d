//! A memory store that fails on demand, to stage a store outage of exactly the length
//! a test wants: a real `MemoryStore` behind a switch, not a mock of any backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tollgate::store::StoreCall;
use tollgate::store::{Charge, Store};
use tollgate::{Decision, MemoryStore, StoreError, StoreErrorKind};

/// `MemoryStore` while up; every call fails with a connection error while down.
#[derive(Debug, Clone)]
pub(crate) struct OutageStore {
    store: MemoryStore,
    down: Arc<AtomicBool>,
}

impl OutageStore {
    pub(crate) fn new(store: MemoryStore) -> Self {
        Self {
            store,
            down: Arc::default(),
        }
    }

    /// From now on, every call fails.
    pub(crate) fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
    }

    /// From now on, the memory store answers again, with the state it had.
    pub(crate) fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    fn failure<T>(&self) -> Option<StoreCall<'static, T>> {
        self.down.load(Ordering::SeqCst).then(|| {
            StoreCall::ready(Err(StoreError::new(
                StoreErrorKind::Connection,
                "down for the test",
            )))
        })
    }
}

impl Store for OutageStore {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.failure().unwrap_or_else(|| self.store.decide(charges))
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.failure().unwrap_or_else(|| self.store.refund(charge))
    }
}
