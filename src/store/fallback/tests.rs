//! Unit tests of the switch, with a primary that is always down.

use super::Fallback;
use crate::store::{Charge, Store, StoreCall};
use crate::{Decision, Key, Limit, MemoryStore, Quota, StoreError, StoreErrorKind};
use std::time::Duration;

/// A primary that is always down, answering as a remote store does: a future.
#[derive(Debug)]
struct Down;

impl Store for Down {
    fn decide<'a>(&'a self, _: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        StoreCall::future(async { Err(StoreError::new(StoreErrorKind::Connection, "down")) })
    }

    fn refund<'a>(&'a self, _: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async { Ok(()) })
    }
}

#[tokio::test]
async fn a_known_down_primary_is_skipped_and_the_memory_store_answers_at_once() {
    let store = Fallback::new(Down, MemoryStore::new()).probe_interval(Duration::from_secs(60));
    let limit = Limit::new("api", Quota::per_minute(2)).expect("limit");
    let key = Key::from("alice");
    let charge = Charge {
        limit: &limit,
        key: &key,
        cost: 1,
    };
    // The first call tries the primary: a future, answered by the insurance store.
    let first = store.decide_one(charge);
    assert!(!first.is_ready());
    assert!(first.await.expect("insurance").allowed);
    assert!(!store.serving_primary());
    // Known down, no probe due: at once, from the insurance store, routed there.
    let second = store
        .decide_one(charge)
        .into_ready()
        .expect("answered at once");
    let second = second.expect("insurance");
    assert_eq!((second.allowed, second.remaining), (true, 0));
    let third = store
        .decide(&[charge])
        .into_ready()
        .expect("answered at once");
    assert!(!third.expect("insurance")[0].allowed);
    let (insurance, _) = second
        .receipt
        .expect("charged")
        .unrouted()
        .expect("a route");
    assert!(insurance);
}
