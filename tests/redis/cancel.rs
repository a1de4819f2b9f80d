//! Cancel-safe waiting and operators reaching leases, on private `redis-server`
//! processes (a stall pauses every client of a server, and its script calls are one
//! test's alone), at a `ManualClock`'s instants:
//!
//! - a waiter (`until_ready`, `reserve`) or a check cancelled while its call is on
//!   the wire to a stalled Redis (`CLIENT PAUSE`, 600 ms; cancelled 100 ms in) gives
//!   what it took back when the reply arrives, by receipt: never someone else's
//!   charge;
//! - plan callers wait and peek under their own quota (`reserve_with`,
//!   `until_ready_with`, `peek_with`);
//! - `block` and `reset` through a `LeasedStore` drop the calling process's leases of
//!   the key before they return.
#![cfg(feature = "redis")]

use std::time::Duration;

use support::redis_server::{RedisServer, script_calls};
use tollgate::clock::ManualClock;
use tollgate::store::{LeasedStore, SliceSizing};
use tollgate::{Algorithm, Key, Limit, Limiter, Quota, RedisStore};

const BASE: Duration = Duration::from_secs(1_699_920_000);
const DAY: Duration = Duration::from_secs(86_400);
const MINUTE: Duration = Duration::from_secs(60);

/// Generous bound that turns a hang into a failure; never a timing assertion.
const HANG: Duration = Duration::from_secs(20);

/// Time for a background give-back, already sent (seen on the server), to land; the
/// assertions after it are exact.
const SETTLE: Duration = Duration::from_millis(300);

/// A private server and a store on it at a clock that stands still at [`BASE`] (the
/// start of a minute).
fn private_redis() -> (RedisServer, RedisStore) {
    private_redis_at(ManualClock::new(BASE))
}

fn private_redis_at(clock: ManualClock) -> (RedisServer, RedisStore) {
    let server = RedisServer::start();
    let store = RedisStore::from_url(&server.url())
        .expect("a valid url")
        .deadline(Duration::from_secs(5))
        .expect("a deadline")
        .denial_cache(0)
        .with_clock(clock);
    (server, store)
}

/// Stalls `server` and drops `call` 100 ms into the stall, while it is on the wire.
async fn cancelled_on_the_wire<F: std::future::Future>(server: &RedisServer, call: F) {
    stall(server);
    let cancelled = tokio::time::timeout(Duration::from_millis(100), call).await;
    assert!(cancelled.is_err(), "cancelled on the wire");
}

fn limiter(limit: Limit, store: RedisStore) -> Limiter {
    Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("limiter")
}

/// GCRA 1/min (burst 1).
fn per_minute() -> Limit {
    Limit::new("upstream", Quota::per_minute(1))
        .expect("limit")
        .algorithm(Algorithm::Gcra)
}

/// Stalls `server` for 600 ms: every command sent meanwhile waits on the wire.
fn stall(server: &RedisServer) {
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "600", "ALL"]), "OK");
}

