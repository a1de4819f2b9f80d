//! Extreme waits where the new options meet time arithmetic: `Duration::MAX` for
//! `wait_for_outcomes`, `poll_other_processes`, the layer's wait and `Fallback`'s
//! `min_down` / `probe_interval`. Nothing panics, nothing hangs past its reason to
//! wait, over real TCP.

use std::time::Duration;

use http::StatusCode;
use tollgate::store::{Fallback, Store};
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{clock, redis, wait_until};
use crate::desk::{Desk, at_once, attempt, serve, tally};

fn logins() -> Policy {
    Policy::new("failed-logins", Quota::per_minute(1))
        .expect("policy")
        .algorithm(Algorithm::Gcra)
        .key(key::header("x-user").expect("header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
}

async fn waits_then_served(policy: Policy, store: impl Store) {
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("x", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let rest = at_once(&server, 3, "x", "right");
    tokio::time::sleep(Duration::from_millis(100)).await;
    desk.open();
    assert_eq!(pending.await.expect("no panic"), StatusCode::OK);
    let done = tokio::time::timeout(Duration::from_secs(20), tally(rest)).await;
    assert_eq!(done.expect("no hang"), (3, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_outcomes_of_duration_max_neither_panics_nor_hangs() {
    waits_then_served(
        logins().wait_for_outcomes(Duration::MAX),
        MemoryStore::with_clock(clock()),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_other_processes_every_duration_max_neither_panics_nor_hangs() {
    waits_then_served(
        logins()
            .wait_for_outcomes(Duration::MAX)
            .poll_other_processes(Duration::MAX),
        redis("max-poll", clock()),
    )
    .await;
}

/// The layer's wait of `Duration::MAX` for an in-flight slot: the second request
/// waits for the first and is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_wait_of_duration_max_for_a_slot_neither_panics_nor_hangs() {
    let slots = Policy::in_flight_only("slots", 1)
        .expect("policy")
        .key(key::header("x-user").expect("header"));
    let layer = RateLimitLayer::builder()
        .policy(slots)
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer")
        .wait(Duration::MAX);
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("y", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let second = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("y", "right", false)).await.status })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    desk.open();
    assert_eq!(pending.await.expect("no panic"), StatusCode::OK);
    let second = tokio::time::timeout(Duration::from_secs(20), second).await;
    assert_eq!(second.expect("no hang").expect("no panic"), StatusCode::OK);
}

/// A leaky bucket with `max_delay(Duration::MAX)` and the layer's wait of
/// `Duration::MAX`: refused at build, or each request answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_delay_of_duration_max_is_refused_or_answered() {
    let queue = Policy::new("queue", Quota::per_minute(600))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket)
        .max_delay(Duration::MAX)
        .key(key::header("x-user").expect("header"));
    let Ok(layer) = RateLimitLayer::builder()
        .policy(queue)
        .store(MemoryStore::with_clock(clock()))
        .build()
    else {
        return;
    };
    let layer = layer.wait(Duration::MAX);
    let desk = Desk::new();
    desk.open();
    let server = serve(&layer, &desk).await;
    let replies = at_once(&server, 3, "z", "right");
    let done = tokio::time::timeout(Duration::from_secs(20), tally(replies)).await;
    let (ok, _, refused) = done.expect("no hang");
    assert_eq!(ok + refused, 3);
}

/// `Fallback` with `min_down` and `probe_interval` of `Duration::MAX` over a primary
/// that fails: the insurance answers, nothing panics.
#[tokio::test]
async fn a_fallback_with_duration_max_timings_answers_from_the_insurance() {
    let c = clock();
    let primary = crate::failover::Switched::new(&c);
    let store = Fallback::new(primary.clone(), MemoryStore::with_clock(c.clone()))
        .min_down(Duration::MAX)
        .probe_interval(Duration::MAX);
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(10)).expect("limit"))
        .store(store)
        .build()
        .expect("limiter");
    let key = Key::from("max");
    assert!(
        limiter
            .check("api", &key, 1)
            .await
            .expect("primary")
            .allowed
    );
    primary.set(false);
    let mut admitted = 0;
    for _ in 0..12 {
        admitted += usize::from(
            limiter
                .check("api", &key, 1)
                .await
                .expect("insurance")
                .allowed,
        );
    }
    assert_eq!(admitted, 9);
    primary.set(true);
    assert!(limiter.check("api", &key, 0).await.is_ok());
}

/// `wait_for_outcomes(Duration::ZERO)`: a login kept out only by a pending one is
/// refused at once, with no offence: the 10-minute box (after 1) never trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_wait_for_outcomes_refuses_without_an_offence() {
    use tollgate::Penalty;
    let policy = logins()
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
        .wait_for_outcomes(Duration::ZERO);
    let layer = RateLimitLayer::builder()
        .policy(policy.clone())
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("zero", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    assert_eq!(tally(at_once(&server, 3, "zero", "right")).await, (0, 0, 3));
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    let (parts, _) = attempt("zero", "x", false).into_parts();
    let key = policy.key_of(&parts).expect("key");
    let offences = layer
        .limiter()
        .offences("failed-logins", &key)
        .await
        .expect("offences");
    assert_eq!(offences.blocked_for, None);
    assert_eq!(
        server.send(attempt("zero", "right", false)).await.status,
        StatusCode::OK
    );
}

/// A rate policy's own `wait(Duration::MAX)`: a request that must wait a minute for
/// its turn is held (or refused), never dropped by a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_wait_of_duration_max_for_a_turn_does_not_drop_the_request() {
    let policy = Policy::new("api", Quota::per_minute(1))
        .expect("policy")
        .key(key::header("x-user").expect("header"))
        .wait(Duration::MAX);
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer");
    let desk = Desk::new();
    desk.open();
    let server = serve(&layer, &desk).await;
    assert_eq!(
        server.send(attempt("w", "right", false)).await.status,
        StatusCode::OK
    );
    match tokio::time::timeout(
        Duration::from_secs(1),
        server.open(attempt("w", "right", false)),
    )
    .await
    {
        Err(_) => {} // held for its turn
        Ok(Ok(response)) => assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS),
        Ok(Err(error)) => panic!("the request was dropped: {error}"),
    }
}

