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

/// `FCALL`s a node has run since its statistics were reset.
fn fcalls(port: u16) -> u64 {
    support::redis_server::cli(port, &["INFO", "commandstats"])
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_fcall:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_keys_concurrent_decisions_share_calls_on_its_slot() {
    use support::redis_cluster::RedisCluster;
    use support::redis_server::{cli, server_version};
    use tollgate::{Key, Limit, Limiter, Quota};

    if !server_version().has_functions() {
        return; // Batches ride the function library (Redis 7 and later).
    }
    let cluster = RedisCluster::start(0);
    let store = RedisStore::from_cluster_urls(cluster.urls())
        .expect("valid urls")
        .denial_cache(0)
        .deadline(Duration::from_secs(5))
        .expect("a deadline");
    let limit = Limit::new("api", Quota::per_hour(1_000_000)).expect("a limit");
    let hot = Key::from("hot");
    let master = cluster.nodes[cluster.master_of(&store.state_key(&limit, &hot))].port();
    let limiter = Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("a limiter");
    // Loads the library on the hot key's master.
    assert!(
        limiter
            .check("api", &hot, 1)
            .await
            .expect("a decision")
            .allowed
    );
    let reset = || {
        for node in &cluster.nodes {
            cli(node.port(), &["CONFIG", "RESETSTAT"]);
        }
    };

    reset();
    for _ in 0..50 {
        assert!(
            limiter
                .check("api", &hot, 1)
                .await
                .expect("a decision")
                .allowed
        );
    }
    assert_eq!(fcalls(master), 50, "one call per decision at one task");

    reset();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    let d = limiter.check("api", &Key::from("hot"), 1).await;
                    assert!(d.expect("a decision").allowed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
    let shared = fcalls(master);
    assert!(
        shared * 2 < 64 * 20,
        "{shared} calls for {} decisions on one slot",
        64 * 20
    );
}
