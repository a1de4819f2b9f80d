//! In-flight limits on a real three-master Redis Cluster: every way a request ends
//! gives its slot record back (over real TCP), a crashed process's slot records expire within
//! the TTL on whichever master holds the key's slot, and 1,500 running keys spread
//! over the masters stay renewed past their TTL.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::in_flight::{
    crash_holding, crash_spec, every_way_a_request_ends, hold_until_killed, take_each, until_free,
};
use support::redis_cluster::shared_cluster;
use support::redis_server::{cli, unique_prefix};
use tollgate::store::Store;
use tollgate::{Key, Limit, Policy, Quota, RateLimitLayer, RedisStore};

fn store(prefix: &str) -> RedisStore {
    RedisStore::from_cluster_urls(shared_cluster().urls())
        .expect("valid urls")
        .prefix(prefix)
        // Many tasks on two cores: answers are checked here, not speed.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_request_ends_gives_its_slot_record_back() {
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::new("slow", Quota::per_minute(1000))
                .expect("policy")
                .in_flight(2)
                .expect("in flight"),
        )
        .store(store(&unique_prefix("in-flight")))
        .build()
        .expect("layer");
    every_way_a_request_ends(2, |router| router.layer(layer)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_process_s_slot_records_expire_within_the_ttl() {
    let prefix = unique_prefix("crash");
    let ttl = Duration::from_millis(300);
    crash_holding(
        "in_flight::crashing_process",
        &format!(
            "{} {prefix} {} 3",
            shared_cluster().urls().join(","),
            ttl.as_millis()
        ),
    );
    let (limit, key) = (limit(), Key::from("alice"));
    let live = store(&prefix).in_flight_ttl(ttl).expect("a ttl");
    let set = live.in_flight_key(&limit, &key);
    let master = &shared_cluster().nodes[shared_cluster().master_of(&set)];
    assert_eq!(cli(master.port(), &["ZCARD", &set]), "3");
    until_free(&live, &limit, &key, 3).await;
}

/// Not a test of its own: the process that `crash_holding` starts and kills. Spec:
/// `<node urls, comma-separated> <prefix> <ttl ms> <slots>`; it takes that many
/// slots of `alice` under [`limit`] and holds them until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the crashing process of crash_holding, which runs it in a child process"]
async fn crashing_process() {
    let Some(spec) = crash_spec() else {
        return;
    };
    let [urls, prefix, ttl, n] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("bad spec {spec:?}");
    };
    let store = RedisStore::from_cluster_urls(urls.split(','))
        .expect("valid urls")
        .prefix(prefix)
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
        .in_flight_ttl(Duration::from_millis(ttl.parse().expect("a ttl")))
        .expect("a ttl");
    let n: u32 = n.parse().expect("a number of slots");
    let mut held = Vec::new();
    for _ in 0..n {
        let slot = store
            .acquire_in_flight(&limit(), &Key::from("alice"), n)
            .await;
        held.push(slot.expect("the store answers").expect("a free slot"));
    }
    hold_until_killed().await;
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_running_keys_stay_renewed_past_their_ttl() {
    let prefix = unique_prefix("many");
    // A cluster round is one call per hash slot, 1,500 here (a standalone server's
    // is three): 100-300 ms in a debug build on two busy cores. A slot record taken just
    // after a round began waits up to two rounds, so the TTL gives TTL/3 room above
    // a round (the standalone test keeps 300 ms).
    let ttl = Duration::from_secs(1);
    let limit = limit();
    let keys: Vec<Key> = (0..1500_u64).map(Key::from).collect();
    let holder = store(&prefix).in_flight_ttl(ttl).expect("a ttl");
    let held = take_each(&holder, &limit, &keys).await;
    assert_eq!(held.iter().filter(|s| s.is_some()).count(), 1500);
    // Four lifetimes of running requests, the keys spread over the three masters.
    tokio::time::sleep(ttl * 4).await;
    let other = store(&prefix).in_flight_ttl(ttl).expect("a ttl");
    let second = take_each(&other, &limit, &keys).await;
    let doubled = second.iter().filter(|s| s.is_some()).count();
    assert_eq!(doubled, 0, "{doubled} of 1500 keys gave a second slot");
    assert_eq!(holder.in_flight_slots_lost(), 0);
    assert_eq!(holder.in_flight_slots_readded(), 0);
    drop(held);
    until_free(&other, &limit, &keys[1499], 1).await;
}

fn limit() -> Limit {
    Limit::new("jobs", Quota::per_second(1)).expect("limit")
}
