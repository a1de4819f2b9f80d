//! One caller, one record on Redis: a caller's block, penalty count and reservations
//! belong to (limit name, key), whatever quota, period or algorithm it is decided
//! under. A block, a reset or a penalty through the limit reaches a plan caller over
//! another period; a reload that changes the algorithm or the period keeps blocks and
//! penalty counts (and so does reverting it); `block(Duration::MAX)` and
//! `penalize(u32::MAX)` answer as the memory store does, without an error. Each runs
//! through the function library and through scripts.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{RedisServer, shared_server, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Store};
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Penalty, Quota, RedisStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const BASE: Duration = Duration::from_secs(1_699_920_000);

/// The longest block either store writes: a century of 365-day years.
const CENTURY: Duration = Duration::from_secs(100 * 365 * 86_400);

/// A store on the shared server, on `clock`, through the function library or scripts.
/// The denial cache is off: every answer here is Redis's own.
fn store(clock: &ManualClock, functions: bool) -> RedisStore {
    store_at(clock, functions, &unique_prefix("records"))
}

/// The same under `prefix`: two stores on one prefix are two processes' views.
fn store_at(clock: &ManualClock, functions: bool, prefix: &str) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(prefix)
        .denial_cache(0)
        .functions(functions)
        // Answers are checked here, not speed, on a possibly busy machine.
        .deadline(Duration::from_secs(10))
        .expect("a deadline")
        .with_clock(clock.clone())
}

fn limiter(limits: Vec<Limit>, store: impl Store) -> Result<Limiter, tollgate::ConfigError> {
    let mut builder = Limiter::builder();
    for limit in limits {
        builder = builder.limit(limit);
    }
    builder.store(store).build()
}

fn api() -> Limit {
    Limit::new("api", Quota::per_minute(100)).expect("a limit")
}

/// "api" whose first rejection blocks the key for 15 minutes.
fn boxed_api() -> Limit {
    api().penalty(
        Penalty::after(1)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(900)),
    )
}

/// How many of `n` checks of `key` under the plan `quota` are admitted.
async fn admitted_with(
    limiter: &Limiter,
    key: &Key,
    quota: Quota,
    n: usize,
) -> Result<usize, tollgate::StoreError> {
    let mut admitted = 0;
    for _ in 0..n {
        if limiter.check_with("api", key, 1, quota).await?.allowed {
            admitted += 1;
        }
    }
    Ok(admitted)
}

#[tokio::test]
async fn a_block_through_the_limit_denies_a_plan_caller_over_another_period() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(vec![api()], store(&clock, functions))?;
        let plan = Quota::per_hour(10_000);
        // One plan caller with state under its own period (unmarked: no record existed
        // when it was written), one without any.
        let (known, fresh) = (Key::from("pro-alice"), Key::from("pro-bob"));
        assert!(limiter.check_with("api", &known, 1, plan).await?.allowed);
        for key in [&known, &fresh] {
            limiter.block("api", key, Duration::from_secs(3600)).await?;
        }
        clock.advance(Duration::from_secs(1));
        for key in [&known, &fresh] {
            assert_eq!(
                admitted_with(&limiter, key, plan, 10).await?,
                0,
                "{functions}"
            );
            let d = limiter.check_with("api", key, 1, plan).await?;
            assert_eq!(
                d.blocked_for,
                Some(Duration::from_secs(3599)),
                "{functions}"
            );
            assert_eq!(d.retry_after, Some(Duration::from_secs(3599)));
        }
        // The block ends for everyone at once.
        clock.advance(Duration::from_secs(3599));
        assert!(limiter.check_with("api", &known, 1, plan).await?.allowed);
        assert!(limiter.check("api", &fresh, 1).await?.allowed);
    }
    Ok(())
}

#[tokio::test]
async fn a_block_by_another_process_denies_a_plan_caller_it_never_saw() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let prefix = unique_prefix("records");
        let serving = limiter(vec![api()], store_at(&clock, functions, &prefix))?;
        // The operator's process: the same keys, a store of its own, which has never
        // decided the plan's period (so cannot mark its state).
        let admin = limiter(vec![api()], store_at(&clock, functions, &prefix))?;
        let plan = Quota::per_hour(10_000);
        let key = Key::from("pro-mallory");
        assert!(serving.check_with("api", &key, 1, plan).await?.allowed);
        admin.block("api", &key, Duration::from_secs(3600)).await?;
        assert_eq!(
            admitted_with(&serving, &key, plan, 10).await?,
            0,
            "{functions}"
        );
        admin.reset("api", &key).await?;
        // The block is lifted (the plan's rate state, which only the serving process
        // knows, is not: 1 of its 10,000 used).
        let d = serving.check_with("api", &key, 1, plan).await?;
        assert_eq!((d.allowed, d.remaining), (true, 9_998), "{functions}");
    }
    Ok(())
}

