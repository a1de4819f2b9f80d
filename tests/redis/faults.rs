//! Redis failing under load: flushed scripts, a killed server, a restarted one, a
//! stopped one (SIGSTOP, also counting the connections it is sent: no reconnect
//! storm), a read-only replica, a server busy with a script, a reply of the wrong
//! type, a stop longer than redis-rs's own response timeout, a connect cut short by
//! its runtime, and `Fallback` riding it out. Every call must come back, as a
//! decision or a `StoreError`, within the deadline (plus generous slack for a busy
//! test machine): never a panic, never a hang.
#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::redis_server::{RedisServer, server_version};
use tollgate::store::{Charge, Fallback, Store};
use tollgate::{Key, Limit, Limiter, MemoryStore, Quota, RedisStore, StoreErrorKind};

const DEADLINE: Duration = Duration::from_millis(50);
/// Scheduling noise on a loaded two-core machine, not a performance target.
const SLACK: Duration = Duration::from_millis(450);

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn store(server: &RedisServer) -> RedisStore {
    RedisStore::from_url(&server.url())
        .expect("a valid url")
        .deadline(DEADLINE)
        .expect("a deadline")
        .denial_cache(0)
}

fn limiter(store: impl Store) -> Limiter {
    Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(1_000_000)).expect("a policy"))
        .store(store)
        .build()
        .expect("a limiter")
}

#[tokio::test]
async fn a_call_after_script_flush_reloads_the_script() -> TestResult {
    let server = RedisServer::start();
    // What is tested is the reload after NOSCRIPT, not speed: a loaded CI machine can
    // take longer than the 50 ms production deadline for the extra round trips, and
    // the deadline itself is proven by the tests below.
    // Scripts only: single decisions otherwise call the function library, whose
    // reload after FUNCTION FLUSH is functions.rs's.
    let patient = store(&server)
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .functions(false);
    let limiter = limiter(patient);
    let key = Key::from("alice");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    Ok(())
}

