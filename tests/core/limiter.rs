//! The limiter: all-or-nothing multi-policy checks, refunds, peeks, and configuration
//! mistakes reported by name.

use std::time::Duration;

use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota, StoreErrorKind};

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn two_policies(clock: &ManualClock) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("user", Quota::per_minute(2))
                .expect("policy")
                .algorithm(Algorithm::FixedWindow),
        )
        .limit(
            Limit::new("global", Quota::per_minute(3))
                .expect("policy")
                .algorithm(Algorithm::SlidingWindowLog),
        )
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("limiter")
}

#[test]
fn a_denial_by_one_policy_charges_none() {
    let clock = ManualClock::new(BASE);
    let limiter = two_policies(&clock);
    let (alice, bob, all) = (Key::from("alice"), Key::from("bob"), Key::from(""));
    let allowed = |key: &Key| {
        immediate(limiter.check_all(&[("user", key, 1), ("global", &all, 1)]))
            .expect("memory store")
            .iter()
            .all(|d| d.allowed)
    };
    assert!(allowed(&alice));
    assert!(allowed(&alice));
    // alice's own policy denies: the global policy must not be charged for it.
    for _ in 0..5 {
        assert!(!allowed(&alice));
    }
    assert_eq!(
        immediate(limiter.check("global", &all, 0))
            .expect("store")
            .remaining,
        1
    );
    assert!(allowed(&bob));
    // Now the global policy denies bob: his own policy stays untouched.
    assert!(!allowed(&bob));
    assert_eq!(
        immediate(limiter.check("user", &bob, 0))
            .expect("store")
            .remaining,
        1
    );
}

#[test]
fn every_policy_reports_its_own_state_in_a_denied_batch() {
    let clock = ManualClock::new(BASE);
    let limiter = two_policies(&clock);
    let (alice, all) = (Key::from("alice"), Key::from(""));
    immediate(limiter.check("user", &alice, 2)).expect("store");
    let decisions =
        immediate(limiter.check_all(&[("user", &alice, 1), ("global", &all, 1)])).expect("store");
    assert_eq!(decisions.len(), 2);
    assert!(!decisions[0].allowed);
    assert_eq!(decisions[0].limit, "user");
    assert_eq!(decisions[0].retry_after, Some(Duration::from_secs(60)));
    assert!(decisions[1].allowed, "global had room");
    assert_eq!(decisions[1].remaining, 3, "but was not charged");
}

#[test]
fn a_batch_naming_one_key_twice_is_all_or_nothing_too() {
    let clock = ManualClock::new(BASE);
    let limiter = two_policies(&clock);
    let alice = Key::from("alice");
    // Each half fits alone (2 ≤ 2); together they do not.
    let decisions =
        immediate(limiter.check_all(&[("user", &alice, 2), ("user", &alice, 2)])).expect("store");
    assert!(!decisions.iter().all(|d| d.allowed));
    assert_eq!(
        immediate(limiter.check("user", &alice, 0))
            .expect("store")
            .remaining,
        2
    );
}

#[test]
fn refunds_return_the_newest_charges_and_never_exceed_idle() {
    for algorithm in support::every_algorithm(6) {
        let clock = ManualClock::new(BASE);
        let limiter = Limiter::builder()
            .limit(
                Limit::new("login", Quota::per_minute(6))
                    .expect("policy")
                    .algorithm(algorithm),
            )
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("limiter");
        let key = Key::from("alice");
        immediate(limiter.check("login", &key, 4)).expect("store");
        immediate(limiter.refund("login", &key, 3)).expect("store");
        assert_eq!(
            immediate(limiter.check("login", &key, 0))
                .expect("store")
                .remaining,
            5,
            "{algorithm}"
        );
        immediate(limiter.refund("login", &key, 100)).expect("store");
        let idle = immediate(limiter.check("login", &key, 0)).expect("store");
        assert_eq!(idle.remaining, 6, "{algorithm}");
        assert_eq!(idle.reset_after, Duration::ZERO, "{algorithm}");
        // A refund of a key that has no state is a no-op.
        immediate(limiter.refund("login", &Key::from("nobody"), 1)).expect("store");
    }
}

#[test]
fn cost_above_capacity_can_never_fit() {
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_second(10).with_burst(3).expect("burst")).expect("policy"),
        )
        .build()
        .expect("limiter");
    let d = immediate(limiter.check("api", &Key::from("a"), 4)).expect("store");
    assert!(!d.allowed);
    assert_eq!(d.retry_after, None);
    assert_eq!((d.capacity, d.remaining), (3, 3));
}

#[test]
fn leaky_bucket_queues_a_burst_with_growing_delays() {
    let clock = ManualClock::new(BASE);
    let limiter = Limiter::builder()
        .limit(
            Limit::new("queue", Quota::per_second(4).with_burst(3).expect("burst"))
                .expect("policy")
                .algorithm(Algorithm::LeakyBucket),
        )
        .store(MemoryStore::with_clock(clock))
        .build()
        .expect("limiter");
    let key = Key::from("job");
    let delays: Vec<Duration> = (0..3)
        .map(|_| {
            immediate(limiter.check("queue", &key, 1))
                .expect("store")
                .delay
        })
        .collect();
    assert_eq!(delays, [0, 250, 500].map(Duration::from_millis));
    let full = immediate(limiter.check("queue", &key, 1)).expect("store");
    assert!(!full.allowed);
    assert_eq!(full.retry_after, Some(Duration::from_millis(250)));
}