#[tokio::test]
async fn a_plan_callers_penalty_block_denies_it_under_the_limits_own_quota() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let boxed = boxed_api();
        let limiter = limiter(vec![boxed], store(&clock, functions))?;
        let key = Key::from("mallory");
        // State under the base quota first, unmarked.
        assert!(limiter.check("api", &key, 1).await?.allowed);
        let plan = Quota::per_hour(5);
        assert_eq!(admitted_with(&limiter, &key, plan, 5).await?, 5);
        // The plan caller's first rejection trips the box: blocked under every quota.
        let tripped = limiter.check_with("api", &key, 1, plan).await?;
        assert_eq!(tripped.blocked_for, Some(Duration::from_secs(900)));
        let own = limiter.check("api", &key, 1).await?;
        assert!(!own.allowed, "{functions}");
        assert_eq!(
            own.blocked_for,
            Some(Duration::from_secs(900)),
            "{functions}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn reset_lifts_a_plan_callers_penalty_block_and_its_rate_state() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let boxed = boxed_api();
        let limiter = limiter(vec![boxed], store(&clock, functions))?;
        let key = Key::from("pro-mallory");
        let plan = Quota::per_hour(5);
        assert_eq!(admitted_with(&limiter, &key, plan, 6).await?, 5);
        let blocked = limiter.check_with("api", &key, 1, plan).await?;
        assert_eq!(blocked.blocked_for, Some(Duration::from_secs(900)));
        limiter.reset("api", &key).await?;
        // The block is lifted and the plan's hour is idle again: 5 of 5 admitted.
        assert_eq!(
            admitted_with(&limiter, &key, plan, 5).await?,
            5,
            "{functions}"
        );
        let sixth = limiter.check_with("api", &key, 1, plan).await?;
        assert!(!sixth.allowed);
        // A first rejection again: the penalty count was cleared too, and trips anew.
        assert_eq!(sixth.blocked_for, Some(Duration::from_secs(900)));
    }
    Ok(())
}

#[tokio::test]
async fn penalize_through_the_limit_denies_a_plan_caller() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(vec![api()], store(&clock, functions))?;
        let key = Key::from("pro-carol");
        let plan = Quota::per_hour(600);
        assert!(limiter.check_with("api", &key, 1, plan).await?.allowed);
        // Reported as a peek would: nothing left of the limit's own minute.
        assert_eq!(limiter.penalize("api", &key, 1000).await?.remaining, 0);
        // 1000 requests charged under the plan's hour too (600/h): 401 beyond it, 6 s
        // each.
        let plan_d = limiter.check_with("api", &key, 1, plan).await?;
        assert!(!plan_d.allowed, "{functions}");
        assert_eq!(plan_d.retry_after, Some(Duration::from_secs(402 * 6)));
        assert!(!limiter.check("api", &key, 1).await?.allowed);
    }
    Ok(())
}

#[tokio::test]
async fn a_reload_that_changes_algorithm_and_period_keeps_the_block_and_the_penalty_count()
-> TestResult {
    let penalty = || {
        Penalty::after(3)
            .within(Duration::from_secs(3600))
            .block_for(Duration::from_secs(600))
    };
    let before = Limit::new("login", Quota::per_minute(10))?.penalty(penalty());
    let after = Limit::new("login", Quota::per_hour(20))?
        .algorithm(Algorithm::FixedWindow)
        .penalty(penalty());
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(vec![before.clone()], store(&clock, functions))?;
        let (counted, blocked) = (Key::from("counted"), Key::from("blocked"));
        // Two rejections counted under GCRA 10/min.
        for _ in 0..12 {
            limiter.check("login", &counted, 1).await?;
        }
        limiter
            .block("login", &blocked, Duration::from_secs(3600))
            .await?;
        limiter.reload([after.clone()])?;
        // Fixed window 20/h: fresh usage, the same block and the same count.
        let d = limiter.check("login", &blocked, 1).await?;
        assert_eq!(
            d.blocked_for,
            Some(Duration::from_secs(3600)),
            "{functions}"
        );
        for _ in 0..20 {
            assert!(limiter.check("login", &counted, 1).await?.allowed);
        }
        let third = limiter.check("login", &counted, 1).await?;
        assert_eq!(
            third.blocked_for,
            Some(Duration::from_secs(600)),
            "{functions}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn reverting_a_reload_keeps_a_block_tripped_in_between() -> TestResult {
    let penalty = || {
        Penalty::after(1)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(600))
    };
    let gcra = Limit::new("login", Quota::per_minute(10))?.penalty(penalty());
    let window = Limit::new("login", Quota::per_hour(2))?
        .algorithm(Algorithm::FixedWindow)
        .penalty(penalty());
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(vec![gcra.clone()], store(&clock, functions))?;
        let key = Key::from("mallory");
        // GCRA state without a record (unmarked).
        assert!(limiter.check("login", &key, 1).await?.allowed);
        limiter.reload([window.clone()])?;
        for _ in 0..2 {
            assert!(limiter.check("login", &key, 1).await?.allowed);
        }
        // Tripped under the fixed window, whose state alone the trip marks.
        let tripped = limiter.check("login", &key, 1).await?;
        assert_eq!(tripped.blocked_for, Some(Duration::from_secs(600)));
        limiter.reload([gcra.clone()])?;
        let d = limiter.check("login", &key, 1).await?;
        assert!(!d.allowed, "{functions}");
        assert_eq!(d.blocked_for, Some(Duration::from_secs(600)), "{functions}");
    }
    Ok(())
}

