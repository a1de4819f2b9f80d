//! Settling (`Limiter::settle`) on the memory store and through its decorators: the
//! attacker's extremes, chains, resets, many tasks on one key, a lease (settled in it
//! while it lasts, through the store after, each unit once), a `Fallback` (settled on
//! the store that took the charge, dropped when it is down), the `Store` trait's
//! default (a refund by receipt, then a penalty), and decisions the limiter cannot
//! place (another limit's, a limit a reload removed). The hand-computed tables are
//! `tests/support/scenarios/settle.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::settle::{
    ALGORITHMS, BASE, a_charge_under_a_changed_limit_gives_nothing_back,
    a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended,
    a_settle_up_counts_in_full_under_a_larger_quota, chains_never_give_back_another_charge,
    concurrent_settles, each_receipt_moves_its_charge_once,
    each_receipt_moves_its_charge_once_through_a_lease, extremes_saturate,
    receipts_from_before_a_reset_give_nothing_back,
};
use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Fallback, LeasedStore, Receipt, SliceSizing, Store, StoreCall};
use tollgate::{
    Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Quota, StoreError, StoreErrorKind,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[tokio::test]
async fn a_chain_of_settles_never_gives_back_another_requests_charge() -> TestResult {
    chains_never_give_back_another_charge(MemoryStore::with_clock).await
}

#[tokio::test]
async fn an_estimate_of_1_settled_to_u64_max_saturates_into_a_bounded_debt() -> TestResult {
    extremes_saturate(MemoryStore::with_clock).await
}

#[tokio::test]
async fn a_settle_up_under_a_small_quota_counts_in_full_under_a_larger_quota_of_the_key()
-> TestResult {
    a_settle_up_counts_in_full_under_a_larger_quota(MemoryStore::with_clock).await
}

#[tokio::test]
async fn a_receipt_from_before_a_reset_gives_nothing_back_but_its_extra_is_charged() -> TestResult {
    receipts_from_before_a_reset_give_nothing_back(MemoryStore::with_clock).await
}

#[tokio::test]
async fn a_decision_settled_or_refunded_twice_gives_back_once() -> TestResult {
    each_receipt_moves_its_charge_once(MemoryStore::with_clock).await
}

#[tokio::test]
async fn a_charge_made_before_a_reload_to_another_algorithm_or_period_gives_nothing_back()
-> TestResult {
    a_charge_under_a_changed_limit_gives_nothing_back(MemoryStore::with_clock).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_settling_one_key_leave_exactly_the_sum_of_their_actuals() {
    for algorithm in ALGORITHMS {
        let store = MemoryStore::with_clock(ManualClock::new(BASE));
        let (used, settled) = concurrent_settles(store, algorithm, 16, 40).await;
        if algorithm == Algorithm::LeakyBucket {
            // A place queued behind a later one is not given back (never over).
            assert!(
                used >= settled,
                "{algorithm}: {used} used, {settled} settled"
            );
        } else {
            assert_eq!(used, settled, "{algorithm}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_settling_through_leases_leave_exactly_the_sum_of_their_actuals() -> TestResult {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 10 },
    ] {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        let leased = LeasedStore::builder(memory.clone())
            .clock(clock.clone())
            .build();
        let (_, settled) = concurrent_settles(leased.clone(), algorithm, 16, 40).await;
        // Units parked in leases go back, then the store counts exactly what was settled.
        leased.release_all().await?;
        let peek = memory
            .peek(
                &Limit::new(algorithm.name(), Quota::per_hour(100_000))?.algorithm(algorithm),
                &Key::from("shared"),
            )
            .await?;
        assert_eq!(peek.capacity - peek.remaining, settled, "{algorithm}");
        assert!(leased.store_calls() > 0);
    }
    Ok(())
}

/// A limiter of one fixed window (`"api"`, 1 000/min) on `store`.
fn api(store: impl Store) -> Limiter {
    let limit = Limit::new("api", Quota::per_minute(1_000))
        .expect("a limit")
        .algorithm(Algorithm::FixedWindow);
    Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("a limiter")
}

async fn remaining(limiter: &Limiter, key: &Key) -> u64 {
    limiter.peek("api", key).await.expect("a peek").remaining
}

#[tokio::test]
async fn a_lease_settles_in_itself_while_it_lasts_and_through_the_store_after() -> TestResult {
    let clock = ManualClock::new(BASE);
    let memory = MemoryStore::with_clock(clock.clone());
    let leased = LeasedStore::builder(memory.clone())
        .clock(clock.clone())
        .sizing(SliceSizing::Fixed(8))?
        .build();
    let (limiter, backing) = (api(leased.clone()), api(memory));
    let key = Key::from("alice");

    // One slice of 8 charged to the store; the request spent 1, 7 parked here.
    let first = limiter.check("api", &key, 1).await?;
    assert_eq!((leased.store_calls(), leased.held()), (1, 7));
    // Settled down in the lease: 8 parked, no store call; the store still counts 8.
    let down = limiter.settle(&first, &key, 0).await?;
    assert!(down.allowed && down.receipt().is_none());
    assert_eq!((leased.store_calls(), leased.held()), (1, 8));
    assert_eq!(remaining(&backing, &key).await, 992);

    // Settled up within what the lease holds: spent from it, no store call.
    let second = limiter.check("api", &key, 1).await?;
    let up = limiter.settle(&second, &key, 5).await?;
    assert_eq!((leased.store_calls(), leased.held()), (1, 3));
    assert_eq!(up.receipt().map(|r| r.cost()), Some(5));
    // Past it: the store settles (and charges the 15 the lease cannot cover).
    let past = limiter.settle(&up, &key, 20).await?;
    assert_eq!((leased.store_calls(), leased.held()), (2, 3));
    assert_eq!(past.receipt().map(|r| r.cost()), Some(20));
    // The lease's 3 go back: the store counts 0 + 20.
    assert_eq!(leased.release_all().await?, 3);
    assert_eq!(remaining(&backing, &key).await, 980);
    // And the last settle's extra comes back through the store, no more.
    limiter.settle(&past, &key, 4).await?;
    assert_eq!(remaining(&backing, &key).await, 995);
    Ok(())
}

/// A memory store that fails every call while `down` is set, as a lost Redis does,
/// and passes settles on (so a `Fallback` over it settles atomically).
#[derive(Debug, Clone)]
struct Flaky {
    inner: MemoryStore,
    down: Arc<AtomicBool>,
}

impl Flaky {
    fn new(clock: &ManualClock) -> Self {
        Self {
            inner: MemoryStore::with_clock(clock.clone()),
            down: Arc::default(),
        }
    }

    fn up<'a, T>(&self, call: impl FnOnce() -> StoreCall<'a, T>) -> StoreCall<'a, T> {
        if self.down.load(Ordering::SeqCst) {
            StoreCall::ready(Err(StoreError::new(
                StoreErrorKind::Connection,
                "down for the test",
            )))
        } else {
            call()
        }
    }
}

impl Store for Flaky {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.up(|| self.inner.decide(charges))
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.up(|| self.inner.refund(charge))
    }

    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        self.up(|| self.inner.settle(charge, receipt))
    }
}

