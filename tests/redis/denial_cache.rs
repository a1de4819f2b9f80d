//! The denial cache against real Redis: two `RedisStore`s (two caches, as two
//! processes would have) on one private redis-server and on the real three-master
//! cluster. A cached denial answers for at most its max age, so a reset, a refund by
//! another process or a far-future denial reaches the caching process within it; a
//! batch with one blocked charge is denied without a round trip. Round trips are
//! counted by the server itself (`INFO commandstats`).
#![cfg(feature = "redis")]

use std::sync::OnceLock;
use std::time::Duration;

use support::redis_cluster::RedisCluster;
use support::redis_server::{RedisServer, cli, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

/// A day boundary: day windows start here.
const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Where the two stores point: a private server, or this module's cluster.
struct Target {
    urls: Vec<String>,
    ports: Vec<u16>,
    cluster: bool,
    /// Held for the test's duration: the cluster is shared by this module's tests,
    /// whose round trips would otherwise mix into each other's counts.
    _turn: Option<tokio::sync::MutexGuard<'static, ()>>,
    _server: Option<RedisServer>,
}

static CLUSTER_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A cluster for this module's tests alone, not the binary's shared one: round trips
/// are counted on every node (`INFO commandstats`), which other tests' calls would
/// add to.
fn counting_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(0))
}

fn standalone() -> Target {
    let server = RedisServer::start();
    Target {
        urls: vec![server.url()],
        ports: vec![server.port()],
        cluster: false,
        _turn: None,
        _server: Some(server),
    }
}

async fn cluster() -> Target {
    let turn = CLUSTER_TURN.lock().await;
    let cluster = counting_cluster();
    Target {
        urls: cluster.urls(),
        ports: cluster.nodes.iter().map(RedisServer::port).collect(),
        cluster: true,
        _turn: Some(turn),
        _server: None,
    }
}

impl Target {
    /// A store of its own (its own cache) on the shared key space `prefix`.
    fn store(&self, prefix: &str, clock: &ManualClock) -> RedisStore {
        let store = if self.cluster {
            RedisStore::from_cluster_urls(self.urls.clone())
        } else {
            RedisStore::from_url(&self.urls[0])
        };
        store
            .expect("valid urls")
            .prefix(prefix)
            // Answers and round trips are checked here, not speed.
            .deadline(Duration::from_secs(10))
            .expect("a deadline")
            .with_clock(clock.clone())
    }

    /// Scripts and functions run so far, on every node: the store's round trips.
    fn script_calls(&self) -> u64 {
        self.ports
            .iter()
            .map(|&port| {
                cli(port, &["INFO", "commandstats"])
                    .lines()
                    .filter(|l| {
                        ["cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"]
                            .iter()
                            .any(|c| l.starts_with(c))
                    })
                    .filter_map(|l| l.split([':', ',']).find_map(|f| f.strip_prefix("calls=")))
                    .map(|n| n.parse::<u64>().expect("a call count"))
                    .sum::<u64>()
            })
            .sum()
    }

    /// `DEL name` on the node that holds it.
    fn delete(&self, name: &str) -> String {
        let port = if self.cluster {
            let cluster = counting_cluster();
            cluster.nodes[cluster.master_of(name)].port()
        } else {
            self.ports[0]
        };
        cli(port, &["DEL", name])
    }
}

fn limiter(store: RedisStore, policies: &[(&str, Quota, Algorithm)]) -> Limiter {
    let mut builder = Limiter::builder().store(store);
    for (name, quota, algorithm) in policies {
        builder = builder.limit(
            Limit::new(*name, *quota)
                .expect("a policy")
                .algorithm(*algorithm),
        );
    }
    builder.build().expect("a limiter")
}

