//! The store as an ACL user allowed exactly what the README's "ACL rules" list (its
//! commands, on its prefix's keys): every kind of call works, and nothing else is
//! allowed. A server that will not run the store's scripts (EVALSHA forbidden, or
//! renamed away as on a server without Lua) fails the first call with an error that
//! says what the store needs.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{RedisServer, cli_as, server_version};
use tollgate::store::Store;
use tollgate::{Algorithm, Key, Limit, Limiter, Penalty, Quota, RedisStore, StoreErrorKind};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The commands the store sends (`EVALSHA`, `SCRIPT LOAD` after a `NOSCRIPT`, `ZREM`
/// to give an in-flight slot back) and those its scripts run. The README's table
/// lists the same.
const COMMANDS: [&str; 18] = [
    "+evalsha",
    "+script|load",
    "+time",
    "+get",
    "+set",
    "+del",
    "+exists",
    "+pexpire",
    "+pttl",
    "+setrange",
    "+zadd",
    "+zcard",
    "+zrange",
    "+zrangebyscore",
    "+zrevrangebyscore",
    "+zremrangebyscore",
    "+zscore",
    "+zrem",
];

/// With functions (Redis 7, Valkey): single decisions are `FCALL`s of a library the
/// store loads itself. Optional: without them the store runs scripts.
const FUNCTION_COMMANDS: [&str; 2] = ["+fcall", "+function|load"];

/// Creates user `name` with `COMMANDS` (and the function commands where the server
/// has them), less `without`, on the keys of `prefix`; returns its URL.
fn restricted_user(server: &RedisServer, name: &str, prefix: &str, without: &[&str]) -> String {
    let pattern = format!("~{prefix}:*");
    let mut rules = vec![
        "ACL", "SETUSER", name, "reset", "on", ">secret", &pattern, "-@all",
    ];
    rules.extend(COMMANDS.iter().filter(|c| !without.contains(c)));
    if server_version().has_functions() {
        rules.extend(FUNCTION_COMMANDS.iter().filter(|c| !without.contains(c)));
    }
    assert_eq!(server.cli(&rules), "OK");
    format!("redis://{name}:secret@127.0.0.1:{}", server.port())
}

fn store(url: &str, prefix: &str) -> Result<RedisStore, tollgate::ConfigError> {
    RedisStore::from_url(url)?
        .prefix(prefix)
        .denial_cache(0)
        .deadline(Duration::from_secs(5))
}

#[tokio::test]
async fn the_store_runs_as_a_user_allowed_only_the_listed_commands_on_its_prefix() -> TestResult {
    let server = RedisServer::start();
    let url = restricted_user(&server, "tollgate", "acl", &[]);
    let store = store(&url, "acl")?;
    let mut builder = Limiter::builder().store(store.clone());
    for algorithm in support::every_algorithm(4) {
        builder = builder.limit(
            Limit::new(algorithm.name(), Quota::per_minute(5))?
                .algorithm(algorithm)
                .penalty(
                    Penalty::after(2)
                        .within(Duration::from_secs(60))
                        .block_for(Duration::from_secs(60)),
                ),
        );
    }
    let limiter = builder.build()?;
    let (alice, bob) = (Key::from("alice"), Key::from("bob"));
    for algorithm in support::every_algorithm(4) {
        let name = algorithm.name();
        // A decision (the function library where the server has one), a batch, a
        // refund, a peek, a reservation, a penalty, a block and a reset.
        assert!(limiter.check(name, &alice, 1).await?.allowed, "{name}");
        let both = limiter
            .check_all(&[(name, &alice, 1), (name, &bob, 1)])
            .await?;
        assert!(both.iter().all(|d| d.allowed), "{name}");
        limiter.refund(name, &alice, 1).await?;
        assert_eq!(limiter.peek(name, &alice).await?.remaining, 4, "{name}");
        let wait = limiter
            .reserve(name, &bob, 1, Duration::from_secs(60))
            .await?;
        assert!(wait.allowed, "{name}");
        limiter.penalize(name, &bob, 1).await?;
        assert!(
            !limiter
                .block(name, &bob, Duration::from_secs(60))
                .await?
                .allowed
        );
        assert!(
            !limiter.check(name, &bob, 1).await?.allowed,
            "{name}: blocked"
        );
        limiter.reset(name, &bob).await?;
        assert!(limiter.check(name, &bob, 1).await?.allowed, "{name}: reset");
    }
    // Single decisions went to the function library wherever there is one.
    assert_eq!(store.get_functions(), server_version().has_functions());
    // In-flight slots: taken, renewed (a record lives 1 s unless renewed, every
    // third of that), given back.
    let slots = store.in_flight_ttl(Duration::from_secs(1))?;
    let limit = Limit::new("jobs", Quota::per_minute(2))?.algorithm(Algorithm::Gcra);
    let held = slots.acquire_in_flight(&limit, &alice, 1).await?;
    assert!(held.is_some());
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(slots.acquire_in_flight(&limit, &alice, 1).await?.is_none());
    assert_eq!(slots.in_flight_slots_lost(), 0);
    drop(held);
    let freed = std::time::Instant::now();
    while slots.acquire_in_flight(&limit, &alice, 1).await?.is_none() {
        assert!(
            freed.elapsed() < Duration::from_secs(5),
            "the slot never came back"
        );
    }
    // Nothing more: the user reaches no key outside the prefix and no other command.
    let outside = cli_as(server.port(), "tollgate", "secret", &["GET", "other:x"]);
    assert!(outside.starts_with("NOPERM"), "{outside}");
    let other = cli_as(server.port(), "tollgate", "secret", &["KEYS", "acl:*"]);
    assert!(other.starts_with("NOPERM"), "{other}");
    Ok(())
}

#[tokio::test]
async fn a_user_without_evalsha_gets_an_error_that_names_what_the_store_needs() -> TestResult {
    let server = RedisServer::start();
    let url = restricted_user(&server, "noscripts", "acl", &["+evalsha"]);
    // Functions alone would do single decisions; turned off, the first is a script.
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(5))?)
        .store(store(&url, "acl")?.functions(false))
        .build()?;
    let err = limiter
        .check("api", &Key::from("alice"), 1)
        .await
        .expect_err("no scripts, no decisions");
    assert_eq!(err.kind(), StoreErrorKind::Protocol, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("NOPERM") && text.contains("EVALSHA, SCRIPT LOAD"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_without_scripting_gets_an_error_that_names_what_the_store_needs() -> TestResult {
    // EVALSHA renamed away: what a client sees of a server built or configured
    // without Lua (Valkey 9 can run with its Lua module unloaded).
    let server = RedisServer::start_with(&["--rename-command", "EVALSHA", ""]);
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(5))?)
        .store(store(&server.url(), "none")?.functions(false))
        .build()?;
    let err = limiter
        .check("api", &Key::from("alice"), 1)
        .await
        .expect_err("no scripts, no decisions");
    assert_eq!(err.kind(), StoreErrorKind::Protocol, "{err}");
    assert!(err.to_string().contains("EVALSHA, SCRIPT LOAD"), "{err}");
    Ok(())
}
