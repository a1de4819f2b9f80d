//! Operators' calls with the largest inputs their types take (issue 23, item 7):
//! `penalize(u32::MAX)` and `block(Duration::MAX)` never panic, never wrap, and deny
//! at least as long as asked, up to `MAX_DENIAL`, on every algorithm.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Penalty, Quota};

const BASE: Duration = Duration::from_secs(1_700_000_000);

const ALGORITHMS: [Algorithm; 7] = support::every_algorithm(4);

fn limiter(quota: Quota, algorithm: Algorithm, clock: &ManualClock) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("slow", quota)
                .expect("a limit")
                .algorithm(algorithm),
        )
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("a limiter")
}

#[tokio::test]
async fn penalize_u32_max_on_slow_limits_denies_and_never_wraps()
-> Result<(), Box<dyn std::error::Error>> {
    for quota in [
        Quota::per_minute(1),
        Quota::per_day(1),
        Quota::per_second(1_000),
    ] {
        for algorithm in ALGORITHMS {
            let clock = ManualClock::new(BASE);
            let limiter = limiter(quota, algorithm, &clock);
            let key = Key::from("mallory");
            // Twice: a second penalty on top of the first must not wrap either.
            for _ in 0..2 {
                let d = limiter.penalize("slow", &key, u32::MAX).await?;
                assert_eq!(d.remaining, 0, "{algorithm} {quota}: nothing left");
            }
            let next = limiter.check("slow", &key, 1).await?;
            assert!(!next.allowed, "{algorithm} {quota}: the penalty denies");
            // Still denied a full period later: the debt was not wrapped into credit.
            clock.advance(quota.period());
            let later = limiter.check("slow", &key, 1).await?;
            if matches!(
                algorithm,
                Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
            ) {
                assert!(
                    !later.allowed,
                    "{algorithm} {quota}: the debt outlives a period"
                );
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn block_for_duration_max_is_a_century() -> Result<(), Box<dyn std::error::Error>> {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let limiter = limiter(Quota::per_minute(1), algorithm, &clock);
        let key = Key::from("mallory");
        let blocked = limiter.block("slow", &key, Duration::MAX).await?;
        assert_eq!(
            blocked.blocked_for,
            Some(Penalty::MAX_DENIAL),
            "{algorithm}"
        );
        clock.advance(Duration::from_secs(365 * 86_400));
        let d = limiter.check("slow", &key, 1).await?;
        assert!(!d.allowed, "{algorithm}: blocked a year later");
        assert_eq!(
            d.blocked_for,
            Penalty::MAX_DENIAL.checked_sub(Duration::from_secs(365 * 86_400))
        );
        assert_eq!(
            d.retry_after, d.blocked_for,
            "{algorithm}: retry at the block's end"
        );
    }
    Ok(())
}
