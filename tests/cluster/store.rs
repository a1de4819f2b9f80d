//! `RedisStore` on a real local Redis Cluster: batches whose keys live on different
//! slots (and their refunds when a later slot's node stalls), hash tags, the function
//! library on every node, and a master failing over (exactness:
//! `tests/redis/exactness.rs`).
#![cfg(feature = "redis")]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use support::redis_cluster::{RedisCluster, shared_cluster};
use support::redis_server::{cli, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore, StoreErrorKind};

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
    let policy = Limit::new("a{b}", Quota::per_second(1))?;
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
        .limit(Limit::new("user", Quota::per_minute(10))?.algorithm(Algorithm::SlidingWindowLog))
        .limit(Limit::new("tenant", Quota::per_minute(1))?.algorithm(Algorithm::FixedWindow))
        .store(store(cluster, &prefix).with_clock(clock).denial_cache(0))
        .build()?;
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    let user = limiter.limit("user").ok_or("policy")?;
    let tenant = limiter.limit("tenant").ok_or("policy")?;
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
        .denial_cache(0);
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(1_000_000))?)
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
    let master = cluster.master_of(&store.state_key(limiter.limit("api").ok_or("policy")?, &key));
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

/// A cluster of its own for the tests that stop nodes, one test at a time.
async fn stalling_cluster() -> (&'static RedisCluster, tokio::sync::MutexGuard<'static, ()>) {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let turn = TURN.lock().await;
    (CLUSTER.get_or_init(|| RedisCluster::start(0)), turn)
}

/// "user" (alice) and "tenant" (acme) on different masters, the store's connection
/// made and its library loaded on both; returns the masters of alice and acme.
async fn batch_across_two_masters(
    cluster: &RedisCluster,
    deadline: Duration,
) -> Result<(Limiter, RedisStore, usize, usize), Box<dyn std::error::Error>> {
    let store = store(cluster, &unique_prefix("stall"))
        .deadline(deadline)?
        .with_clock(ManualClock::new(BASE))
        .denial_cache(0);
    let limiter = Limiter::builder()
        .limit(Limit::new("user", Quota::per_minute(10))?.algorithm(Algorithm::SlidingWindowLog))
        .limit(Limit::new("tenant", Quota::per_minute(1))?.algorithm(Algorithm::FixedWindow))
        .store(store.clone())
        .build()?;
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    let user = cluster.master_of(&store.state_key(limiter.limit("user").ok_or("policy")?, &alice));
    let tenant =
        cluster.master_of(&store.state_key(limiter.limit("tenant").ok_or("policy")?, &acme));
    assert_ne!(user, tenant, "pick keys on different masters");
    // Peeks make the connection and load the library, and a refund of nothing loads
    // the refund script (redis-rs sends `SCRIPT LOAD` to every master, the stalled one
    // too): what follows is only the batch.
    assert_eq!(limiter.check("user", &alice, 0).await?.remaining, 10);
    assert_eq!(limiter.check("tenant", &acme, 0).await?.remaining, 1);
    limiter.refund("user", &alice, 0).await?;
    Ok((limiter, store, user, tenant))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_across_slots_refunds_the_charged_slots_when_a_later_slot_times_out() -> TestResult
{
    let (cluster, _turn) = stalling_cluster().await;
    let (limiter, _, _, tenant) =
        batch_across_two_masters(cluster, Duration::from_millis(300)).await?;
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    // "user" is charged on its master, then "tenant"'s master does not answer: the
    // batch's deadline is spent by the time "user" must be refunded.
    cluster.nodes[tenant].pause();
    let result = limiter
        .check_all(&[("user", &alice, 1), ("tenant", &acme, 1)])
        .await;
    cluster.nodes[tenant].resume();
    assert_eq!(
        result.map_err(|e| e.kind()).err(),
        Some(StoreErrorKind::Timeout)
    );
    // The refund had a deadline of its own: the slot charged before the one that
    // timed out is uncharged. (The timed-out call itself may still run when its node
    // resumes: a timeout's outcome is unknown, and nothing is refunded that may not
    // have been charged.)
    assert_eq!(limiter.check("user", &alice, 0).await?.remaining, 10);
    Ok(())
}

/// Counts `tracing` events whose message is `message`, on the thread it is set on.
#[cfg(feature = "tracing")]
struct CountEvents {
    message: &'static str,
    seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[cfg(feature = "tracing")]
impl tracing::Subscriber for CountEvents {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if message.0 == self.message {
            self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[cfg(feature = "tracing")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compensating_refund_that_fails_is_reported() -> TestResult {
    let (cluster, _turn) = stalling_cluster().await;
    let deadline = Duration::from_millis(300);
    let (limiter, store, user, tenant) = batch_across_two_masters(cluster, deadline).await?;
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let _events = tracing::subscriber::set_default(CountEvents {
        message: "rate-limit refund failed",
        seen: seen.clone(),
    });
    let name = store.state_key(limiter.limit("user").ok_or("policy")?, &alice);
    cluster.nodes[tenant].pause();
    // The batch and, beside it on this thread, a watcher that stops "user"'s master
    // once the charge landed there, so the refund that follows cannot land.
    let checks = [("user", &alice, 1), ("tenant", &acme, 1)];
    let batch = limiter.check_all(&checks);
    let watcher = async {
        let started = Instant::now();
        while cluster.nodes[user].cli(&["EXISTS", &name]) != "1" {
            assert!(started.elapsed() < deadline, "the charge never landed");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        cluster.nodes[user].pause();
    };
    let (result, ()) = tokio::join!(batch, watcher);
    cluster.nodes[user].resume();
    cluster.nodes[tenant].resume();
    assert!(result.is_err());
    assert_eq!(
        seen.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "one failed refund, reported"
    );
    // Its command may still run when the node resumes (sent, not answered in time):
    // only the report is certain.
    cluster.wait_until_ok();
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_master_does_not_stall_decisions_on_the_other_masters() -> TestResult {
    let (cluster, _turn) = stalling_cluster().await;
    let deadline = Duration::from_millis(100);
    let (limiter, _, user, tenant) = batch_across_two_masters(cluster, deadline).await?;
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    // Old enough that a timeout may make the store replace its connection.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before: Vec<u64> = cluster.nodes.iter().map(connections_received).collect();
    cluster.nodes[tenant].pause();
    let mut timeouts = 0;
    for _ in 0..5 {
        let stalled = limiter.check("tenant", &acme, 0).await;
        assert_eq!(
            stalled.map_err(|e| e.kind()).err(),
            Some(StoreErrorKind::Timeout)
        );
        timeouts += 1;
        // alice's master answers all along.
        assert_eq!(limiter.check("user", &alice, 0).await?.remaining, 10);
    }
    cluster.nodes[tenant].resume();
    assert_eq!(limiter.check("tenant", &acme, 0).await?.remaining, 1);
    let after: Vec<u64> = cluster.nodes.iter().map(connections_received).collect();
    // A replacement connects to each master once (plus the `redis-cli` asking).
    let new_to_user = after[user] - before[user] - 1;
    assert!(
        new_to_user <= 2,
        "{new_to_user} connections to a healthy master for {timeouts} timeouts"
    );
    cluster.wait_until_ok();
    Ok(())
}

/// `total_connections_received` of a node (the `redis-cli` asking counts too).
fn connections_received(node: &support::redis_server::RedisServer) -> u64 {
    node.cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats")
}
