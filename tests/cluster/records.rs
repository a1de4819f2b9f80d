//! One caller, one record on a real Redis Cluster: a block through the limit denies a
//! plan caller over another period, a plan caller's penalty block denies it under the
//! limit's own quota, and a reset reaches both, every key of one caller on its one
//! slot (the record shares the states' hash tag).
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_cluster::shared_cluster;
use support::redis_server::{cli, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::{Key, Limit, Limiter, Penalty, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn limiter(
    clock: &ManualClock,
    functions: bool,
) -> Result<(Limiter, RedisStore), tollgate::ConfigError> {
    let store = RedisStore::from_cluster_urls(shared_cluster().urls())?
        .prefix(&unique_prefix("records"))
        .denial_cache(0)
        .functions(functions)
        // Answers are checked here, not speed.
        .deadline(Duration::from_secs(10))?
        .with_clock(clock.clone());
    let api = Limit::new("api", Quota::per_minute(100))?.penalty(
        Penalty::after(1)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(900)),
    );
    let limiter = Limiter::builder().limit(api).store(store.clone()).build()?;
    Ok((limiter, store))
}

#[tokio::test]
async fn a_block_through_the_limit_denies_a_plan_caller_on_the_cluster() -> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let (limiter, store) = limiter(&clock, functions)?;
        let plan = Quota::per_hour(10_000);
        let key = Key::from("pro-mallory");
        assert!(limiter.check_with("api", &key, 1, plan).await?.allowed);
        limiter
            .block("api", &key, Duration::from_secs(3600))
            .await?;
        let mut admitted = 0;
        for _ in 0..10 {
            let d = limiter.check_with("api", &key, 1, plan).await?;
            assert_eq!(
                d.blocked_for,
                Some(Duration::from_secs(3600)),
                "{functions}"
            );
            admitted += usize::from(d.allowed);
        }
        assert_eq!(admitted, 0);
        // The record lives on the caller's slot.
        let port = shared_cluster().nodes[0].port();
        let limit = limiter.limit("api").ok_or("limit")?;
        assert_eq!(
            cli(
                port,
                &["CLUSTER", "KEYSLOT", &store.record_key(limit, &key)]
            ),
            cli(port, &["CLUSTER", "KEYSLOT", &key.to_hex()]),
        );
        limiter.reset("api", &key).await?;
        assert!(limiter.check_with("api", &key, 1, plan).await?.allowed);
    }
    Ok(())
}

#[tokio::test]
async fn a_plan_callers_penalty_block_denies_it_under_the_limits_own_quota_on_the_cluster()
-> TestResult {
    for functions in [true, false] {
        let clock = ManualClock::new(BASE);
        let (limiter, _) = limiter(&clock, functions)?;
        let key = Key::from("pro-eve");
        assert!(limiter.check("api", &key, 1).await?.allowed);
        let plan = Quota::per_hour(3);
        for _ in 0..3 {
            assert!(limiter.check_with("api", &key, 1, plan).await?.allowed);
        }
        let tripped = limiter.check_with("api", &key, 1, plan).await?;
        assert_eq!(tripped.blocked_for, Some(Duration::from_secs(900)));
        let own = limiter.check("api", &key, 1).await?;
        assert_eq!(
            own.blocked_for,
            Some(Duration::from_secs(900)),
            "{functions}"
        );
        limiter.reset("api", &key).await?;
        for _ in 0..3 {
            assert!(
                limiter.check_with("api", &key, 1, plan).await?.allowed,
                "{functions}"
            );
        }
    }
    Ok(())
}