/// Waits until `server` has run at least `calls` script calls (the proof that a
/// give-back was sent; a call that failed and was retried counts too), then lets it
/// land.
async fn given_back(server: &RedisServer, calls: u64) {
    let started = std::time::Instant::now();
    while script_calls(server.port()) < calls {
        assert!(started.elapsed() < HANG, "no give-back was sent");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(SETTLE).await;
}

/// `until_ready` cancelled 100 ms into a 600 ms stall, its reserve call on the wire:
/// the next place is one period away (before the fix: two, one period lost per
/// cancellation).
#[tokio::test]
async fn a_waiter_cancelled_while_its_reserve_is_on_the_wire_gives_its_place_back() {
    let (server, store) = private_redis();
    let limiter = limiter(per_minute(), store);
    let host = Key::from("api.example.com");
    let first = limiter.until_ready("upstream", &host, 1, DAY).await;
    assert_eq!(first.expect("redis").delay, Duration::ZERO);
    let calls = script_calls(server.port());
    cancelled_on_the_wire(&server, limiter.until_ready("upstream", &host, 1, DAY)).await;
    // The reservation, then its give-back.
    given_back(&server, calls + 2).await;
    let next = limiter.reserve("upstream", &host, 1, DAY).await;
    let next = next.expect("redis");
    assert_eq!((next.allowed, next.delay), (true, MINUTE));
}

/// The same for `reserve` itself: a reservation whose caller never saw the decision
/// is given back by itself.
#[tokio::test]
async fn a_reserve_dropped_on_the_wire_gives_its_place_back() {
    let (server, store) = private_redis();
    let limiter = limiter(per_minute(), store);
    let host = Key::from("api.example.com");
    assert!(
        limiter
            .reserve("upstream", &host, 1, DAY)
            .await
            .expect("redis")
            .allowed
    );
    let calls = script_calls(server.port());
    cancelled_on_the_wire(&server, limiter.reserve("upstream", &host, 1, DAY)).await;
    given_back(&server, calls + 2).await;
    let next = limiter.reserve("upstream", &host, 1, DAY).await;
    let next = next.expect("redis");
    assert_eq!((next.allowed, next.delay), (true, MINUTE));
}

/// A plain check cancelled while its call is on the wire (a caller's timeout) gives
/// its charge back when the reply arrives: the caller never learned it was admitted.
#[tokio::test]
async fn a_check_cancelled_on_the_wire_gives_its_charge_back() {
    let (server, store) = private_redis();
    let window = Limit::new("api", Quota::per_minute(2))
        .expect("limit")
        .algorithm(Algorithm::FixedWindow);
    let limiter = limiter(window, store);
    let key = Key::from("alice");
    assert!(limiter.check("api", &key, 1).await.expect("redis").allowed);
    let calls = script_calls(server.port());
    cancelled_on_the_wire(&server, limiter.check("api", &key, 1)).await;
    given_back(&server, calls + 2).await;
    assert_eq!(limiter.peek("api", &key).await.expect("redis").remaining, 1);
    assert!(limiter.check("api", &key, 1).await.expect("redis").allowed);
    assert!(!limiter.check("api", &key, 1).await.expect("redis").allowed);
}

/// The same for an all-or-nothing `check_all` over two limits: cancelled on the wire,
/// both charges come back when the reply arrives.
#[tokio::test]
async fn a_check_all_cancelled_on_the_wire_gives_every_charge_back() {
    let (server, store) = private_redis();
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_minute(2))
                .expect("limit")
                .algorithm(Algorithm::FixedWindow),
        )
        .limit(Limit::new("global", Quota::per_minute(10)).expect("limit"))
        .store(store)
        .build()
        .expect("limiter");
    let (key, all) = (Key::from("alice"), Key::from(""));
    let calls = script_calls(server.port());
    stall(&server);
    let batch = [("api", &key, 1), ("global", &all, 1)];
    let check = limiter.check_all(&batch);
    let cancelled = tokio::time::timeout(Duration::from_millis(100), check).await;
    assert!(cancelled.is_err(), "cancelled on the wire");
    // The batch, then one give-back per charge.
    given_back(&server, calls + 3).await;
    assert_eq!(limiter.peek("api", &key).await.expect("redis").remaining, 2);
    assert_eq!(
        limiter.peek("global", &all).await.expect("redis").remaining,
        10
    );
}

/// A give-back that lands late, after the charge's window has rolled over and another
/// caller has charged the new one, takes back only what of its own charge still
/// counts (by receipt): nothing, never the other caller's charge. Fixed window 3/min.
#[tokio::test]
async fn a_late_give_back_never_returns_another_callers_charge() {
    let clock = ManualClock::new(BASE);
    let (server, store) = private_redis_at(clock.clone());
    let window = Limit::new("api", Quota::per_minute(3))
        .expect("limit")
        .algorithm(Algorithm::FixedWindow);
    let limiter = limiter(window, store);
    let key = Key::from("shared");
    let calls = script_calls(server.port());
    cancelled_on_the_wire(&server, limiter.until_ready("api", &key, 1, DAY)).await;
    // Decided in its window; its give-back arrives in the next one, after another
    // caller's charge there.
    clock.advance(MINUTE);
    let other = limiter.check("api", &key, 1).await.expect("redis");
    assert!(other.allowed);
    given_back(&server, calls + 3).await;
    let now = limiter.peek("api", &key).await.expect("redis");
    assert_eq!(now.remaining, 2);
}

