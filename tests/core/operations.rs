//! Operators' calls and the penalty box on the memory store, beyond the scenario
//! tables: block and penalty records stay bounded under a flood of distinct offending
//! keys, and such a flood cannot lift a block.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Key, Limit, Limiter, MemoryStore, Penalty, Quota, StoreErrorKind};

const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn a_flood_of_distinct_offenders_keeps_penalty_records_within_max_keys() -> TestResult {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone()).max_keys(256)?;
    let limiter = Limiter::builder()
        .limit(
            Limit::new("login", Quota::per_minute(1))?.penalty(
                Penalty::after(3)
                    .within(Duration::from_secs(600))
                    .block_for(Duration::from_secs(3600)),
            ),
        )
        .store(store.clone())
        .build()?;
    let victim = Key::from("victim");
    limiter
        .block("login", &victim, Duration::from_secs(3600))
        .await?;
    for i in 0..20_000_u64 {
        let key = Key::from(i);
        // Spend the key's quota, then offend once: a record with a count of 1.
        assert!(limiter.check("login", &key, 1).await?.allowed);
        assert!(!limiter.check("login", &key, 1).await?.allowed);
        assert!(
            store.block_records() <= 256,
            "{} records",
            store.block_records()
        );
        assert!(store.len() <= 256);
        if i % 1000 == 0 {
            clock.advance(Duration::from_millis(1));
        }
    }
    // Counts before blocks: the flood recycled its own records.
    let d = limiter.check("login", &victim, 1).await?;
    assert!(!d.allowed);
    assert!(d.blocked_for.is_some());
    Ok(())
}

#[tokio::test]
async fn a_penalty_reaches_a_plan_caller_whose_state_was_swept_idle() -> TestResult {
    support::plan_walk::a_penalty_reaches_a_plan_caller_whose_state_was_swept(
        MemoryStore::with_clock,
    )
    .await
}

#[tokio::test]
async fn records_are_swept_once_they_say_nothing() -> TestResult {
    let clock = ManualClock::new(BASE);
    let store = MemoryStore::with_clock(clock.clone());
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(1))?)
        .store(store.clone())
        .build()?;
    limiter
        .block("api", &Key::from("mallory"), Duration::from_secs(5))
        .await?;
    assert_eq!(store.block_records(), 1);
    clock.advance(Duration::from_secs(6));
    // Any call sweeps the shard (one shard at this size? at least the key's own).
    limiter.check("api", &Key::from("mallory"), 0).await?;
    assert!(
        limiter
            .check("api", &Key::from("mallory"), 1)
            .await?
            .allowed
    );
    Ok(())
}

#[tokio::test]
async fn a_zero_block_lifts_a_block_and_unknown_policies_are_errors() -> TestResult {
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(1))?)
        .build()?;
    let key = Key::from("mallory");
    limiter.block("api", &key, Duration::from_secs(60)).await?;
    let lifted = limiter.block("api", &key, Duration::ZERO).await?;
    assert_eq!((lifted.allowed, lifted.blocked_for), (true, None));
    assert!(limiter.check("api", &key, 1).await?.allowed);
    for err in [
        limiter.peek("nope", &key).await.map(drop),
        limiter.reset("nope", &key).await,
        limiter.penalize("nope", &key, 1).await.map(drop),
    ] {
        assert_eq!(err.map_err(|e| e.kind()), Err(StoreErrorKind::UnknownLimit));
    }
    Ok(())
}

#[test]
fn a_penalty_with_a_zero_is_refused_when_the_limiter_is_built() {
    for penalty in [
        Penalty::after(0)
            .within(Duration::from_secs(1))
            .block_for(Duration::from_secs(1)),
        // Several rejections need a window to fall in; one does not.
        Penalty::after(2).block_for(Duration::from_secs(1)),
        Penalty::after(1).within(Duration::from_secs(1)),
    ] {
        let limit = Limit::new("api", Quota::per_second(1))
            .expect("a limit")
            .penalty(penalty);
        let err = Limiter::builder().limit(limit).build().expect_err("a zero");
        assert!(
            err.to_string().contains("penalty of limit \"api\""),
            "{err}"
        );
    }
    let one = Limit::new("api", Quota::per_second(1))
        .expect("a limit")
        .penalty(Penalty::after(1).block_for(Duration::from_secs(1)));
    assert!(Limiter::builder().limit(one).build().is_ok());
}

#[tokio::test]
async fn a_fallback_blocks_and_resets_on_both_stores_and_penalizes_the_serving_one() -> TestResult {
    let clock = ManualClock::new(BASE);
    let (primary, insurance) = (
        MemoryStore::with_clock(clock.clone()),
        MemoryStore::with_clock(clock.clone()),
    );
    let limit = Limit::new("api", Quota::per_minute(5))?;
    let on = |store: MemoryStore| {
        Limiter::builder()
            .limit(limit.clone())
            .store(store)
            .build()
            .expect("a limiter")
    };
    let (through_primary, through_insurance) = (on(primary.clone()), on(insurance.clone()));
    let both = on_fallback(&limit, primary, insurance)?;
    let key = Key::from("mallory");

    both.block("api", &key, Duration::from_secs(60)).await?;
    for store in [&through_primary, &through_insurance] {
        assert!(store.peek("api", &key).await?.blocked_for.is_some());
    }
    both.reset("api", &key).await?;
    both.penalize("api", &key, 3).await?;
    assert_eq!(through_primary.peek("api", &key).await?.remaining, 2);
    assert_eq!(through_insurance.peek("api", &key).await?.remaining, 5);
    Ok(())
}

fn on_fallback(
    limit: &Limit,
    primary: MemoryStore,
    insurance: MemoryStore,
) -> Result<Limiter, tollgate::ConfigError> {
    Limiter::builder()
        .limit(limit.clone())
        .store(tollgate::store::Fallback::new(primary, insurance))
        .build()
}