#[test]
fn unknown_policies_are_store_errors_not_panics() {
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(1)).expect("policy"))
        .build()
        .expect("limiter");
    let key = Key::from("a");
    let err = immediate(limiter.check("nope", &key, 1)).expect_err("unknown");
    assert_eq!(err.kind(), StoreErrorKind::UnknownLimit);
    assert!(err.to_string().contains("\"nope\""));
    let err =
        immediate(limiter.check_all(&[("api", &key, 1), ("nope", &key, 1)])).expect_err("unknown");
    assert_eq!(err.kind(), StoreErrorKind::UnknownLimit);
    // Nothing was charged by the failed batch.
    assert_eq!(
        immediate(limiter.check("api", &key, 0))
            .expect("store")
            .remaining,
        1
    );
    assert!(immediate(limiter.refund("nope", &key, 1)).is_err());
}

#[test]
fn configuration_mistakes_name_the_policy_and_the_input() {
    let quota = Quota::per_minute(60);
    let cases = [
        (
            Limiter::builder()
                .limit(Limit::new("a", quota).expect("policy"))
                .limit(Limit::new("a", quota).expect("policy")),
            "duplicate limit name \"a\"",
        ),
        (
            Limiter::builder().limit(
                Limit::new("w", quota.with_burst(5).expect("burst"))
                    .expect("policy")
                    .algorithm(Algorithm::SlidingWindow),
            ),
            "invalid limit \"w\"",
        ),
        (
            Limiter::builder().limit(
                Limit::new("c", quota)
                    .expect("policy")
                    .algorithm(Algorithm::SlidingWindowCounters { buckets: 7 }),
            ),
            "7 buckets do not divide",
        ),
        (
            Limiter::builder().limit(
                Limit::new("z", quota)
                    .expect("policy")
                    .algorithm(Algorithm::SlidingWindowCounters { buckets: 0 }),
            ),
            "1 to 1024 buckets",
        ),
        (Limiter::builder(), "a limiter needs at least one limit"),
    ];
    for (builder, expected) in cases {
        let err = builder.build().expect_err(expected);
        assert!(
            err.to_string().contains(expected),
            "{err} does not contain {expected}"
        );
    }
    // A burst equal to the limit is fine on a window algorithm.
    assert!(
        Limiter::builder()
            .limit(
                Limit::new("ok", quota.with_burst(60).expect("burst"))
                    .expect("policy")
                    .algorithm(Algorithm::FixedWindow)
            )
            .build()
            .is_ok()
    );
}

#[test]
fn policy_names_must_be_printable_ascii() {
    for bad in ["", "tab\t", "ünïcode", "nul\0", &"x".repeat(65)] {
        let err = Limit::new(bad, Quota::per_second(1)).expect_err("bad name");
        assert!(err.to_string().contains("printable ASCII"), "{err}");
    }
    assert!(Limit::new("api v2 /users:write", Quota::per_second(1)).is_ok());
}

#[test]
fn extreme_rates_do_not_overflow() {
    let clock = ManualClock::new(BASE);
    // Unbounded in bytes: a log at a billion per second can hold 16 MiB for one key,
    // which the default byte budget refuses at build time.
    let store = MemoryStore::with_clock(clock.clone())
        .max_bytes(usize::MAX)
        .expect("max_bytes");
    let year = Duration::from_secs(365 * 86_400);
    for algorithm in support::every_algorithm(1000) {
        for (name, quota) in [
            ("billion-per-second", Quota::per_second(1_000_000_000)),
            ("once-a-year", Quota::new(1, year).expect("quota")),
        ] {
            let limiter = Limiter::builder()
                .limit(
                    Limit::new(name, quota)
                        .expect("policy")
                        .algorithm(algorithm),
                )
                .store(store.clone())
                .build()
                .expect("limiter");
            let key = Key::from(name);
            let d = immediate(limiter.check(name, &key, u32::MAX)).expect("store");
            assert!(d.remaining <= d.capacity, "{algorithm} {name}");
            let first = immediate(limiter.check(name, &key, 1)).expect("store");
            assert!(first.allowed, "{algorithm} {name}");
            assert!(
                first.reset_after <= quota.period() * 2,
                "{algorithm} {name}: {first:?}"
            );
        }
        // A billion per second: a full second's worth fits at once, then refills fast.
        let limiter = Limiter::builder()
            .limit(
                Limit::new("g", Quota::per_second(1_000_000_000))
                    .expect("policy")
                    .algorithm(algorithm),
            )
            .store(
                MemoryStore::with_clock(clock.clone())
                    .max_bytes(usize::MAX)
                    .expect("max_bytes"),
            )
            .build()
            .expect("limiter");
        let d = immediate(limiter.check("g", &Key::from("k"), 1_000_000_000)).expect("store");
        assert!(d.allowed && d.remaining == 0, "{algorithm}: {d:?}");
    }
}