/// 300 callers (checks, `reserve`s and `until_ready`s of cost 1 to 3) against a
/// Redis that stalls for 300 ms every 400 ms, each cancelled at a random point (before
/// its call is sent, on the wire, after the reply) or not at all: once every
/// give-back has landed, the store counts exactly what the callers that got their
/// decision hold, not a unit more or less. Fixed window 100 000/min on a clock that
/// stands still: every call is admitted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_cancelled_at_random_points_leave_exactly_what_the_others_hold() {
    const CAPACITY: u64 = 100_000;
    let (server, store) = private_redis();
    let window = Limit::new("api", Quota::per_minute(CAPACITY))
        .expect("limit")
        .algorithm(Algorithm::FixedWindow);
    let limiter = limiter(window, store);
    let key = Key::from("hot");
    let port = server.port();
    let stalls = tokio::task::spawn_blocking(move || {
        for _ in 0..5 {
            support::redis_server::cli(port, &["CLIENT", "PAUSE", "300", "ALL"]);
            std::thread::sleep(Duration::from_millis(400));
        }
    });
    let mut rng = support::rng::Rng(0x5eed_cafe_f00d);
    let mut callers = Vec::new();
    for i in 0..300_u64 {
        let (limiter, op, cost) = (limiter.clone(), rng.below(3), rng.below(3) + 1);
        // A quarter are never cancelled; the rest within 0 to 499 ms.
        let patience = match rng.below(4) {
            0 => HANG,
            _ => Duration::from_millis(rng.below(500)),
        };
        let start = Duration::from_millis(rng.below(2_000));
        callers.push(tokio::spawn(async move {
            tokio::time::sleep(start).await;
            let cost = u32::try_from(cost).expect("small");
            let call = async {
                match op {
                    0 => limiter.check("api", &key, cost).await,
                    1 => limiter.reserve("api", &key, cost, DAY).await,
                    _ => limiter.until_ready("api", &key, cost, DAY).await,
                }
            };
            match tokio::time::timeout(patience, call).await {
                Ok(decision) => {
                    let decision = decision.expect("redis");
                    assert!(decision.allowed, "caller {i}");
                    u64::from(cost)
                }
                Err(_) => 0,
            }
        }));
    }
    let mut held = 0;
    for caller in callers {
        held += caller.await.expect("caller");
    }
    stalls.await.expect("stalls");
    let started = std::time::Instant::now();
    loop {
        let counted = CAPACITY - limiter.peek("api", &key).await.expect("redis").remaining;
        if counted == held {
            break;
        }
        assert!(
            started.elapsed() < HANG,
            "the store counts {counted}, the callers hold {held}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Nothing more lands later.
    tokio::time::sleep(SETTLE).await;
    let counted = CAPACITY - limiter.peek("api", &key).await.expect("redis").remaining;
    assert_eq!(counted, held);
    assert!(held > 0);
}

/// A plan caller (2/min on a 1/min limit) waits and peeks under its own quota, on
/// Redis as on memory.
#[tokio::test]
async fn plan_callers_wait_and_peek_under_their_own_quota() {
    let (_server, store) = private_redis();
    let limiter = limiter(per_minute(), store);
    let key = Key::from("customer-42");
    let plan = Quota::per_minute(2);
    let half = Duration::from_secs(30);
    // Burst 2, then one place every 30 s.
    let mut delays = Vec::new();
    for _ in 0..4 {
        let d = limiter.reserve_with("upstream", &key, 1, plan, DAY).await;
        delays.push(d.expect("redis").delay);
    }
    assert_eq!(delays, [Duration::ZERO, Duration::ZERO, half, half * 2]);
    let peek = limiter.peek_with("upstream", &key, plan).await;
    let peek = peek.expect("redis");
    assert_eq!((peek.capacity, peek.remaining, peek.quota), (2, 0, plan));
    // The limit's own quota reports its own numbers.
    let own = limiter.peek("upstream", &key).await.expect("redis");
    assert_eq!((own.capacity, own.quota), (1, Quota::per_minute(1)));
    let d = limiter
        .until_ready_with("upstream", &Key::from("other"), 1, plan, DAY)
        .await;
    assert_eq!(d.expect("redis").quota, plan);
}

/// 1000/h fixed window, leased from Redis in slices of 64 (one process), leases that
/// outlast the test.
fn leased(store: RedisStore) -> (LeasedStore<RedisStore>, Limiter) {
    let leases = LeasedStore::builder(store)
        .clock(ManualClock::new(BASE))
        .max_lease(Duration::from_secs(10))
        .expect("max lease")
        .processes(1)
        .expect("processes")
        .sizing(SliceSizing::Fixed(64))
        .expect("sizing")
        .build();
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_hour(1_000))
                .expect("limit")
                .algorithm(Algorithm::FixedWindow),
        )
        .store(leases.clone())
        .build()
        .expect("limiter");
    (leases, limiter)
}

async fn admitted(limiter: &Limiter, key: &Key, tries: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..tries {
        if limiter.check("api", key, 1).await.expect("redis").allowed {
            admitted += 1;
        }
    }
    admitted
}

/// Nine requests: one slice of 64 charged, 55 parked here.
async fn park_55(leases: &LeasedStore<RedisStore>, limiter: &Limiter, key: &Key) {
    assert_eq!(admitted(limiter, key, 9).await, 9);
    assert_eq!(leases.held(), 55);
}

#[tokio::test]
async fn a_leased_block_admits_nothing_more_in_the_process_that_set_it_on_redis() {
    let (_server, store) = private_redis();
    let (leases, limiter) = leased(store);
    let key = Key::from("mallory");
    park_55(&leases, &limiter, &key).await;
    let blocked = limiter.block("api", &key, Duration::from_secs(3_600)).await;
    assert!(!blocked.expect("redis").allowed);
    assert_eq!(leases.held(), 0);
    // Before the fix: 55.
    assert_eq!(admitted(&limiter, &key, 100).await, 0);
}

#[tokio::test]
async fn a_leased_reset_admits_a_fresh_quota_and_no_parked_unit_on_top_on_redis() {
    let (_server, store) = private_redis();
    let (leases, limiter) = leased(store);
    let key = Key::from("alice");
    park_55(&leases, &limiter, &key).await;
    limiter.reset("api", &key).await.expect("redis");
    assert_eq!(leases.held(), 0);
    // Before the fix: 1 055.
    assert_eq!(admitted(&limiter, &key, 1_100).await, 1_000);
}