fn daily() -> [(&'static str, Quota, Algorithm); 1] {
    [("daily", Quota::per_day(5), Algorithm::FixedWindow)]
}

/// Process A spends its 5/day and gets a denial cached for the rest of the day.
async fn spend_and_cache(a: &Limiter, store: &RedisStore, key: &Key) -> TestResult {
    for _ in 0..5 {
        assert!(a.check("daily", key, 1).await?.allowed);
    }
    let denied = a.check("daily", key, 1).await?;
    assert!(!denied.allowed);
    assert_eq!(denied.retry_after, Some(Duration::from_secs(86_400)));
    assert_eq!(store.blocked_keys(), 1);
    Ok(())
}

/// A's cached denial still answers, locally, just before its max age.
async fn still_cached(target: &Target, a: &Limiter, clock: &ManualClock, key: &Key) -> TestResult {
    clock.set(
        BASE + RedisStore::DEFAULT_BLOCK_CACHE_MAX_AGE.saturating_sub(Duration::from_micros(1)),
    );
    let calls = target.script_calls();
    assert!(!a.check("daily", key, 1).await?.allowed);
    assert_eq!(
        target.script_calls(),
        calls,
        "answered without a round trip"
    );
    clock.set(BASE + RedisStore::DEFAULT_BLOCK_CACHE_MAX_AGE);
    Ok(())
}

async fn a_deleted_key_reaches_the_caching_process_within_the_max_age(
    target: Target,
) -> TestResult {
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("reset");
    let (store_a, store_b) = (target.store(&prefix, &clock), target.store(&prefix, &clock));
    let (a, b) = (
        limiter(store_a.clone(), &daily()),
        limiter(store_b, &daily()),
    );
    let key = Key::from("alice");
    spend_and_cache(&a, &store_a, &key).await?;
    let name = store_a.state_key(a.limit("daily").ok_or("policy")?, &key);
    assert_eq!(target.delete(&name), "1");
    // Another process sees the reset at once.
    let fresh = b.check("daily", &key, 1).await?;
    assert!(fresh.allowed);
    assert_eq!(fresh.remaining, 4);
    still_cached(&target, &a, &clock, &key).await?;
    let seen = a.check("daily", &key, 1).await?;
    assert!(seen.allowed, "the reset reached A within the max age");
    assert_eq!(seen.remaining, 3);
    Ok(())
}

#[tokio::test]
async fn a_deleted_key_is_admitted_by_a_caching_process_once_the_max_age_has_passed() -> TestResult
{
    a_deleted_key_reaches_the_caching_process_within_the_max_age(standalone()).await
}

#[tokio::test]
async fn a_deleted_key_is_admitted_by_a_caching_process_once_the_max_age_has_passed_on_the_cluster()
-> TestResult {
    a_deleted_key_reaches_the_caching_process_within_the_max_age(cluster().await).await
}

async fn a_refund_reaches_the_caching_process_within_the_max_age(target: Target) -> TestResult {
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("refund");
    let (store_a, store_b) = (target.store(&prefix, &clock), target.store(&prefix, &clock));
    let (a, b) = (
        limiter(store_a.clone(), &daily()),
        limiter(store_b, &daily()),
    );
    let key = Key::from("alice");
    spend_and_cache(&a, &store_a, &key).await?;
    b.refund("daily", &key, 5).await?;
    assert_eq!(b.check("daily", &key, 0).await?.remaining, 5);
    still_cached(&target, &a, &clock, &key).await?;
    let seen = a.check("daily", &key, 1).await?;
    assert!(seen.allowed, "the refund reached A within the max age");
    assert_eq!(seen.remaining, 4);
    Ok(())
}

#[tokio::test]
async fn a_refund_by_another_process_is_seen_by_a_caching_process_once_the_max_age_has_passed()
-> TestResult {
    a_refund_reaches_the_caching_process_within_the_max_age(standalone()).await
}

#[tokio::test]
async fn a_refund_by_another_process_is_seen_by_a_caching_process_once_the_max_age_has_passed_on_the_cluster()
-> TestResult {
    a_refund_reaches_the_caching_process_within_the_max_age(cluster().await).await
}

/// Regression (issue 23, "also seen"): an operator's refund through the caching process
/// forgot the cached denial only under the limit's own quota; a plan caller (same
/// period, so the same state) stayed denied locally for up to the max age.
async fn an_operator_refund_frees_a_plan_callers_cached_denial(target: Target) -> TestResult {
    let clock = ManualClock::new(BASE);
    let store = target.store(&unique_prefix("plan-refund"), &clock);
    let a = limiter(store.clone(), &daily());
    let key = Key::from("alice");
    let plan = Quota::per_day(6);
    for _ in 0..6 {
        assert!(a.check_with("daily", &key, 1, plan).await?.allowed);
    }
    assert!(!a.check_with("daily", &key, 1, plan).await?.allowed);
    assert_eq!(
        store.blocked_keys(),
        1,
        "the plan caller's denial is cached"
    );
    a.refund("daily", &key, 2).await?;
    assert_eq!(store.blocked_keys(), 0, "forgotten under every quota");
    let after = a.check_with("daily", &key, 1, plan).await?;
    assert!(after.allowed, "the refund frees the plan caller at once");
    assert_eq!(after.remaining, 1);
    Ok(())
}

#[tokio::test]
async fn an_operator_refund_frees_a_plan_callers_cached_denial_at_once() -> TestResult {
    an_operator_refund_frees_a_plan_callers_cached_denial(standalone()).await
}

#[tokio::test]
async fn an_operator_refund_frees_a_plan_callers_cached_denial_at_once_on_the_cluster() -> TestResult
{
    an_operator_refund_frees_a_plan_callers_cached_denial(cluster().await).await
}

async fn a_far_future_denial_is_capped(target: Target) -> TestResult {
    let clock = ManualClock::new(BASE);
    let max_age = Duration::from_secs(5);
    let store = target
        .store(&unique_prefix("far"), &clock)
        .denial_cache_max_age(max_age)?;
    let decade = Duration::from_secs(10 * 365 * 86_400);
    let policies = [("decade", Quota::new(1, decade)?, Algorithm::Gcra)];
    let limiter = limiter(store.clone(), &policies);
    let key = Key::from("alice");
    assert!(limiter.check("decade", &key, 1).await?.allowed);
    let denied = limiter.check("decade", &key, 1).await?;
    assert_eq!(denied.retry_after, Some(decade));
    assert_eq!(store.blocked_keys(), 1);

    clock.set(BASE + max_age.saturating_sub(Duration::from_micros(1)));
    let calls = target.script_calls();
    let local = limiter.check("decade", &key, 1).await?;
    assert!(!local.allowed);
    assert_eq!(target.script_calls(), calls, "still answered locally");
    // A decade-long denial answers for the max age, not a decade: then Redis decides.
    clock.set(BASE + max_age);
    let asked = limiter.check("decade", &key, 1).await?;
    assert!(!asked.allowed);
    assert_eq!(asked.retry_after, decade.checked_sub(max_age));
    assert_eq!(target.script_calls(), calls + 1, "asked Redis again");
    Ok(())
}

#[tokio::test]
async fn a_far_future_denial_is_cached_no_longer_than_the_max_age() -> TestResult {
    a_far_future_denial_is_capped(standalone()).await
}

#[tokio::test]
async fn a_far_future_denial_is_cached_no_longer_than_the_max_age_on_the_cluster() -> TestResult {
    a_far_future_denial_is_capped(cluster().await).await
}

async fn one_blocked_charge_denies_locally(target: Target) -> TestResult {
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("batch");
    let store = target.store(&prefix, &clock);
    let policies = [
        ("tenant", Quota::per_day(100), Algorithm::SlidingWindowLog),
        ("burst", Quota::per_second(1), Algorithm::FixedWindow),
    ];
    let limiter = limiter(store.clone(), &policies);
    let (acme, alice) = (Key::from("acme"), Key::from("alice"));
    if target.cluster {
        // The costly case: each policy's key on its own master, so a remote denial
        // charges "tenant" on its node, is denied on the other, then refunds.
        let cluster = counting_cluster();
        let tenant = limiter.limit("tenant").ok_or("policy")?;
        let burst = limiter.limit("burst").ok_or("policy")?;
        assert_ne!(
            cluster.master_of(&store.state_key(tenant, &acme)),
            cluster.master_of(&store.state_key(burst, &alice)),
            "pick keys on different masters"
        );
    }
    let batch = [("tenant", &acme, 1), ("burst", &alice, 1)];
    assert!(limiter.check_all(&batch).await?.iter().all(|d| d.allowed));
    let denied = limiter.check_all(&batch).await?;
    assert!(denied[0].allowed && !denied[1].allowed);
    assert_eq!(store.blocked_keys(), 1, "only burst is blocked");

    let calls = target.script_calls();
    for _ in 0..10 {
        let local = limiter.check_all(&batch).await?;
        assert!(!local[1].allowed);
        assert_eq!(local[1].retry_after, Some(Duration::from_secs(1)));
        // Not evaluated: it did not deny, and promises nothing.
        assert!(local[0].allowed);
        assert_eq!((local[0].remaining, local[0].retry_after), (0, None));
    }
    assert_eq!(
        target.script_calls(),
        calls,
        "no round trip for a blocked batch"
    );
    // Nothing was charged to the policy that was not evaluated.
    assert_eq!(limiter.check("tenant", &acme, 0).await?.remaining, 99);
    // Charges that are not blocked still go to Redis.
    let calls = target.script_calls();
    assert!(limiter.check_all(&[("tenant", &acme, 1)]).await?[0].allowed);
    assert_eq!(target.script_calls(), calls + 1);
    Ok(())
}

#[tokio::test]
async fn a_batch_with_one_blocked_charge_is_denied_without_a_round_trip() -> TestResult {
    one_blocked_charge_denies_locally(standalone()).await
}

#[tokio::test]
async fn a_batch_with_one_blocked_charge_is_denied_without_a_round_trip_on_the_cluster()
-> TestResult {
    one_blocked_charge_denies_locally(cluster().await).await
}

/// Asserts that the store made `expected` round trips since `calls`, and moves it on.
fn expect_calls(target: &Target, calls: &mut u64, expected: u64, what: &str) {
    let now = target.script_calls();
    assert_eq!(now - *calls, expected, "round trips for {what}");
    *calls = now;
}

/// Every operation is one call (one script or function), the penalty box adds none
/// to a decision, and a blocked key is answered from the cache.
async fn every_operation_is_one_round_trip(target: Target) -> TestResult {
    let clock = ManualClock::new(BASE);
    let store = target.store(&unique_prefix("one-trip"), &clock);
    // The sliding window log: three keys per decision (state, log, block record).
    let limit = tollgate::Limit::new("api", Quota::per_minute(1))?
        .algorithm(Algorithm::SlidingWindowLog)
        .penalty(
            tollgate::Penalty::after(2)
                .within(Duration::from_secs(60))
                .block_for(Duration::from_secs(600)),
        );
    let limiter = Limiter::builder().limit(limit).store(store).build()?;
    let key = Key::from("mallory");
    // A fresh server learns the function library and the script on their first use
    // (one more call each): not counted here.
    limiter.peek("api", &Key::from("warm-up")).await?;
    limiter.reset("api", &Key::from("warm-up")).await?;
    let mut calls = target.script_calls();
    assert!(limiter.check("api", &key, 1).await?.allowed);
    expect_calls(&target, &mut calls, 1, "an admission");
    assert_eq!(limiter.check("api", &key, 1).await?.blocked_for, None);
    expect_calls(
        &target,
        &mut calls,
        1,
        "a rejection counted by the penalty box",
    );
    let tripped = limiter.check("api", &key, 1).await?;
    assert_eq!(tripped.blocked_for, Some(Duration::from_secs(600)));
    expect_calls(&target, &mut calls, 1, "the rejection that trips the box");
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    expect_calls(&target, &mut calls, 0, "a blocked key, from the cache");
    assert!(limiter.peek("api", &key).await?.blocked_for.is_some());
    expect_calls(&target, &mut calls, 1, "a peek");
    limiter.penalize("api", &key, 3).await?;
    expect_calls(&target, &mut calls, 1, "a penalty");
    limiter.reset("api", &key).await?;
    expect_calls(&target, &mut calls, 1, "a reset");
    limiter.block("api", &key, Duration::from_secs(60)).await?;
    expect_calls(&target, &mut calls, 1, "a block");
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    expect_calls(&target, &mut calls, 0, "a key blocked through this process");
    limiter.reset("api", &key).await?;
    assert!(limiter.check("api", &key, 1).await?.allowed);
    expect_calls(&target, &mut calls, 2, "a reset, then an admission");
    Ok(())
}

#[tokio::test]
async fn every_operation_is_one_round_trip_and_blocks_are_answered_locally() -> TestResult {
    every_operation_is_one_round_trip(standalone()).await
}

#[tokio::test]
async fn every_operation_is_one_round_trip_and_blocks_are_answered_locally_on_the_cluster()
-> TestResult {
    every_operation_is_one_round_trip(cluster().await).await
}

/// "burst" (1/day, no penalty box) and "login" (1/day, `penalty`) on `store`.
fn boxed_beside_plain(
    store: impl tollgate::store::Store,
    penalty: tollgate::Penalty,
) -> Result<Limiter, tollgate::ConfigError> {
    Limiter::builder()
        .limit(Limit::new("burst", Quota::per_day(1))?.algorithm(Algorithm::FixedWindow))
        .limit(
            Limit::new("login", Quota::per_day(1))?
                .algorithm(Algorithm::FixedWindow)
                .penalty(penalty),
        )
        .store(store)
        .build()
}

/// One denial rule, for batches (issue 35): a batch whose charge under a penalty box
/// could be a rejection goes to Redis, even when another of its charges is denied
/// here, because Redis counts every charge of a denied batch that denies. Before, the
/// cached denial of the other limit answered the batch, and the box never counted.
async fn a_batch_beside_a_cached_denial_still_counts_its_penalty_box(target: Target) -> TestResult {
    let penalty = tollgate::Penalty::after(2)
        .within(Duration::from_secs(60))
        .block_for(Duration::from_secs(600));
    let clock = ManualClock::new(BASE);
    let on_redis = boxed_beside_plain(target.store(&unique_prefix("batch-box"), &clock), penalty)?;
    let on_memory = boxed_beside_plain(tollgate::MemoryStore::with_clock(clock.clone()), penalty)?;
    let key = Key::from("mallory");
    let batch = [("burst", &key, 1), ("login", &key, 1)];
    let said = |d: &[tollgate::Decision]| -> Vec<(bool, Option<Duration>)> {
        d.iter().map(|d| (d.allowed, d.blocked_for)).collect()
    };
    let block = Some(Duration::from_secs(600));
    let expected = [
        vec![(true, None), (true, None)],
        // The first rejection: counted, and `burst`'s denial cached.
        vec![(false, None), (false, None)],
        // The second trips the box: Redis was asked.
        vec![(false, None), (false, block)],
    ];
    for (i, expected) in expected.iter().enumerate() {
        assert_eq!(
            &said(&on_memory.check_all(&batch).await?),
            expected,
            "memory, batch {i}"
        );
        assert_eq!(
            &said(&on_redis.check_all(&batch).await?),
            expected,
            "redis, batch {i}"
        );
    }
    // Both keys denied here, the boxed one blocked: nothing more to count, and the
    // batch is answered without a round trip.
    let calls = target.script_calls();
    let local = on_redis.check_all(&batch).await?;
    assert_eq!(target.script_calls(), calls, "answered here");
    assert!(!local[0].allowed && local[1].blocked_for == block);
    Ok(())
}

#[tokio::test]
async fn a_batch_beside_a_cached_denial_still_counts_its_penalty_box_on_redis() -> TestResult {
    a_batch_beside_a_cached_denial_still_counts_its_penalty_box(standalone()).await
}

#[tokio::test]
async fn a_batch_beside_a_cached_denial_still_counts_its_penalty_box_on_the_cluster() -> TestResult
{
    a_batch_beside_a_cached_denial_still_counts_its_penalty_box(cluster().await).await
}
