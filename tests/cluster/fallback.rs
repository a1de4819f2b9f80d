//! `Fallback` over a Redis Cluster store: a primary failing half its calls still
//! admits one quota per key in one process.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::fallback::admitted_under_a_half_failing_primary;
use support::redis_cluster::shared_cluster;
use support::redis_server::unique_prefix;
use support::scenarios::BASE;
use tollgate::RedisStore;
use tollgate::clock::ManualClock;

#[tokio::test]
async fn a_cluster_primary_failing_half_its_calls_admits_one_quota_at_one_instant()
-> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE);
    let cluster = RedisStore::from_cluster_urls(shared_cluster().urls())?
        .prefix(&unique_prefix("fallback-half-down"))
        .deadline(Duration::from_secs(5))?
        .denial_cache(0)
        .with_clock(clock.clone());
    let (admitted, switches, left) = admitted_under_a_half_failing_primary(cluster, &clock).await;
    assert_eq!(admitted, 10, "one store's quota, after {switches} switches");
    assert!(switches >= 2, "it failed over and back: {switches}");
    assert_eq!(
        left, 0,
        "the cluster was charged what the insurance admitted"
    );
    Ok(())
}