#[tokio::test]
async fn a_fallback_settles_on_the_store_that_took_the_charge_or_not_at_all() -> TestResult {
    let clock = ManualClock::new(BASE);
    let primary = Flaky::new(&clock);
    let insurance = MemoryStore::with_clock(clock.clone());
    let store = Fallback::new(primary.clone(), insurance.clone()).probe_interval(Duration::ZERO);
    let limiter = api(store.clone());
    let (on_primary, on_insurance) = (api(primary.inner.clone()), api(insurance));
    let key = Key::from("alice");

    let charged_on_primary = limiter.check("api", &key, 10).await?;
    primary.down.store(true, Ordering::SeqCst);
    // The insurance starts the key where the primary left it (10 used), then 10.
    let charged_on_insurance = limiter.check("api", &key, 10).await?;
    assert_eq!(
        (
            remaining(&on_primary, &key).await,
            remaining(&on_insurance, &key).await
        ),
        (990, 980)
    );

    // The insurance took this one: settled there, and its receipt keeps the route.
    let settled = limiter.settle(&charged_on_insurance, &key, 30).await?;
    assert_eq!(remaining(&on_insurance, &key).await, 960);
    // The primary took this one and is down: dropped, nothing moves anywhere.
    let dropped = limiter.settle(&charged_on_primary, &key, 1).await;
    assert_eq!(
        dropped.map_err(|e| e.kind()),
        Err(StoreErrorKind::Unavailable)
    );
    assert_eq!(remaining(&on_insurance, &key).await, 960);

    // Back up (a decision finds it so): each settles where it was charged.
    primary.down.store(false, Ordering::SeqCst);
    limiter.check("api", &key, 0).await?;
    assert!(store.serving_primary());
    limiter.settle(&charged_on_primary, &key, 1).await?;
    limiter.settle(&settled, &key, 10).await?;
    assert_eq!(
        (
            remaining(&on_primary, &key).await,
            remaining(&on_insurance, &key).await
        ),
        (999, 980)
    );
    Ok(())
}

