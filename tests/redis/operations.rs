//! Operators' calls and the penalty box on real Redis (a shared standalone server and
//! the shared three-master cluster): the box trips exactly once per window of
//! offences under concurrent callers on several limiter instances; a block or a reset
//! made by one process reaches another, which caches blocks, within its denial
//! cache's max age; every operation is one round trip.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::plan_walk::{Compare, walk, walks};
use support::redis_cluster::shared_cluster;
use support::redis_server::{shared_server, unique_prefix};
use tokio::time::{Instant, sleep};
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, Penalty, Quota, RedisStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn store(urls: &[String], cluster: bool, prefix: &str) -> RedisStore {
    let store = if cluster {
        RedisStore::from_cluster_urls(urls.to_vec())
    } else {
        RedisStore::from_url(&urls[0])
    };
    store
        .expect("valid urls")
        .prefix(prefix)
        // Answers are checked here, not speed, on a busy machine.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
}

fn standalone() -> (Vec<String>, bool) {
    (vec![shared_server().url()], false)
}

fn cluster() -> (Vec<String>, bool) {
    (shared_cluster().urls(), true)
}

/// 10 per minute; the 5th rejection within a minute blocks for 10 minutes.
fn boxed(algorithm: Algorithm) -> Limit {
    Limit::new("login", Quota::per_minute(10))
        .expect("a limit")
        .algorithm(algorithm)
        .penalty(
            Penalty::after(5)
                .within(Duration::from_secs(60))
                .block_for(Duration::from_secs(600)),
        )
}

/// 64 tasks on each of `limiters` send one request each, at one frozen instant.
async fn storm(
    limiters: &[Limiter],
    key: &Key,
) -> Result<Vec<Decision>, Box<dyn std::error::Error>> {
    let mut tasks = Vec::new();
    for limiter in limiters {
        for _ in 0..64 {
            let (limiter, key) = (limiter.clone(), *key);
            tasks.push(tokio::spawn(async move {
                limiter.check("login", &key, 1).await
            }));
        }
    }
    let mut decisions = Vec::new();
    for task in tasks {
        decisions.push(task.await??);
    }
    Ok(decisions)
}

/// 256 requests at once against 10/min: 10 admitted, 4 plain rejections, and the 5th
/// rejection trips the box: every other request is blocked, and none of them counts
/// or extends the block (all report the full 600 s at the frozen instant).
fn assert_one_trip(decisions: &[Decision]) {
    let admitted = decisions.iter().filter(|d| d.allowed).count();
    let rejected = decisions
        .iter()
        .filter(|d| !d.allowed && d.blocked_for.is_none())
        .count();
    let blocked: Vec<_> = decisions.iter().filter_map(|d| d.blocked_for).collect();
    assert_eq!((admitted, rejected, blocked.len()), (10, 4, 242));
    assert!(blocked.iter().all(|&left| left == Duration::from_secs(600)));
}