/// The layer's `wait(Duration::MAX)` for a turn, the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_wait_of_duration_max_for_a_turn_does_not_drop_the_request() {
    let policy = Policy::new("api", Quota::per_minute(1))
        .expect("policy")
        .key(key::header("x-user").expect("header"));
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer")
        .wait(Duration::MAX);
    let desk = Desk::new();
    desk.open();
    let server = serve(&layer, &desk).await;
    assert_eq!(
        server.send(attempt("w", "right", false)).await.status,
        StatusCode::OK
    );
    match tokio::time::timeout(
        Duration::from_secs(1),
        server.open(attempt("w", "right", false)),
    )
    .await
    {
        Err(_) => {}
        Ok(Ok(response)) => assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS),
        Ok(Err(error)) => panic!("the request was dropped: {error}"),
    }
}

/// A policy's own `wait(Duration::MAX)` for an in-flight slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_wait_of_duration_max_for_a_slot_does_not_drop_the_request() {
    let slots = Policy::in_flight_only("slots", 1)
        .expect("policy")
        .key(key::header("x-user").expect("header"))
        .wait(Duration::MAX);
    let layer = RateLimitLayer::builder()
        .policy(slots)
        .store(MemoryStore::with_clock(clock()))
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("p", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let second = tokio::time::timeout(
        Duration::from_millis(500),
        server.open(attempt("p", "right", false)),
    )
    .await;
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    if let Ok(Err(error)) = second {
        panic!("the waiting request was dropped: {error}");
    }
}
