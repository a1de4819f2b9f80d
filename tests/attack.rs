//! Attacks on the promises of issues 23 and 24 (one caller, one record; cancel-safe
//! waiting, held requests, leases, in-flight slots, fair holding), through the public
//! API only, counted exactly against each documented bound.
//!
//! Tests that expose a broken promise are `#[ignore = "BROKEN: …"]` and fail when run:
//!
//! ```text
//! cargo test --all-features --test attack -- --ignored
//! ```

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Quota};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const BASE: Duration = Duration::from_secs(1_699_920_000);
const HOUR: Duration = Duration::from_secs(3_600);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn limiter_on(store: impl Store, limits: impl IntoIterator<Item = Limit>) -> Limiter {
    let mut builder = Limiter::builder();
    for limit in limits {
        builder = builder.limit(limit);
    }
    builder.store(store).build().expect("limiter")
}

/// GCRA 10/s with burst 1: places are T = 100 ms apart.
fn spaced(algorithm: Algorithm) -> Limit {
    Limit::new("wait", Quota::per_second(10).with_burst(1).expect("burst"))
        .expect("limit")
        .algorithm(algorithm)
        .max_delay(Duration::from_secs(10))
}

/// The instants (µs from the start) of places still ahead, sorted.
fn too_close(places: &[u64], t_us: u64) -> Option<(u64, u64)> {
    let mut sorted = places.to_vec();
    sorted.sort_unstable();
    sorted
        .windows(2)
        .find(|w| w[1] - w[0] < t_us)
        .map(|w| (w[0], w[1]))
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("fits")
}

// ---------------------------------------------------------------------------------
// Reservations across a reset: give-backs of places reserved before the reset.
// ---------------------------------------------------------------------------------

/// Four places at 0, 100, 200, 300 ms; a reset; three new places (fresh quota: 0, 100,
/// 200 ms); then the three old places still ahead are cancelled. The next reservation
/// must not land on a place already given (the new ones at 0..200 ms), and every place
/// reserved after the reset must stay T apart.
async fn give_backs_after_a_reset(
    store: impl Store,
    algorithm: Algorithm,
) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let limiter = limiter_on(store, [spaced(algorithm)]);
    let key = Key::from("victim");
    let wait = Duration::from_secs(5);
    let mut old = Vec::new();
    for _ in 0..4 {
        old.push(limiter.reserve("wait", &key, 1, wait).await?);
    }
    let old_at: Vec<u64> = old.iter().map(|d| us(d.delay)).collect();
    assert_eq!(old_at, [0, 100_000, 200_000, 300_000], "{algorithm}");
    limiter.reset("wait", &key).await?;
    let mut new_at = Vec::new();
    for _ in 0..3 {
        let d = limiter.reserve("wait", &key, 1, wait).await?;
        assert!(d.allowed);
        new_at.push(us(d.delay));
    }
    // The old places given back, latest first (as clients that leave in any order).
    for d in old[1..].iter().rev() {
        limiter.refund_charge(d, &key, 1).await?;
    }
    for _ in 0..3 {
        let d = limiter.reserve("wait", &key, 1, wait).await?;
        assert!(d.allowed);
        new_at.push(us(d.delay));
    }
    let close = too_close(&new_at, 100_000);
    eprintln!("{algorithm}: places reserved after the reset {new_at:?}");
    Ok(close.map(|_| format!("{algorithm}: places reserved after the reset {new_at:?}")))
}

#[tokio::test]
async fn old_places_given_back_after_a_reset_never_double_book_new_places_on_memory() -> TestResult
{
    let mut broken = Vec::new();
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::TokenBucket,
    ] {
        let clock = ManualClock::new(BASE);
        broken.extend(give_backs_after_a_reset(MemoryStore::with_clock(clock), algorithm).await?);
    }
    assert!(broken.is_empty(), "{broken:#?}");
    Ok(())
}

// ---------------------------------------------------------------------------------
// A blocked key admits nothing: reserve / until_ready / plan variants.
// ---------------------------------------------------------------------------------

async fn reserve_on_a_blocked_key(store: impl Store, algorithm: Algorithm) -> TestResult {
    let limit = Limit::new("api", Quota::per_minute(100))?.algorithm(algorithm);
    let limiter = limiter_on(store, [limit]);
    let key = Key::from("mallory");
    let plan_same = Quota::per_minute(1_000);
    let plan_other = Quota::per_hour(10_000);
    limiter.block("api", &key, HOUR).await?;
    let day = Duration::from_secs(86_400);
    for (what, d) in [
        ("reserve", limiter.reserve("api", &key, 1, day).await?),
        (
            "reserve_with same period",
            limiter.reserve_with("api", &key, 1, plan_same, day).await?,
        ),
        (
            "reserve_with other period",
            limiter
                .reserve_with("api", &key, 1, plan_other, day)
                .await?,
        ),
    ] {
        // Either refused, or its place is at or after the block's end.
        assert!(
            !d.allowed || d.delay >= HOUR,
            "{algorithm}: {what} on a key blocked for 1 h: {d:?}"
        );
    }
    for (what, d) in [
        (
            "reserve short",
            limiter.reserve("api", &key, 1, ms(10)).await?,
        ),
        (
            "reserve_with short",
            limiter
                .reserve_with("api", &key, 1, plan_other, ms(10))
                .await?,
        ),
    ] {
        assert!(
            !d.allowed,
            "{algorithm}: {what} admitted while blocked: {d:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_blocked_key_gets_no_place_before_its_block_ends_on_memory() -> TestResult {
    for algorithm in ALL {
        let clock = ManualClock::new(BASE);
        reserve_on_a_blocked_key(MemoryStore::with_clock(clock), algorithm).await?;
    }
    Ok(())
}

const ALL: [Algorithm; 7] = support::every_algorithm(5);

#[allow(dead_code)]
fn admitted(decisions: &[Decision]) -> usize {
    decisions.iter().filter(|d| d.allowed).count()
}

// ---------------------------------------------------------------------------------
// A flood of new keys against a key with pending reservations (memory store bounds).
// ---------------------------------------------------------------------------------

/// "api" 5/min; the victim (an attacker's own key) spends its 5 and reserves 5 more
/// places ahead, then `flood` new keys spend their whole quota each. Returns how many
/// of 10 plain checks of the victim are admitted right after: its quota and its
/// queue are both spoken for, so the bound is 0.
async fn admitted_after_a_flood_over_pending_reservations(
    algorithm: Algorithm,
    max_keys: usize,
    flood: usize,
) -> Result<usize, Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE + Duration::from_secs(30));
    let store = MemoryStore::with_clock(clock.clone()).max_keys(max_keys)?;
    let limit = Limit::new("api", Quota::per_minute(5))?
        .algorithm(algorithm)
        .max_delay(Duration::from_secs(600));
    let limiter = limiter_on(store, [limit]);
    let victim = Key::from("victim");
    let minutes = Duration::from_secs(600);
    assert!(
        limiter.check("api", &victim, 5).await?.allowed,
        "{algorithm}"
    );
    for _ in 0..5 {
        let d = limiter.reserve("api", &victim, 1, minutes).await?;
        assert!(d.allowed && d.delay > Duration::ZERO, "{algorithm}: {d:?}");
    }
    clock.advance(ms(1));
    for i in 0..flood {
        let key = Key::from(format!("flood-{i}").as_str());
        limiter.check("api", &key, 5).await?;
    }
    let mut admitted = 0;
    for _ in 0..10 {
        if limiter.check("api", &victim, 1).await?.allowed {
            admitted += 1;
        }
    }
    Ok(admitted)
}