/// A store that implements only what a third-party store must (and `penalize`):
/// `settle` is the trait's default, a refund by receipt then a penalty or a peek.
#[derive(Debug, Clone)]
struct Minimal(MemoryStore);

impl Store for Minimal {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.0.decide(charges)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.0.refund(charge)
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.0.refund_charge(charge, receipt)
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.0.penalize(charge)
    }
}

/// A limiter of `limit` alone on `store`.
fn on(store: impl Store, limit: &Limit) -> Limiter {
    Limiter::builder()
        .limit(limit.clone())
        .store(store)
        .build()
        .expect("a limiter")
}

#[tokio::test]
async fn the_default_settle_answers_as_the_atomic_one_and_never_gives_back_more() -> TestResult {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let limit = Limit::new("api", Quota::per_second(10))?.algorithm(algorithm);
        let atomic = on(MemoryStore::with_clock(clock.clone()), &limit);
        let composed = on(Minimal(MemoryStore::with_clock(clock.clone())), &limit);
        let key = Key::from("alice");
        let mut last = [
            atomic.check("api", &key, 3).await?,
            composed.check("api", &key, 3).await?,
        ];
        for (step, actual) in [1, 6, 6, 2, 0].into_iter().enumerate() {
            clock.advance(Duration::from_millis(30));
            for (i, limiter) in [&atomic, &composed].into_iter().enumerate() {
                last[i] = limiter.settle(&last[i], &key, actual).await?;
            }
            let [a, c] = &last;
            if step < 3 {
                // Down, up, equal: the same answers.
                assert_eq!(a, c, "{algorithm}, step {step}");
            } else {
                // Down after up: the default cannot name the extra's place, so it gives
                // back only what of the estimate its receipt reaches; never more.
                assert!(c.remaining <= a.remaining, "{algorithm}, step {step}");
            }
            assert_eq!(a.receipt().map(|r| r.cost()), c.receipt().map(|r| r.cost()));
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_decision_the_limiter_cannot_place_is_refused_or_settles_nothing() -> TestResult {
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(10))?)
        .build()?;
    let other = Limiter::builder()
        .limit(Limit::new("elsewhere", Quota::per_minute(10))?)
        .build()?;
    let key = Key::from("alice");
    let foreign = other.check("elsewhere", &key, 5).await?;
    // Another limiter's limit: refused, by name.
    let refused = limiter.settle(&foreign, &key, 1).await;
    assert_eq!(
        refused.map_err(|e| e.kind()),
        Err(StoreErrorKind::UnknownLimit)
    );
    // A decision that charged nothing: itself, unchanged, whatever the actual.
    limiter.check("api", &key, 10).await?;
    let denied = limiter.check("api", &key, 1).await?;
    let settled = limiter.settle(&denied, &key, u64::MAX).await?;
    assert_eq!(settled, denied);
    assert!(settled.receipt().is_none());
    let peeked = limiter.check("api", &key, 0).await?;
    assert_eq!(limiter.settle(&peeked, &key, 7).await?, peeked);
    assert_eq!(limiter.peek("api", &key).await?.remaining, 0);

    // A reload that changed the limit's algorithm (its state starts fresh): settled
    // under the limit as it is now, never more than the difference back; one that
    // removed the limit: refused.
    let bob = Key::from("bob");
    let charged = limiter.check("api", &bob, 4).await?;
    limiter
        .reload([Limit::new("api", Quota::per_minute(20))?.algorithm(Algorithm::FixedWindow)])?;
    limiter.check("api", &bob, 3).await?;
    limiter.settle(&charged, &bob, 0).await?;
    let left = limiter.peek("api", &bob).await?.remaining;
    assert!((17..=20).contains(&left), "{left}");
    limiter.reload([Limit::new("other", Quota::per_minute(20))?])?;
    assert_eq!(
        limiter
            .settle(&charged, &bob, 1)
            .await
            .map_err(|e| e.kind()),
        Err(StoreErrorKind::UnknownLimit)
    );
    Ok(())
}

