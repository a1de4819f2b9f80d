//! Waiting instead of rejecting, the same on every store: reservations follow the
//! rule's own admission schedule, a place beyond `max_wait` charges nothing, and a
//! reservation given back returns its place.
//!
//! Invoke [`waiting_tests!`](crate::waiting_tests) once per store, like
//! [`scenario_tests!`](crate::scenario_tests), with anything callable as
//! `make_store(clock: ManualClock) -> impl Store`.

use std::error::Error;
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, Limit, Limiter, Quota};

use crate::scenarios::BASE;

/// Every algorithm, with the quota the tests use: 10 per second (burst 10).
pub const ALGORITHMS: [Algorithm; 7] = crate::every_algorithm(5);

const WAITERS: usize = 50;
/// Where the waiting tests start, after [`BASE`].
pub const START: Duration = Duration::from_millis(123);

/// A limiter with the limits the waiting tests use, "retry" and "wait" (10 per
/// second, `max_delay` 10 s), counted by `algorithm` on `store`.
pub fn limiter<S: Store>(algorithm: Algorithm, store: S) -> Result<Limiter, Box<dyn Error>> {
    let limit = |name: &str| -> Result<Limit, Box<dyn Error>> {
        Ok(Limit::new(name, Quota::per_second(10))?
            .algorithm(algorithm)
            // The leaky bucket may queue the whole schedule.
            .max_delay(Duration::from_secs(10)))
    };
    Ok(Limiter::builder()
        .limit(limit("retry")?)
        .limit(limit("wait")?)
        .store(store)
        .build()?)
}

/// The rule's admission schedule: the instants (µs after the start) at which `n`
/// requests of cost 1 are admitted when each one that is denied comes back exactly
/// after its `retry_after` (for the leaky bucket: when it is served).
pub async fn schedule(
    limiter: &Limiter,
    clock: &ManualClock,
    n: usize,
) -> Result<Vec<u64>, Box<dyn Error>> {
    let key = Key::from("schedule");
    let mut at = Duration::ZERO;
    let mut instants = Vec::with_capacity(n);
    while instants.len() < n {
        clock.set(BASE + START + at);
        let decision = limiter.check("retry", &key, 1).await?;
        if decision.allowed {
            instants.push(u64::try_from((at + decision.delay).as_micros())?);
        } else {
            at += decision
                .retry_after
                .ok_or("a request of cost 1 always fits later")?;
        }
    }
    Ok(instants)
}

/// 50 waiters reserve at one instant; each one's wait equals the admission schedule,
/// in order, and the 51st, whose place is beyond its `max_wait`, is refused and
/// charges nothing.
pub async fn waiters_follow_the_admission_schedule<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    for algorithm in ALGORITHMS {
        // The schedule on a store of its own: its clock moves, and a memory store's
        // shard remembers the latest instant it saw.
        let expected = {
            let clock = ManualClock::new(BASE + START);
            schedule(
                &limiter(algorithm, make_store(clock.clone()))?,
                &clock,
                WAITERS + 1,
            )
            .await?
        };
        let clock = ManualClock::new(BASE + START);
        let limiter = limiter(algorithm, make_store(clock))?;
        let key = Key::from("waiters");
        let max_wait = Duration::from_micros(expected[WAITERS - 1]);
        let mut waits = Vec::with_capacity(WAITERS);
        for _ in 0..WAITERS {
            let decision = limiter.reserve("wait", &key, 1, max_wait).await?;
            assert!(
                decision.allowed,
                "{algorithm}: a place within max_wait is reserved"
            );
            waits.push(u64::try_from(decision.delay.as_micros())?);
        }
        assert_eq!(
            waits,
            expected[..WAITERS],
            "{algorithm}: the waiters' places are the rule's admission schedule"
        );
        // The next place is beyond max_wait: refused, told where it is, nothing charged.
        let refused = limiter.reserve("wait", &key, 1, max_wait).await?;
        assert!(
            !refused.allowed,
            "{algorithm}: a place beyond max_wait is refused"
        );
        assert_eq!(
            refused.retry_after,
            Some(Duration::from_micros(expected[WAITERS])),
            "{algorithm}: the refusal says where the place is"
        );
        let again = limiter
            .reserve("wait", &key, 1, Duration::from_micros(expected[WAITERS]))
            .await?;
        assert_eq!(
            u64::try_from(again.delay.as_micros())?,
            expected[WAITERS],
            "{algorithm}: the refused reservation charged nothing"
        );
    }
    Ok(())
}

