//! The layer's tests on a Redis store: each on the binary's one private `redis-server`
//! (started by the first test that asks), under a key prefix of its own.

use std::time::Duration;

use support::redis_server::{shared_server, unique_prefix};
use tollgate::RedisStore;
use tollgate::clock::ManualClock;

/// A store on the shared server, its keys under a prefix made from `name`, deciding
/// at `clock`'s instants. Its deadline is generous: these tests check answers, not
/// speed, on a busy machine.
pub(crate) fn redis_store(name: &str, clock: ManualClock) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(&unique_prefix(name))
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}

/// A store on a three-master Redis Cluster shared by this binary (started by the first
/// test that asks), its keys under a prefix made from `name`, deciding at `clock`'s
/// instants.
pub(crate) fn cluster_store(name: &str, clock: ManualClock) -> RedisStore {
    RedisStore::from_cluster_urls(support::redis_cluster::shared_cluster().urls())
        .expect("valid urls")
        .prefix(&unique_prefix(name))
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}
