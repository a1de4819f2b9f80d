//! Coalesced calls on a real three-master Redis Cluster, where only decisions on one
//! hash slot may share a call: the scenario tables through batches (every step asked
//! of twelve copies of one store at once) and exact admissions under many tasks and
//! several stores, on a hot key (one slot: its decisions share calls) and on many keys
//! (many slots on every node).
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_cluster::shared_cluster;
use tollgate::RedisStore;

#[path = "../redis/coalesced_exact.rs"]
mod exact;
#[path = "../redis/coalesced_fanned.rs"]
mod fanned;

fn patient() -> RedisStore {
    RedisStore::from_cluster_urls(shared_cluster().urls())
        .expect("valid urls")
        .denial_cache(0)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
}

/// The store-conformance suite through batches on the cluster.
mod tables {
    use tollgate::clock::ManualClock;

    use super::fanned::Fanned;

    fn store(clock: ManualClock) -> Fanned {
        Fanned::new(&super::patient(), clock)
    }

    support::store_conformance!(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_on_several_stores_admit_exactly_what_memory_admits() {
    exact::admissions_are_exact(|clock, prefix| patient().prefix(prefix).with_clock(clock.clone()))
        .await;
}
