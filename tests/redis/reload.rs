//! Reloading limits while four limiter instances × 64 tasks hammer one key on Redis:
//! no error, every request decided under one whole set (never half of the old and
//! half of the new), and usage carried over (the count is not reset by a reload, so
//! the key ends with exactly the final quota admitted, not more).
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::redis_server::{shared_server, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);
const INSTANCES: usize = 4;
const TASKS: usize = 64;

/// The two sets the reloads alternate between: `api` and `daily` change together, so a
/// request whose two decisions come from different sets would show it.
fn set(generation: u64) -> Vec<Limit> {
    let (api, daily) = if generation.is_multiple_of(2) {
        (100, 1_000)
    } else {
        (200, 2_000)
    };
    vec![
        Limit::new("api", Quota::per_hour(api))
            .expect("limit")
            .algorithm(Algorithm::FixedWindow),
        Limit::new("daily", Quota::per_day(daily))
            .expect("limit")
            .algorithm(Algorithm::FixedWindow),
    ]
}

/// Every task checks both limits of the key until `stop`; returns the admitted count.
async fn hammer(limiters: &[Limiter], rounds: usize) -> Result<u64, String> {
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for limiter in limiters {
        for _ in 0..TASKS {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                let key = Key::from("shared");
                for _ in 0..rounds {
                    let decisions = limiter
                        .check_all(&[("api", &key, 1), ("daily", &key, 1)])
                        .await
                        .map_err(|e| format!("a check failed during reloads: {e}"))?;
                    let (api, daily) = (decisions[0].quota.limit(), decisions[1].quota.limit());
                    if daily != api * 10 {
                        return Err(format!(
                            "decided under half of one set and half of another: api {api}/h, \
                             daily {daily}/day"
                        ));
                    }
                    if decisions.iter().all(|d| d.allowed) {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok::<(), String>(())
            }));
        }
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(admitted.load(Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_load_decide_whole_sets_and_carry_usage_over() -> Result<(), String> {
    let url = shared_server().url();
    let prefix = unique_prefix("reload");
    // A frozen clock: the hour's window never rolls while the tasks run.
    let clock = ManualClock::new(BASE + Duration::from_millis(123));
    let limiters: Vec<Limiter> = (0..INSTANCES)
        .map(|_| {
            let store = RedisStore::from_url(&url)
                .expect("url")
                .prefix(&prefix)
                .deadline(Duration::from_secs(10))
                .expect("deadline")
                .with_clock(clock.clone());
            set(0)
                .into_iter()
                .fold(Limiter::builder(), tollgate::LimiterBuilder::limit)
                .store(store)
                .build()
                .expect("limiter")
        })
        .collect();
    // Reload every instance back and forth while the tasks run.
    let reloader = {
        let limiters = limiters.clone();
        tokio::spawn(async move {
            for generation in 1..=40 {
                for limiter in &limiters {
                    limiter.reload(set(generation)).expect("a valid set");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let during = hammer(&limiters, 6).await?;
    reloader.await.map_err(|e| e.to_string())?;
    // The last reload (generation 40) is the 100/h set: the count carried through
    // every reload, so whatever was admitted under 200/h already counts.
    assert!(
        during <= 200,
        "{during} admitted: more than the most generous quota"
    );
    for limiter in &limiters {
        limiter.reload(set(1)).map_err(|e| e.to_string())?;
    }
    let after = hammer(&limiters, 2).await?;
    assert_eq!(
        during + after,
        200,
        "usage carried over: the key admits exactly 200 in its hour, across reloads"
    );
    // A bad set is refused whole, and the good one stays.
    assert!(limiters[0].reload(Vec::<Limit>::new()).is_err());
    let key = Key::from("shared");
    let peek = limiters[0]
        .check("api", &key, 0)
        .await
        .map_err(|e| e.to_string())?;
    assert_eq!((peek.quota, peek.remaining), (Quota::per_hour(200), 0));
    Ok(())
}
