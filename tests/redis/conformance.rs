//! The store-conformance suite (`tests/support/conformance.rs`: the scenario tables
//! and the shared waiting tests) on a private standalone Redis, with an injected
//! clock: the same answers as the memory store, field by field.
#![cfg(feature = "redis")]

use support::redis_server::{shared_server, unique_prefix};
use tollgate::RedisStore;
use tollgate::clock::ManualClock;

/// The denial cache is off: the tables pin what the store itself answers (a
/// table may refund a denied key and ask again at the same instant).
fn store(clock: ManualClock) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(&unique_prefix("scenario"))
        .denial_cache(0)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(std::time::Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}

support::store_conformance!(store);