#[tokio::test]
async fn a_flood_of_new_keys_never_frees_a_key_with_pending_reservations_one_key_store()
-> TestResult {
    let mut broken = Vec::new();
    for algorithm in ALL {
        let n = admitted_after_a_flood_over_pending_reservations(algorithm, 1, 1).await?;
        if n > 0 {
            broken.push(format!("{algorithm}: {n} of 10 admitted"));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    Ok(())
}

#[tokio::test]
async fn a_flood_of_new_keys_never_frees_a_key_with_pending_reservations() -> TestResult {
    let mut broken = Vec::new();
    for algorithm in ALL {
        let n = admitted_after_a_flood_over_pending_reservations(algorithm, 256, 4_000).await?;
        if n > 0 {
            broken.push(format!("{algorithm}: {n} of 10 admitted"));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    Ok(())
}

// ---------------------------------------------------------------------------------
// Receipts from before a reset: a fresh quota after a reset admits at most the quota.
// ---------------------------------------------------------------------------------

/// 5/min (burst 5): five requests charged one by one, a reset, a fresh quota of 5
/// spent, then the five old receipts handed back. Returns how many of 10 further
/// requests are admitted: the fresh quota is spent, so the bound is 0.
async fn admitted_after_old_receipts_come_back(
    store: impl Store,
    algorithm: Algorithm,
) -> Result<usize, Box<dyn std::error::Error>> {
    let limit = Limit::new("api", Quota::per_minute(5))?.algorithm(algorithm);
    let limiter = limiter_on(store, [limit]);
    let key = Key::from("mallory");
    let mut old = Vec::new();
    for _ in 0..5 {
        let d = limiter.check("api", &key, 1).await?;
        assert!(d.allowed);
        old.push(d);
    }
    limiter.reset("api", &key).await?;
    for _ in 0..5 {
        assert!(limiter.check("api", &key, 1).await?.allowed, "{algorithm}");
    }
    for d in &old {
        limiter.refund_charge(d, &key, 1).await?;
    }
    let mut admitted = 0;
    for _ in 0..10 {
        if limiter.check("api", &key, 1).await?.allowed {
            admitted += 1;
        }
    }
    Ok(admitted)
}

#[tokio::test]
async fn receipts_from_before_a_reset_give_nothing_back_on_memory() -> TestResult {
    let mut broken = Vec::new();
    for algorithm in ALL {
        let clock = ManualClock::new(BASE + Duration::from_secs(10));
        let n = admitted_after_old_receipts_come_back(MemoryStore::with_clock(clock), algorithm)
            .await?;
        if n > 0 {
            broken.push(format!(
                "{algorithm}: {n} of 10 admitted past a spent fresh quota"
            ));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    Ok(())
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use support::redis_server::{shared_server, unique_prefix};
    use tollgate::RedisStore;

    pub(super) fn store(clock: &ManualClock, cache: bool) -> RedisStore {
        let store = RedisStore::from_url(&shared_server().url())
            .expect("url")
            .prefix(&unique_prefix("attack"))
            .deadline(Duration::from_secs(10))
            .expect("deadline")
            .with_clock(clock.clone());
        if cache { store } else { store.denial_cache(0) }
    }

    fn cluster_store(clock: &ManualClock) -> RedisStore {
        RedisStore::from_cluster_urls(support::redis_cluster::shared_cluster().urls())
            .expect("urls")
            .prefix(&unique_prefix("attack"))
            .deadline(Duration::from_secs(10))
            .expect("deadline")
            .with_clock(clock.clone())
    }

    #[tokio::test]
    async fn receipts_from_before_a_reset_give_nothing_back_on_the_cluster() -> TestResult {
        let mut broken = Vec::new();
        for algorithm in ALL {
            let clock = ManualClock::new(BASE + Duration::from_secs(10));
            let n = admitted_after_old_receipts_come_back(cluster_store(&clock), algorithm).await?;
            if n > 0 {
                broken.push(format!(
                    "{algorithm}: {n} of 10 admitted past a spent fresh quota"
                ));
            }
        }
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
            Algorithm::TokenBucket,
        ] {
            let clock = ManualClock::new(BASE);
            broken.extend(give_backs_after_a_reset(cluster_store(&clock), algorithm).await?);
        }
        assert!(broken.is_empty(), "{broken:#?}");
        Ok(())
    }

    #[tokio::test]
    async fn old_places_given_back_after_a_reset_never_double_book_new_places_on_redis()
    -> TestResult {
        let mut broken = Vec::new();
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
            Algorithm::TokenBucket,
        ] {
            let clock = ManualClock::new(BASE);
            broken.extend(give_backs_after_a_reset(store(&clock, true), algorithm).await?);
        }
        assert!(broken.is_empty(), "{broken:#?}");
        Ok(())
    }

    #[tokio::test]
    async fn a_blocked_key_gets_no_place_before_its_block_ends_on_redis() -> TestResult {
        for algorithm in ALL {
            let clock = ManualClock::new(BASE);
            reserve_on_a_blocked_key(store(&clock, true), algorithm).await?;
            let clock = ManualClock::new(BASE);
            reserve_on_a_blocked_key(store(&clock, false), algorithm).await?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn receipts_from_before_a_reset_give_nothing_back_on_redis() -> TestResult {
        let mut broken = Vec::new();
        for algorithm in ALL {
            let clock = ManualClock::new(BASE + Duration::from_secs(10));
            let n = admitted_after_old_receipts_come_back(store(&clock, true), algorithm).await?;
            if n > 0 {
                broken.push(format!(
                    "{algorithm}: {n} of 10 admitted past a spent fresh quota"
                ));
            }
        }
        assert!(broken.is_empty(), "{broken:#?}");
        Ok(())
    }
}

// ---------------------------------------------------------------------------------
// Memory and Redis give identical decisions: random walks over every operation.
// ---------------------------------------------------------------------------------

#[cfg(feature = "redis")]
fn walk_limit(algorithm: Algorithm) -> Limit {
    use tollgate::Penalty;
    let fluid = matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    );
    let quota = if fluid {
        Quota::per_second(10).with_burst(3).expect("burst")
    } else {
        Quota::per_second(10)
    };
    Limit::new("walk", quota)
        .expect("limit")
        .algorithm(algorithm)
        .max_delay(Duration::from_secs(5))
        .penalty(
            Penalty::after(4)
                .within(Duration::from_secs(1))
                .block_for(Duration::from_secs(2)),
        )
}

/// One walk of operations on two limiters; the first step whose decisions differ.
#[cfg(feature = "redis")]
#[allow(clippy::too_many_arguments, clippy::too_many_lines)]
async fn differential_walk(
    memory: &Limiter,
    redis: &Limiter,
    clock: &ManualClock,
    algorithm: Algorithm,
    seed: u64,
    steps: usize,
    other_periods: bool,
    plans: bool,
) -> Result<Option<String>, Box<dyn std::error::Error>> {
    let fluid = matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    );
    let same_period = if fluid {
        Quota::per_second(20).with_burst(5)?
    } else {
        Quota::per_second(20)
    };
    let other_period = Quota::per_minute(100);
    let key = Key::from("walker");
    let mut walk = support::rng::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut receipts: Vec<Decision> = Vec::new();
    let mut log = Vec::new();
    for step in 0..steps {
        let mut what = walk.below(16);
        if !other_periods && (what == 4 || what == 13) {
            what = 0;
        }
        if !plans && (what == 3 || what == 4 || what == 7 || what == 13) {
            what = 5;
        }
        let cost = 1 + u32::try_from(walk.below(3))?;
        let wait = ms(100 * walk.below(30));
        let (op, m, r) = match what {
            0..=2 => (
                format!("check {cost}"),
                memory.check("walk", &key, cost).await?,
                redis.check("walk", &key, cost).await?,
            ),
            3 => (
                format!("check_with same-period {cost}"),
                memory.check_with("walk", &key, cost, same_period).await?,
                redis.check_with("walk", &key, cost, same_period).await?,
            ),
            4 => (
                format!("check_with other-period {cost}"),
                memory.check_with("walk", &key, cost, other_period).await?,
                redis.check_with("walk", &key, cost, other_period).await?,
            ),
            5 | 6 => (
                format!("reserve {cost} within {wait:?}"),
                memory.reserve("walk", &key, cost, wait).await?,
                redis.reserve("walk", &key, cost, wait).await?,
            ),
            7 => (
                format!("reserve_with same-period {cost} within {wait:?}"),
                memory
                    .reserve_with("walk", &key, cost, same_period, wait)
                    .await?,
                redis
                    .reserve_with("walk", &key, cost, same_period, wait)
                    .await?,
            ),
            8 => {
                if receipts.is_empty() {
                    continue;
                }
                let i = usize::try_from(walk.below(receipts.len() as u64))?;
                let d = receipts.remove(i);
                memory.refund_charge(&d, &key, cost).await?;
                redis.refund_charge(&d, &key, cost).await?;
                log.push(format!("{step}: refund_charge {cost} of {d:?}"));
                continue;
            }
            9 => {
                memory.refund("walk", &key, cost).await?;
                redis.refund("walk", &key, cost).await?;
                log.push(format!("{step}: refund {cost}"));
                continue;
            }
            10 => {
                let d = ms(500 * walk.below(5));
                (
                    format!("block {d:?}"),
                    memory.block("walk", &key, d).await?,
                    redis.block("walk", &key, d).await?,
                )
            }
            11 => {
                if walk.below(3) != 0 {
                    continue;
                }
                memory.reset("walk", &key).await?;
                redis.reset("walk", &key).await?;
                log.push(format!("{step}: reset"));
                continue;
            }
            12 => {
                let n = 1 + u32::try_from(walk.below(20))?;
                (
                    format!("penalize {n}"),
                    memory.penalize("walk", &key, n).await?,
                    redis.penalize("walk", &key, n).await?,
                )
            }
            13 => (
                "peek_with other-period".to_owned(),
                memory.peek_with("walk", &key, other_period).await?,
                redis.peek_with("walk", &key, other_period).await?,
            ),
            _ => {
                let by = walk.below(400_000);
                clock.advance(Duration::from_micros(by));
                log.push(format!("{step}: advance {by} µs"));
                continue;
            }
        };
        log.push(format!("{step}: {op} -> {m:?}"));
        if m != r {
            let tail =
                log[log
                    .len()
                    .saturating_sub(if std::env::var_os("ATTACK_FULL").is_some() {
                        1000
                    } else {
                        12
                    })..]
                    .join("\n");
            return Ok(Some(format!(
                "{algorithm} seed {seed} step {step}: {op}\n memory {m:?}\n redis  {r:?}\nlast steps:\n{tail}"
            )));
        }
        if m.receipt().is_some() {
            receipts.push(m);
        }
        let (pm, pr) = (
            memory.peek("walk", &key).await?,
            redis.peek("walk", &key).await?,
        );
        if pm != pr {
            let tail =
                log[log
                    .len()
                    .saturating_sub(if std::env::var_os("ATTACK_FULL").is_some() {
                        1000
                    } else {
                        12
                    })..]
                    .join("\n");
            return Ok(Some(format!(
                "{algorithm} seed {seed} step {step}: peek after {op}\n memory {pm:?}\n redis  {pr:?}\nlast steps:\n{tail}"
            )));
        }
    }
    Ok(None)
}

#[cfg(feature = "redis")]
async fn differential_walks(
    seeds: std::ops::RangeInclusive<u64>,
    other_periods: bool,
    plans: bool,
) -> Vec<String> {
    let mut broken = Vec::new();
    for algorithm in ALL {
        for seed in seeds.clone() {
            let clock = ManualClock::new(BASE);
            let memory = limiter_on(
                MemoryStore::with_clock(clock.clone()),
                [walk_limit(algorithm)],
            );
            let redis = limiter_on(redis::store(&clock, false), [walk_limit(algorithm)]);
            match differential_walk(
                &memory,
                &redis,
                &clock,
                algorithm,
                seed,
                150,
                other_periods,
                plans,
            )
            .await
            {
                Ok(None) => {}
                Ok(Some(diff)) => {
                    broken.push(diff);
                    break;
                }
                Err(e) => {
                    broken.push(format!("{algorithm} seed {seed}: error {e}"));
                    break;
                }
            }
        }
    }
    broken
}

/// Runs `differential_walks` and fails, printing each disagreement, unless memory and
/// Redis answered every walk alike.
#[cfg(feature = "redis")]
async fn assert_walks_agree(
    seeds: std::ops::RangeInclusive<u64>,
    other_periods: bool,
    plans: bool,
) {
    let broken = differential_walks(seeds, other_periods, plans).await;
    for b in &broken {
        eprintln!("{b}\n");
    }
    assert!(broken.is_empty(), "{} algorithms disagree", broken.len());
}

#[cfg(feature = "redis")]
#[tokio::test]
#[ignore = "KNOWN (RELIABILITY.md, Known gaps): memory and Redis still disagree on rare walks mixing reset, refunds by receipt in the reset's instant, plans and reservations"]
async fn memory_and_redis_agree_on_random_walks_of_every_operation() {
    assert_walks_agree(1..=12, true, true).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
#[ignore = "KNOWN (RELIABILITY.md, Known gaps): with same-period plans of another count, reservations given back after a re-count differ by a fraction of T"]
async fn memory_and_redis_agree_on_random_walks_within_one_period() {
    assert_walks_agree(1..=12, false, true).await;
}

/// A plan caller over another period spends 13 of 100/min; a reset through the limit;
/// what the plan caller has left.
async fn plan_usage_after_a_reset(
    store: impl Store,
) -> Result<Decision, Box<dyn std::error::Error>> {
    let limiter = limiter_on(store, [Limit::new("api", Quota::per_second(10))?]);
    let key = Key::from("pro");
    let plan = Quota::per_minute(100);
    assert!(limiter.check_with("api", &key, 13, plan).await?.allowed);
    limiter.check("api", &key, 1).await?;
    limiter.reset("api", &key).await?;
    Ok(limiter.peek_with("api", &key, plan).await?)
}

#[tokio::test]
async fn a_reset_forgets_a_plan_callers_usage_over_another_period_on_memory() -> TestResult {
    let d = plan_usage_after_a_reset(MemoryStore::with_clock(ManualClock::new(BASE))).await?;
    assert_eq!(d.remaining, 100, "{d:?}");
    Ok(())
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_reset_forgets_a_plan_callers_usage_over_another_period_on_redis() -> TestResult {
    let clock = ManualClock::new(BASE);
    let d = plan_usage_after_a_reset(redis::store(&clock, false)).await?;
    assert_eq!(d.remaining, 100, "{d:?}");
    Ok(())
}

/// "api" 100/min; the operator penalizes a key by 1000 (ten minutes of its quota);
/// then `before` ran or not; how many of 10 requests a plan caller over another
/// period (1000/h) gets admitted. "penalize through the limit reaches its plan
/// callers": the bound is 0.
async fn plan_admitted_after_penalize(
    store: impl Store,
    seen_before: bool,
) -> Result<usize, Box<dyn std::error::Error>> {
    let limiter = limiter_on(store, [Limit::new("api", Quota::per_minute(100))?]);
    let key = Key::from("pro");
    let plan = Quota::per_hour(1_000);
    if seen_before {
        limiter.check_with("api", &key, 1, plan).await?;
        limiter.reset("api", &key).await?;
    }
    let d = limiter.penalize("api", &key, 1_000).await?;
    assert_eq!(d.remaining, 0);
    let mut admitted = 0;
    for _ in 0..10 {
        if limiter.check_with("api", &key, 1, plan).await?.allowed {
            admitted += 1;
        }
    }
    Ok(admitted)
}

/// The documented residual: `penalize` reaches the periods a limit has been decided
/// under (memory: in the key's shard; Redis: by this process); a plan caller under a
/// period never seen starts without the debt. `block` reaches it whatever its plan.
#[tokio::test]
async fn penalize_reaches_periods_seen_and_block_reaches_every_plan_on_memory() -> TestResult {
    let n = plan_admitted_after_penalize(MemoryStore::with_clock(ManualClock::new(BASE)), false)
        .await?;
    assert_eq!(
        n, 10,
        "a period never decided under starts without the debt"
    );
    let limiter = limiter_on(
        MemoryStore::with_clock(ManualClock::new(BASE)),
        [Limit::new("api", Quota::per_minute(100))?],
    );
    let key = Key::from("pro");
    limiter
        .block("api", &key, Duration::from_secs(3600))
        .await?;
    assert!(
        !limiter
            .check_with("api", &key, 1, Quota::per_hour(1_000))
            .await?
            .allowed
    );
    Ok(())
}

#[tokio::test]
async fn penalize_after_a_reset_reaches_a_plan_caller_on_memory() -> TestResult {
    let n =
        plan_admitted_after_penalize(MemoryStore::with_clock(ManualClock::new(BASE)), true).await?;
    assert_eq!(n, 0, "{n} of 10 admitted");
    Ok(())
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn penalize_reaches_periods_seen_and_block_reaches_every_plan_on_redis() -> TestResult {
    let clock = ManualClock::new(BASE);
    let n = plan_admitted_after_penalize(redis::store(&clock, false), false).await?;
    assert_eq!(
        n, 10,
        "a period never decided under starts without the debt"
    );
    let limiter = limiter_on(
        redis::store(&clock, false),
        [Limit::new("api", Quota::per_minute(100))?],
    );
    let key = Key::from("pro");
    limiter
        .block("api", &key, Duration::from_secs(3600))
        .await?;
    assert!(
        !limiter
            .check_with("api", &key, 1, Quota::per_hour(1_000))
            .await?
            .allowed
    );
    Ok(())
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn penalize_after_a_reset_reaches_a_plan_caller_on_redis() -> TestResult {
    let clock = ManualClock::new(BASE);
    let n = plan_admitted_after_penalize(redis::store(&clock, false), true).await?;
    assert_eq!(n, 0, "{n} of 10 admitted");
    Ok(())
}

#[cfg(feature = "redis")]
#[tokio::test]
#[ignore = "KNOWN (RELIABILITY.md, Known gaps): memory and Redis still disagree on rare walks mixing reset, same-instant refunds and reservations"]
async fn memory_and_redis_agree_on_random_walks_under_the_limits_own_quota() {
    assert_walks_agree(1..=24, false, false).await;
}

/// GCRA 10/s, burst 1 (T = 100 ms): one request now, places at +100 and +200 ms
/// reserved; an operator blocks the key and lifts the block (`lift`), or leaves it;
/// then plain requests at once. Returns the instants (µs from now) of every admitted
/// request and reserved place: with burst 1, no two closer than T.
async fn places_after_a_lifted_block(
    store: impl Store,
    algorithm: Algorithm,
    how: u8,
) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let limit = spaced(algorithm).penalty(
        tollgate::Penalty::after(4)
            .within(Duration::from_secs(1))
            .block_for(Duration::from_secs(2)),
    );
    let limiter = limiter_on(store, [limit]);
    let key = Key::from("k");
    let mut at = Vec::new();
    let d = limiter.check("wait", &key, 1).await?;
    assert!(d.allowed);
    at.push(us(d.delay));
    for _ in 0..2 {
        let d = limiter
            .reserve("wait", &key, 1, Duration::from_secs(5))
            .await?;
        assert!(d.allowed);
        at.push(us(d.delay));
    }
    match how {
        0 => {
            limiter.block("wait", &key, Duration::from_secs(1)).await?;
            limiter.block("wait", &key, Duration::ZERO).await?;
        }
        1 => {
            limiter.penalize("wait", &key, 1).await?;
        }
        3 => {
            for _ in 0..4 {
                assert!(!limiter.check("wait", &key, 1).await?.allowed);
            }
            assert!(limiter.peek("wait", &key).await?.blocked_for.is_some());
            limiter.block("wait", &key, Duration::ZERO).await?;
        }
        4 => {
            for _ in 0..4 {
                assert!(!limiter.check("wait", &key, 1).await?.allowed);
            }
        }
        _ => {
            limiter.refund("wait", &key, 1).await?;
        }
    }
    for _ in 0..3 {
        let d = limiter.check("wait", &key, 1).await?;
        if d.allowed {
            at.push(us(d.delay));
        }
    }
    Ok(at)
}

/// A lifted block, a penalty, an operator's refund or a tripped penalty box
/// (lifted or not) never lets a plain request jump places already reserved, and both
/// stores answer alike.
#[tokio::test]
async fn operators_calls_never_let_a_request_jump_reserved_places() -> TestResult {
    for how in 0..5 {
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
            Algorithm::TokenBucket,
        ] {
            let clock = ManualClock::new(BASE);
            let m =
                places_after_a_lifted_block(MemoryStore::with_clock(clock), algorithm, how).await?;
            assert_eq!(too_close(&m, 100_000), None, "{how} {algorithm}: {m:?}");
            #[cfg(feature = "redis")]
            {
                let clock = ManualClock::new(BASE);
                let r = places_after_a_lifted_block(redis::store(&clock, false), algorithm, how)
                    .await?;
                assert_eq!(m, r, "{how} {algorithm}");
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------
// Shrunk walks: the smallest sequence of operations on which the stores disagree.
// ---------------------------------------------------------------------------------

#[cfg(feature = "redis")]
#[derive(Clone, Copy, Debug)]
enum Op {
    Check(u32),
    Reserve(u32, u64),
    /// Gives back the i-th (mod count) receipt still held, `cost` of it.
    RefundCharge(u64, u32),
    Refund(u32),
    Block(u64),
    Reset,
    Penalize(u32),
    Advance(u64),
    /// Under a plan of the same period (20/s, burst 5 where it takes one).
    CheckWith(u32),
    ReserveWith(u32, u64),
}

#[cfg(feature = "redis")]
fn same_period_plan(algorithm: Algorithm) -> Quota {
    if matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
    ) {
        Quota::per_second(20).with_burst(5).expect("burst")
    } else {
        Quota::per_second(20)
    }
}

#[cfg(feature = "redis")]
fn ops_of(seed: u64, steps: usize, plans: bool) -> Vec<Op> {
    let mut walk = support::rng::Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..steps)
        .map(|_| {
            let cost = 1 + u32::try_from(walk.below(3)).expect("small");
            match walk.below(if plans { 13 } else { 11 }) {
                11 => Op::CheckWith(cost),
                12 => Op::ReserveWith(cost, 100 * walk.below(30)),
                0..=2 => Op::Check(cost),
                3 | 4 => Op::Reserve(cost, 100 * walk.below(30)),
                5 => Op::RefundCharge(walk.below(64), cost),
                6 => Op::Refund(cost),
                7 => Op::Block(500 * walk.below(5)),
                8 => {
                    if walk.below(3) == 0 {
                        Op::Reset
                    } else {
                        Op::Check(cost)
                    }
                }
                9 => Op::Penalize(1 + u32::try_from(walk.below(20)).expect("small")),
                _ => Op::Advance(walk.below(400_000)),
            }
        })
        .collect()
}

/// Runs `ops` on one limiter; every decision (and a peek after each step).
#[cfg(feature = "redis")]
async fn run_ops(
    limiter: &Limiter,
    clock: &ManualClock,
    ops: &[Op],
    plan: Quota,
) -> Vec<Option<Decision>> {
    let key = Key::from("shrunk");
    let mut held: Vec<Decision> = Vec::new();
    let mut out = Vec::new();
    for op in ops {
        let d = match *op {
            Op::Check(c) => Some(limiter.check("walk", &key, c).await.expect("check")),
            Op::Reserve(c, w) => Some(
                limiter
                    .reserve("walk", &key, c, ms(w))
                    .await
                    .expect("reserve"),
            ),
            Op::RefundCharge(i, c) => {
                if !held.is_empty() {
                    let d = held.remove(usize::try_from(i).expect("small") % held.len());
                    limiter.refund_charge(&d, &key, c).await.expect("refund");
                }
                None
            }
            Op::Refund(c) => {
                limiter.refund("walk", &key, c).await.expect("refund");
                None
            }
            Op::Block(b) => Some(limiter.block("walk", &key, ms(b)).await.expect("block")),
            Op::Reset => {
                limiter.reset("walk", &key).await.expect("reset");
                None
            }
            Op::Penalize(n) => Some(limiter.penalize("walk", &key, n).await.expect("penalize")),
            Op::Advance(by) => {
                clock.advance(Duration::from_micros(by));
                None
            }
            Op::CheckWith(c) => Some(
                limiter
                    .check_with("walk", &key, c, plan)
                    .await
                    .expect("check"),
            ),
            Op::ReserveWith(c, w) => Some(
                limiter
                    .reserve_with("walk", &key, c, plan, ms(w))
                    .await
                    .expect("reserve"),
            ),
        };
        if let Some(d) = d.as_ref().filter(|d| d.receipt().is_some()) {
            held.push(d.clone());
        }
        out.push(d);
        out.push(Some(limiter.peek("walk", &key).await.expect("peek")));
    }
    out
}

#[cfg(feature = "redis")]
async fn disagree(algorithm: Algorithm, ops: &[Op]) -> Option<(usize, Decision, Decision)> {
    let clock = ManualClock::new(BASE);
    let memory = limiter_on(
        MemoryStore::with_clock(clock.clone()),
        [walk_limit(algorithm)],
    );
    let m = run_ops(&memory, &clock, ops, same_period_plan(algorithm)).await;
    let clock = ManualClock::new(BASE);
    let redis = limiter_on(redis::store(&clock, false), [walk_limit(algorithm)]);
    let r = run_ops(&redis, &clock, ops, same_period_plan(algorithm)).await;
    m.into_iter()
        .zip(r)
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i / 2, a.expect("a decision"), b.expect("a decision")))
}

/// Deletes operations one at a time while the stores still disagree.
#[cfg(feature = "redis")]
async fn shrink(algorithm: Algorithm, mut ops: Vec<Op>) -> Vec<Op> {
    loop {
        let mut smaller = false;
        let mut i = 0;
        while i < ops.len() {
            let mut fewer = ops.clone();
            fewer.remove(i);
            if disagree(algorithm, &fewer).await.is_some() {
                ops = fewer;
                smaller = true;
            } else {
                i += 1;
            }
        }
        if !smaller {
            return ops;
        }
    }
}

#[cfg(feature = "redis")]
#[tokio::test]
#[ignore = "KNOWN (RELIABILITY.md, Known gaps): prints the smallest walks on which memory and Redis still disagree (ATTACK_PLANS=1 adds same-period plans)"]
async fn shrunk_disagreements() {
    let mut found = 0;
    let plans = std::env::var_os("ATTACK_PLANS").is_some();
    for algorithm in ALL {
        for seed in 1..=40 {
            let ops = ops_of(seed, 150, plans);
            if let Some((at, ..)) = disagree(algorithm, &ops).await {
                let ops = shrink(algorithm, ops[..=at].to_vec()).await;
                let (step, m, r) = disagree(algorithm, &ops).await.expect("still");
                eprintln!(
                    "{algorithm} seed {seed}: {ops:?}\n  step {step}\n  memory {m:?}\n  redis  {r:?}\n"
                );
                found += 1;
                break;
            }
        }
    }
    assert_eq!(found, 0, "algorithms on which memory and Redis disagree");
}

/// Replays `ops` at one frozen instant (nothing advances the clock) on a limit of
/// 10/s (burst 3 for the fluid algorithms), then ten plain requests of cost 1;
/// returns the cost admitted at that instant or reserved within the first second
/// (penalties excluded, operator refunds not subtracted).
#[cfg(feature = "redis")]
async fn admitted_in_the_first_second(
    store: impl Store,
    algorithm: Algorithm,
    ops: &[Op],
) -> Result<u64, Box<dyn std::error::Error>> {
    let limit = Limit::new(
        "walk",
        if matches!(algorithm, Algorithm::TokenBucket | Algorithm::Gcra) {
            Quota::per_second(10).with_burst(3)?
        } else {
            Quota::per_second(10)
        },
    )?
    .algorithm(algorithm)
    .max_delay(Duration::from_secs(5));
    let limiter = limiter_on(store, [limit]);
    let key = Key::from("k");
    let mut total = 0;
    let mut count = |d: &Decision, cost: u32| {
        if d.allowed && d.delay < Duration::from_secs(1) {
            total += u64::from(cost);
        }
    };
    for op in ops {
        match *op {
            Op::Check(c) => count(&limiter.check("walk", &key, c).await?, c),
            Op::Reserve(c, w) => count(&limiter.reserve("walk", &key, c, ms(w)).await?, c),
            Op::Refund(c) => limiter.refund("walk", &key, c).await?,
            Op::Block(b) => {
                limiter.block("walk", &key, ms(b)).await?;
            }
            Op::Penalize(n) => {
                limiter.penalize("walk", &key, n).await?;
            }
            _ => unreachable!("not at one instant"),
        }
    }
    for _ in 0..10 {
        count(&limiter.check("walk", &key, 1).await?, 1);
    }
    Ok(total)
}

/// Fixed window 10/s: reservations that fill the window and queue into the next,
/// then an operator's `block(0)` (lifting a block that was never set); in the first
/// window at most 10 may be admitted or reserved.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_zero_block_never_refills_a_full_window() -> TestResult {
    let ops = [
        Op::Reserve(2, 200),
        Op::Penalize(2),
        Op::Reserve(1, 1200),
        Op::Check(1),
        Op::Reserve(3, 2900),
        Op::Reserve(2, 1600),
        Op::Block(0),
        Op::Check(3),
    ];
    let mut broken = Vec::new();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowCounters { buckets: 5 },
        Algorithm::SlidingWindowLog,
    ] {
        let clock = ManualClock::new(BASE);
        let m =
            admitted_in_the_first_second(MemoryStore::with_clock(clock), algorithm, &ops).await?;
        let clock = ManualClock::new(BASE);
        let r = admitted_in_the_first_second(redis::store(&clock, false), algorithm, &ops).await?;
        eprintln!("{algorithm}: memory {m}, redis {r}");
        if m > 10 || r > 10 {
            broken.push(format!(
                "{algorithm}: memory {m}, redis {r} in a 10/s window"
            ));
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
    Ok(())
}

/// Token bucket 10/s burst 3: `penalize(20)` (2 s of debt), a reservation of 2, an
/// operator's refund of 2, `block(0)`: nothing may pass at that instant.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_zero_block_never_forgives_a_penalty() -> TestResult {
    let ops = [
        Op::Penalize(20),
        Op::Reserve(2, 2900),
        Op::Refund(2),
        Op::Block(0),
    ];
    let clock = ManualClock::new(BASE);
    let m =
        admitted_in_the_first_second(MemoryStore::with_clock(clock), Algorithm::TokenBucket, &ops)
            .await?;
    let clock = ManualClock::new(BASE);
    let r = admitted_in_the_first_second(redis::store(&clock, false), Algorithm::TokenBucket, &ops)
        .await?;
    assert_eq!(
        (m, r),
        (0, 0),
        "admitted in the first second: memory {m}, redis {r}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------
// The layer over real TCP: wait mode, fair holding, in-flight slot waiting.
// ---------------------------------------------------------------------------------

mod layer {
    use super::*;
    use axum::Router;
    use axum::routing::get;
    use bytes::Bytes;
    use http::{Request, StatusCode};
    use http_body_util::Full;
    use std::sync::Arc;
    use support::http::Server;
    use tokio::io::AsyncWriteExt as _;
    use tokio::net::TcpStream;
    use tokio::sync::Semaphore;
    use tollgate::{Policy, RateLimitLayer, key};

    const DAY: Duration = Duration::from_secs(86_400);
    const HANG: Duration = Duration::from_secs(20);

    fn from(user: &str) -> Request<Full<Bytes>> {
        Request::get("/")
            .header("x-user", user)
            .body(Full::default())
            .expect("request")
    }

    async fn client(server: &Server, user: &str, extra: &str) -> TcpStream {
        let mut stream = TcpStream::connect(server.addr).await.expect("connect");
        let request = format!("GET / HTTP/1.1\r\nhost: localhost\r\nx-user: {user}\r\n{extra}\r\n");
        stream.write_all(request.as_bytes()).await.expect("send");
        stream
    }

    async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let started = std::time::Instant::now();
        while !done() {
            assert!(started.elapsed() < HANG, "still waiting: {what}");
            tokio::time::sleep(ms(5)).await;
        }
    }

    /// `in_flight_only(1)` in wait mode (30 s): a request holds the slot; a second
    /// waits for it and its client leaves; a third waits. When the first ends, the
    /// third is served at once (not after the leaver's slot times out, nor never).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_that_leaves_never_keeps_the_slot_from_the_next() {
        let gate = Arc::new(Semaphore::new(0));
        let handler_gate = gate.clone();
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::in_flight_only("reports", 1)
                    .expect("policy")
                    .key(key::header("x-user").expect("header"))
                    .wait(Duration::from_secs(30)),
            )
            .build()
            .expect("layer");
        let app = Router::new()
            .route(
                "/",
                get(move || {
                    let gate = handler_gate.clone();
                    async move {
                        gate.acquire().await.expect("open").forget();
                        "ok"
                    }
                }),
            )
            .layer(layer);
        let server = Arc::new(Server::start(app).await);
        let holder = {
            let server = server.clone();
            tokio::spawn(async move { server.send(from("alice")).await.status })
        };
        tokio::time::sleep(ms(200)).await;
        let leaver = client(&server, "alice", "").await;
        tokio::time::sleep(ms(200)).await;
        let next = {
            let server = server.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                (server.send(from("alice")).await.status, started.elapsed())
            })
        };
        tokio::time::sleep(ms(200)).await;
        drop(leaver);
        tokio::time::sleep(ms(200)).await;
        gate.add_permits(1); // the holder ends
        assert_eq!(holder.await.expect("holder"), StatusCode::OK);
        let started = std::time::Instant::now();
        gate.add_permits(1); // let the next one finish once it runs
        let (status, _) = tokio::time::timeout(HANG, next)
            .await
            .expect("the next waiter is served")
            .expect("task");
        assert_eq!(status, StatusCode::OK);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // Nothing leaked: one more request runs at once.
        gate.add_permits(1);
        let status = tokio::time::timeout(Duration::from_secs(5), server.send(from("alice")))
            .await
            .expect("served")
            .status;
        assert_eq!(status, StatusCode::OK);
    }

    /// A plan caller in wait mode (10/s on a 1/s limit, burst 1) is held under its
    /// own plan: four held requests take places 100 ms apart, not 1 s.
    #[tokio::test]
    async fn a_plan_caller_in_wait_mode_waits_under_its_own_quota() {
        let pro = Quota::per_second(10).with_burst(1).expect("burst");
        let base = Quota::per_second(1).with_burst(1).expect("burst");
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::new("api", base)
                    .expect("policy")
                    .key(key::header("x-user").expect("header"))
                    .quota_from(move |parts: &http::request::Parts| {
                        parts.headers.get("x-plan").map(|_| pro)
                    }),
            )
            .store(MemoryStore::with_clock(ManualClock::new(BASE)))
            .build()
            .expect("layer");
        let limiter = layer.limiter().clone();
        let layer = layer.wait(DAY);
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone());
        let server = Server::start(app).await;
        let mut clients = Vec::new();
        for _ in 0..5 {
            clients.push(client(&server, "pro", "x-plan: pro\r\n").await);
        }
        wait_until("four held", || layer.held() == 4).await;
        let (parts, ()) = Request::get("/")
            .header("x-user", "pro")
            .body(())
            .expect("request")
            .into_parts();
        let key = layer
            .policy("api")
            .and_then(|p| p.key_of(&parts))
            .expect("key");
        let d = limiter.peek_with("api", &key, pro).await.expect("peek");
        assert_eq!(d.reset_after, ms(500), "{d:?}");
        drop(clients);
        wait_until("dropped", || layer.held() == 0).await;
    }

    /// A leaky bucket with a deep queue (burst 1000, 1/s, `max_delay` 1 h), not in wait
    /// mode: one key's delayed requests are held too, and are bounded per key
    /// (`DEFAULT_MAX_HELD_PER_KEY`, 128).
    #[tokio::test]
    async fn one_key_holds_at_most_max_held_per_key_leaky_bucket_turns() {
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::new("queue", Quota::per_second(1).with_burst(1_000).expect("b"))
                    .expect("policy")
                    .algorithm(Algorithm::LeakyBucket)
                    .max_delay(HOUR)
                    .key(key::header("x-user").expect("header")),
            )
            .store(MemoryStore::with_clock(ManualClock::new(BASE)))
            .build()
            .expect("layer");
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone());
        let server = Arc::new(Server::start(app).await);
        let mut clients = Vec::new();
        for _ in 0..200 {
            clients.push(client(&server, "mallory", "").await);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held = layer.held();
        assert!(
            held <= RateLimitLayer::DEFAULT_MAX_HELD_PER_KEY,
            "{held} held for one key"
        );
        eprintln!("{held} of mallory's 200 held");
        // Another caller's second request is still held, not refused (its first is
        // served at once).
        let alice = (
            client(&server, "alice", "").await,
            client(&server, "alice", "").await,
        );
        wait_until("alice held", || layer.held() == held + 1).await;
        drop((clients, alice));
    }

    /// "login" 5/min (fixed window) counting only failed logins (`count_when` 401).
    /// Five slow successful logins are in flight (charged, to be refunded); the
    /// operator resets the key (an account unlock); the caller then fails 5 logins
    /// (its fresh quota); the slow ones end with 200 and are refunded into the fresh
    /// window. Failed logins counted in that window must stay at most 5.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn refunds_of_requests_from_before_a_reset_never_widen_the_fresh_quota() {
        let gate = Arc::new(Semaphore::new(0));
        let handler_gate = gate.clone();
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::new("login", Quota::per_minute(5))
                    .expect("policy")
                    .algorithm(Algorithm::FixedWindow)
                    .key(key::header("x-user").expect("header"))
                    .count_when(|status| status == StatusCode::UNAUTHORIZED),
            )
            .store(MemoryStore::with_clock(ManualClock::new(
                BASE + Duration::from_secs(5),
            )))
            .build()
            .expect("layer");
        let limiter = layer.limiter().clone();
        let app = Router::new()
            .route(
                "/",
                get(move |headers: http::HeaderMap| {
                    let gate = handler_gate.clone();
                    async move {
                        if headers.contains_key("x-slow") {
                            gate.acquire().await.expect("open").forget();
                            (StatusCode::OK, "welcome")
                        } else {
                            (StatusCode::UNAUTHORIZED, "wrong password")
                        }
                    }
                }),
            )
            .layer(layer.clone());
        let server = Arc::new(Server::start(app).await);
        let mut slow = Vec::new();
        for _ in 0..5 {
            let server = server.clone();
            slow.push(tokio::spawn(async move {
                let request = Request::get("/")
                    .header("x-user", "mallory")
                    .header("x-slow", "1")
                    .body(Full::default())
                    .expect("request");
                server.send(request).await.status
            }));
        }
        tokio::time::sleep(ms(300)).await;
        let (parts, ()) = Request::get("/")
            .header("x-user", "mallory")
            .body(())
            .expect("request")
            .into_parts();
        let key = layer
            .policy("login")
            .and_then(|p| p.key_of(&parts))
            .expect("key");
        assert_eq!(
            limiter.peek("login", &key).await.expect("peek").remaining,
            0
        );
        limiter.reset("login", &key).await.expect("reset");
        let mut failed = 0;
        for _ in 0..5 {
            failed +=
                usize::from(server.send(from("mallory")).await.status == StatusCode::UNAUTHORIZED);
        }
        gate.add_permits(5);
        for task in slow {
            assert_eq!(task.await.expect("task"), StatusCode::OK);
        }
        tokio::time::sleep(ms(200)).await;
        for _ in 0..10 {
            failed +=
                usize::from(server.send(from("mallory")).await.status == StatusCode::UNAUTHORIZED);
        }
        assert_eq!(
            failed, 5,
            "{failed} failed logins answered in one 5/min window"
        );
    }

    /// `in_flight_only(1)` in wait mode: how many requests of one key wait for the
    /// slot at once. README: one caller cannot take every held place (128 per key).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_key_waiting_for_a_slot_is_bounded_per_key() {
        let gate = Arc::new(Semaphore::new(0));
        let handler_gate = gate.clone();
        let layer = RateLimitLayer::builder()
            .policy(
                Policy::in_flight_only("reports", 1)
                    .expect("policy")
                    .key(key::header("x-user").expect("header"))
                    .wait(Duration::from_secs(60)),
            )
            .build()
            .expect("layer");
        let app = Router::new()
            .route(
                "/",
                get(move || {
                    let gate = handler_gate.clone();
                    async move {
                        gate.acquire().await.expect("open").forget();
                        "ok"
                    }
                }),
            )
            .layer(layer.clone());
        let server = Arc::new(Server::start(app).await);
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let server = server.clone();
            tasks.push(tokio::spawn(async move {
                server.send(from("mallory")).await.status
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let answered = tasks.iter().filter(|t| t.is_finished()).count();
        eprintln!("held() = {}, answered = {answered} of 300", layer.held());
        let waiting = 300 - 1 - answered;
        gate.add_permits(10_000);
        for t in tasks {
            t.abort();
        }
        assert!(
            waiting <= RateLimitLayer::DEFAULT_MAX_HELD_PER_KEY,
            "{waiting} requests of one key wait for its slot at once"
        );
    }
}

// ---------------------------------------------------------------------------------
// LeasedStore: operators reach plan callers' leases in the process that acts.
// ---------------------------------------------------------------------------------

mod leases {
    use super::*;
    use tollgate::store::{LeasedStore, SliceSizing};

    fn leased<S: Store>(store: S, clock: &ManualClock) -> (LeasedStore<S>, Limiter) {
        let leases = LeasedStore::builder(store)
            .clock(clock.clone())
            .max_lease(Duration::from_secs(10))
            .expect("max lease")
            .processes(1)
            .expect("processes")
            .sizing(SliceSizing::Fixed(64))
            .expect("sizing")
            .build();
        let limiter = limiter_on(
            leases.clone(),
            [Limit::new("api", Quota::per_hour(1_000))
                .expect("limit")
                .algorithm(Algorithm::FixedWindow)],
        );
        (leases, limiter)
    }

    async fn admitted_with(limiter: &Limiter, key: &Key, plan: Quota, n: usize) -> usize {
        let mut admitted = 0;
        for _ in 0..n {
            if limiter
                .check_with("api", key, 1, plan)
                .await
                .expect("check")
                .allowed
            {
                admitted += 1;
            }
        }
        admitted
    }

    /// Returns (admitted after a block, admitted after a reset) for a plan caller
    /// with units parked in this process's lease.
    async fn plan_caller<S: Store>(store: S, clock: &ManualClock, plan: Quota) -> (usize, usize) {
        let (leases, limiter) = leased(store, clock);
        let key = Key::from("pro");
        assert_eq!(admitted_with(&limiter, &key, plan, 9).await, 9);
        let parked = leases.held();
        limiter.block("api", &key, HOUR).await.expect("block");
        let after_block = admitted_with(&limiter, &key, plan, 100).await;
        limiter.reset("api", &key).await.expect("reset");
        let fresh = usize::try_from(plan.limit()).expect("small");
        let after_reset = admitted_with(&limiter, &key, plan, fresh + 200).await;
        eprintln!("{plan}: parked {parked}, after block {after_block}, after reset {after_reset}");
        (after_block, after_reset.saturating_sub(fresh))
    }

    #[tokio::test]
    async fn a_leased_block_and_reset_reach_plan_callers_on_memory() {
        for plan in [Quota::per_hour(2_000), Quota::per_day(20_000)] {
            let clock = ManualClock::new(BASE);
            let got = plan_caller(MemoryStore::with_clock(clock.clone()), &clock, plan).await;
            assert_eq!(
                got,
                (0, 0),
                "{plan}: (admitted while blocked, beyond a fresh quota)"
            );
        }
    }

    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn a_leased_block_and_reset_reach_plan_callers_on_redis() {
        for plan in [Quota::per_hour(2_000), Quota::per_day(20_000)] {
            let clock = ManualClock::new(BASE);
            let got = plan_caller(redis::store(&clock, true), &clock, plan).await;
            assert_eq!(
                got,
                (0, 0),
                "{plan}: (admitted while blocked, beyond a fresh quota)"
            );
        }
    }

    /// Receipts of leased decisions from before a reset, refunded after it.
    #[tokio::test]
    async fn leased_receipts_from_before_a_reset_give_nothing_back() {
        let clock = ManualClock::new(BASE);
        let (_leases, limiter) = leased(MemoryStore::with_clock(clock.clone()), &clock);
        let key = Key::from("k");
        let mut old = Vec::new();
        for _ in 0..100 {
            old.push(limiter.check("api", &key, 1).await.expect("check"));
        }
        limiter.reset("api", &key).await.expect("reset");
        let mut admitted = 0;
        for _ in 0..1_000 {
            admitted += usize::from(limiter.check("api", &key, 1).await.expect("c").allowed);
        }
        for d in &old {
            limiter.refund_charge(d, &key, 1).await.expect("refund");
        }
        for _ in 0..200 {
            admitted += usize::from(limiter.check("api", &key, 1).await.expect("c").allowed);
        }
        assert!(
            admitted <= 1_000,
            "{admitted} admitted after a reset, fresh quota 1000"
        );
    }
}

// ---------------------------------------------------------------------------------
// A reload that adds or removes a penalty box reaches plan callers at once.
// ---------------------------------------------------------------------------------

/// "api" 1/min, no box; a plan caller (2/h) spends its plan; a reload adds a box
/// (1st rejection blocks 900 s): its next rejection blocks it, and 2 minutes later
/// it is still denied. A reload that removes the box keeps that block.
async fn reload_adds_a_box(
    store: impl Store,
    clock: &ManualClock,
    plan_caller: bool,
) -> TestResult {
    use tollgate::Penalty;
    let plain = Limit::new("api", Quota::per_minute(1))?;
    let boxed = plain.clone().penalty(
        Penalty::after(1)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(900)),
    );
    let limiter = limiter_on(store, [plain.clone()]);
    let key = Key::from("pro");
    let quota = if plan_caller {
        Quota::per_hour(2)
    } else {
        Quota::per_minute(1)
    };
    let spend = if plan_caller { 2 } else { 1 };
    for _ in 0..spend {
        assert!(limiter.check_with("api", &key, 1, quota).await?.allowed);
    }
    assert_eq!(
        limiter.check_with("api", &key, 1, quota).await?.blocked_for,
        None
    );
    limiter.reload([boxed])?;
    let d = limiter.check_with("api", &key, 1, quota).await?;
    assert_eq!(d.blocked_for, Some(Duration::from_secs(900)), "{d:?}");
    limiter.reload([plain])?;
    clock.advance(Duration::from_secs(120));
    // The limit's own minute has refilled; the block (a reload that keeps the name
    // keeps it) has not ended.
    let d = limiter.check("api", &key, 1).await?;
    assert!(!d.allowed, "after a reload that removes the box: {d:?}");
    clock.advance(Duration::from_secs(900));
    assert!(limiter.check("api", &key, 1).await?.allowed);
    Ok(())
}

