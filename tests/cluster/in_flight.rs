//! In-flight limits on a real three-master Redis Cluster: every way a request ends
//! gives its lease back (over real TCP), and a crashed process's leases expire within
//! the TTL on whichever master holds the key's slot.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::in_flight::{crash_holding, every_way_a_request_ends, until_free};
use support::redis_cluster::shared_cluster;
use support::redis_server::{cli, unique_prefix};
use tollgate::{Key, Limit, Limiter, Policy, Quota, RateLimitLayer, RedisStore};

fn store(prefix: &str) -> RedisStore {
    RedisStore::from_cluster_urls(shared_cluster().urls())
        .expect("valid urls")
        .prefix(prefix)
        // Many tasks on two cores: answers are checked here, not speed.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_request_ends_gives_its_lease_back() {
    let limiter = Limiter::builder()
        .policy(
            Policy::new("slow", Quota::per_minute(1000))
                .expect("policy")
                .in_flight(2)
                .expect("in flight"),
        )
        .store(store(&unique_prefix("in-flight")))
        .build()
        .expect("limiter");
    let layer = RateLimitLayer::new(limiter);
    every_way_a_request_ends(2, |router| router.layer(layer)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_process_s_leases_expire_within_the_ttl() {
    let prefix = unique_prefix("crash");
    let ttl = Duration::from_millis(300);
    let limit = Limit::new("jobs", Quota::per_second(1)).expect("limit");
    let key = Key::from("alice");
    let crashed = prefix.clone();
    crash_holding(
        move || store(&crashed).in_flight_ttl(ttl).expect("a ttl"),
        limit.clone(),
        key,
        3,
    );
    let live = store(&prefix).in_flight_ttl(ttl).expect("a ttl");
    let set = live.in_flight_key(&limit, &key);
    let master = &shared_cluster().nodes[shared_cluster().master_of(&set)];
    assert_eq!(cli(master.port(), &["ZCARD", &set]), "3");
    until_free(&live, &limit, &key, 3).await;
}
