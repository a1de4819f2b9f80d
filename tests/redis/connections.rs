//! Every way to build a `RedisStore` on a standalone server (a URL, redis-rs's
//! `ConnectionManager`, a deadpool-redis pool) decides alike, keeps the store's
//! deadline on a stopped server, and decides again once a killed server is back.
#![cfg(feature = "redis")]

use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use support::redis_server::RedisServer;
use tollgate::{Key, Limit, Limiter, Quota, RedisStore, StoreErrorKind};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The store's deadline in these tests: long enough for a busy machine, short enough
/// that a stopped server's calls end by it.
const DEADLINE: Duration = Duration::from_millis(300);

/// A manager whose own bounds are left to the store (no response timeout), and
/// which retries its reconnects for about as long as a restart takes here.
async fn manager(server: &RedisServer) -> Result<ConnectionManager, redis::RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(None)
        .set_number_of_retries(8);
    ConnectionManager::new_with_config(redis::Client::open(server.url())?, config).await
}

/// A store of each kind on `server`, by name.
async fn stores(
    server: &RedisServer,
) -> Result<Vec<(&'static str, RedisStore)>, Box<dyn std::error::Error>> {
    #[allow(unused_mut)] // without deadpool, two
    let mut stores = vec![
        ("url", RedisStore::from_url(&server.url())?),
        (
            "connection manager",
            RedisStore::from_connection_manager(manager(server).await?),
        ),
    ];
    #[cfg(feature = "deadpool")]
    stores.push((
        "deadpool pool",
        RedisStore::from_pool(
            deadpool_redis::Config::from_url(server.url())
                .create_pool(Some(deadpool_redis::Runtime::Tokio1))?,
        ),
    ));
    Ok(stores)
}

fn limiter(store: RedisStore, prefix: &str) -> Result<Limiter, Box<dyn std::error::Error>> {
    Ok(Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(3))?)
        .store(store.prefix(prefix).denial_cache(0).deadline(DEADLINE)?)
        .build()?)
}

#[tokio::test]
async fn every_kind_of_store_decides_alike() -> TestResult {
    let server = RedisServer::start();
    for (kind, store) in stores(&server).await? {
        assert!(!store.is_cluster(), "{kind}");
        let limiter = limiter(store, kind)?;
        let key = Key::from("alice");
        for remaining in [2, 1, 0] {
            let d = limiter.check("api", &key, 1).await?;
            assert!(d.allowed && d.remaining == remaining, "{kind}: {d:?}");
        }
        assert!(!limiter.check("api", &key, 1).await?.allowed, "{kind}");
        limiter.refund("api", &key, 1).await?;
        assert!(limiter.check("api", &key, 1).await?.allowed, "{kind}");
    }
    Ok(())
}

#[tokio::test]
async fn a_stopped_server_fails_each_kind_of_store_by_its_deadline() -> TestResult {
    let server = RedisServer::start();
    for (kind, store) in stores(&server).await? {
        let limiter = limiter(store, kind)?;
        let key = Key::from("bob");
        assert!(limiter.check("api", &key, 1).await?.allowed, "{kind}");
        server.pause();
        let err = limiter
            .check("api", &key, 1)
            .await
            .expect_err("a stopped server decides nothing");
        server.resume();
        // The store's deadline ended the call: no bound of the connection's own (the
        // manager has none, the URL's and the pool's are lifted) came first.
        assert_eq!(err.kind(), StoreErrorKind::Timeout, "{kind}: {err}");
        assert!(
            err.to_string().contains(&format!("{DEADLINE:?}")),
            "{kind}: {err}"
        );
        let resumed = Instant::now();
        while limiter.check("api", &key, 1).await.is_err() {
            assert!(
                resumed.elapsed() < Duration::from_secs(5),
                "{kind}: no answer after SIGCONT"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn each_kind_of_store_decides_again_once_a_killed_server_is_back() -> TestResult {
    let mut server = RedisServer::start();
    let stores = stores(&server).await?;
    let mut limiters = Vec::new();
    for (kind, store) in stores {
        let limiter = limiter(store, kind)?;
        assert!(
            limiter.check("api", &Key::from("carol"), 1).await?.allowed,
            "{kind}"
        );
        limiters.push((kind, limiter));
    }
    server.kill();
    for (kind, limiter) in &limiters {
        let err = limiter
            .check("api", &Key::from("carol"), 1)
            .await
            .expect_err("no server");
        assert!(
            matches!(
                err.kind(),
                StoreErrorKind::Connection | StoreErrorKind::Timeout
            ),
            "{kind}: {err}"
        );
    }
    // Back on the same port, empty (no persistence): each store reconnects by itself
    // (the manager by its own retries), loads its code again and decides.
    server.restart();
    for (kind, limiter) in &limiters {
        let back = Instant::now();
        let decision = loop {
            match limiter.check("api", &Key::from("carol"), 1).await {
                Ok(decision) => break decision,
                Err(err) => assert!(
                    back.elapsed() < Duration::from_secs(10),
                    "{kind}: no decision after the restart: {err}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(decision.allowed, "{kind}");
        assert_eq!(
            decision.remaining, 2,
            "{kind}: the restarted server is empty"
        );
    }
    Ok(())
}