#[tokio::test]
async fn a_plan_callers_charge_settles_under_its_own_quota() -> TestResult {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let limit = Limit::new("api", Quota::per_minute(100))?.algorithm(algorithm);
        let limiter = on(MemoryStore::with_clock(clock), &limit);
        let key = Key::from("pro");
        let own = Quota::per_hour(1_000);
        let estimate = limiter.check_with("api", &key, 500, own).await?;
        let settled = limiter.settle(&estimate, &key, 100).await?;
        assert_eq!(
            (settled.quota, settled.remaining),
            (own, 900),
            "{algorithm}"
        );
        assert_eq!(limiter.peek_with("api", &key, own).await?.remaining, 900);
        // The limit's own quota counts in state of its own: untouched.
        assert_eq!(
            limiter.peek("api", &key).await?.remaining,
            100,
            "{algorithm}"
        );
        let up = limiter.settle(&settled, &key, 1_200).await?;
        assert_eq!(up.remaining, 0, "{algorithm}");
        assert!(!limiter.check_with("api", &key, 1, own).await?.allowed);
        assert_eq!(
            limiter.peek("api", &key).await?.remaining,
            100,
            "{algorithm}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_decision_settled_or_refunded_twice_through_a_fallback_gives_back_once() -> TestResult {
    each_receipt_moves_its_charge_once(|clock: ManualClock| {
        Fallback::new(
            MemoryStore::with_clock(clock.clone()),
            MemoryStore::with_clock(clock),
        )
    })
    .await
}

/// Through a lease: a charge spent from a live lease is settled in it, and the lease
/// table remembers the receipts it moved, so a second settle or refund of the same
/// decision moves nothing (without the record, the second settle was settled in the
/// lease again, a receipt still standing for it). Slices of 25, so that every request of the
/// scenario is spent from one lease and every move is made in it (a token bucket's
/// lease that ends leaves its unused units to time, which a frozen clock never
/// repays).
#[tokio::test]
async fn a_decision_settled_or_refunded_twice_through_a_lease_gives_back_once() -> TestResult {
    each_receipt_moves_its_charge_once_through_a_lease(|clock: ManualClock| {
        LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
            .clock(clock)
            .processes(1)
            .and_then(|b| b.sizing(SliceSizing::Fixed(25)))
            .expect("one process, slices of 25")
            .build()
    })
    .await
}

#[tokio::test]
async fn a_decision_settled_in_a_lease_moves_nothing_when_settled_again_after_the_lease_ended()
-> TestResult {
    a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended(|clock: ManualClock| {
        LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
            .clock(clock)
            .processes(1)
            .and_then(|b| b.sizing(SliceSizing::Fixed(8)))
            .expect("one process, slices of 8")
            .build()
    })
    .await
}
