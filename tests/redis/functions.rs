//! The function library against a private redis-server: single decisions are `FCALL`s
//! of a library the store loads once, again after `FUNCTION FLUSH`; refunds and
//! batches stay scripts; a server that refuses functions (an ACL without them) gets
//! scripts instead, with the same answers, while one that cannot load the library for
//! now (out of memory) is asked again; `functions(false)` never calls one.
//!
//! On a server without functions (Redis 6.2), each test checks the script path
//! instead: the store goes back to scripts by itself, with the same answers.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{RedisServer, server_version};
use tollgate::{Key, Limit, Limiter, Quota, RedisStore, StoreErrorKind};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn limiter(store: RedisStore) -> Result<Limiter, Box<dyn std::error::Error>> {
    let store = store
        .denial_cache(0)
        // Answers, not speed, on a possibly busy machine.
        .deadline(Duration::from_secs(5))?;
    Ok(Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(3))?)
        .limit(Limit::new("hour", Quota::per_hour(100))?)
        .store(store)
        .build()?)
}

/// `calls=` of one command in `INFO commandstats` (0 when never called).
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{command}:")))
        .and_then(|l| l.split([':', ',']).find_map(|f| f.strip_prefix("calls=")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Whether the server has Redis Functions (Redis 7 and later, every Valkey).
fn functions_here() -> bool {
    server_version().has_functions()
}

/// Three admitted, then denied: the answers every test below expects.
async fn spend(limiter: &Limiter, key: &Key) -> TestResult {
    for remaining in [2, 1, 0] {
        let d = limiter.check("api", key, 1).await?;
        assert!(d.allowed);
        assert_eq!(d.remaining, remaining);
    }
    let denied = limiter.check("api", key, 1).await?;
    assert!(!denied.allowed);
    assert!(denied.retry_after.is_some());
    Ok(())
}

#[tokio::test]
async fn single_decisions_call_the_library_loaded_once() -> TestResult {
    let server = RedisServer::start();
    let store = RedisStore::from_url(&server.url())?;
    assert!(store.get_functions());
    let limiter = limiter(store.clone())?;
    spend(&limiter, &Key::from("alice")).await?;
    spend(&limiter, &Key::from("bob")).await?;
    if !functions_here() {
        // Redis 6: the first FCALL is an unknown command, and every decision a script
        // (the first one's NOSCRIPT before redis-rs loaded it).
        assert!(!store.get_functions());
        assert_eq!(calls(&server, "evalsha"), 8 + 1);
        return Ok(());
    }
    // Every decision is one FCALL, and the first one's "Function not found" before
    // the store loaded the library.
    assert_eq!(calls(&server, "function|load"), 1);
    assert_eq!(calls(&server, "fcall"), 8 + 1);
    assert_eq!(calls(&server, "evalsha"), 0);
    let listed = server.cli(&["FUNCTION", "LIST"]);
    assert!(listed.contains("tollgate_"), "{listed}");
    assert!(store.get_functions());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_calls_load_the_library_once() -> TestResult {
    let server = RedisServer::start();
    let store = RedisStore::from_url(&server.url())?;
    let limiter = limiter(store)?;
    // 64 calls at once on a server without the library: each FCALL that finds it
    // missing waits for the one load in flight instead of loading it again (a load
    // compiles the library: about half a millisecond of Redis time each).
    let calls_at_once: Vec<_> = (0..64_u64)
        .map(|i| {
            let limiter = limiter.clone();
            tokio::spawn(async move { limiter.check("api", &Key::from(i), 1).await })
        })
        .collect();
    for call in calls_at_once {
        assert!(call.await??.allowed);
    }
    if !functions_here() {
        // Redis 6: every call went back to the script.
        assert!(calls(&server, "evalsha") >= 64);
        return Ok(());
    }
    assert_eq!(calls(&server, "function|load"), 1);
    assert_eq!(calls(&server, "evalsha"), 0);
    Ok(())
}

#[tokio::test]
async fn refunds_and_batches_stay_scripts() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(RedisStore::from_url(&server.url())?)?;
    let key = Key::from("carol");
    let both = limiter
        .check_all(&[("api", &key, 1), ("hour", &key, 1)])
        .await?;
    assert!(both.iter().all(|d| d.allowed));
    limiter.refund("api", &key, 1).await?;
    assert_eq!(calls(&server, "fcall"), 0);
    // Two script calls, and the first one's NOSCRIPT before redis-rs loaded it.
    assert_eq!(calls(&server, "evalsha"), 2 + 1);
    // The refund gave the batch's charge back: three left again.
    assert_eq!(limiter.check("api", &key, 1).await?.remaining, 2);
    if functions_here() {
        assert_eq!(calls(&server, "fcall"), 2);
    } else {
        // Redis 6: the decision too is a call of the same script.
        assert_eq!(calls(&server, "evalsha"), 2 + 1 + 1);
    }
    Ok(())
}

#[tokio::test]
async fn function_flush_reloads_the_library_and_keeps_the_state() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(RedisStore::from_url(&server.url())?)?;
    let key = Key::from("dave");
    assert_eq!(limiter.check("api", &key, 1).await?.remaining, 2);
    if !functions_here() {
        // Redis 6: the script is flushed instead, and loaded again by itself.
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
        assert_eq!(limiter.check("api", &key, 1).await?.remaining, 1);
        assert_eq!(limiter.check("api", &key, 1).await?.remaining, 0);
        assert!(!limiter.check("api", &key, 1).await?.allowed);
        // Each load follows a NOSCRIPT: one for the first decision, one after the
        // flush (Redis 6 counts SCRIPT LOAD and SCRIPT FLUSH as one command).
        assert_eq!(calls(&server, "script"), 2 + 1);
        return Ok(());
    }
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]), "OK");
    assert!(!server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"));
    // The state survived the flush (it is data, not code): two left, then one.
    assert_eq!(limiter.check("api", &key, 1).await?.remaining, 1);
    assert_eq!(limiter.check("api", &key, 1).await?.remaining, 0);
    assert!(!limiter.check("api", &key, 1).await?.allowed);
    assert_eq!(calls(&server, "function|load"), 2);
    assert!(server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"));
    Ok(())
}

#[tokio::test]
async fn a_user_without_functions_gets_scripts_with_the_same_answers() -> TestResult {
    let server = RedisServer::start();
    // Everything but the function commands (FCALL, FUNCTION, ...), as some managed
    // services and careful operators configure it (Redis 6 has none to take away).
    let mut rules = vec!["ACL", "SETUSER", "limited", "on", ">secret", "~*", "+@all"];
    if functions_here() {
        rules.extend(["-fcall", "-fcall_ro", "-function"]);
    }
    assert_eq!(server.cli(&rules), "OK");
    let url = format!("redis://limited:secret@127.0.0.1:{}", server.port());
    let store = RedisStore::from_url(&url)?;
    let limiter = limiter(store.clone())?;
    spend(&limiter, &Key::from("erin")).await?;
    assert!(!store.get_functions());
    assert_eq!(calls(&server, "function|load"), 0);
    assert_eq!(calls(&server, "evalsha"), 4 + 1);
    assert!(!server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"));
    Ok(())
}

#[tokio::test]
async fn functions_off_runs_scripts_only() -> TestResult {
    let server = RedisServer::start();
    let store = RedisStore::from_url(&server.url())?.functions(false);
    let limiter = limiter(store)?;
    spend(&limiter, &Key::from("frank")).await?;
    assert_eq!(calls(&server, "fcall") + calls(&server, "function|load"), 0);
    // Four decisions, and the first one's NOSCRIPT before redis-rs loaded it.
    assert_eq!(calls(&server, "evalsha"), 4 + 1);
    Ok(())
}

#[tokio::test]
async fn a_library_refused_for_lack_of_memory_is_loaded_once_there_is_room() -> TestResult {
    let server = RedisServer::start();
    // About 3 MB of data, then a 1 MB limit without eviction: every command that may
    // use memory (FUNCTION LOAD, a decision's SET) is refused with OOM.
    server.cli(&[
        "EVAL",
        "for i = 1, 20000 do redis.call('SET', 'junk:' .. i, string.rep('x', 100)) end",
        "0",
    ]);
    assert_eq!(
        server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
        "OK"
    );
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "1mb"]), "OK");
    let store = RedisStore::from_url(&server.url())?;
    let limiter = limiter(store.clone())?;
    let key = Key::from("grace");
    let full = limiter
        .check("api", &key, 1)
        .await
        .expect_err("no room for the library nor the state");
    assert_eq!(full.kind(), StoreErrorKind::Unavailable, "{full}");
    if !functions_here() {
        // Redis 6: the script's SET was refused (inside Redis 6's own error), and
        // the decision is taken once there is room.
        assert!(!store.get_functions());
        assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
        spend(&limiter, &key).await?;
        return Ok(());
    }
    // Not a refusal for good: the store still means to use functions.
    assert!(store.get_functions());
    assert_eq!(server.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    spend(&limiter, &key).await?;
    assert!(store.get_functions());
    assert!(server.cli(&["FUNCTION", "LIST"]).contains("tollgate_"));
    assert_eq!(calls(&server, "evalsha"), 0);
    Ok(())
}
