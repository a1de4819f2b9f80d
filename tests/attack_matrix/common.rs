//! Helpers the attack modules share: a frozen instant, stores on the binary's private
//! `redis-server`, a polling wait that turns a hang into a failure.

use std::time::Duration;

use support::redis_server::{shared_server, unique_prefix};
use tollgate::RedisStore;
use tollgate::clock::ManualClock;

/// 2023-11-14T00:00:00Z.
pub(crate) const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
pub(crate) const HANG: Duration = Duration::from_secs(30);

pub(crate) fn clock() -> ManualClock {
    ManualClock::new(BASE)
}

/// A store on the shared private server under a prefix of its own, at `clock`.
pub(crate) fn redis(name: &str, clock: ManualClock) -> RedisStore {
    redis_at(&unique_prefix(name), clock)
}

/// A store of its own (another process's) on the shared server under `prefix`.
pub(crate) fn redis_at(prefix: &str, clock: ManualClock) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(prefix)
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}

/// Polls `done` until it holds; fails after [`HANG`].
pub(crate) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < HANG, "still waiting: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A store on the binary's three-master Redis Cluster under a prefix of its own.
pub(crate) fn cluster(name: &str, clock: ManualClock) -> RedisStore {
    RedisStore::from_cluster_urls(support::redis_cluster::shared_cluster().urls())
        .expect("valid urls")
        .prefix(&unique_prefix(name))
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock)
}