/// A request that does not wait, while a key holds reservations, is denied with the
/// wait until its place behind them; a reservation given back (by its receipt, as a
/// dropped `until_ready` does) returns its place to the next one.
pub async fn a_given_back_reservation_returns_its_place<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    for algorithm in ALGORITHMS {
        let expected = {
            let clock = ManualClock::new(BASE + START);
            schedule(&limiter(algorithm, make_store(clock.clone()))?, &clock, 12).await?
        };
        let clock = ManualClock::new(BASE + START);
        let limiter = limiter(algorithm, make_store(clock))?;
        let key = Key::from("queue");
        let max_wait = Duration::from_secs(5);
        for _ in 0..11 {
            limiter.reserve("wait", &key, 1, max_wait).await?;
        }
        // The 11th place is taken: a plain check is told to come back for the 12th.
        let plain = limiter.check("wait", &key, 1).await?;
        assert!(
            !plain.allowed,
            "{algorithm}: behind the queue, not admitted now"
        );
        let place = Some(Duration::from_micros(expected[11]));
        if algorithm == Algorithm::LeakyBucket {
            // Its retry is a place in the queue, before the place is served.
            assert!(plain.retry_after <= place, "{algorithm}: behind the queue");
        } else {
            assert_eq!(
                plain.retry_after, place,
                "{algorithm}: a plain check waits for its place behind the queue"
            );
        }
        let twelfth = limiter.reserve("wait", &key, 1, max_wait).await?;
        assert_eq!(u64::try_from(twelfth.delay.as_micros())?, expected[11]);
        // Cancelled: the next reservation gets its place.
        limiter.refund_charge(&twelfth, &key, 1).await?;
        let next = limiter.reserve("wait", &key, 1, max_wait).await?;
        assert_eq!(
            next.delay, twelfth.delay,
            "{algorithm}: a place given back is taken by the next reservation"
        );
    }
    Ok(())
}

/// 10 per second with a burst of 1 (T = 100 ms) under `algorithm`, `max_delay` 10 s.
fn burst_one(algorithm: Algorithm, store: impl Store) -> Result<Limiter, Box<dyn Error>> {
    let limit = Limit::new("wait", Quota::per_second(10).with_burst(1)?)?
        .algorithm(algorithm)
        .max_delay(Duration::from_secs(10));
    Ok(Limiter::builder().limit(limit).store(store).build()?)
}

/// Whether `places` (µs, any order) keep GCRA's bound at 10/s, burst 1: no two closer
/// than T = 100 ms, so any window of `w` holds at most `1 + w / T`.
fn spaced_by_emission(places: &[u64]) -> Result<(), String> {
    let mut sorted = places.to_vec();
    sorted.sort_unstable();
    match sorted.windows(2).find(|w| w[1] - w[0] < 100_000) {
        Some(w) => Err(format!("places {} and {} µs are closer than T", w[0], w[1])),
        None => Ok(()),
    }
}