/// The answers that matter of a decision: everything but the quota and receipt.
fn answer(d: &Decision) -> (bool, u64, Duration, Option<Duration>, Option<Duration>) {
    (
        d.allowed,
        d.remaining,
        d.reset_after,
        d.retry_after,
        d.blocked_for,
    )
}

#[tokio::test]
async fn block_for_duration_max_blocks_for_a_century_without_an_error() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(vec![api()], store(&clock, functions))?;
        let key = Key::from("forever");
        let d = limiter.block("api", &key, Duration::MAX).await?;
        assert_eq!(
            answer(&d),
            (false, 0, CENTURY, Some(CENTURY), Some(CENTURY))
        );
        clock.advance(Duration::from_secs(86_400));
        let left = CENTURY
            .checked_sub(Duration::from_secs(86_400))
            .ok_or("a century")?;
        let d = limiter.check("api", &key, 1).await?;
        assert_eq!(
            answer(&d),
            (false, 0, left, Some(left), Some(left)),
            "{functions}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn penalize_u32_max_on_a_daily_token_bucket_denies_without_an_error() -> TestResult {
    let daily = Limit::new("api", Quota::per_day(1))?.algorithm(Algorithm::TokenBucket);
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(vec![daily.clone()], store(&clock, functions))?;
        let key = Key::from("debtor");
        let d = limiter.penalize("api", &key, u32::MAX).await?;
        // Clamped to 2^52 units of deficit: 52,124 tokens of a day each.
        let owed = Duration::from_secs(52_124 * 86_400);
        // Reported as a peek would (allowed: a peek fits).
        assert_eq!(answer(&d), (true, 0, owed, None, None), "{functions}");
        let d = limiter.check("api", &key, 1).await?;
        assert!(!d.allowed);
        // One token fits again when the whole deficit is repaid.
        assert_eq!(d.retry_after, Some(owed));
    }
    Ok(())
}

#[tokio::test]
async fn penalize_u32_max_denies_every_algorithm_at_slow_rates_without_an_error() -> TestResult {
    let algorithms = support::every_algorithm(10);
    for quota in [
        Quota::per_minute(1),
        Quota::per_day(1),
        Quota::per_day(1000),
    ] {
        for algorithm in algorithms {
            let clock = ManualClock::new(BASE);
            let limit = Limit::new("api", quota)?.algorithm(algorithm);
            let limiter = limiter(vec![limit], store(&clock, true))?;
            let key = Key::from("debtor");
            let d = limiter.penalize("api", &key, u32::MAX).await?;
            assert_eq!(d.remaining, 0, "{algorithm} {quota}");
            clock.advance(Duration::from_secs(1));
            let d = limiter.check("api", &key, 1).await?;
            assert!(!d.allowed, "{algorithm} {quota}");
        }
    }
    Ok(())
}

