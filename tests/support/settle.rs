//! Settling (`Limiter::settle`) against any store, for the memory, Redis and cluster
//! tests alike: chains of settles that must never give back another request's charge,
//! extremes that must saturate, receipts from before a reset, and many tasks settling
//! one key at once, whose usage must come out as the sum of what they settled to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::{LeasedStore, Store};
use tollgate::{Algorithm, Key, Limit, Limiter, Quota};

use crate::rng::Rng;

/// Every scenario starts here: 2023-11-14T00:00:00Z, a multiple of one day.
pub const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Every algorithm, the counters with 10 buckets.
pub const ALGORITHMS: [Algorithm; 7] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowCounters { buckets: 10 },
    Algorithm::SlidingWindowLog,
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A limiter of one limit named after `algorithm`, on `store`.
fn limiter(store: impl Store, algorithm: Algorithm, quota: Quota) -> (Limiter, &'static str) {
    let name = algorithm.name();
    let limiter = Limiter::builder()
        .limit(
            Limit::new(name, quota)
                .expect("a limit")
                .algorithm(algorithm),
        )
        .store(store)
        .build()
        .expect("a limiter");
    (limiter, name)
}

/// What `key` has used of `limiter`'s `name` (capacity less remaining), by a peek.
async fn used(limiter: &Limiter, name: &str, key: &Key) -> u64 {
    let peek = limiter.peek(name, key).await.expect("a peek");
    peek.capacity - peek.remaining
}

/// Chains of settles, each from the decision the last one returned, at one instant,
/// after another request's charge: whatever the chain does, that charge is never
/// given back, and the key never counts less than the chain's last actual (a chain
/// gives back at most what it charged; it may give back less, never more).
pub async fn chains_never_give_back_another_charge<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> TestResult {
    let mut rng = Rng(0x5e77_1e5e_771e);
    for algorithm in ALGORITHMS {
        for round in 0..20 {
            let clock = ManualClock::new(BASE + Duration::from_secs(round));
            let (limiter, name) = limiter(make_store(clock), algorithm, Quota::per_second(100));
            let key = Key::from("chain");
            let other = rng.below(30) + 1;
            assert!(limiter.check(name, &key, other as u32).await?.allowed);
            let estimate = rng.below(30) + 1;
            let mut decision = limiter.check(name, &key, estimate as u32).await?;
            assert!(decision.allowed);
            let (mut actual, mut charged) = (estimate, estimate);
            for _ in 0..6 {
                let wanted = rng.below(41);
                if decision.receipt().is_none() {
                    // Settled to 0: nothing stands, and nothing more settles.
                    let again = limiter.settle(&decision, &key, wanted).await?;
                    assert_eq!((&again, again.receipt()), (&decision, None));
                    continue;
                }
                charged += wanted.saturating_sub(actual);
                actual = wanted;
                decision = limiter.settle(&decision, &key, actual).await?;
                assert_eq!(
                    decision.receipt().map(|r| r.cost()),
                    Some(actual).filter(|&a| a > 0)
                );
                let used = used(&limiter, name, &key).await;
                assert!(
                    used >= other + actual,
                    "{algorithm}: {used} used after settling to {actual} behind {other}"
                );
            }
            // Down to nothing: the other charge stays counted, and at most what the
            // chain charged (a settle up's receipt names its extra only: what was
            // counted before it stays).
            limiter.settle(&decision, &key, 0).await?;
            let used = used(&limiter, name, &key).await;
            assert!(
                (other..=other + charged).contains(&used),
                "{algorithm}: {used} used, other {other}, the chain charged {charged}"
            );
        }
    }
    Ok(())
}

