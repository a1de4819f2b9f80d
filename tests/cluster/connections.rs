//! Every way to build a `RedisStore` on a cluster (seed URLs, redis-rs's cluster
//! connection, a deadpool-redis cluster pool) decides alike across slots, and keeps
//! the store's deadline when one master stops while the others answer.
#![cfg(feature = "redis")]

use std::sync::OnceLock;
use std::time::Duration;

use redis::cluster::ClusterClient;
use support::redis_cluster::{RedisCluster, shared_cluster};
use support::redis_server::unique_prefix;
use tollgate::{Key, Limit, Limiter, Quota, RedisStore, StoreErrorKind};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A store of each kind on `cluster`, by name. The cluster connection is built the
/// common way (redis-rs's default timeouts).
async fn stores(
    cluster: &RedisCluster,
) -> Result<Vec<(&'static str, RedisStore)>, Box<dyn std::error::Error>> {
    let connection = ClusterClient::new(cluster.urls())?
        .get_async_connection()
        .await?;
    #[allow(unused_mut)] // without deadpool, two
    let mut stores = vec![
        ("urls", RedisStore::from_cluster_urls(cluster.urls())?),
        (
            "cluster connection",
            RedisStore::from_cluster_connection(connection),
        ),
    ];
    #[cfg(feature = "deadpool")]
    stores.push((
        "deadpool cluster pool",
        RedisStore::from_cluster_pool(
            deadpool_redis::cluster::Config::from_urls(cluster.urls())
                .create_pool(Some(deadpool_redis::Runtime::Tokio1))?,
        ),
    ));
    Ok(stores)
}

/// "user" and "tenant" limits; `deadline` on each call.
fn limiter(store: RedisStore, deadline: Duration) -> Result<Limiter, Box<dyn std::error::Error>> {
    Ok(Limiter::builder()
        .limit(Limit::new("user", Quota::per_minute(10))?)
        .limit(Limit::new("tenant", Quota::per_minute(1))?)
        .store(
            store
                .prefix(&unique_prefix("connections"))
                .denial_cache(0)
                .deadline(deadline)?,
        )
        .build()?)
}

#[tokio::test]
async fn every_kind_of_cluster_store_decides_across_slots() -> TestResult {
    let cluster = shared_cluster();
    for (kind, store) in stores(cluster).await? {
        assert!(store.is_cluster(), "{kind}");
        let limiter = limiter(store, Duration::from_secs(10))?;
        let (alice, acme) = (Key::from("alice"), Key::from("acme"));
        // One batch over keys of two slots, then the tenant's one request is spent.
        let both = limiter
            .check_all(&[("user", &alice, 1), ("tenant", &acme, 1)])
            .await?;
        assert!(both.iter().all(|d| d.allowed), "{kind}: {both:?}");
        let again = limiter
            .check_all(&[("user", &alice, 1), ("tenant", &acme, 1)])
            .await?;
        assert!(!again[1].allowed, "{kind}");
        // All or none: the user's charge of the denied batch was given back.
        assert_eq!(
            limiter.check("user", &alice, 0).await?.remaining,
            9,
            "{kind}"
        );
    }
    Ok(())
}

/// A cluster of its own, whose masters these tests stop.
fn stalling_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_fails_each_kind_of_cluster_store_by_its_deadline() -> TestResult {
    let cluster = stalling_cluster();
    let deadline = Duration::from_millis(300);
    for (kind, store) in stores(cluster).await? {
        let probe = store.clone();
        let limiter = limiter(store, deadline)?;
        let (alice, acme) = (Key::from("alice"), Key::from("acme"));
        let tenant = limiter.limit("tenant").ok_or("policy")?;
        let user = limiter.limit("user").ok_or("policy")?;
        let stopped = cluster.master_of(&probe.state_key(&tenant, &acme));
        assert_ne!(
            stopped,
            cluster.master_of(&probe.state_key(&user, &alice)),
            "pick keys on different masters"
        );
        // Connected and loaded on both masters first.
        assert_eq!(
            limiter.check("tenant", &acme, 0).await?.remaining,
            1,
            "{kind}"
        );
        assert_eq!(
            limiter.check("user", &alice, 0).await?.remaining,
            10,
            "{kind}"
        );
        cluster.nodes[stopped].pause();
        let err = limiter
            .check("tenant", &acme, 0)
            .await
            .expect_err("a stopped master decides nothing");
        // The other master answers meanwhile.
        let other = limiter.check("user", &alice, 0).await;
        cluster.nodes[stopped].resume();
        assert_eq!(err.kind(), StoreErrorKind::Timeout, "{kind}: {err}");
        assert_eq!(other?.remaining, 10, "{kind}");
        cluster.wait_until_ok();
    }
    Ok(())
}