/// Memory and Redis on one clock give the same answers to the extreme calls.
#[tokio::test]
async fn extreme_blocks_and_penalties_answer_as_the_memory_store() -> TestResult {
    let limits = || {
        vec![
            api(),
            Limit::new("daily", Quota::per_day(1))
                .expect("a limit")
                .algorithm(Algorithm::TokenBucket),
            Limit::new("slow", Quota::per_minute(1)).expect("a limit"),
        ]
    };
    let clock = ManualClock::new(BASE);
    let memory = limiter(limits(), MemoryStore::with_clock(clock.clone()))?;
    let redis = limiter(limits(), store(&clock, true))?;
    let key = Key::from("extreme");
    for limiter in [&memory, &redis] {
        limiter.check("daily", &key, 1).await?;
    }
    let mut answers = Vec::new();
    for limiter in [&memory, &redis] {
        let blocked = limiter.block("api", &key, Duration::MAX).await?;
        let daily = limiter.penalize("daily", &key, u32::MAX).await?;
        let slow = limiter.penalize("slow", &key, u32::MAX).await?;
        answers.push(vec![answer(&blocked), answer(&daily), answer(&slow)]);
    }
    clock.advance(Duration::from_secs(3600));
    for (i, limiter) in [&memory, &redis].into_iter().enumerate() {
        for name in ["api", "daily", "slow"] {
            let d = limiter.check(name, &key, 1).await?;
            assert!(!d.allowed, "{name}");
            answers[i].push(answer(&d));
        }
    }
    assert_eq!(answers[0], answers[1]);
    Ok(())
}

#[tokio::test]
async fn a_batch_with_a_plan_charge_is_denied_by_the_callers_block() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let store = store(&clock, functions);
        let daily = Limit::new("daily", Quota::per_day(1000))?;
        let limiter = limiter(vec![api(), daily.clone()], store.clone())?;
        let key = Key::from("pro-dave");
        let plan = api().with_quota(Quota::per_hour(10_000));
        let charges = [
            Charge {
                limit: &daily,
                key: &key,
                cost: 1,
            },
            Charge {
                limit: &plan,
                key: &key,
                cost: 1,
            },
        ];
        assert!(store.decide(&charges).await?.iter().all(|d| d.allowed));
        limiter.block("api", &key, Duration::from_secs(60)).await?;
        let decisions = store.decide(&charges).await?;
        assert_eq!(
            decisions[1].blocked_for,
            Some(Duration::from_secs(60)),
            "{functions}"
        );
        // All or nothing: "daily" was not charged by the denied batch.
        assert_eq!(limiter.peek("daily", &key).await?.remaining, 999);
        // A reservation under the plan waits behind the block too.
        let reserved = store.reserve(charges[1], Duration::from_secs(3600)).await?;
        assert_eq!(reserved.blocked_for, Some(Duration::from_secs(60)));
    }
    Ok(())
}

/// `calls=` of one command in `INFO commandstats` (commands that scripts and
/// functions run included), 0 when never called.
fn calls(server: &RedisServer, command: &str) -> u64 {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split([':', ',']).find_map(|f| f.strip_prefix("calls=")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn the_common_call_still_reads_one_key_and_a_plan_call_reads_the_record_too() -> TestResult {
    // A private server: its command counts are this test's alone.
    let server = RedisServer::start();
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let store = RedisStore::from_url(&server.url())?
            .prefix(&unique_prefix("cost"))
            .denial_cache(0)
            .functions(functions)
            .deadline(Duration::from_secs(10))?
            .with_clock(clock.clone());
        let limiter = limiter(vec![api()], store)?;
        let (own, pro) = (Key::from("own"), Key::from("pro"));
        let plan = Quota::per_hour(10_000);
        // The first decision of each key finds no state and reads the record (none).
        limiter.check("api", &own, 1).await?;
        limiter.check_with("api", &pro, 1, plan).await?;
        server.cli(&["CONFIG", "RESETSTAT"]);
        for _ in 0..50 {
            assert!(limiter.check("api", &own, 1).await?.allowed);
        }
        // Under its own quota: one GET (the state) and one SET a decision, as before
        // records were kept per name.
        assert_eq!((calls(&server, "get"), calls(&server, "set")), (50, 50));
        server.cli(&["CONFIG", "RESETSTAT"]);
        for _ in 0..50 {
            assert!(limiter.check_with("api", &pro, 1, plan).await?.allowed);
        }
        // Under a plan's other period: the record is read on every decision.
        assert_eq!((calls(&server, "get"), calls(&server, "set")), (100, 50));
    }
    Ok(())
}

/// Regression (issue 23, item 4): a reload that adds or removes a penalty box reaches
/// plan callers at once, on Redis.
#[tokio::test]
async fn a_reload_that_changes_a_penalty_reaches_plan_callers()
-> Result<(), Box<dyn std::error::Error>> {
    support::reload_penalty::a_reload_that_changes_a_penalty_reaches_plan_callers(|clock| {
        tollgate::RedisStore::from_url(&support::redis_server::shared_server().url())
            .expect("a valid url")
            .prefix(&support::redis_server::unique_prefix("reload-penalty"))
            .denial_cache(0)
            .deadline(Duration::from_secs(5))
            .expect("a deadline")
            .with_clock(clock)
    })
    .await
}