/// A caller picks its estimate (1) and its actual (`u64::MAX`, or the same again and
/// again): nothing panics or wraps; the key is in debt, denied, and a settle back
/// gives back what was charged, no more.
pub async fn extremes_saturate<S: Store>(make_store: impl Fn(ManualClock) -> S) -> TestResult {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let (limiter, name) = limiter(make_store(clock.clone()), algorithm, Quota::per_second(10));
        let key = Key::from("greedy");
        limiter.check(name, &key, 2).await?;
        let estimate = limiter.check(name, &key, 1).await?;
        let huge = limiter.settle(&estimate, &key, u64::MAX).await?;
        assert!(huge.allowed, "{algorithm}");
        assert_eq!(huge.remaining, 0, "{algorithm}");
        assert_eq!(
            huge.receipt().map(|r| r.cost()),
            Some(u64::MAX),
            "{algorithm}"
        );
        assert!(!limiter.check(name, &key, 1).await?.allowed, "{algorithm}");
        // The same estimate settled to the most again and again: it settled once, so
        // nothing more is charged (and no receipt stands from the repeats).
        for _ in 0..3 {
            let again = limiter.settle(&estimate, &key, u64::MAX).await?;
            assert_eq!((again.remaining, again.receipt()), (0, None), "{algorithm}");
        }
        assert!(!limiter.check(name, &key, 1).await?.allowed, "{algorithm}");
        // Back to 1 from the first settle's decision: its extra comes back, once.
        let back = limiter.settle(&huge, &key, 1).await?;
        assert_eq!(back.remaining, 7, "{algorithm}: 2 + 1 of 10 stand");
        let again = limiter.settle(&huge, &key, 1).await?;
        assert_eq!((again.remaining, again.receipt()), (7, None), "{algorithm}");
        // From a fresh key: the extra and back again leaves the key where it was.
        let fresh = Key::from("greedy-again");
        limiter.check(name, &fresh, 2).await?;
        let estimate = limiter.check(name, &fresh, 1).await?;
        let huge = limiter.settle(&estimate, &fresh, u64::MAX).await?;
        let back = limiter.settle(&huge, &fresh, 1).await?;
        assert_eq!(back.remaining, 7, "{algorithm}: 2 + 1 of 10 stand");
        assert_eq!(back.receipt().map(|r| r.cost()), Some(1));
    }
    Ok(())
}

/// A receipt from before a reset settles nothing back (its charge went with the
/// key's state), and its extra is still charged (the work happened).
pub async fn receipts_from_before_a_reset_give_nothing_back<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> TestResult {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let (limiter, name) = limiter(make_store(clock.clone()), algorithm, Quota::per_second(10));
        let key = Key::from("reset");
        let before = limiter.check(name, &key, 6).await?;
        let raised = limiter.check(name, &key, 1).await?;
        limiter.reset(name, &key).await?;
        clock.advance(Duration::from_micros(1));
        assert!(limiter.check(name, &key, 10).await?.allowed, "{algorithm}");
        // Nothing of the fresh quota comes back.
        let settled = limiter.settle(&before, &key, 0).await?;
        assert_eq!(settled.remaining, 0, "{algorithm}");
        assert!(!limiter.check(name, &key, 1).await?.allowed, "{algorithm}");
        // Up: charged on top of the fresh usage.
        limiter.reset(name, &key).await?;
        clock.advance(Duration::from_micros(1));
        limiter.settle(&raised, &key, 4).await?;
        assert_eq!(
            used(&limiter, name, &key).await,
            3,
            "{algorithm}: 4 − 1 charged"
        );
    }
    Ok(())
}

/// `tasks` tasks each check an estimate and settle it to an actual, `rounds` times,
/// on one key of a limit large enough for all of it, the clock standing still: the
/// key's usage afterwards is the sum of the actuals of the admitted checks. Returns
/// (usage, sum of actuals). The leaky bucket gives back no place queued behind a later
/// one, so there the usage may only be larger.
pub async fn concurrent_settles<S: Store>(
    store: S,
    algorithm: Algorithm,
    tasks: u64,
    rounds: u64,
) -> (u64, u64) {
    let quota = Quota::per_hour(100_000);
    let (limiter, name) = limiter(store, algorithm, quota);
    let settled = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (limiter, settled) = (limiter.clone(), settled.clone());
        handles.push(tokio::spawn(async move {
            let key = Key::from("shared");
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (task + 1));
            for _ in 0..rounds {
                let estimate = rng.below(100) + 1;
                let actual = rng.below(151);
                let decision = limiter
                    .check(name, &key, estimate as u32)
                    .await
                    .expect("a decision");
                assert!(decision.allowed, "the quota holds every estimate");
                let after = limiter
                    .settle(&decision, &key, actual)
                    .await
                    .expect("settled");
                assert!(after.allowed);
                settled.fetch_add(actual, Ordering::Relaxed);
            }
        }));
    }
    for handle in handles {
        handle.await.expect("no panic");
    }
    let used = used(&limiter, name, &Key::from("shared")).await;
    (used, settled.load(Ordering::Relaxed))
}

/// One decision settled twice, settled up twice, refunded twice, and settled after a
/// refund: each receipt moves its charge once. (A retry after a timeout whose first
/// try ran is the same second call.) At one instant, each charge the newest of its
/// key when it moves, so every algorithm gives back exactly.
pub async fn each_receipt_moves_its_charge_once<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> TestResult {
    for algorithm in ALGORITHMS {
        moves_once(make_store(ManualClock::new(BASE)), algorithm, || 0).await?;
    }
    Ok(())
}

