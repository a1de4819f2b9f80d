//! The store-conformance suite (`tests/support/conformance.rs`: the scenario tables
//! and the shared waiting tests) on a real local three-master Redis Cluster, with an
//! injected clock: the same answers as the memory store, field by field.
#![cfg(feature = "redis")]

use support::redis_cluster::shared_cluster;
use support::redis_server::unique_prefix;
use tollgate::RedisStore;
use tollgate::clock::ManualClock;

fn store(clock: ManualClock) -> RedisStore {
    RedisStore::from_cluster_urls(shared_cluster().urls())
        .expect("valid urls")
        .prefix(&unique_prefix("scenario"))
        .denial_cache(0)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(std::time::Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}

support::store_conformance!(store);