/// 64 tasks call in a loop until `stop`; every call is checked for its duration and,
/// when it fails, for its error kind.
fn load(limiter: &Limiter, stop: &Arc<AtomicBool>) -> Vec<tokio::task::JoinHandle<(u64, u64)>> {
    (0..64)
        .map(|i| {
            let limiter = limiter.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let key = Key::from(i as u64);
                let (mut ok, mut failed) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let result = limiter.check("api", &key, 1).await;
                    let took = started.elapsed();
                    assert!(took <= DEADLINE + SLACK, "a call took {took:?}");
                    match result {
                        Ok(_) => ok += 1,
                        Err(err) => {
                            assert!(
                                matches!(
                                    err.kind(),
                                    StoreErrorKind::Connection | StoreErrorKind::Timeout
                                ),
                                "unexpected error {err}"
                            );
                            failed += 1;
                            // A down server fails fast: don't spin.
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                (ok, failed)
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_mid_load_fails_calls_within_the_deadline_then_restart_resumes() -> TestResult
{
    let mut server = RedisServer::start();
    let limiter = limiter(store(&server));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(&limiter, &stop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for task in tasks {
        let (o, f) = task.await?; // a panic in a task (a slow call) fails here
        ok += o;
        failed += f;
    }
    assert!(ok > 0 && failed > 0, "ok {ok}, failed {failed}");

    // Restarted: decisions resume within a second.
    server.restart();
    let restarted = Instant::now();
    loop {
        if limiter.check("api", &Key::from("after"), 1).await.is_ok() {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(1),
            "no decision 1 s after the restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

#[tokio::test]
async fn stopped_server_calls_time_out_within_the_deadline() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(store(&server));
    let key = Key::from("alice");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    server.pause();
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let result = limiter.check("api", &Key::from("alice"), 1).await;
                (started.elapsed(), result.map(|_| ()).map_err(|e| e.kind()))
            })
        })
        .collect();
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await?);
    }
    server.resume();
    for (took, result) in results {
        assert_eq!(result, Err(StoreErrorKind::Timeout));
        assert!(
            took >= DEADLINE && took <= DEADLINE + SLACK,
            "took {took:?}"
        );
    }
    // Resumed: answers come back.
    let resumed = Instant::now();
    while limiter.check("api", &key, 1).await.is_err() {
        assert!(
            resumed.elapsed() < Duration::from_secs(2),
            "no answer after SIGCONT"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_read_only_replica_is_unavailable() -> TestResult {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    let store = RedisStore::from_url(&replica.url())?.deadline(Duration::from_secs(5))?;
    let policy = Limit::new("api", Quota::per_second(5))?;
    let key = Key::from("alice");
    let err = store
        .decide(&[Charge {
            limit: &policy,
            key: &key,
            cost: 1,
        }])
        .await
        .expect_err("a replica refuses writes");
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_serves_from_memory_while_redis_is_down_and_returns() -> TestResult {
    let mut server = RedisServer::start();
    let redis = store(&server);
    let fallback = Fallback::new(redis.clone(), MemoryStore::new())
        .probe_interval(Duration::from_millis(100))
        .min_down(Duration::from_millis(100));
    let limiter = limiter(fallback.clone());
    let policy = limiter.limit("api").ok_or("policy")?.clone();
    let key = Key::from("alice");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    assert!(fallback.serving_primary());

    server.kill();
    for _ in 0..20 {
        let started = Instant::now();
        let decision = limiter.check("api", &key, 1).await?; // never an error
        assert!(decision.allowed);
        assert!(started.elapsed() <= DEADLINE + SLACK);
    }
    assert!(!fallback.serving_primary());

    server.restart();
    let restarted = Instant::now();
    while !fallback.serving_primary() {
        limiter.check("api", &key, 1).await?;
        assert!(
            restarted.elapsed() < Duration::from_secs(1),
            "still on the insurance store"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Back on Redis: the state lives there again.
    limiter.check("api", &key, 1).await?;
    let name = redis.state_key(&policy, &key);
    assert_eq!(server.cli(&["EXISTS", &name]), "1");
    Ok(())
}

/// `total_connections_received` of `INFO stats` (the `redis-cli` asking counts too).
fn connections_received(server: &RedisServer) -> u64 {
    server
        .cli(&["INFO", "stats"])
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_under_load_gets_a_bounded_number_of_reconnects() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(store(&server));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = load(&limiter, &stop);
    // Long enough for the shared connection to be one the store may replace (a
    // connection gets a second of grace after it is made).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let before = connections_received(&server);
    server.pause();
    // 64 tasks time out every 50 ms: about 1 300 timeouts in this second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.resume();
    let resumed = Instant::now();
    while limiter.check("api", &Key::from("after"), 1).await.is_err() {
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "no decision after SIGCONT"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for task in tasks {
        let (o, f) = task.await?;
        ok += o;
        failed += f;
    }
    // Less the `redis-cli` that asked.
    let received = connections_received(&server) - before - 1;
    eprintln!("{failed} failed calls, {ok} decisions, {received} connections received");
    assert!(failed >= 64, "every task timed out at least once: {failed}");
    // One connect at a time, and a silent connection replaced at most once a second.
    assert!(
        received <= 3,
        "{received} connections for {failed} failed calls"
    );
    Ok(())
}

#[test]
fn a_connect_cut_short_by_its_runtime_shutting_down_does_not_block_the_next() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(store(&server).deadline(Duration::from_millis(200))?);
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    };
    // The first call starts the connect in a task of the first runtime; the server
    // does not answer, so it is still under way when that runtime shuts down.
    server.pause();
    let first = runtime()?.block_on(limiter.check("api", &Key::from("alice"), 1));
    assert_eq!(
        first.map_err(|e| e.kind()).err(),
        Some(StoreErrorKind::Timeout)
    );
    server.resume();
    // Another runtime: its calls connect again rather than wait for the dead connect.
    runtime()?.block_on(async {
        let resumed = Instant::now();
        while limiter.check("api", &Key::from("alice"), 1).await.is_err() {
            assert!(
                resumed.elapsed() < Duration::from_secs(5),
                "no decision on the second runtime"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    Ok(())
}

#[tokio::test]
async fn a_call_waits_for_the_stores_deadline_not_the_pools_response_timeout() -> TestResult {
    let server = RedisServer::start();
    // A pool built the common way: redis-rs 1 gives its connections a response
    // timeout of 500 ms.
    #[allow(unused_mut)] // without deadpool, the URL's store alone
    let mut stores = vec![RedisStore::from_url(&server.url())?];
    #[cfg(feature = "deadpool")]
    stores.push(RedisStore::from_pool(
        deadpool_redis::Config::from_url(server.url())
            .create_pool(Some(deadpool_redis::Runtime::Tokio1))?,
    ));
    for store in stores {
        let limiter = limiter(store.deadline(Duration::from_secs(10))?.denial_cache(0));
        assert!(limiter.check("api", &Key::from("alice"), 1).await?.allowed);
        server.pause();
        let call = tokio::spawn({
            let limiter = limiter.clone();
            async move {
                let decision = limiter.check("api", &Key::from("alice"), 1).await;
                decision.map(|d| d.allowed).map_err(|e| e.to_string())
            }
        });
        // Stopped for twice redis-rs's timeout, well within the store's deadline.
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.resume();
        assert_eq!(call.await?, Ok(true));
    }
    Ok(())
}

#[tokio::test]
async fn a_reply_of_the_wrong_type_fails_the_call_and_keeps_the_connection() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(store(&server).deadline(Duration::from_secs(5))?);
    let key = Key::from("alice");
    // The first decision loads the function library; whoever can load functions on
    // the server can replace it with one of the same name that answers a string.
    assert!(limiter.check("api", &key, 1).await?.allowed);
    if !server_version().has_functions() {
        // Redis 6: no library to replace; the store went back to scripts.
        assert_eq!(
            server.cli(&["FUNCTION", "LIST"]).split(' ').next(),
            Some("ERR")
        );
        return Ok(());
    }
    let listing = server.cli(&["FUNCTION", "LIST"]);
    let name = listing
        .lines()
        .skip_while(|l| *l != "library_name")
        .nth(1)
        .ok_or("no library loaded")?;
    let impostor = format!(
        "#!lua name={name}\nredis.register_function('{name}', function() return {{'x'}} end)"
    );
    assert_eq!(
        server.cli(&["FUNCTION", "LOAD", "REPLACE", &impostor]),
        name
    );
    let before = connections_received(&server);
    for _ in 0..5 {
        let err = limiter
            .check("api", &key, 1)
            .await
            .expect_err("a string is no verdict");
        assert_eq!(err.kind(), StoreErrorKind::Protocol, "{err}");
    }
    // Less the `redis-cli` that asked: the store kept its connection.
    assert_eq!(connections_received(&server) - before - 1, 0);
    // Without the impostor, the store loads its own library again.
    assert_eq!(server.cli(&["FUNCTION", "FLUSH"]), "OK");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    Ok(())
}

/// The ids of the server's clients, less the `redis-cli` asking (whose command is
/// `client|list`, or on Redis 6 `client`).
fn client_ids(server: &RedisServer) -> Vec<String> {
    server
        .cli(&["CLIENT", "LIST"])
        .lines()
        .filter(|l| !l.contains(" cmd=client|list ") && !l.contains(" cmd=client "))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_server_busy_with_a_long_script_is_unavailable_and_keeps_the_connection() -> TestResult {
    let server = RedisServer::start();
    let limiter = limiter(store(&server).deadline(Duration::from_secs(5))?);
    let key = Key::from("alice");
    assert!(limiter.check("api", &key, 1).await?.allowed);
    let ids = client_ids(&server);
    assert_eq!(ids.len(), 1, "the store's connection: {ids:?}");
    // Other clients are answered BUSY once a script has run for 10 ms (Redis 6
    // names the setting `lua-time-limit`, which later servers keep as an alias).
    assert_eq!(server.cli(&["CONFIG", "SET", "lua-time-limit", "10"]), "OK");
    let port = server.port().to_string();
    let spin =
        "local s = redis.call('TIME')[1] while redis.call('TIME')[1] - s < 2 do end return 1";
    let mut script = std::process::Command::new("redis-cli")
        .args(["-p", &port, "EVAL", spin, "0"])
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let started = Instant::now();
    while !server.cli(&["PING"]).contains("BUSY") {
        assert!(started.elapsed() < Duration::from_secs(2), "never busy");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let err = limiter
        .check("api", &key, 1)
        .await
        .expect_err("a busy server decides nothing");
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    script.wait()?;
    assert!(limiter.check("api", &key, 1).await?.allowed);
    assert_eq!(client_ids(&server), ids);
    Ok(())
}

/// A state key holding bytes tollgate did not write (another program's value under the
/// prefix, a hand edit, an older tollgate's format): every algorithm's decision fails
/// as a store error, so the layer's fail mode decides, never a panic and never an
/// admission counted on misread state; a reset makes the key idle again.
#[tokio::test]
async fn a_state_tollgate_did_not_write_fails_the_decision_until_a_reset() -> TestResult {
    let server = RedisServer::start();
    let store = store(&server).deadline(Duration::from_secs(5))?;
    let algorithms = support::every_algorithm(4);
    let mut builder = Limiter::builder().store(store.clone());
    for algorithm in algorithms {
        builder = builder
            .limit(Limit::new(algorithm.name(), Quota::per_second(10))?.algorithm(algorithm));
    }
    let limiter = builder.build()?;
    let key = Key::from("alice");
    for algorithm in algorithms {
        let name = algorithm.name();
        assert!(limiter.check(name, &key, 1).await?.allowed, "{name}");
        let policy = limiter.limit(name).ok_or("policy")?;
        let state = store.state_key(&policy, &key);
        for foreign in ["x", "1700000000000000 5 3", ""] {
            assert_eq!(server.cli(&["SET", &state, foreign]), "OK");
            let err = limiter
                .check(name, &key, 1)
                .await
                .expect_err("misread state decides nothing");
            assert_eq!(
                err.kind(),
                StoreErrorKind::Protocol,
                "{name} on {foreign:?}: {err}"
            );
        }
        limiter.reset(name, &key).await?;
        assert!(
            limiter.check(name, &key, 1).await?.allowed,
            "{name} after a reset"
        );
    }
    Ok(())
}