#[test]
fn a_store_answers_a_policy_no_limiter_validated_without_panicking() {
    // The limiter builder refuses these combinations; a store used directly must
    // still answer sanely rather than panic.
    let store = MemoryStore::with_clock(ManualClock::new(BASE));
    let odd = [
        Algorithm::SlidingWindowCounters { buckets: 7 },
        Algorithm::SlidingWindowCounters { buckets: 0 },
        Algorithm::FixedWindow,
        Algorithm::TokenBucket,
    ];
    for algorithm in odd {
        let policy = Limit::new(
            "unchecked",
            Quota::per_minute(60).with_burst(5).expect("burst"),
        )
        .expect("policy")
        .algorithm(algorithm);
        let key = Key::from("a");
        let charge = tollgate::store::Charge {
            limit: &policy,
            key: &key,
            cost: 1,
        };
        // The memory store answers at once, without a future.
        let decisions = tollgate::store::Store::decide(&store, &[charge])
            .into_ready()
            .expect("answered at once")
            .expect("memory store");
        assert!(decisions[0].allowed, "{algorithm}");
        assert!(
            decisions[0].remaining < decisions[0].capacity,
            "{algorithm}"
        );
    }
}

/// A store that is not the memory store (so the limiter reaches it through the
/// `Store` trait) and that suspends once before answering, as a network store does.
#[derive(Debug)]
struct SuspendingStore(MemoryStore);

impl tollgate::store::Store for SuspendingStore {
    fn decide<'a>(
        &'a self,
        charges: &'a [tollgate::store::Charge<'a>],
    ) -> tollgate::store::StoreCall<'a, Vec<tollgate::Decision>> {
        tollgate::store::StoreCall::future(async move {
            tokio::task::yield_now().await;
            self.0.decide(charges).await
        })
    }

    fn refund<'a>(
        &'a self,
        charge: tollgate::store::Charge<'a>,
    ) -> tollgate::store::StoreCall<'a, ()> {
        tollgate::store::StoreCall::future(async move {
            tokio::task::yield_now().await;
            self.0.refund(charge).await
        })
    }
}

#[tokio::test]
async fn check_through_a_store_that_suspends_decides_as_the_memory_store_does() {
    let policy = || Limit::new("api", Quota::per_minute(3)).expect("policy");
    let clock = ManualClock::new(BASE);
    let direct = Limiter::builder()
        .limit(policy())
        .store(MemoryStore::with_clock(clock.clone()))
        .build()
        .expect("limiter");
    let suspending = Limiter::builder()
        .limit(policy())
        .store(SuspendingStore(MemoryStore::with_clock(clock.clone())))
        .build()
        .expect("limiter");
    let key = Key::from("alice");
    for cost in [1, 0, 2, 1, 0, 3] {
        let expected = direct.check("api", &key, cost).await.expect("memory store");
        let got = suspending.check("api", &key, cost).await.expect("store");
        assert_eq!(got, expected, "cost {cost}");
    }
    let unknown = suspending
        .check("nope", &key, 1)
        .await
        .expect_err("unknown limit");
    assert_eq!(unknown.kind(), StoreErrorKind::UnknownLimit);
}

/// A reload reaches every thread at its next check, and usage carries over: each
/// thread keeps the set it last decided with only until the limiter's generation moves.
#[test]
fn a_reload_reaches_threads_that_decided_before_it() {
    use std::sync::mpsc;

    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_minute(10)).expect("limit"))
        .store(MemoryStore::with_clock(ManualClock::new(
            Duration::from_secs(1_700_000_000),
        )))
        .build()
        .expect("limiter");
    let (ask, asked) = mpsc::channel::<()>();
    let (tell, told) = mpsc::channel::<(u64, u64)>();
    let worker = {
        let limiter = limiter.clone();
        std::thread::spawn(move || {
            let key = Key::from("alice");
            while asked.recv().is_ok() {
                let decision = immediate(limiter.check("api", &key, 1)).expect("a decision");
                tell.send((decision.quota.limit(), decision.remaining))
                    .expect("told");
            }
        })
    };
    let check = || {
        ask.send(()).expect("asked");
        told.recv().expect("an answer")
    };
    assert_eq!(check(), (10, 9));
    assert_eq!(check(), (10, 8));
    limiter
        .reload([Limit::new("api", Quota::per_minute(100)).expect("limit")])
        .expect("a valid set");
    // The worker's cached set is stale now: its next check uses the new one, and the
    // 2 it used count against 100.
    assert_eq!(check(), (100, 97));
    limiter
        .reload([Limit::new("other", Quota::per_minute(5)).expect("limit")])
        .expect("a valid set");
    drop(ask);
    worker.join().expect("no panic");
    let gone = immediate(limiter.check("api", &Key::from("alice"), 1)).expect_err("removed");
    assert_eq!(gone.kind(), StoreErrorKind::UnknownLimit);
}
