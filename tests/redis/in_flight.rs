//! In-flight limits on a real `redis-server`: every way a request ends gives its slot record
//! back (over real TCP), a crashed process's slot records expire within the TTL, live slot records
//! are renewed past it (1,500 keys at once; after the runtime that first called ends),
//! expired slot records are added back or counted lost, an acquire cancelled during a stall
//! leaves no slot, the record set's name, hash tag and TTL, inner-service errors, and
//! the fail modes when Redis is away.
#![cfg(feature = "redis")]

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use support::in_flight::{
    crash_holding, crash_spec, every_way_a_request_ends, hold_until_killed, stall, take_each,
    until_free,
};
use support::redis_server::{RedisServer, free_port, shared_server, unique_prefix};
use tollgate::layer::FailMode;
use tollgate::store::Store;
use tollgate::{Key, Limit, Limiter, Policy, Quota, RateLimitLayer, RedisStore};
use tower::{Layer, ServiceExt};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn store(prefix: &str) -> RedisStore {
    RedisStore::from_url(&shared_server().url())
        .expect("a valid url")
        .prefix(prefix)
        // Generous: these tests check answers, not speed, on a possibly busy machine.
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
}

fn layer(policy: Policy, store: RedisStore) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer")
}

fn limit() -> Limit {
    Limit::new("jobs", Quota::per_second(1)).expect("limit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_a_request_ends_gives_its_slot_record_back() {
    let policy = Policy::in_flight_only("slow", 2).expect("policy");
    let layer = layer(policy, store(&unique_prefix("in-flight")));
    every_way_a_request_ends(2, |router| router.layer(layer)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_process_s_slot_records_expire_within_the_ttl() -> TestResult {
    let prefix = unique_prefix("crash");
    let ttl = Duration::from_millis(300);
    let (limit, key) = (limit(), Key::from("alice"));
    let url = shared_server().url();
    crash_holding(
        "in_flight::crashing_process",
        &format!("{url} {prefix} {} 2", ttl.as_millis()),
    );
    let live = store(&prefix).in_flight_ttl(ttl)?;
    let set = live.in_flight_key(&limit, &key);
    // The dead process's slot records are still there, and count.
    assert_eq!(shared_server().cli(&["ZCARD", &set]), "2");
    until_free(&live, &limit, &key, 2).await;
    // Once they expired the set holds only live slot records, and goes with the last.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while shared_server().cli(&["EXISTS", &set]) != "0" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the record set stayed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Not a test of its own: the process that `crash_holding` starts and kills. Spec:
/// `<url> <prefix> <ttl ms> <slots>`; it takes that many slots of `alice` under
/// [`limit`] and holds them until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the crashing process of crash_holding, which runs it in a child process"]
async fn crashing_process() -> TestResult {
    let Some(spec) = crash_spec() else {
        return Ok(());
    };
    let [url, prefix, ttl, n] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("bad spec {spec:?}");
    };
    let store = RedisStore::from_url(url)?
        .prefix(prefix)
        .deadline(Duration::from_secs(5))?
        .in_flight_ttl(Duration::from_millis(ttl.parse()?))?;
    let n: u32 = n.parse()?;
    let mut held = Vec::new();
    for _ in 0..n {
        let slot = store
            .acquire_in_flight(&limit(), &Key::from("alice"), n)
            .await?;
        held.push(slot.expect("a free slot"));
    }
    hold_until_killed().await;
    drop(held);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_slot_records_are_renewed_past_their_ttl() -> TestResult {
    let prefix = unique_prefix("renew");
    let ttl = Duration::from_secs(1);
    let (limit, key) = (limit(), Key::from("alice"));
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    let other = store(&prefix).in_flight_ttl(ttl)?;
    let held = [
        holder.acquire_in_flight(&limit, &key, 2).await?,
        holder.acquire_in_flight(&limit, &key, 2).await?,
    ];
    assert!(held.iter().all(Option::is_some));
    tokio::time::sleep(ttl * 3).await;
    // Three lifetimes later, still held: renewed every ttl/3.
    assert!(other.acquire_in_flight(&limit, &key, 2).await?.is_none());
    let set = holder.in_flight_key(&limit, &key);
    assert_eq!(shared_server().cli(&["ZCARD", &set]), "2");
    let pttl: u64 = shared_server().cli(&["PTTL", &set]).parse()?;
    assert!(pttl > 0 && pttl <= 1000, "PTTL {pttl}");
    drop(held);
    until_free(&other, &limit, &key, 2).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_record_set_shares_the_rate_state_s_hash_tag() {
    let live = store("tags");
    let (limit, key) = (limit(), Key::from("alice"));
    let set = live.in_flight_key(&limit, &key);
    let state = live.state_key(&limit, &key);
    let tag = |name: &str| name[name.find('{').expect("{")..=name.find('}').expect("}")].to_owned();
    assert_eq!(tag(&set), tag(&state));
    assert_eq!(set, format!("tags:jobs:{}:inflight", tag(&state)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_service_error_gives_the_slot_record_back() -> TestResult {
    let prefix = unique_prefix("error");
    let policy = Policy::in_flight_only("jobs", 1)?;
    let service =
        layer(policy, store(&prefix)).layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
            Err::<Response<Full<Bytes>>, _>("inner failure")
        }));
    for _ in 0..3 {
        // Each call must find the slot given back by the one before.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match service.clone().oneshot(Request::new(Full::default())).await {
                Err(error) => {
                    assert_eq!(error, "inner failure");
                    break;
                }
                Ok(refused) => {
                    assert_eq!(refused.status(), http::StatusCode::TOO_MANY_REQUESTS);
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the slot record stayed"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_open_or_closed_as_the_layer_says() -> TestResult {
    let away = RedisStore::from_url(&format!("redis://127.0.0.1:{}", free_port(false)))?
        .deadline(Duration::from_millis(50))?;
    let call = |mode| {
        let policy = Policy::in_flight_only("jobs", 1).expect("policy");
        let service = layer(policy, away.clone())
            .on_store_error(mode)
            .layer(tower::service_fn(|_: Request<Full<Bytes>>| async {
                Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default()))
            }));
        service.oneshot(Request::new(Full::default()))
    };
    assert_eq!(call(FailMode::Open).await?.status(), http::StatusCode::OK);
    let closed = call(FailMode::Closed).await?;
    assert_eq!(closed.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(closed.headers()["retry-after"], "1");
    Ok(())
}

/// A store on a private server (for the tests that stall it).
fn private_store(server: &RedisServer) -> RedisStore {
    RedisStore::from_url(&server.url())
        .expect("a valid url")
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_running_keys_stay_renewed_past_their_ttl() -> TestResult {
    let prefix = unique_prefix("many");
    let ttl = Duration::from_millis(300);
    let limit = limit();
    let keys: Vec<Key> = (0..1500_u64).map(Key::from).collect();
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    let held = take_each(&holder, &limit, &keys).await;
    assert_eq!(held.iter().filter(|s| s.is_some()).count(), 1500);
    // Five lifetimes of running requests.
    tokio::time::sleep(ttl * 5).await;
    let other = store(&prefix).in_flight_ttl(ttl)?;
    let second = take_each(&other, &limit, &keys).await;
    let doubled = second.iter().filter(|s| s.is_some()).count();
    assert_eq!(doubled, 0, "{doubled} of 1500 keys gave a second slot");
    assert_eq!(holder.in_flight_slots_lost(), 0);
    assert_eq!(holder.in_flight_slots_readded(), 0);
    assert!(held.iter().flatten().all(|slot| !slot.ran_uncounted()));
    drop(held);
    until_free(&other, &limit, &keys[1499], 1).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_continues_after_the_runtime_that_started_it_ends() -> TestResult {
    let prefix = unique_prefix("runtimes");
    let ttl = Duration::from_millis(300);
    let (limit, first, second) = (limit(), Key::from("first"), Key::from("second"));
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    // Runtime A: the store's first call (its connection, and once its renewal, were
    // made there); the slot outlives the runtime.
    let on_a = {
        let (holder, limit) = (holder.clone(), limit.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime A");
            let slot = runtime.block_on(holder.acquire_in_flight(&limit, &first, 1));
            drop(runtime);
            slot
        })
        .join()
        .expect("runtime A's thread")?
        .expect("a free slot")
    };
    // On this runtime, after A ended: the connection A made is gone with it, and the
    // call does not fail on it.
    let on_b = holder.acquire_in_flight(&limit, &second, 1).await?;
    let on_b = on_b.expect("a free slot");
    tokio::time::sleep(ttl * 4).await;
    let other = store(&prefix).in_flight_ttl(ttl)?;
    assert!(other.acquire_in_flight(&limit, &first, 1).await?.is_none());
    assert!(other.acquire_in_flight(&limit, &second, 1).await?.is_none());
    assert_eq!(holder.in_flight_slots_lost(), 0);
    assert!(!on_a.ran_uncounted() && !on_b.ran_uncounted());
    drop((on_a, on_b));
    until_free(&other, &limit, &first, 1).await;
    until_free(&other, &limit, &second, 1).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_made_on_an_ended_runtime_does_not_fail_the_next_call() -> TestResult {
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(100))?)
        .store(store(&unique_prefix("ended")))
        .build()?;
    let alice = Key::from("alice");
    for _ in 0..3 {
        // Each runtime makes the connection the next one finds dead.
        let on_its_own = limiter.clone();
        let decision = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime")
                .block_on(on_its_own.check("api", &alice, 1))
        })
        .join()
        .expect("the runtime's thread")?;
        assert!(decision.allowed);
    }
    assert!(limiter.check("api", &alice, 1).await?.allowed);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_dropped_outside_any_runtime_is_given_back() -> TestResult {
    let prefix = unique_prefix("outside");
    let (limit, key) = (limit(), Key::from("alice"));
    // A TTL far beyond `until_free`'s bound: the slot comes back given, not expired.
    let ttl = Duration::from_secs(600);
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    let slot = holder.acquire_in_flight(&limit, &key, 1).await?;
    let slot = slot.expect("a free slot");
    // No runtime on this thread to send the ZREM: the store's renewer sends it.
    std::thread::spawn(move || drop(slot))
        .join()
        .expect("the dropping thread");
    until_free(&store(&prefix).in_flight_ttl(ttl)?, &limit, &key, 1).await;
    Ok(())
}

/// Polls (with a bound) until `done`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_slot_record_is_added_back_while_its_key_has_room() -> TestResult {
    let prefix = unique_prefix("readd");
    let ttl = Duration::from_millis(300);
    let (limit, key) = (limit(), Key::from("alice"));
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    let slot = holder.acquire_in_flight(&limit, &key, 1).await?;
    let slot = slot.expect("a free slot");
    let set = holder.in_flight_key(&limit, &key);
    // As if the process had been paused past the TTL and another acquire had dropped
    // the expired slot record.
    assert_eq!(shared_server().cli(&["DEL", &set]), "1");
    until("the slot record was added back", || {
        holder.in_flight_slots_readded() == 1
    })
    .await;
    assert_eq!(shared_server().cli(&["ZCARD", &set]), "1");
    assert!(slot.ran_uncounted());
    assert_eq!(holder.in_flight_slots_lost(), 0);
    let other = store(&prefix).in_flight_ttl(ttl)?;
    assert!(other.acquire_in_flight(&limit, &key, 1).await?.is_none());
    drop(slot);
    until_free(&other, &limit, &key, 1).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_slot_record_whose_key_filled_up_is_counted_lost() -> TestResult {
    let prefix = unique_prefix("lost");
    let ttl = Duration::from_millis(300);
    let (limit, key) = (limit(), Key::from("alice"));
    let holder = store(&prefix).in_flight_ttl(ttl)?;
    let slot = holder.acquire_in_flight(&limit, &key, 1).await?;
    let slot = slot.expect("a free slot");
    let set = holder.in_flight_key(&limit, &key);
    assert_eq!(shared_server().cli(&["DEL", &set]), "1");
    // Another process takes the place meanwhile: the holder's request runs uncounted.
    let other = store(&prefix).in_flight_ttl(ttl)?;
    let taken = other.acquire_in_flight(&limit, &key, 1).await?;
    let taken = taken.expect("the place the expired slot record left");
    until("the slot record was counted lost", || {
        holder.in_flight_slots_lost() == 1
    })
    .await;
    assert!(slot.ran_uncounted());
    assert_eq!(shared_server().cli(&["ZCARD", &set]), "1");
    // Counted once, however many rounds find it so; added back once there is room.
    drop(taken);
    until("the lost slot record was added back", || {
        holder.in_flight_slots_readded() == 1
    })
    .await;
    assert_eq!(holder.in_flight_slots_lost(), 1);
    assert!(other.acquire_in_flight(&limit, &key, 1).await?.is_none());
    drop(slot);
    until_free(&other, &limit, &key, 1).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_cancelled_during_a_stall_leaves_no_slot() -> TestResult {
    // A private server: the stall would hold up every test sharing one.
    let server = RedisServer::start();
    let store = private_store(&server);
    let (limit, key) = (limit(), Key::from("alice"));
    // Connected and scripts loaded, so the cancelled call is the acquire itself.
    drop(store.acquire_in_flight(&limit, &key, 1).await?);
    until_free(&store, &limit, &key, 1).await;
    let busy = stall(server.port(), Duration::from_millis(600)).await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        store.acquire_in_flight(&limit, &key, 1),
    )
    .await;
    assert!(gave_up.is_err(), "the acquire answered during the stall");
    tokio::task::spawn_blocking(move || busy.join())
        .await?
        .expect("the stall");
    let set = store.in_flight_key(&limit, &key);
    // The next request after the stall gets the slot: no polling, the removal was
    // sent right behind the cancelled call.
    let next = store.acquire_in_flight(&limit, &key, 1).await?;
    assert!(next.is_some(), "the cancelled acquire kept the slot");
    assert_eq!(server.cli(&["ZCARD", &set]), "1");
    drop(next);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_client_gives_up_during_a_stall_leaves_no_slot() -> TestResult {
    let server = RedisServer::start();
    let policy = Policy::in_flight_only("jobs", 1)?;
    let service = layer(policy, private_store(&server)).layer(tower::service_fn(
        |_: Request<Full<Bytes>>| async {
            Ok::<_, std::convert::Infallible>(Response::new(Full::<Bytes>::default()))
        },
    ));
    let call = || service.clone().oneshot(Request::new(Full::default()));
    // Connected and scripts loaded.
    assert_eq!(call().await?.status(), http::StatusCode::OK);
    let busy = stall(server.port(), Duration::from_millis(600)).await;
    let gave_up = tokio::time::timeout(Duration::from_millis(100), call()).await;
    assert!(
        gave_up.is_err(),
        "the request was answered during the stall"
    );
    tokio::task::spawn_blocking(move || busy.join())
        .await?
        .expect("the stall");
    assert_eq!(call().await?.status(), http::StatusCode::OK);
    Ok(())
}

/// A measurement, not part of the suite (over a minute): `TOLLGATE_RUNNING_KEYS`
/// keys (100,000 unless set), each running one request, on a store at the default
/// in-flight TTL; 3.5 lifetimes later another process must get no second slot on
/// any of them. Prints how long the last renewal round took (the spread of the
/// renewed slot records' expiries) and Redis's time in the renewal script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of a minute or more: run with -- --ignored --nocapture"]
async fn running_keys_stay_renewed_at_the_default_ttl() -> TestResult {
    let n: u64 = std::env::var("TOLLGATE_RUNNING_KEYS").map_or(Ok(100_000), |v| v.parse())?;
    let server = RedisServer::start();
    let holder = private_store(&server);
    let ttl = holder.get_in_flight_ttl();
    let limit = limit();
    let keys: Vec<Key> = (0..n).map(Key::from).collect();
    let started = tokio::time::Instant::now();
    let held = take_each(&holder, &limit, &keys).await;
    let taken = held.iter().filter(|s| s.is_some()).count();
    println!("{taken} keys running after {:?}", started.elapsed());
    tokio::time::sleep(ttl * 3 + ttl / 2).await;
    // How long a round takes, read from the slot records' expiries while nothing else
    // runs (a sample of them): sorted, the newest round is what follows the last gap of over 500 ms (the
    // rounds are TTL/3 apart). A sample taken mid-round sees part of one: the
    // longest of a few samples.
    let spread = "local scores = {} \
         for i = 1, #KEYS do \
           local s = redis.call('ZRANGE', KEYS[i], 0, 0, 'WITHSCORES')[2] \
           if s then scores[#scores + 1] = tonumber(s) end \
         end \
         table.sort(scores) \
         local start = scores[1] \
         for i = 2, #scores do \
           if scores[i] - scores[i - 1] > 500 then start = scores[i] end \
         end \
         return {#scores, scores[#scores] - start}";
    // Every 100th key: a round renews keys in no particular order, and a script over
    // them all would hold Redis up long enough to stretch the round it measures.
    let sets: Vec<String> = keys
        .iter()
        .step_by(100)
        .map(|k| holder.in_flight_key(&limit, k))
        .collect();
    let client = redis::Client::open(server.url())?;
    // A script over every key takes longer than redis-rs's 500 ms default.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let (mut records, mut round_ms) = (0_u64, 0_u64);
    for _ in 0..5 {
        let (live, spread_ms): (u64, u64) = redis::cmd("EVAL")
            .arg(spread)
            .arg(sets.len())
            .arg(&sets)
            .query_async(&mut conn)
            .await?;
        (records, round_ms) = (live, round_ms.max(spread_ms));
        tokio::time::sleep(ttl / 7).await;
    }
    let other = private_store(&server);
    let second = take_each(&other, &limit, &keys).await;
    let doubled = second.iter().filter(|s| s.is_some()).count();
    println!("{doubled} of {n} keys double-slotted");
    let stats = server.cli(&["INFO", "commandstats"]);
    let evalsha = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or_default();
    println!(
        "{n} running keys, TTL {ttl:?}: {doubled} double-slotted, {} lost, {} added back; \
         {records} sampled records live, a round {round_ms} ms; {evalsha}",
        holder.in_flight_slots_lost(),
        holder.in_flight_slots_readded(),
    );
    assert_eq!(taken, keys.len());
    assert_eq!(doubled, 0);
    assert_eq!(holder.in_flight_slots_lost(), 0);
    assert_eq!(holder.in_flight_slots_readded(), 0);
    drop(held);
    Ok(())
}