#[tokio::test]
async fn a_reload_that_adds_a_box_reaches_plan_callers_on_memory() -> TestResult {
    let clock = ManualClock::new(BASE);
    reload_adds_a_box(MemoryStore::with_clock(clock.clone()), &clock, true).await?;
    let clock = ManualClock::new(BASE);
    reload_adds_a_box(MemoryStore::with_clock(clock.clone()), &clock, false).await
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_reload_that_adds_a_box_reaches_plan_callers_on_redis() -> TestResult {
    let clock = ManualClock::new(BASE);
    reload_adds_a_box(redis::store(&clock, false), &clock, true).await?;
    let clock = ManualClock::new(BASE);
    reload_adds_a_box(redis::store(&clock, false), &clock, false).await
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_reload_that_adds_a_box_reaches_plan_callers_on_redis_with_the_denial_cache() -> TestResult
{
    let clock = ManualClock::new(BASE);
    reload_adds_a_box(redis::store(&clock, true), &clock, false).await?;
    let clock = ManualClock::new(BASE);
    reload_adds_a_box(redis::store(&clock, true), &clock, true).await
}

/// "login" 1/min, 3rd rejection within a minute blocks 900 s, on Redis with the
/// denial cache on (the default): ten rejected attempts trip the box.
#[cfg(feature = "redis")]
#[tokio::test]
async fn rejections_answered_from_the_denial_cache_still_trip_the_box() -> TestResult {
    use tollgate::Penalty;
    let clock = ManualClock::new(BASE);
    let limit = Limit::new("login", Quota::per_minute(1))?.penalty(
        Penalty::after(3)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(900)),
    );
    let limiter = limiter_on(redis::store(&clock, true), [limit]);
    let key = Key::from("mallory");
    assert!(limiter.check("login", &key, 1).await?.allowed);
    for _ in 0..10 {
        limiter.check("login", &key, 1).await?;
    }
    clock.advance(Duration::from_secs(120));
    let d = limiter.check("login", &key, 1).await?;
    assert!(!d.allowed, "two minutes later: {d:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------
// Extremes: a century of debt or block, then waiting with no bound on the wait.
// ---------------------------------------------------------------------------------

#[cfg(feature = "redis")]
async fn extremes(store: impl Store, algorithm: Algorithm) -> Vec<Decision> {
    let limit = Limit::new("api", Quota::per_minute(1))
        .expect("limit")
        .algorithm(algorithm)
        .max_delay(Duration::MAX);
    let limiter = limiter_on(store, [limit]);
    let plan = Quota::per_day(10);
    let (a, b) = (Key::from("a"), Key::from("b"));
    let mut out = vec![
        limiter
            .penalize("api", &a, u32::MAX)
            .await
            .expect("penalize"),
    ];
    out.push(
        limiter
            .reserve("api", &a, 1, Duration::MAX)
            .await
            .expect("reserve"),
    );
    out.push(
        limiter
            .reserve_with("api", &a, 1, plan, Duration::MAX)
            .await
            .expect("reserve_with"),
    );
    out.push(
        limiter
            .block("api", &b, Duration::MAX)
            .await
            .expect("block"),
    );
    out.push(
        limiter
            .reserve("api", &b, 1, Duration::MAX)
            .await
            .expect("reserve"),
    );
    out.push(
        limiter
            .reserve_with("api", &b, u32::MAX, plan, Duration::MAX)
            .await
            .expect("reserve_with"),
    );
    out.push(
        limiter
            .penalize("api", &b, u32::MAX)
            .await
            .expect("penalize"),
    );
    out.push(limiter.peek_with("api", &a, plan).await.expect("peek"));
    out
}

/// `penalize(u32::MAX)` and `block(Duration::MAX)`, then reservations with no bound
/// on the wait, under the limit's quota and a plan's: no panic, no error, nothing
/// admitted sooner than a century, and both stores alike.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_century_of_debt_or_block_then_unbounded_waits_answer_alike() {
    for algorithm in ALL {
        let clock = ManualClock::new(BASE);
        let m = extremes(MemoryStore::with_clock(clock), algorithm).await;
        let clock = ManualClock::new(BASE);
        let r = extremes(redis::store(&clock, false), algorithm).await;
        // Window algorithms carry a penalty one window only: see
        // `a_window_penalty_lasts_until_enough_windows_have_passed_*`.
        let fluid = matches!(
            algorithm,
            Algorithm::Gcra | Algorithm::LeakyBucket | Algorithm::TokenBucket
        );
        for d in m.iter().filter(|_| fluid) {
            assert!(
                !d.allowed
                    || d.delay >= Duration::from_secs(99 * 365 * 86_400)
                    || d.receipt().is_none(),
                "{algorithm}: {d:?}"
            );
        }
        assert_eq!(m, r, "{algorithm}");
    }
}

/// `penalize(100)` on 1/min. As documented (`Limiter::penalize`): the fluid
/// algorithms owe it until the refill repays it (100 minutes); a window algorithm's
/// debt lives in the window it is charged in (the sliding window's weighs on the next
/// one too), so it ends with that window (a longer denial is a `block`). Returns how
/// many of ten requests, one a minute from the 2nd minute on, are admitted.
async fn admitted_after_penalize_100(
    store: impl Store,
    clock: &ManualClock,
    algorithm: Algorithm,
) -> usize {
    let limit = Limit::new("api", Quota::per_minute(1))
        .expect("limit")
        .algorithm(algorithm);
    let limiter = limiter_on(store, [limit]);
    let key = Key::from("k");
    limiter.penalize("api", &key, 100).await.expect("penalize");
    let mut admitted = 0;
    for _ in 0..10 {
        clock.advance(Duration::from_secs(61));
        admitted += usize::from(limiter.check("api", &key, 1).await.expect("check").allowed);
    }
    admitted
}

fn penalty_outlasts(algorithm: Algorithm, admitted: usize) -> Option<String> {
    let fluid = matches!(
        algorithm,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
    );
    let ok = if fluid { admitted == 0 } else { admitted >= 9 };
    (!ok).then(|| format!("{algorithm}: {admitted} of 10 admitted within 11 min of penalize(100)"))
}

#[tokio::test]
async fn a_penalty_lasts_as_documented_on_memory() {
    let mut broken = Vec::new();
    for algorithm in ALL {
        let clock = ManualClock::new(BASE);
        let n =
            admitted_after_penalize_100(MemoryStore::with_clock(clock.clone()), &clock, algorithm)
                .await;
        broken.extend(penalty_outlasts(algorithm, n));
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_penalty_lasts_as_documented_on_redis() {
    let mut broken = Vec::new();
    for algorithm in ALL {
        let clock = ManualClock::new(BASE);
        let n = admitted_after_penalize_100(redis::store(&clock, false), &clock, algorithm).await;
        broken.extend(penalty_outlasts(algorithm, n));
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

// ---------------------------------------------------------------------------------
// Fallback: an operator's block set while the primary is down holds once it is back.
// ---------------------------------------------------------------------------------

/// Fallback(Redis, memory): Redis stalls (SIGSTOP), so the insurance store serves;
/// the operator blocks a key for an hour; Redis comes back. "A reset and a block go
/// to both stores ... so that they hold whichever store serves the key next": the
/// key admits nothing once Redis serves again.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_set_while_the_primary_is_down_holds_once_it_is_back() -> TestResult {
    use support::redis_server::RedisServer;
    use tollgate::RedisStore;
    use tollgate::store::Fallback;
    let server = RedisServer::start();
    let redis = RedisStore::from_url(&server.url())?
        .prefix("fallback")
        .denial_cache(0)
        .deadline(ms(100))?;
    let store = Fallback::new(redis, MemoryStore::new())
        .probe_interval(ms(200))
        .min_down(ms(100));
    let limiter = limiter_on(store.clone(), [Limit::new("api", Quota::per_minute(100))?]);
    let key = Key::from("mallory");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    assert!(store.serving_primary());
    server.pause();
    let during = limiter.check("api", &key, 1).await?;
    assert!(during.allowed && !store.serving_primary(), "{during:?}");
    let blocked = limiter.block("api", &key, HOUR).await?;
    assert!(!blocked.allowed);
    server.resume();
    tokio::time::sleep(ms(500)).await;
    let mut admitted = 0;
    for _ in 0..5 {
        admitted += usize::from(limiter.check("api", &key, 1).await?.allowed);
        tokio::time::sleep(ms(50)).await;
    }
    assert!(store.serving_primary(), "Redis serves again");
    assert_eq!(admitted, 0, "{admitted} of 5 admitted while blocked");
    Ok(())
}