/// Regression (issue 23, item 6): 11 waiters at +0 … +1000 ms (10/s, burst 1); five
/// times the earliest pending waiter gives its place back and a new one reserves.
/// Giving back an older place used to free the newest one's instant instead, so the
/// five newcomers all landed on +1000 ms: six at one instant with burst 1. Every
/// place stays spaced by T, on every store.
pub async fn cancelled_places_never_stack_waiters<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::TokenBucket,
    ] {
        let clock = ManualClock::new(BASE + START);
        let limiter = burst_one(algorithm, make_store(clock))?;
        let key = Key::from("stack");
        let max_wait = Duration::from_secs(5);
        let mut live = std::collections::VecDeque::new();
        for _ in 0..11 {
            let decision = limiter.reserve("wait", &key, 1, max_wait).await?;
            assert!(decision.allowed, "{algorithm}: within max_wait");
            live.push_back(decision);
        }
        let first: Vec<u64> = live.iter().map(|d| d.delay.as_micros() as u64).collect();
        assert_eq!(
            first,
            (0..11).map(|i| i * 100_000).collect::<Vec<u64>>(),
            "{algorithm}: one place every 100 ms"
        );
        for cycle in 0..5 {
            // The earliest waiter still waiting (the one at +0 has gone ahead).
            let cancelled = live.remove(1).ok_or("a pending waiter")?;
            limiter.refund_charge(&cancelled, &key, 1).await?;
            let newcomer = limiter.reserve("wait", &key, 1, max_wait).await?;
            assert!(
                newcomer.allowed,
                "{algorithm}: cycle {cycle}: within max_wait"
            );
            live.push_back(newcomer);
            let places: Vec<u64> = live.iter().map(|d| d.delay.as_micros() as u64).collect();
            spaced_by_emission(&places)
                .map_err(|e| format!("{algorithm}: cycle {cycle}: {e} in {places:?}"))?;
        }
        // The newest place given back is the next one's: nothing is lost either.
        let newest = live.pop_back().ok_or("a waiter")?;
        limiter.refund_charge(&newest, &key, 1).await?;
        let again = limiter.reserve("wait", &key, 1, max_wait).await?;
        assert_eq!(
            again.delay, newest.delay,
            "{algorithm}: the newest place comes back"
        );
    }
    Ok(())
}

/// Regression (issue 24, item 3): places given back in any order all come back. Ten
/// places (10/s, burst 1) at +0 … +900 ms; the nine still waiting give theirs back
/// in a shuffled order (a place given back while later ones are reserved waits for
/// them); the next reservation is +100 ms, right behind the one that went ahead, as
/// if the nine had never come.
pub async fn places_given_back_in_any_order_all_come_back<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn Error>> {
    for algorithm in [Algorithm::Gcra, Algorithm::LeakyBucket] {
        let clock = ManualClock::new(BASE + START);
        let limiter = burst_one(algorithm, make_store(clock))?;
        let key = Key::from("shuffled");
        let max_wait = Duration::from_secs(5);
        let mut places = Vec::new();
        for _ in 0..10 {
            places.push(limiter.reserve("wait", &key, 1, max_wait).await?);
        }
        for i in [3, 1, 9, 5, 2, 8, 4, 6, 7] {
            limiter.refund_charge(&places[i], &key, 1).await?;
        }
        let next = limiter.reserve("wait", &key, 1, max_wait).await?;
        assert_eq!(
            next.delay,
            Duration::from_millis(100),
            "{algorithm}: every place given back came back"
        );
    }
    Ok(())
}

/// Expands to one `#[tokio::test]` per shared waiting test, each on stores built by
/// `$make_store`.
#[macro_export]
macro_rules! waiting_tests {
    ($make_store:expr) => {
        #[tokio::test]
        async fn waiters_follow_the_admission_schedule() -> Result<(), Box<dyn std::error::Error>> {
            $crate::waiting::waiters_follow_the_admission_schedule($make_store).await
        }

        #[tokio::test]
        async fn a_given_back_reservation_returns_its_place()
        -> Result<(), Box<dyn std::error::Error>> {
            $crate::waiting::a_given_back_reservation_returns_its_place($make_store).await
        }

        #[tokio::test]
        async fn cancelled_places_never_stack_waiters() -> Result<(), Box<dyn std::error::Error>> {
            $crate::waiting::cancelled_places_never_stack_waiters($make_store).await
        }

        #[tokio::test]
        async fn places_given_back_in_any_order_all_come_back()
        -> Result<(), Box<dyn std::error::Error>> {
            $crate::waiting::places_given_back_in_any_order_all_come_back($make_store).await
        }
    };
}