/// [`each_receipt_moves_its_charge_once`] through a `LeasedStore`: what the key has
/// used is what the store counts less the units parked in the lease (charged to the
/// store, spent by no request), so a move made in the lease shows as one made at the
/// store does.
pub async fn each_receipt_moves_its_charge_once_through_a_lease<S: Store>(
    make_store: impl Fn(ManualClock) -> LeasedStore<S>,
) -> TestResult {
    for algorithm in ALGORITHMS {
        let store = make_store(ManualClock::new(BASE));
        let parked = store.clone();
        moves_once(store, algorithm, move || parked.held()).await?;
    }
    Ok(())
}

/// The body of [`each_receipt_moves_its_charge_once`] for one algorithm; `parked` is
/// how many units the store counts that no request spent.
async fn moves_once(
    store: impl Store,
    algorithm: Algorithm,
    parked: impl Fn() -> u64,
) -> TestResult {
    let (limiter, name) = limiter(store, algorithm, Quota::per_second(100));
    let key = Key::from("twice");
    let used = async || used(&limiter, name, &key).await - parked();
    limiter.check(name, &key, 1).await?;
    // Down, twice: 4 come back once.
    let estimate = limiter.check(name, &key, 6).await?;
    let first = limiter.settle(&estimate, &key, 2).await?;
    assert_eq!(first.receipt().map(|r| r.cost()), Some(2), "{algorithm}");
    assert_eq!(used().await, 3, "{algorithm}");
    let second = limiter.settle(&estimate, &key, 2).await?;
    assert_eq!(second.receipt(), None, "{algorithm}: nothing stands for it");
    assert_eq!(used().await, 3, "{algorithm}");
    limiter.settle(&estimate, &key, 0).await?;
    limiter.refund_charge(&estimate, &key, 6).await?;
    assert_eq!(used().await, 3, "{algorithm}");
    // Up, twice: the extra (3) is charged once.
    let estimate = limiter.check(name, &key, 2).await?;
    limiter.settle(&estimate, &key, 5).await?;
    limiter.settle(&estimate, &key, 5).await?;
    assert_eq!(used().await, 8, "{algorithm}");
    // Refunded twice: once.
    let estimate = limiter.check(name, &key, 4).await?;
    limiter.refund_charge(&estimate, &key, 4).await?;
    limiter.refund_charge(&estimate, &key, 4).await?;
    assert_eq!(used().await, 8, "{algorithm}");
    // Refunded, then settled: the settle moves nothing more.
    let estimate = limiter.check(name, &key, 4).await?;
    limiter.refund_charge(&estimate, &key, 1).await?;
    assert_eq!(used().await, 11, "{algorithm}");
    limiter.settle(&estimate, &key, 0).await?;
    limiter.settle(&estimate, &key, 9).await?;
    assert_eq!(used().await, 11, "{algorithm}");
    // Two charges of one size at one instant are two receipts: each gives back.
    let a = limiter.check(name, &key, 1).await?;
    let b = limiter.check(name, &key, 1).await?;
    limiter.refund_charge(&b, &key, 1).await?;
    limiter.refund_charge(&a, &key, 1).await?;
    assert_eq!(used().await, 11, "{algorithm}");
    Ok(())
}

/// Receipts moved in a lease (a settle down, a settle up spent from the slice) used
/// again after the lease ended and returned its unused units: they move nothing at
/// the store, which never saw the first move; a receipt the lease issued but never
/// moved goes to the store and gives back there, once. Window algorithms, whose
/// unused units go back to the store; `make_store` leases 8 units at a time.
pub async fn a_receipt_moved_in_a_lease_moves_nothing_once_the_lease_has_ended<S: Store>(
    make_store: impl Fn(ManualClock) -> LeasedStore<S>,
) -> TestResult {
    let windows = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 10 },
    ];
    for algorithm in windows {
        let leased = make_store(ManualClock::new(BASE));
        let (limiter, name) = limiter(leased.clone(), algorithm, Quota::per_second(100));
        let key = Key::from("ended");
        limiter.check(name, &key, 1).await?;
        assert_eq!(leased.held(), 7, "{algorithm}: a slice of 8");
        let down = limiter.check(name, &key, 4).await?;
        let up = limiter.check(name, &key, 2).await?;
        let unmoved = limiter.check(name, &key, 1).await?;
        limiter.settle(&down, &key, 1).await?;
        limiter.settle(&up, &key, 4).await?;
        assert_eq!(leased.held(), 1, "{algorithm}: all in the lease");
        assert_eq!(leased.release_all().await?, 1, "{algorithm}");
        // 1 + 1 + 4 + 1.
        assert_eq!(used(&limiter, name, &key).await, 7, "{algorithm}");
        let again = limiter.settle(&down, &key, 1).await?;
        assert_eq!(again.receipt(), None, "{algorithm}: nothing stands for it");
        limiter.settle(&down, &key, 0).await?;
        limiter.refund_charge(&down, &key, 4).await?;
        limiter.settle(&up, &key, 4).await?;
        limiter.refund_charge(&up, &key, 2).await?;
        assert_eq!(used(&limiter, name, &key).await, 7, "{algorithm}");
        // Never moved: the store gives it back, once.
        limiter.refund_charge(&unmoved, &key, 1).await?;
        limiter.refund_charge(&unmoved, &key, 1).await?;
        assert_eq!(used(&limiter, name, &key).await, 6, "{algorithm}");
    }
    Ok(())
}

