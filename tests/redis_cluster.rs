//! `RedisStore` on a real local Redis Cluster: batches whose keys live on different
//! slots, hash tags, the function library on every node, and a master failing over (exactness: `tests/redis_exactness.rs`).
#![cfg(feature = "redis")]

mod support {
    pub(crate) mod redis_cluster;
    pub(crate) mod redis_server;
}

use std::time::{Duration, Instant};

use support::redis_cluster::{RedisCluster, shared_cluster};
use support::redis_server::{cli, unique_prefix};
use tollgate::{Algorithm, Key, Limiter, ManualClock, Policy, Quota, RedisStore, StoreErrorKind};

const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn store(cluster: &RedisCluster, prefix: &str) -> RedisStore {
    RedisStore::from_cluster_urls(cluster.urls())
        .expect("valid urls")
        .prefix(prefix)
        // Many tasks on two cores: answers are checked here, not speed.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
}

#[tokio::test]
async fn state_keys_hash_to_the_subjects_slot() -> TestResult {
    let cluster = shared_cluster();
    let port = cluster.nodes[0].port();
    let store = store(cluster, "p{x}");
    let policy = Policy::new("a{b}", Quota::per_second(1))?;
    for caller in ["{tag}", "}{", "plain", "{x}"] {
        let key = Key::from(caller);
        let name = store.state_key(&policy, &key);
        assert_eq!(
            cli(port, &["CLUSTER", "KEYSLOT", &name]),
            cli(port, &["CLUSTER", "KEYSLOT", &key.to_hex()]),
            "{name}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_batch_across_slots_refunds_when_a_later_slot_denies() -> TestResult {
    let cluster = shared_cluster();
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("slots");
    let limiter = Limiter::builder()
        .policy(Policy::new("user", Quota::per_minute(10))?.algorithm(Algorithm::SlidingWindowLog))
        .policy(Policy::new("tenant", Quota::per_minute(1))?.algorithm(Algorithm::FixedWindow))
        .store(store(cluster, &prefix).with_clock(clock).block_cache(0))
        .build()?;
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    let user = limiter.policy("user").ok_or("policy")?;
    let tenant = limiter.policy("tenant").ok_or("policy")?;
    let probe = store(cluster, &prefix);
    assert_ne!(
        cluster.master_of(&probe.state_key(user, &alice)),
        cluster.master_of(&probe.state_key(tenant, &acme)),
        "pick keys on different masters"
    );
    let batch = [("user", &alice, 1), ("tenant", &acme, 1)];
    assert!(limiter.check_all(&batch).await?.iter().all(|d| d.allowed));
    let denied = limiter.check_all(&batch).await?;
    assert!(denied[0].allowed && !denied[1].allowed);
    // "user" was charged on its slot, then refunded when "tenant" denied.
    assert_eq!(limiter.check("user", &alice, 0).await?.remaining, 9);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_resume_after_a_master_fails_over() -> TestResult {
    // Three masters with one replica each: a killed master's replica takes over.
    let mut cluster = RedisCluster::start(1);
    let deadline = Duration::from_millis(200);
    let store = RedisStore::from_cluster_urls(cluster.urls())?
        .deadline(deadline)?
        .block_cache(0);
    let limiter = Limiter::builder()
        .policy(Policy::new("api", Quota::per_second(1_000_000))?)
        .store(store.clone())
        .build()?;
    let key = Key::from("alice");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    // The first decision loaded the function library on every master (redis-rs sends
    // FUNCTION LOAD to all of them) and the replicas got it by replication, so the
    // replica that takes over below already has it.
    for node in &cluster.nodes {
        let started = Instant::now();
        while !node.cli(&["FUNCTION", "LIST"]).contains("tollgate_") {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "node {} has no library",
                node.port()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let master = cluster.master_of(&store.state_key(limiter.policy("api").ok_or("policy")?, &key));
    cluster.nodes[master].kill();
    let killed = Instant::now();
    let mut errors = 0;
    loop {
        let started = Instant::now();
        match limiter.check("api", &key, 1).await {
            Ok(decision) => {
                assert!(decision.allowed);
                break;
            }
            Err(err) => {
                errors += 1;
                assert!(
                    matches!(
                        err.kind(),
                        StoreErrorKind::Connection
                            | StoreErrorKind::Timeout
                            | StoreErrorKind::Unavailable
                    ),
                    "{err}"
                );
                assert!(started.elapsed() <= deadline + Duration::from_millis(800));
            }
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no failover after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(errors > 0, "the outage was not seen");
    eprintln!(
        "decisions resumed {:?} after the master was killed ({errors} failed calls)",
        killed.elapsed()
    );
    Ok(())
}