async fn the_penalty_box_trips_once_per_window_of_offences(
    (urls, cluster): (Vec<String>, bool),
) -> TestResult {
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("penalty-storm");
    let limiters: Vec<Limiter> = (0..4)
        .map(|_| {
            Limiter::builder()
                .limit(boxed(Algorithm::Gcra))
                .store(store(&urls, cluster, &prefix).with_clock(clock.clone()))
                .build()
                .expect("a limiter")
        })
        .collect();
    let key = Key::from("mallory");
    assert_one_trip(&storm(&limiters, &key).await?);
    // After the block the quota is full and the count starts over: the same again.
    clock.advance(Duration::from_secs(600));
    assert_one_trip(&storm(&limiters, &key).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_penalty_box_trips_once_under_64_tasks_on_4_limiters() -> TestResult {
    the_penalty_box_trips_once_per_window_of_offences(standalone()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_penalty_box_trips_once_under_64_tasks_on_4_limiters_on_the_cluster() -> TestResult {
    the_penalty_box_trips_once_per_window_of_offences(cluster()).await
}

/// Polls `limiter` (every 10 ms, for at most 10 s: a bound for a busy machine, not a
/// claim on speed) until `done` holds for its decision on `key`.
async fn poll_until(
    limiter: &Limiter,
    key: &Key,
    done: impl Fn(&Decision) -> bool,
) -> Result<Decision, Box<dyn std::error::Error>> {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let decision = limiter.check("api", key, 1).await?;
        if done(&decision) {
            return Ok(decision);
        }
        if Instant::now() >= give_up {
            return Err(format!("still {decision:?} after 10 s").into());
        }
        sleep(Duration::from_millis(10)).await;
    }
}

async fn blocks_and_resets_reach_every_process((urls, cluster): (Vec<String>, bool)) -> TestResult {
    let prefix = unique_prefix("operate");
    let max_age = Duration::from_millis(200);
    let limiter = |store: RedisStore| {
        Limiter::builder()
            .limit(Limit::new("api", Quota::per_minute(1000)).expect("a limit"))
            .store(store)
            .build()
            .expect("a limiter")
    };
    let store_b = store(&urls, cluster, &prefix)
        .denial_cache_max_age(max_age)
        .expect("an age");
    let a = limiter(store(&urls, cluster, &prefix));
    let b = limiter(store_b.clone());
    let key = Key::from("mallory");
    assert!(b.check("api", &key, 1).await?.allowed);

    a.block("api", &key, Duration::from_secs(3600)).await?;
    let denied = poll_until(&b, &key, |d| !d.allowed).await?;
    assert!(denied.blocked_for.is_some());
    assert_eq!(denied.remaining, 0);
    // B holds the block in its cache: hammering it costs Redis nothing.
    assert!(!b.check("api", &key, 1).await?.allowed);
    assert_eq!(store_b.blocked_keys(), 1);

    a.reset("api", &key).await?;
    let served = poll_until(&b, &key, |d| d.allowed).await?;
    assert_eq!(served.blocked_for, None);
    // The reset forgot the key's usage too: 1000 − this request.
    assert_eq!(served.remaining, 999);
    Ok(())
}

#[tokio::test]
async fn a_block_and_a_reset_by_one_process_reach_another_within_its_cache_age() -> TestResult {
    blocks_and_resets_reach_every_process(standalone()).await
}

#[tokio::test]
async fn a_block_and_a_reset_by_one_process_reach_another_within_its_cache_age_on_the_cluster()
-> TestResult {
    blocks_and_resets_reach_every_process(cluster()).await
}

#[tokio::test]
async fn a_reset_through_this_process_clears_its_own_cached_block_at_once() -> TestResult {
    let (urls, cluster) = standalone();
    let clock = ManualClock::new(BASE);
    let store = store(&urls, cluster, &unique_prefix("own-reset")).with_clock(clock);
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(10))?)
        .store(store.clone())
        .build()?;
    let key = Key::from("mallory");
    limiter.block("api", &key, Duration::from_secs(60)).await?;
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    assert_eq!(store.blocked_keys(), 1);
    limiter.reset("api", &key).await?;
    assert_eq!(store.blocked_keys(), 0);
    assert!(limiter.check("api", &key, 1).await?.allowed);
    Ok(())
}

#[tokio::test]
async fn penalty_state_lives_next_to_the_rate_state_with_a_ttl() -> TestResult {
    let server = shared_server();
    let clock = ManualClock::new(BASE);
    let store = store(&[server.url()], false, &unique_prefix("layout")).with_clock(clock);
    let limiter = Limiter::builder()
        .limit(boxed(Algorithm::FixedWindow))
        .store(store.clone())
        .build()?;
    let key = Key::from("mallory");
    for _ in 0..11 {
        limiter.check("login", &key, 1).await?;
    }
    let state = store.state_key(limiter.limit("login").ok_or("limit")?, &key);
    let record = store.record_key(limiter.limit("login").ok_or("limit")?, &key);
    // One rejection counted: "<blocked_until> <count> <first_at> <queue_until>", first
    // at BASE, no reservation queued.
    let base_us = BASE.as_micros();
    assert_eq!(
        support::redis_server::cli(server.port(), &["GET", &record]),
        format!("0 1 {base_us} 0")
    );
    let ttl: i64 = support::redis_server::cli(server.port(), &["PTTL", &record]).parse()?;
    assert!(ttl > 0, "every key has a TTL: {ttl}");
    // The same hash tag as the state.
    let tag =
        |name: &str| name[name.find('{').unwrap_or(0)..=name.find('}').unwrap_or(0)].to_owned();
    assert_eq!(tag(&record), tag(&state));
    Ok(())
}

#[tokio::test]
async fn a_penalty_reaches_a_plan_caller_whose_state_was_swept_idle_on_redis() -> TestResult {
    support::plan_walk::a_penalty_reaches_a_plan_caller_whose_state_was_swept(|clock| {
        let (urls, cluster) = standalone();
        store(&urls, cluster, &unique_prefix("swept-plan")).with_clock(clock)
    })
    .await
}

/// Random walks of `check_with` under two or three plans (one over another period),
/// the limit's own checks and peeks, `penalize`, `reset`, `block`, a penalty box on
/// some walks and clock steps, on the memory store and on Redis with one injected
/// clock: every answer alike (the seed of a walk that differs is in the message).
/// Without the denial cache, equal; with it (the default), alike in admission and
/// blocks (a cached denial repeats an earlier denial's remaining and retry time).
#[tokio::test]
async fn memory_and_redis_answer_alike_for_penalize_reset_and_block_under_plans() {
    for (cache, compare) in [
        (0, Compare::Exact),
        (RedisStore::DEFAULT_DENIAL_CACHE_KEYS, Compare::Admission),
    ] {
        let redis = |clock: ManualClock| {
            let (urls, cluster) = standalone();
            store(&urls, cluster, &unique_prefix("plan-walk"))
                .denial_cache(cache)
                .with_clock(clock)
        };
        let differences = walks(
            (0x0c0f_fee5_eed5_0008, compare),
            28,
            150,
            tollgate::MemoryStore::with_clock,
            redis,
        )
        .await;
        assert!(
            differences.is_empty(),
            "denial cache {cache}: {} of 28 walks differ:\n{}",
            differences.len(),
            differences.join("\n")
        );
    }
}

/// One walk of the test above again, its steps and answers printed: set
/// `PLAN_WALK_SEED` (hex), `PLAN_WALK_TRACE=1`, and `PLAN_WALK_CACHE=1` for the
/// denial cache (the test does nothing without a seed).
#[tokio::test]
async fn one_plan_walk_again() {
    let Ok(seed) = std::env::var("PLAN_WALK_SEED") else {
        return;
    };
    let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("a hex seed");
    let cached = std::env::var_os("PLAN_WALK_CACHE").is_some();
    let compare = if cached {
        Compare::Admission
    } else {
        Compare::Exact
    };
    let redis = |clock: ManualClock| {
        let (urls, cluster) = standalone();
        store(&urls, cluster, &unique_prefix("plan-walk"))
            .denial_cache(if cached {
                RedisStore::DEFAULT_DENIAL_CACHE_KEYS
            } else {
                0
            })
            .with_clock(clock)
    };
    let walked = walk(
        (seed, compare),
        150,
        tollgate::MemoryStore::with_clock,
        redis,
    )
    .await;
    assert!(walked.is_ok(), "{}", walked.err().unwrap_or_default());
}