/// A charge made under a limit whose algorithm or period a reload changed since gives
/// nothing back (and a settle up charges nothing more): 5 charged under a fixed window
/// of 10/min, the limit reloaded as GCRA with a burst of 10, the charge settled to 0
/// and refunded: a burst at one instant still admits exactly 10, not 15. The same
/// after a reload to another period.
pub async fn a_charge_under_a_changed_limit_gives_nothing_back<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> TestResult {
    let before = Limit::new("api", Quota::per_minute(10))?.algorithm(Algorithm::FixedWindow);
    let reloads = [
        Limit::new("api", Quota::per_minute(10))?.algorithm(Algorithm::Gcra),
        Limit::new("api", Quota::per_hour(10))?.algorithm(Algorithm::FixedWindow),
        Limit::new("api", Quota::per_minute(10))?
            .algorithm(Algorithm::SlidingWindowCounters { buckets: 6 }),
    ];
    for after in reloads {
        let clock = ManualClock::new(BASE);
        let limiter = Limiter::builder()
            .limit(before.clone())
            .store(make_store(clock.clone()))
            .build()?;
        let key = Key::from("reloaded");
        let settled = limiter.check("api", &key, 5).await?;
        let refunded = limiter.check("api", &key, 2).await?;
        let raised = limiter.check("api", &key, 1).await?;
        limiter.reload([after.clone()])?;
        let answer = limiter.settle(&settled, &key, 0).await?;
        assert_eq!(answer.receipt(), None, "{after:?}: nothing stands");
        limiter.refund_charge(&refunded, &key, 2).await?;
        // Settled up: the work was paid for under the old limit; nothing new is
        // charged under the new one.
        limiter.settle(&raised, &key, 4).await?;
        let mut admitted = 0;
        for _ in 0..30 {
            admitted += u32::from(limiter.check("api", &key, 1).await?.allowed);
        }
        assert_eq!(admitted, 10, "{after:?}");
    }
    Ok(())
}

/// The algorithms that count a window's usage: their settle up is capped, and the cap
/// must not depend on the quota the charge was made under.
pub const WINDOWS: [Algorithm; 4] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowCounters { buckets: 10 },
    Algorithm::SlidingWindowLog,
];

/// One key under two quotas of one period (a free caller's 4 and a pro caller's 8 per
/// 100 ms, by `check_with`): a free request's settle up to 7 counts all 7, past the
/// free capacity, so the pro quota, which sees the same usage, has 1 left, not the 3
/// a settle capped at the free capacity (4 of extra) would leave it.
pub async fn a_settle_up_counts_in_full_under_a_larger_quota<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> TestResult {
    let free = Quota::new(4, Duration::from_millis(100))?;
    let pro = Quota::new(8, Duration::from_millis(100))?;
    for algorithm in WINDOWS {
        let (limiter, name) = limiter(make_store(ManualClock::new(BASE)), algorithm, free);
        let key = Key::from("shared");
        let estimate = limiter.check_with(name, &key, 1, free).await?;
        assert_eq!(
            (estimate.allowed, estimate.remaining),
            (true, 3),
            "{algorithm}"
        );
        let settled = limiter.settle(&estimate, &key, 7).await?;
        assert_eq!(
            (settled.allowed, settled.remaining),
            (true, 0),
            "{algorithm}"
        );
        assert_eq!(settled.receipt().map(|r| r.cost()), Some(7), "{algorithm}");
        assert_eq!(
            limiter.peek_with(name, &key, pro).await?.remaining,
            1,
            "{algorithm}: 7 of 8 used"
        );
        let last = limiter.check_with(name, &key, 1, pro).await?;
        assert_eq!((last.allowed, last.remaining), (true, 0), "{algorithm}");
        let over = limiter.check_with(name, &key, 1, pro).await?;
        assert!(!over.allowed, "{algorithm}: 8 of 8 used");
        // Back down to 1 from the settled decision: the whole extra comes back, once.
        let back = limiter.settle(&settled, &key, 1).await?;
        assert_eq!(back.remaining, 2, "{algorithm}: 1 + 1 of 4 stand");
        assert_eq!(
            limiter.peek_with(name, &key, pro).await?.remaining,
            6,
            "{algorithm}"
        );
    }
    Ok(())
}
