//! Operators' calls (`reset`, `block`) while requests are pending their outcome or
//! waiting for one (`count_when`), over real TCP.

use std::time::Duration;

use http::StatusCode;
use tollgate::store::Store;
use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key};

use crate::common::{clock, redis, wait_until};
use crate::desk::{Desk, at_once, attempt, serve, tally};

fn one_failure() -> Policy {
    Policy::new("failed-logins", Quota::per_minute(1))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .wait_for_outcomes(Duration::from_millis(300))
}

fn layer(store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(one_failure())
        .store(store)
        .build()
        .expect("layer")
}

fn key_of(user: &str) -> tollgate::Key {
    let (parts, _) = attempt(user, "x", false).into_parts();
    one_failure().key_of(&parts).expect("key")
}

/// A right login pending when an operator resets the caller; one wrong login uses the
/// fresh quota; the pending login's refund (from before the reset) gives nothing
/// back: the next wrong ones are refused. One wrong login reaches the desk.
async fn reset_under_a_pending_refund(store: impl Store) -> usize {
    let layer = layer(store);
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("op", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    layer
        .limiter()
        .reset("failed-logins", &key_of("op"))
        .await
        .expect("reset");
    let first = server.send(attempt("op", "wrong", false)).await.status;
    assert_eq!(first, StatusCode::UNAUTHORIZED);
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        let _ = server.send(attempt("op", "wrong", false)).await;
    }
    desk.reached().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_from_before_a_reset_gives_nothing_back_on_memory() {
    assert_eq!(
        reset_under_a_pending_refund(MemoryStore::with_clock(clock())).await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_from_before_a_reset_gives_nothing_back_on_redis() {
    assert_eq!(
        reset_under_a_pending_refund(redis("op-reset", clock())).await,
        1
    );
}

/// Logins waiting for a pending outcome when an operator blocks the caller for an
/// hour: none of them is served, whatever the outcome.
async fn block_while_waiting(store: impl Store) -> (usize, usize, usize) {
    let layer = RateLimitLayer::builder()
        .policy(one_failure().wait_for_outcomes(Duration::from_secs(5)))
        .store(store)
        .build()
        .expect("layer");
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("blocked", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let waiting = at_once(&server, 5, "blocked", "right");
    tokio::time::sleep(Duration::from_millis(100)).await;
    layer
        .limiter()
        .block(
            "failed-logins",
            &key_of("blocked"),
            Duration::from_secs(3600),
        )
        .await
        .expect("block");
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    tally(waiting).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_waiting_for_an_outcome_are_refused_once_the_caller_is_blocked_on_memory() {
    assert_eq!(
        block_while_waiting(MemoryStore::with_clock(clock())).await,
        (0, 0, 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_waiting_for_an_outcome_are_refused_once_the_caller_is_blocked_on_redis() {
    assert_eq!(
        block_while_waiting(redis("op-block", clock())).await,
        (0, 0, 5)
    );
}
