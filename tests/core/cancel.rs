//! Cancel-safe waiting on the memory store, which decides a reservation at once (no
//! call on the wire): a waiter under a plan's own quota that is cancelled while it
//! waits gives its place back; plan callers wait and peek under their own quota
//! (`reserve_with`, `until_ready_with`, `peek_with`). The Redis twins, with calls cancelled on the
//! wire, are in `tests/redis/cancel.rs`.

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

const BASE: Duration = Duration::from_secs(1_699_920_000);
const DAY: Duration = Duration::from_secs(86_400);

/// GCRA 1/min (burst 1) on a clock that stands still.
fn upstream() -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("upstream", Quota::per_minute(1))
                .expect("limit")
                .algorithm(Algorithm::Gcra),
        )
        .store(MemoryStore::with_clock(ManualClock::new(BASE)))
        .build()
        .expect("limiter")
}

/// A plan caller (2/min on a 1/min limit) waits and peeks under its own quota.
#[tokio::test]
async fn plan_callers_wait_and_peek_under_their_own_quota() {
    let limiter = upstream();
    let key = Key::from("customer-42");
    let plan = Quota::per_minute(2);
    let half = Duration::from_secs(30);
    let mut delays = Vec::new();
    for _ in 0..4 {
        let d = limiter.reserve_with("upstream", &key, 1, plan, DAY).await;
        delays.push(d.expect("memory").delay);
    }
    // Burst 2, then one place every 30 s (under the limit's quota: 0, 60, 120, 180 s).
    assert_eq!(delays, [Duration::ZERO, Duration::ZERO, half, half * 2]);
    let peek = limiter.peek_with("upstream", &key, plan).await;
    let peek = peek.expect("memory");
    assert_eq!((peek.capacity, peek.remaining, peek.quota), (2, 0, plan));
    let own = limiter.peek("upstream", &key).await.expect("memory");
    assert_eq!((own.capacity, own.quota), (1, Quota::per_minute(1)));
}

/// `until_ready_with` cancelled while it waits for its place gives the place back:
/// the next waiter of the plan takes it.
#[tokio::test(start_paused = true)]
async fn a_plan_waiter_cancelled_while_it_waits_gives_its_place_back() {
    let limiter = upstream();
    let key = Key::from("customer-42");
    let plan = Quota::per_minute(2);
    for _ in 0..2 {
        let d = limiter
            .until_ready_with("upstream", &key, 1, plan, DAY)
            .await;
        assert_eq!(d.expect("memory").delay, Duration::ZERO);
    }
    let waiter = limiter.until_ready_with("upstream", &key, 1, plan, DAY);
    let cancelled = tokio::time::timeout(Duration::from_secs(10), waiter).await;
    assert!(cancelled.is_err(), "cancelled 10 s into its 30 s wait");
    let next = limiter.reserve_with("upstream", &key, 1, plan, DAY).await;
    let next = next.expect("memory");
    // The limiter's clock stands still: the place given back, 30 s away, is taken.
    assert_eq!((next.allowed, next.delay), (true, Duration::from_secs(30)));
}

/// A place beyond `max_wait` is refused at once and charges nothing, under a plan's
/// quota as under the limit's.
#[tokio::test]
async fn a_plan_place_beyond_max_wait_is_refused_and_charges_nothing() {
    let limiter = upstream();
    let key = Key::from("customer-42");
    let plan = Quota::per_minute(2);
    for _ in 0..2 {
        let d = limiter.reserve_with("upstream", &key, 1, plan, DAY).await;
        assert!(d.expect("memory").allowed);
    }
    let wait = Duration::from_secs(10);
    let refused = limiter
        .until_ready_with("upstream", &key, 1, plan, wait)
        .await;
    let refused = refused.expect("memory");
    assert_eq!(
        (refused.allowed, refused.retry_after),
        (false, Some(Duration::from_secs(30)))
    );
    let next = limiter.reserve_with("upstream", &key, 1, plan, DAY).await;
    assert_eq!(next.expect("memory").delay, Duration::from_secs(30));
}

/// Every `_with` call naming a limit the limiter does not have is an error.
#[tokio::test]
async fn waiting_under_an_unknown_limit_is_an_error() {
    let limiter = upstream();
    let key = Key::from("customer-42");
    let plan = Quota::per_minute(2);
    assert!(
        limiter
            .reserve_with("nope", &key, 1, plan, DAY)
            .await
            .is_err()
    );
    assert!(
        limiter
            .until_ready_with("nope", &key, 1, plan, DAY)
            .await
            .is_err()
    );
    assert!(limiter.peek_with("nope", &key, plan).await.is_err());
}
