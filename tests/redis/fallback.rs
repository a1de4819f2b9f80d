//! `Fallback(Redis, memory)` through real outages of a private `redis-server`: one
//! quota per process across a failover, hysteresis under a server that stalls past
//! its deadline, blocks re-asserted on a server that comes back empty, and missed
//! blocks replayed in the background before Redis decides again.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::fallback::admitted_under_a_half_failing_primary;
use support::redis_server::RedisServer;
use support::scenarios::BASE;
use tollgate::clock::ManualClock;
use tollgate::store::{Fallback, Store};
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota, RedisStore};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn limiter(limits: Vec<Limit>, store: impl Store) -> Limiter {
    Limiter::builder()
        .limits(limits)
        .store(store)
        .build()
        .expect("a limiter")
}

/// Waits (bounded) until the fallback serves from its primary again.
async fn until_primary<P: Store, I: Store>(store: &Fallback<P, I>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !store.serving_primary() {
        assert!(Instant::now() < deadline, "the primary never came back");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_redis_primary_failing_half_its_calls_admits_one_quota_at_one_instant() -> TestResult {
    let server = RedisServer::start();
    let clock = ManualClock::new(BASE);
    let redis = RedisStore::from_url(&server.url())?
        .deadline(Duration::from_secs(1))?
        .denial_cache(0)
        .with_clock(clock.clone());
    let (admitted, switches, left) = admitted_under_a_half_failing_primary(redis, &clock).await;
    assert_eq!(admitted, 10, "one store's quota, after {switches} switches");
    assert!(switches >= 2, "it failed over and back: {switches}");
    assert_eq!(left, 0, "Redis was charged what the insurance admitted");
    Ok(())
}

/// Redis stalls (SIGSTOP) and resumes (SIGCONT) every 150 ms for 3 s, past its 100 ms
/// deadline. The fallback switches a bounded number of times (it stays down at
/// least its minimum, longer while Redis flaps), no request waits out two deadlines,
/// a burst-10 key is admitted at most its quota plus what 3 s refill, and a global
/// limit still rejects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stalling_past_its_deadline_switches_a_bounded_number_of_times() -> TestResult {
    let server = Arc::new(RedisServer::start());
    let deadline = Duration::from_millis(100);
    let redis = RedisStore::from_url(&server.url())?
        .deadline(deadline)?
        .denial_cache(0);
    let store = Fallback::new(redis, MemoryStore::new());
    let burst = Limit::new("burst", Quota::per_minute(10))?.algorithm(Algorithm::Gcra);
    let global = Limit::new("global", Quota::per_minute(50))?;
    let limiter = limiter(vec![burst, global], store.clone());
    let everyone = Key::from("everyone");
    let (mut global_admitted, mut global_rejected) = (0, 0);
    let key = Key::from("alice");
    assert!(limiter.check("burst", &key, 0).await?.allowed);

    let running = Arc::new(AtomicBool::new(true));
    let flapper = {
        let (server, running) = (server.clone(), running.clone());
        std::thread::spawn(move || {
            while running.load(Ordering::SeqCst) {
                server.pause();
                std::thread::sleep(Duration::from_millis(150));
                server.resume();
                std::thread::sleep(Duration::from_millis(150));
            }
            server.resume();
        })
    };
    let started = Instant::now();
    let (mut admitted, mut slowest, mut requests) = (0, Duration::ZERO, 0);
    while started.elapsed() < Duration::from_secs(3) {
        let sent = Instant::now();
        if limiter.check("burst", &key, 1).await?.allowed {
            admitted += 1;
        }
        slowest = slowest.max(sent.elapsed());
        let sent = Instant::now();
        if limiter.check("global", &everyone, 1).await?.allowed {
            global_admitted += 1;
        } else {
            global_rejected += 1;
        }
        slowest = slowest.max(sent.elapsed());
        requests += 2;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.store(false, Ordering::SeqCst);
    flapper.join().expect("the flapper");
    let switches = store.switches();
    eprintln!(
        "{requests} requests, {switches} switches, slowest {slowest:?}, admitted {admitted}, \
         global {global_admitted} admitted {global_rejected} rejected"
    );
    assert!(switches <= 6, "{switches} switches in 3 s");
    assert!(slowest < deadline * 2, "a request waited {slowest:?}");
    assert!(admitted <= 11, "{admitted} admitted on a burst of 10");
    // A global limit still rejects: one quota (and what 3 s refill) in all.
    assert!(
        global_admitted <= 53,
        "{global_admitted} admitted on 50 a minute"
    );
    assert!(global_rejected > 0);
    Ok(())
}

/// A key blocked for ten minutes through this process; Redis dies, and comes back
/// empty on the same port. Before it decides again, the fallback re-asserts the block
/// there: Redis itself reports it, for what is left of the ten minutes.
#[tokio::test]
async fn a_block_holds_on_a_redis_that_comes_back_empty() -> TestResult {
    let mut server = RedisServer::start();
    let redis = || -> Result<RedisStore, Box<dyn std::error::Error>> {
        Ok(RedisStore::from_url(&server.url())?
            .deadline(Duration::from_millis(500))?
            .denial_cache(0))
    };
    let store = Fallback::new(redis()?, MemoryStore::new())
        .min_down(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(50));
    let api = || Limit::new("api", Quota::per_minute(100)).expect("a limit");
    let limiter = limiter(vec![api()], store.clone());
    let mallory = Key::from("mallory");
    limiter
        .block("api", &mallory, Duration::from_secs(600))
        .await?;

    server.kill();
    // The outage is seen: the insurance store serves, and mallory stays blocked.
    assert!(!limiter.check("api", &mallory, 1).await?.allowed);
    assert!(!store.serving_primary());
    server.restart();
    until_primary(&store).await;

    let direct = limiter_on_redis(&server.url(), api())?;
    let on_redis = direct.check("api", &mallory, 0).await?;
    let left = on_redis.blocked_for.expect("blocked on Redis");
    assert!(left > Duration::from_secs(590), "{left:?}");
    assert!(!limiter.check("api", &mallory, 1).await?.allowed);
    Ok(())
}

fn limiter_on_redis(url: &str, limit: Limit) -> Result<Limiter, Box<dyn std::error::Error>> {
    let redis = RedisStore::from_url(url)?
        .deadline(Duration::from_secs(2))?
        .denial_cache(0);
    Ok(limiter(vec![limit], redis))
}

/// While Redis is down, an operator blocks 2,000 keys (one of them for an hour). Redis
/// comes back empty: the blocks are replayed in the background, a bounded number at
/// once, before Redis decides again. No request waits for the replay, and the key
/// blocked for an hour is never admitted, before, during or after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_blocks_are_replayed_in_the_background_before_redis_decides_again() -> TestResult {
    let mut server = RedisServer::start();
    let redis = RedisStore::from_url(&server.url())?
        .deadline(Duration::from_millis(500))?
        .denial_cache(0);
    let store = Fallback::new(redis, MemoryStore::new())
        .min_down(Duration::from_millis(100))
        .probe_interval(Duration::from_millis(50));
    let api = || Limit::new("api", Quota::per_minute(1_000)).expect("a limit");
    let limiter = limiter(vec![api()], store.clone());
    let hour = Key::from("blocked-for-an-hour");
    assert!(limiter.check("api", &hour, 1).await?.allowed);

    server.kill();
    assert!(
        limiter
            .check("api", &Key::from("someone"), 1)
            .await?
            .allowed
    );
    assert!(!store.serving_primary());
    limiter
        .block("api", &hour, Duration::from_secs(3_600))
        .await?;
    for i in 0..2_000 {
        limiter
            .block(
                "api",
                &Key::from(format!("abuser-{i}").as_str()),
                Duration::from_secs(600),
            )
            .await?;
    }
    server.restart();

    let started = Instant::now();
    let (mut slowest, mut admitted, mut asked) = (Duration::ZERO, 0, 0);
    let mut recovered = None;
    while !store.serving_primary() || started.elapsed() < Duration::from_millis(300) {
        if store.serving_primary() {
            recovered.get_or_insert(started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never recovered"
        );
        let sent = Instant::now();
        if limiter.check("api", &hour, 1).await?.allowed {
            admitted += 1;
        }
        slowest = slowest.max(sent.elapsed());
        asked += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    eprintln!("recovered in {recovered:?}; {asked} requests, slowest {slowest:?}");
    assert_eq!(admitted, 0, "the hour's block held through the replay");
    assert!(
        slowest < Duration::from_millis(250),
        "a request waited {slowest:?}"
    );
    let direct = limiter_on_redis(&server.url(), api())?;
    for key in [hour, Key::from("abuser-0"), Key::from("abuser-1999")] {
        assert!(direct.check("api", &key, 0).await?.blocked_for.is_some());
    }
    Ok(())
}
