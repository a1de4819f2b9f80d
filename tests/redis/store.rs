//! `RedisStore` against a private redis-server: the same answers as the memory store
//! on random sequences (through the function library and through scripts) and on log
//! denials at every cost, keys and TTLs, batches, refunds, validation and the
//! denial cache (two processes' caches: `denial_cache.rs`).
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{RedisServer, shared_server, unique_prefix};
use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Store};
use tollgate::{Algorithm, ConfigError, Key, Limit, Limiter, MemoryStore, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// `policy` on the memory store, on Redis through the function library (single
/// decisions' default) and on Redis through scripts (`EVALSHA`), all on `clock`: the
/// three must answer alike.
fn memory_functions_scripts(
    policy: Limit,
    server: &RedisServer,
    clock: &ManualClock,
) -> Result<[Limiter; 3], ConfigError> {
    Ok([
        Limiter::builder()
            .limit(policy.clone())
            .store(MemoryStore::with_clock(clock.clone()))
            .build()?,
        Limiter::builder()
            .limit(policy.clone())
            .store(store_on(server, clock))
            .build()?,
        Limiter::builder()
            .limit(policy)
            .store(store_on(server, clock).functions(false))
            .build()?,
    ])
}

fn store_on(server: &RedisServer, clock: &ManualClock) -> RedisStore {
    RedisStore::from_url(&server.url())
        .expect("a valid url")
        .prefix(&unique_prefix("store"))
        .denial_cache(0)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(std::time::Duration::from_secs(5))
        .expect("a deadline")
        .with_clock(clock.clone())
}

/// A small deterministic generator, so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// (quota, burst, algorithm): exact and inexact emission intervals, sub-windows,
/// rational token refills, long and short periods.
fn cases() -> Vec<(&'static str, Option<u64>, Algorithm)> {
    vec![
        ("5/s", None, Algorithm::FixedWindow),
        ("7 per 3 seconds", None, Algorithm::FixedWindow),
        ("10/s", None, Algorithm::SlidingWindow),
        ("13 per 7 seconds", None, Algorithm::SlidingWindow),
        ("8/s", None, Algorithm::SlidingWindowCounters { buckets: 4 }),
        (
            "12/min",
            None,
            Algorithm::SlidingWindowCounters { buckets: 6 },
        ),
        ("5/s", None, Algorithm::SlidingWindowLog),
        ("9 per 2 seconds", None, Algorithm::SlidingWindowLog),
        ("50 per 2 seconds", None, Algorithm::SlidingWindowLog),
        ("10/s", Some(5), Algorithm::TokenBucket),
        ("3/s", None, Algorithm::TokenBucket),
        ("7 per 3 seconds", Some(4), Algorithm::TokenBucket),
        ("10/s", Some(5), Algorithm::Gcra),
        ("3/s", None, Algorithm::Gcra),
        ("7/day", Some(3), Algorithm::Gcra),
        ("1000000/s", Some(9), Algorithm::Gcra),
        ("10/s", Some(3), Algorithm::LeakyBucket),
        ("3/s", Some(2), Algorithm::LeakyBucket),
        ("7 per 3 seconds", Some(4), Algorithm::LeakyBucket),
    ]
}

#[tokio::test]
async fn answers_like_the_memory_store_on_random_sequences() -> TestResult {
    let server = shared_server();
    for (case, (quota, burst, algorithm)) in cases().into_iter().enumerate() {
        let mut q: Quota = quota.parse()?;
        if let Some(b) = burst {
            q = q.with_burst(b)?;
        }
        let policy = || Limit::new("diff", q).map(|p| p.algorithm(algorithm));
        let clock = ManualClock::new(BASE);
        let [memory, redis, scripts] = memory_functions_scripts(policy()?, server, &clock)?;
        let capacity = burst.unwrap_or(q.limit());
        let period_us = q.period().as_micros() as u64;
        let key = Key::from("subject");
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ case as u64);
        let mut now = 0_u64;
        // The key starts with state: the memory store's floor is per shard and also
        // moves on peeks and denials of keys it holds nothing for, while Redis keeps
        // the latest instant only in a key's own state (it never writes for unknown
        // keys), so before the first charge a clock stepping back can differ.
        let first = memory.check("diff", &key, 1).await?;
        assert_eq!(first, redis.check("diff", &key, 1).await?);
        assert_eq!(first, scripts.check("diff", &key, 1).await?);
        for step in 0..500 {
            // Mostly small steps, sometimes a jump, sometimes the clock goes back.
            match rng.below(10) {
                0 => now += rng.below(period_us * 2),
                1 => now = now.saturating_sub(rng.below(period_us / 3 + 1)),
                2..=4 => {}
                _ => now += rng.below(period_us / capacity.max(1) + 2),
            }
            clock.set(BASE + Duration::from_micros(now));
            if rng.below(8) == 0 {
                let amount = rng.below(capacity + 2) as u32;
                memory.refund("diff", &key, amount).await?;
                redis.refund("diff", &key, amount).await?;
                scripts.refund("diff", &key, amount).await?;
                continue;
            }
            let cost = match rng.below(6) {
                0 => 0,
                1 => capacity as u32 + 1,
                _ => rng.below(capacity.min(4)) as u32 + 1,
            };
            let want = memory.check("diff", &key, cost).await?;
            let got = redis.check("diff", &key, cost).await?;
            let by_script = scripts.check("diff", &key, cost).await?;
            let at = format!(
                "{algorithm} at {quota} (burst {burst:?}), step {step}, t = {now} µs, cost {cost}"
            );
            assert_eq!(got, want, "function: {at}");
            assert_eq!(by_script, want, "script: {at}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_key_written_has_a_ttl() -> TestResult {
    let server = shared_server();
    let clock = ManualClock::new(BASE);
    let prefix = unique_prefix("ttl");
    let store = RedisStore::from_url(&server.url())?
        .prefix(&prefix)
        .deadline(Duration::from_secs(5))?
        .with_clock(clock.clone());
    let mut builder = Limiter::builder().store(store);
    let algorithms = support::every_algorithm(6);
    for algorithm in algorithms {
        builder =
            builder.limit(Limit::new(algorithm.name(), Quota::per_minute(5))?.algorithm(algorithm));
    }
    let limiter = builder.build()?;
    for algorithm in algorithms {
        for caller in ["alice", "bob"] {
            limiter
                .check(algorithm.name(), &Key::from(caller), 2)
                .await?;
            limiter
                .refund(algorithm.name(), &Key::from(caller), 1)
                .await?;
            limiter
                .check(algorithm.name(), &Key::from(caller), 5)
                .await?;
        }
    }
    let keys = server.cli(&["--scan", "--pattern", &format!("{prefix}:*")]);
    let keys: Vec<&str> = keys.lines().collect();
    // Seven policies × two callers, plus the log's sorted sets.
    assert_eq!(keys.len(), 7 * 2 + 2, "{keys:?}");
    for key in keys {
        let ttl: i64 = server.cli(&["PTTL", key]).parse()?;
        // Positive, and never longer than the state can matter: a sliding window's
        // count weighs on the next window too (two minutes), rounded up to the second,
        // plus one second of slack.
        assert!(ttl > 0 && ttl <= 122_000, "{key}: PTTL {ttl}");
    }
    Ok(())
}

/// A busy key's writes mostly keep its TTL (`SET … KEEPTTL`, see prelude.lua): that
/// must never leave a key to expire while its state still counts. Each algorithm's key
/// is charged every 37 ms for 4 s (across whole-second boundaries, where the TTL
/// moves) at a quota it never exhausts, with refunds mixed in (their writes set the
/// TTL their own way); after every charge the key lives at least until its limit
/// resets.
///
/// A TTL runs down on the server's clock, a state's reset on the decision's: the
/// injected clock keeps pace with real time, as the server's own clock does in
/// production (a step sleeps when ahead, and takes more than 37 ms when the machine
/// is slower). An injected clock left behind real time would let keys expire by the
/// lag (on a loaded machine, by more than the TTL's second of slack: a key gone
/// outright), which says nothing about the store.
#[tokio::test]
async fn a_busy_keys_kept_ttl_always_covers_its_state() -> TestResult {
    let server = shared_server();
    let start = BASE + Duration::from_millis(500);
    let clock = ManualClock::new(start);
    let store = store_on(server, &clock);
    let algorithms = support::every_algorithm(4);
    let mut builder = Limiter::builder().store(store.clone());
    for algorithm in algorithms {
        // 1000 per 2 s: a charge of 3 every 37 ms spends about 160 of them per 2 s.
        let quota = Quota::new(1000, Duration::from_secs(2))?;
        builder = builder.limit(Limit::new(algorithm.name(), quota)?.algorithm(algorithm));
    }
    let limiter = builder.build()?;
    let key = Key::from("busy");
    let started = std::time::Instant::now();
    for step in 0..108 {
        let due = Duration::from_millis(37) * (step + 1);
        if let Some(ahead) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(ahead).await;
        }
        let at = started.elapsed();
        clock.set(start + at);
        for algorithm in algorithms {
            let mut d = limiter.check(algorithm.name(), &key, 3).await?;
            if step % 7 == 0 {
                // A second charge at the same instant: the log's entries merge.
                d = limiter.check(algorithm.name(), &key, 2).await?;
            }
            assert!(d.allowed, "{algorithm} at step {step}");
            if step % 10 == 9 {
                limiter.refund(algorithm.name(), &key, 1).await?;
            }
            let policy = limiter.limit(algorithm.name()).ok_or("policy")?;
            let name = store.state_key(&policy, &key);
            let reset = i64::try_from(d.reset_after.as_millis())?;
            let mut names = vec![name.clone()];
            if algorithm == Algorithm::SlidingWindowLog {
                names.push(format!("{name}:log"));
            }
            for name in names {
                let ttl: i64 = server.cli(&["PTTL", &name]).parse()?;
                // The TTL has run down for the real time since the step's instant.
                let since = i64::try_from(started.elapsed().saturating_sub(at).as_millis())?;
                assert!(
                    ttl > 0 && ttl + since >= reset,
                    "{name} at step {step}: PTTL {ttl} ms {since} ms after the decision, \
                     resets in {reset} ms"
                );
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn caller_bytes_cannot_pick_the_slot_or_lengthen_keys() -> TestResult {
    let store = RedisStore::from_url(&shared_server().url())?.prefix("p{x}");
    let policy = Limit::new("a{b}", Quota::per_second(1))?;
    let short = store.state_key(&policy, &Key::from("x"));
    for caller in ["{tag}", "}{", "{}", &"{long}".repeat(100_000)] {
        let name = store.state_key(&policy, &Key::from(caller));
        let open = name.find('{').ok_or("no hash tag")?;
        let close = name[open..].find('}').ok_or("no hash tag end")? + open;
        // The only hash tag is the caller key's 32-hex-digit fingerprint.
        assert_eq!(&name[open + 1..close], Key::from(caller).to_hex());
        assert_eq!(name.len(), short.len());
    }
    assert!(short.starts_with("p%7Bx%7D:a%7Bb%7D:{"));
    Ok(())
}

#[tokio::test]
async fn batches_charge_every_policy_or_none() -> TestResult {
    let clock = ManualClock::new(BASE);
    let limiter = Limiter::builder()
        .limit(Limit::new("burst", Quota::per_second(1))?.algorithm(Algorithm::TokenBucket))
        .limit(Limit::new("daily", Quota::per_day(100))?.algorithm(Algorithm::SlidingWindowLog))
        .store(store_on(shared_server(), &clock))
        .build()?;
    let alice = Key::from("alice");
    let both = [("burst", &alice, 1), ("daily", &alice, 1)];
    assert!(limiter.check_all(&both).await?.iter().all(|d| d.allowed));
    let second = limiter.check_all(&both).await?;
    assert!(!second[0].allowed && second[1].allowed);
    assert_eq!(limiter.check("daily", &alice, 0).await?.remaining, 99);
    // One batch naming the same key twice: each part fits alone, not together.
    clock.advance(Duration::from_secs(1));
    let twice = limiter
        .check_all(&[("burst", &alice, 1), ("burst", &alice, 1)])
        .await?;
    assert!(!twice[1].allowed);
    assert_eq!(limiter.check("burst", &alice, 0).await?.remaining, 1);
    Ok(())
}

#[tokio::test]
async fn refunds_return_the_newest_charges() -> TestResult {
    let clock = ManualClock::new(BASE);
    let limiter = Limiter::builder()
        .limit(Limit::new("login", Quota::per_minute(5))?.algorithm(Algorithm::SlidingWindowLog))
        .store(store_on(shared_server(), &clock))
        .build()?;
    let key = Key::from("alice");
    limiter.check("login", &key, 3).await?;
    limiter.refund("login", &key, 1).await?;
    assert_eq!(limiter.check("login", &key, 0).await?.remaining, 3);
    limiter.refund("login", &key, 100).await?;
    assert_eq!(limiter.check("login", &key, 0).await?.remaining, 5);
    Ok(())
}

#[test]
fn rejects_policies_lua_cannot_compute_exactly() -> TestResult {
    let store = RedisStore::from_url("redis://127.0.0.1:1")?;
    let err = Limiter::builder()
        .limit(Limit::new("huge", Quota::per_day(1_000_000))?.algorithm(Algorithm::SlidingWindow))
        .store(store.clone())
        .build()
        .expect_err("L·P beyond 2^53");
    assert!(err.to_string().contains("\"huge\""), "{err}");
    // The same quota is fine on every other algorithm.
    Limiter::builder()
        .limit(
            Limit::new("huge", Quota::per_day(1_000_000))?
                .algorithm(Algorithm::SlidingWindowCounters { buckets: 24 }),
        )
        .store(store)
        .build()?;
    Ok(())
}

#[tokio::test]
async fn server_time_is_the_default_clock() -> TestResult {
    let store = RedisStore::from_url(&shared_server().url())?
        .prefix(&unique_prefix("time"))
        .deadline(Duration::from_secs(5))?;
    let policy = Limit::new("api", Quota::per_day(2))?;
    let key = Key::from("alice");
    let charge = Charge {
        limit: &policy,
        key: &key,
        cost: 1,
    };
    assert!(store.decide(&[charge]).await?[0].allowed);
    assert!(store.decide(&[charge]).await?[0].allowed);
    let denied = store.decide(&[charge]).await?.remove(0);
    assert!(!denied.allowed);
    // GCRA at 2/day: the next request fits half a day after the first.
    let retry = denied.retry_after.ok_or("a retry")?;
    assert!(retry > Duration::from_secs(43_000) && retry <= Duration::from_secs(43_200));
    Ok(())
}

#[tokio::test]
async fn blocked_keys_are_denied_locally_until_their_retry() -> TestResult {
    let server = RedisServer::start();
    let clock = ManualClock::new(BASE);
    let store = RedisStore::from_url(&server.url())?
        .deadline(Duration::from_millis(500))?
        .with_clock(clock.clone());
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(2))?.algorithm(Algorithm::FixedWindow))
        .store(store.clone())
        .build()?;
    let key = Key::from("mallory");
    limiter.check("api", &key, 2).await?;
    let denied = limiter.check("api", &key, 1).await?;
    assert_eq!(denied.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(store.blocked_keys(), 1);
    // Redis is gone: only a local answer can come back, and it does.
    server.pause();
    clock.advance(Duration::from_millis(400));
    let local = limiter.check("api", &key, 1).await?;
    assert!(!local.allowed);
    assert_eq!(local.retry_after, Some(Duration::from_millis(600)));
    assert_eq!(local.remaining, 0);
    // A smaller cost than the one denied is not known to be blocked: it asks Redis.
    assert!(limiter.check("api", &key, 0).await.is_err());
    server.resume();
    // Once the window ends, the key goes back to Redis and passes.
    clock.advance(Duration::from_millis(600));
    assert!(limiter.check("api", &key, 1).await?.allowed);
    assert_eq!(store.blocked_keys(), 0);
    Ok(())
}

#[tokio::test]
async fn a_store_with_another_prefix_does_not_share_cached_denials() -> TestResult {
    // A patient deadline: the first call connects and loads the library, which can
    // take longer than the default 50 ms on a loaded machine.
    let first = RedisStore::from_url(&shared_server().url())?
        .deadline(Duration::from_secs(5))?
        .prefix(&unique_prefix("first"));
    let second = first.clone().prefix(&unique_prefix("second"));
    let build = |store: RedisStore| {
        Limiter::builder()
            .limit(Limit::new("api", Quota::per_day(1)).expect("policy"))
            .store(store)
            .build()
            .expect("limiter")
    };
    let (a, b) = (build(first), build(second));
    let key = Key::from("alice");
    assert!(a.check("api", &key, 1).await?.allowed);
    assert!(
        !a.check("api", &key, 1).await?.allowed,
        "spent, and now cached"
    );
    assert!(
        b.check("api", &key, 1).await?.allowed,
        "another key space starts fresh"
    );
    Ok(())
}

#[tokio::test]
async fn log_denials_at_every_cost_answer_like_the_memory_store() -> TestResult {
    // A denial reads only the entries its retry time needs, from the oldest or from
    // the newest end, whichever is shorter: every cost from 1 to L, on logs of
    // entries of mixed costs, must still find the same entry as the Rust rule.
    let server = shared_server();
    let clock = ManualClock::new(BASE);
    let policy = || {
        Limit::new(
            "log",
            Quota::new(64, Duration::from_secs(10)).expect("a quota"),
        )
        .map(|p| p.algorithm(Algorithm::SlidingWindowLog))
    };
    let [memory, functions, scripts] = memory_functions_scripts(policy()?, server, &clock)?;
    let mut rng = Rng(0x5eed);
    // One clock for every round, never going back: the memory store's floor is per
    // shard, Redis's per key, so a clock stepping back could differ for a fresh key.
    let mut now = Duration::ZERO;
    for round in 0..6 {
        let key = Key::from(round);
        // Fill to the limit with entries costing 1 to 3, then let some leave.
        loop {
            now += Duration::from_millis(37);
            clock.set(BASE + now);
            let cost = rng.below(3) as u32 + 1;
            let want = memory.check("log", &key, cost).await?;
            assert_eq!(functions.check("log", &key, cost).await?, want);
            assert_eq!(scripts.check("log", &key, cost).await?, want);
            if !want.allowed {
                break;
            }
        }
        now += Duration::from_millis(round * 2_000);
        clock.set(BASE + now);
        for cost in 0..=65 {
            let want = memory.check("log", &key, cost).await?;
            let at = format!("round {round}, cost {cost}");
            assert_eq!(
                functions.check("log", &key, cost).await?,
                want,
                "function: {at}"
            );
            assert_eq!(
                scripts.check("log", &key, cost).await?,
                want,
                "script: {at}"
            );
        }
    }
    Ok(())
}
