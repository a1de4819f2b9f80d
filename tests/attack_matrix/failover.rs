//! `Fallback` where its new hysteresis, carried usage, re-asserted blocks and replay
//! meet penalties, operators' calls and batches. The primary is a memory store behind
//! a switch (down: every call fails as a lost connection; up: the same state as
//! before), both stores at one frozen instant; `Fallback`'s own timing is real.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::fallback::HalfDown;
use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Fallback, Store, StoreCall};
use tollgate::{
    Decision, Key, Limit, Limiter, MemoryStore, Penalty, Quota, StoreError, StoreErrorKind,
};

use crate::common::clock;

/// A store behind a switch: while down every call fails; back up, it has what it had.
#[derive(Debug, Clone)]
pub(crate) struct Switched {
    store: MemoryStore,
    up: Arc<AtomicBool>,
}

impl Switched {
    pub(crate) fn new(clock: &ManualClock) -> Self {
        Self {
            store: MemoryStore::with_clock(clock.clone()),
            up: Arc::new(AtomicBool::new(true)),
        }
    }

    pub(crate) fn set(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    fn gate<'a, T: Send + 'a>(&self, call: impl FnOnce() -> StoreCall<'a, T>) -> StoreCall<'a, T> {
        if self.up.load(Ordering::SeqCst) {
            call()
        } else {
            StoreCall::ready(Err(StoreError::new(
                StoreErrorKind::Connection,
                "switched off",
            )))
        }
    }
}

impl Store for Switched {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.gate(|| self.store.decide(charges))
    }
    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.gate(|| self.store.refund(charge))
    }
    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.gate(|| self.store.penalize(charge))
    }
    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        self.gate(|| self.store.reset(limit, key))
    }
    fn block<'a>(&'a self, limit: &'a Limit, key: &'a Key, d: Duration) -> StoreCall<'a, Decision> {
        self.gate(|| self.store.block(limit, key, d))
    }
}

pub(crate) fn fallback(primary: &Switched, clock: &ManualClock) -> Fallback<Switched, MemoryStore> {
    Fallback::new(primary.clone(), MemoryStore::with_clock(clock.clone()))
        .min_down(Duration::from_millis(5))
        .probe_interval(Duration::from_millis(2))
}

fn limiter(limit: Limit, store: impl Store) -> Limiter {
    Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("limiter")
}

/// The fallback's calls until it is back on the primary (each call may be what
/// notices), its catch-up and replay given time to land.
async fn until_back(store: &Fallback<Switched, MemoryStore>, limiter: &Limiter, name: &str) {
    let probe = Key::from("probe-key");
    let started = std::time::Instant::now();
    while !store.serving_primary() {
        assert!(
            started.elapsed() < crate::common::HANG,
            "never back on the primary"
        );
        let _ = limiter.check(name, &probe, 0).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}

async fn admitted(limiter: &Limiter, name: &str, key: &Key, n: usize) -> usize {
    let mut admitted = 0;
    for _ in 0..n {
        admitted += usize::from(limiter.check(name, key, 1).await.is_ok_and(|d| d.allowed));
    }
    admitted
}

/// A penalty box tripped on the insurance while the primary is down is a block this
/// process knows: once the primary is back, the primary itself reports it.
#[tokio::test]
async fn a_box_tripped_on_the_insurance_holds_on_the_primary_once_it_is_back() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("login", Quota::per_minute(3))
        .expect("limit")
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let limiter = limiter(limit.clone(), store.clone());
    let key = Key::from("mallory");
    primary.set(false);
    assert_eq!(admitted(&limiter, "login", &key, 5).await, 3);
    let boxed = limiter.offences("login", &key).await.expect("offences");
    assert!(boxed.blocked_for.is_some(), "not boxed on the insurance");
    primary.set(true);
    until_back(&store, &limiter, "login").await;
    let on_primary = limiter_on(&limit, &primary)
        .offences("login", &key)
        .await
        .expect("offences");
    // A minute later the window has refilled; the box has not.
    c.advance(Duration::from_secs(61));
    let a_minute_later = admitted(&limiter, "login", &key, 5).await;
    assert!(
        on_primary
            .blocked_for
            .is_some_and(|d| d > Duration::from_secs(590))
            && a_minute_later == 0,
        "the primary's view: {on_primary:?}; admitted 61 s later (quiet since): \
         {a_minute_later} of 5, boxed for 600 s"
    );
}

fn limiter_on(limit: &Limit, primary: &Switched) -> Limiter {
    limiter(limit.clone(), primary.store.clone())
}

/// 10 of 10/min used on the primary; it goes down; an operator resets the key; the
/// insurance admits a fresh quota; the primary comes back with its state. Across the
/// reset, one quota: 10 admitted, not 20 (the replayed reset must not wipe what the
/// insurance admitted after it).
#[tokio::test]
async fn a_reset_during_an_outage_then_the_recovery_admit_one_quota() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = limiter(
        Limit::new("api", Quota::per_minute(10)).expect("limit"),
        store.clone(),
    );
    let key = Key::from("alice");
    assert_eq!(admitted(&limiter, "api", &key, 12).await, 10);
    primary.set(false);
    let _ = limiter.check("api", &key, 1).await;
    limiter.reset("api", &key).await.expect("reset");
    let on_insurance = admitted(&limiter, "api", &key, 12).await;
    primary.set(true);
    until_back(&store, &limiter, "api").await;
    let on_primary = admitted(&limiter, "api", &key, 12).await;
    assert_eq!(
        (on_insurance, on_primary),
        (10, 0),
        "after the reset: {on_insurance} on the insurance, then {on_primary} on the primary"
    );
}

/// An operator's `penalize` while the primary is down (the quota spent as a penalty)
/// is an operator's call the primary missed: replayed, the key admits nothing once the
/// primary is back.
#[tokio::test]
async fn a_penalty_given_during_an_outage_holds_once_the_primary_is_back() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = limiter(
        Limit::new("api", Quota::per_minute(10)).expect("limit"),
        store.clone(),
    );
    let key = Key::from("abuser");
    assert_eq!(admitted(&limiter, "api", &key, 1).await, 1);
    primary.set(false);
    let _ = limiter.check("api", &key, 0).await;
    limiter.penalize("api", &key, 10).await.expect("penalize");
    assert_eq!(admitted(&limiter, "api", &key, 3).await, 0);
    primary.set(true);
    until_back(&store, &limiter, "api").await;
    assert_eq!(admitted(&limiter, "api", &key, 12).await, 0);
}

/// Two limits decided together (`check_all`) through a primary failing half its calls,
/// at one frozen instant: no more than one quota of either is admitted (the single
/// limit's figure is 10, not 20).
#[tokio::test]
async fn a_batch_through_a_half_failing_primary_admits_one_quota_at_one_instant() {
    let c = clock();
    let store = Fallback::new(
        HalfDown::new(MemoryStore::with_clock(c.clone()), 3),
        MemoryStore::with_clock(c.clone()),
    )
    .min_down(Duration::from_millis(5))
    .probe_interval(Duration::from_millis(2));
    let limiter = Limiter::builder()
        .limit(Limit::new("per-key", Quota::per_minute(10)).expect("limit"))
        .limit(Limit::new("global", Quota::per_minute(1_000)).expect("limit"))
        .store(store)
        .build()
        .expect("limiter");
    let key = Key::from("alice");
    let everyone = Key::from("everyone");
    let mut admitted = 0;
    for _ in 0..200 {
        let batch = limiter
            .check_all(&[("per-key", &key, 1), ("global", &everyone, 1)])
            .await;
        if batch.is_ok_and(|d| d.iter().all(|d| d.allowed)) {
            admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        admitted <= 10,
        "{admitted} admitted on 10/min at one instant"
    );
}

/// The carried usage under a plan: a caller on a plan of 5/min spends it on the
/// primary; the primary fails; on the insurance it still has nothing left.
#[tokio::test]
async fn a_plan_callers_usage_is_carried_to_the_insurance() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = limiter(
        Limit::new("api", Quota::per_minute(100)).expect("limit"),
        store.clone(),
    );
    let key = Key::from("basic-plan");
    let basic = Quota::per_minute(5);
    let mut first = 0;
    for _ in 0..7 {
        first += usize::from(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .expect("check")
                .allowed,
        );
    }
    primary.set(false);
    let mut second = 0;
    for _ in 0..7 {
        second += usize::from(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    assert_eq!((first, second), (5, 0));
}

/// Escalation across a failover: a first trip on the primary (1 s), served out (on
/// the injected clock and in real time: carried blocks are timed on the process's
/// clock); the primary goes down; the caller's next trip, on the insurance, is its
/// second within `remember` and gets the second block (20 s), as on one store.
#[tokio::test]
async fn an_escalating_box_counts_trips_made_on_the_primary_after_a_failover() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("login", Quota::per_second(3))
        .expect("limit")
        .penalty(
            Penalty::after(1)
                .block_for(Duration::from_secs(1))
                .escalate(&[Duration::from_secs(20)])
                .remember(Duration::from_secs(3_600)),
        );
    let limiter = limiter(limit, store.clone());
    let key = Key::from("repeat");
    assert_eq!(admitted(&limiter, "login", &key, 4).await, 3);
    let first = limiter.offences("login", &key).await.expect("offences");
    assert_eq!(first.trips, 1);
    c.advance(Duration::from_millis(1_300));
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(admitted(&limiter, "login", &key, 1).await, 1);
    primary.set(false);
    assert_eq!(admitted(&limiter, "login", &key, 4).await, 2);
    let second = limiter.offences("login", &key).await.expect("offences");
    assert!(
        second
            .blocked_for
            .is_some_and(|d| d > Duration::from_secs(19)),
        "the second trip, on the insurance: {second:?} (a 20 s block is right)"
    );
}

/// The escalation across a failover on a real Redis primary, killed after the first
/// trip was served out there: the second trip, on the insurance, gets the second block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escalating_box_counts_trips_made_on_redis_after_it_died() {
    let c = clock();
    let mut server = support::redis_server::RedisServer::start();
    let primary = tollgate::RedisStore::from_url(&server.url())
        .expect("url")
        .deadline(Duration::from_millis(200))
        .expect("deadline")
        .with_clock(c.clone());
    let store = Fallback::new(primary, MemoryStore::with_clock(c.clone()))
        .min_down(Duration::from_millis(50))
        .probe_interval(Duration::from_millis(20));
    let limit = Limit::new("login", Quota::per_second(3))
        .expect("limit")
        .penalty(
            Penalty::after(1)
                .block_for(Duration::from_secs(1))
                .escalate(&[Duration::from_secs(20)])
                .remember(Duration::from_secs(3_600)),
        );
    let limiter = limiter(limit, store);
    let key = Key::from("repeat-on-redis");
    assert_eq!(admitted(&limiter, "login", &key, 4).await, 3);
    let first = limiter.offences("login", &key).await.expect("offences");
    assert_eq!(first.trips, 1);
    c.advance(Duration::from_millis(1_300));
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(admitted(&limiter, "login", &key, 1).await, 1);
    server.kill();
    assert_eq!(admitted(&limiter, "login", &key, 4).await, 2);
    let second = limiter.offences("login", &key).await.expect("offences");
    assert!(
        second
            .blocked_for
            .is_some_and(|d| d > Duration::from_secs(19)),
        "the second trip, on the insurance: {second:?} (a 20 s block is right)"
    );
}

/// Operators' calls missed by the primary are replayed in their order: a reset then a
/// block of an hour, both while the primary is down, leave the key blocked once the
/// primary is back (replayed the other way round, the reset would lift the block).
#[tokio::test]
async fn a_reset_then_a_block_during_an_outage_leave_the_key_blocked_after_it() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("api", Quota::per_minute(10)).expect("limit");
    let limiter = limiter(limit.clone(), store.clone());
    let key = Key::from("ordered");
    assert_eq!(admitted(&limiter, "api", &key, 3).await, 3);
    primary.set(false);
    let _ = limiter.check("api", &key, 0).await;
    limiter.reset("api", &key).await.expect("reset");
    limiter
        .block("api", &key, Duration::from_secs(3_600))
        .await
        .expect("block");
    primary.set(true);
    until_back(&store, &limiter, "api").await;
    let on_primary = limiter_on(&limit, &primary)
        .offences("api", &key)
        .await
        .expect("offences");
    let through = admitted(&limiter, "api", &key, 5).await;
    assert!(
        on_primary.blocked_for.is_some() && through == 0,
        "on the primary: {on_primary:?}; admitted after: {through} of 5"
    );
}

/// And a block then a reset leave it free, with a fresh quota less what the
/// insurance admitted after the reset.
#[tokio::test]
async fn a_block_then_a_reset_during_an_outage_leave_the_key_free_after_it() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = limiter(
        Limit::new("api", Quota::per_minute(10)).expect("limit"),
        store.clone(),
    );
    let key = Key::from("forgiven");
    assert_eq!(admitted(&limiter, "api", &key, 3).await, 3);
    primary.set(false);
    let _ = limiter.check("api", &key, 0).await;
    limiter
        .block("api", &key, Duration::from_secs(3_600))
        .await
        .expect("block");
    limiter.reset("api", &key).await.expect("reset");
    let on_insurance = admitted(&limiter, "api", &key, 4).await;
    primary.set(true);
    until_back(&store, &limiter, "api").await;
    let on_primary = admitted(&limiter, "api", &key, 12).await;
    assert_eq!((on_insurance, on_primary), (4, 6));
}

/// A block re-asserted on a primary that comes back empty keeps its end: blocked for
/// 10 minutes on the injected clock, 5 minutes pass while the primary is down, and
/// the primary then reports at most 5 minutes left (not a fresh 10).
#[tokio::test]
async fn a_reasserted_block_ends_when_it_would_have() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("api", Quota::per_minute(10)).expect("limit");
    let limiter = limiter(limit.clone(), store.clone());
    let key = Key::from("timed");
    limiter
        .block("api", &key, Duration::from_secs(600))
        .await
        .expect("block");
    primary.set(false);
    let _ = limiter.check("api", &key, 1).await;
    c.advance(Duration::from_secs(300));
    limiter.reset("api", &key).await.expect("reset");
    limiter
        .block("api", &key, Duration::from_secs(300))
        .await
        .expect("block");
    primary.set(true);
    until_back(&store, &limiter, "api").await;
    let left = limiter_on(&limit, &primary)
        .offences("api", &key)
        .await
        .expect("offences")
        .blocked_for;
    assert!(
        left.is_some_and(|d| d <= Duration::from_secs(300) && d > Duration::from_secs(290)),
        "{left:?}"
    );
}

/// The box tripped on the insurance, on a real Redis primary killed and restarted
/// empty: once Redis serves again, the caller is still boxed a minute later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_tripped_on_the_insurance_holds_on_a_redis_that_comes_back() {
    let c = clock();
    let mut server = support::redis_server::RedisServer::start();
    let primary = tollgate::RedisStore::from_url(&server.url())
        .expect("url")
        .deadline(Duration::from_millis(200))
        .expect("deadline")
        .with_clock(c.clone());
    let store = Fallback::new(primary.clone(), MemoryStore::with_clock(c.clone()))
        .min_down(Duration::from_millis(50))
        .probe_interval(Duration::from_millis(20));
    let limit = Limit::new("login", Quota::per_minute(3))
        .expect("limit")
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let through = limiter(limit.clone(), store.clone());
    let direct = limiter(limit.clone(), primary);
    let limiter = through;
    let key = Key::from("mallory");
    let _ = limiter.check("login", &Key::from("warm"), 0).await;
    server.kill();
    let mut on_insurance = 0;
    for _ in 0..5 {
        on_insurance += usize::from(
            limiter
                .check("login", &key, 1)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    assert_eq!(on_insurance, 3);
    server.restart();
    let probe = Key::from("probe-key");
    let started = std::time::Instant::now();
    while !store.serving_primary() {
        assert!(
            started.elapsed() < crate::common::HANG,
            "never back on Redis"
        );
        let _ = limiter.check("login", &probe, 0).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let on_redis = direct.offences("login", &key).await.expect("offences");
    c.advance(Duration::from_secs(61));
    let a_minute_later = admitted(&limiter, "login", &key, 5).await;
    assert!(
        on_redis.blocked_for.is_some() && a_minute_later == 0,
        "Redis's view: {on_redis:?}; admitted 61 s later: {a_minute_later} of 5"
    );
}

/// A plan caller (5/min, the limit's own 100/min) spends its plan on the insurance
/// while the primary is down; the primary is charged on recovery what the insurance
/// admitted, under the caller's plan: back on the primary it admits nothing more.
#[tokio::test]
async fn the_catch_up_charges_a_plan_callers_usage_under_its_plan() {
    let mut seen = Vec::new();
    for algorithm in tollgate::Algorithm::ALL {
        if algorithm == tollgate::Algorithm::LeakyBucket {
            continue;
        }
        let c = clock();
        let primary = Switched::new(&c);
        let store = fallback(&primary, &c);
        let limiter = limiter(
            Limit::new("api", Quota::per_minute(100))
                .expect("limit")
                .algorithm(algorithm),
            store.clone(),
        );
        let key = Key::from("plan-outage");
        let basic = Quota::per_minute(5);
        let _ = limiter
            .check_with("api", &Key::from("warm"), 0, basic)
            .await;
        primary.set(false);
        let mut on_insurance = 0;
        for _ in 0..7 {
            on_insurance += usize::from(
                limiter
                    .check_with("api", &key, 1, basic)
                    .await
                    .is_ok_and(|d| d.allowed),
            );
        }
        primary.set(true);
        until_back(&store, &limiter, "api").await;
        let mut on_primary = 0;
        for _ in 0..7 {
            on_primary += usize::from(
                limiter
                    .check_with("api", &key, 1, basic)
                    .await
                    .expect("check")
                    .allowed,
            );
        }
        seen.push((algorithm, on_insurance, on_primary));
    }
    assert!(
        seen.iter().all(|(_, i, p)| i + p <= 5),
        "(algorithm, admitted on the insurance, then on the primary), 5 is one plan: {seen:?}"
    );
}

/// A block this process saw on the primary's answers, then lifted by an operator's
/// reset through this process while the primary was down: the primary comes back
/// empty and the reset holds (the seen block is not re-asserted over it).
#[tokio::test]
async fn a_block_lifted_during_the_outage_is_not_reasserted_on_an_empty_primary() {
    let primary = support::fallback::Restartable::new();
    let store = Fallback::new(primary.clone(), MemoryStore::new())
        .min_down(Duration::from_millis(5))
        .probe_interval(Duration::from_millis(2));
    let limit = Limit::new("api", Quota::per_minute(10)).expect("limit");
    let limiter = Limiter::builder()
        .limit(limit.clone())
        .store(store.clone())
        .build()
        .expect("limiter");
    let key = Key::from("forgiven");
    limiter
        .block("api", &key, Duration::from_secs(3_600))
        .await
        .expect("block");
    assert!(!limiter.check("api", &key, 1).await.expect("check").allowed);
    primary.go_down();
    let _ = limiter.check("api", &key, 1).await;
    limiter.reset("api", &key).await.expect("reset");
    primary.come_back_empty();
    let probe = Key::from("probe-key");
    let started = std::time::Instant::now();
    while !store.serving_primary() {
        assert!(started.elapsed() < crate::common::HANG, "never back");
        let _ = limiter.check("api", &probe, 0).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = admitted(&limiter, "api", &key, 12).await;
    assert!(
        after >= 9,
        "{after} admitted of 12 after the reset (10 is a fresh quota)"
    );
}

/// A debt across a failover: 1,000 of 10,000 tokens charged on the primary, settled
/// to 9,000 once the primary is down (the settle goes to the store that took the
/// charge, which fails). The insurance then serves the key: within one quota, one
/// more request of 1,000 fits, not nine.
#[tokio::test]
async fn a_debt_settled_while_the_primary_is_down_is_not_forgotten() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = limiter(
        Limit::new("tokens", Quota::per_minute(10_000)).expect("limit"),
        store.clone(),
    );
    let key = Key::from("debtor");
    let first = limiter.check("tokens", &key, 1_000).await.expect("check");
    assert!(first.allowed);
    primary.set(false);
    let settled = limiter.settle(&first, &key, 9_000).await;
    let mut on_insurance = 0;
    for _ in 0..12 {
        on_insurance += usize::from(
            limiter
                .check("tokens", &key, 1_000)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    assert!(
        on_insurance <= 1,
        "{on_insurance} × 1,000 admitted after 9,000 used of 10,000 (the settle: {:?})",
        settled.map(|d| d.remaining)
    );
}

/// The debt settled while the primary is down reaches the primary on its return:
/// 1,000 charged there, settled to 9,000 on the insurance, the primary back: it counts
/// 9,000 of 10,000 (its own 1,000 and the 8,000 extra charged back), before it
/// decides again.
#[tokio::test]
async fn a_debt_settled_while_the_primary_is_down_is_charged_to_it_on_its_return() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("tokens", Quota::per_minute(10_000)).expect("limit");
    let limiter = limiter(limit.clone(), store.clone());
    let key = Key::from("debtor");
    let first = limiter.check("tokens", &key, 1_000).await.expect("check");
    primary.set(false);
    let settled = limiter.settle(&first, &key, 9_000).await.expect("settled");
    assert_eq!(settled.remaining, 1_000);
    primary.set(true);
    until_back(&store, &limiter, "tokens").await;
    let on_primary = limiter_on(&limit, &primary)
        .peek("tokens", &key)
        .await
        .expect("peek");
    assert_eq!(on_primary.remaining, 1_000);
}

/// The same over HTTP: a metered request (estimate 1,000) in its handler when the
/// primary fails reports 9,000; the caller's next requests (1,000 each) on the
/// insurance: one fits in 10,000 a minute, not nine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metered_debt_reported_as_the_primary_fails_is_not_forgotten() {
    use axum::Router;
    use axum::extract::{Extension, Path};
    use axum::routing::get;
    use tollgate::layer::{Costs, Meter};
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let policy = tollgate::Policy::new("tokens", Quota::per_minute(10_000))
        .expect("policy")
        .key(tollgate::key::header("x-api-key").expect("header"))
        .costs(Costs::new().default(1_000))
        .metered();
    let layer = tollgate::RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer");
    let gate = Arc::new(tokio::sync::Notify::new());
    let entered = Arc::new(tokio::sync::Notify::new());
    let routes = {
        let (gate, entered) = (gate.clone(), entered.clone());
        Router::new()
            .route(
                "/held/{n}",
                get(
                    move |Extension(meter): Extension<Meter>, Path(n): Path<u64>| {
                        let (gate, entered) = (gate.clone(), entered.clone());
                        async move {
                            entered.notify_one();
                            gate.notified().await;
                            meter.report(n);
                            "ok"
                        }
                    },
                ),
            )
            .route(
                "/use/{n}",
                get(
                    |Extension(meter): Extension<Meter>, Path(n): Path<u64>| async move {
                        meter.report(n);
                        "ok"
                    },
                ),
            )
            .layer(layer)
    };
    let server = Arc::new(support::http::Server::start(routes).await);
    let call = |path: &str| {
        http::Request::get(path)
            .header("x-api-key", "debtor")
            .body(http_body_util::Full::<bytes::Bytes>::default())
            .expect("request")
    };
    let pending = {
        let server = server.clone();
        let request = call("/held/9000");
        tokio::spawn(async move { server.send(request).await.status })
    };
    entered.notified().await;
    primary.set(false);
    gate.notify_one();
    assert_eq!(pending.await.expect("pending"), http::StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut ok_count = 0;
    for _ in 0..12 {
        if server.send(call("/use/1000")).await.status == http::StatusCode::OK {
            ok_count += 1;
        }
    }
    assert!(
        ok_count <= 1,
        "{ok_count} × 1,000 ok_count after 9,000 used of 10,000"
    );
}

/// Rejections answered by the insurance count toward the penalty box: a key that
/// spent its quota on the primary, the primary down, three rejections on the
/// insurance within the rule's second trip the box there.
#[tokio::test]
async fn rejections_on_the_insurance_trip_the_box() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("api", Quota::per_minute(5))
        .expect("limit")
        .penalty(
            Penalty::after(3)
                .within(Duration::from_secs(1))
                .block_for(Duration::from_secs(600)),
        );
    let limiter = limiter(limit, store.clone());
    let key = Key::from("insured");
    assert_eq!(admitted(&limiter, "api", &key, 5).await, 5);
    primary.set(false);
    let mut answers = Vec::new();
    for _ in 0..4 {
        let d = limiter.check("api", &key, 1).await.expect("insurance");
        answers.push((d.allowed, d.blocked_for.is_some()));
        c.advance(Duration::from_millis(10));
    }
    assert_eq!(
        answers,
        [(false, false), (false, false), (false, true), (false, true)],
        "(allowed, blocked) on the insurance"
    );
}

/// Fifty batches at once (a per-key limit and a global one) right after the primary
/// fails, the key having used 6 of 10 on the primary: the insurance starts the key
/// from that answer, so at most 4 batches are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_batches_on_the_insurance_start_from_the_primarys_answer() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = Arc::new(
        Limiter::builder()
            .limit(Limit::new("per-key", Quota::per_minute(10)).expect("limit"))
            .limit(Limit::new("global", Quota::per_minute(10_000)).expect("limit"))
            .store(store)
            .build()
            .expect("limiter"),
    );
    let key = Key::from("seeded");
    let everyone = Key::from("everyone");
    for _ in 0..6 {
        let batch = limiter
            .check_all(&[("per-key", &key, 1), ("global", &everyone, 1)])
            .await
            .expect("batch");
        assert!(batch.iter().all(|d| d.allowed));
    }
    primary.set(false);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let limiter = limiter.clone();
        tasks.spawn(async move {
            let (key, everyone) = (Key::from("seeded"), Key::from("everyone"));
            limiter
                .check_all(&[("per-key", &key, 1), ("global", &everyone, 1)])
                .await
                .is_ok_and(|d| d.iter().all(|d| d.allowed))
        });
    }
    let mut admitted = 0;
    while let Some(ok) = tasks.join_next().await {
        admitted += usize::from(ok.expect("task"));
    }
    assert_eq!(admitted, 4, "batches admitted of 50 after 6 of 10 used");
}

/// A block reaches every plan, on the insurance too: a caller boxed on the primary
/// under its basic plan, the primary down, then decided under another plan on the
/// insurance: still blocked.
#[tokio::test]
async fn a_carried_block_reaches_the_callers_other_plans() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limit = Limit::new("api", Quota::per_minute(100))
        .expect("limit")
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let limiter = limiter(limit, store.clone());
    let key = Key::from("plan-hopper");
    let basic = Quota::per_minute(3);
    let pro = Quota::per_minute(1_000);
    let mut on_primary = Vec::new();
    for _ in 0..4 {
        on_primary.push(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .expect("check")
                .allowed,
        );
    }
    assert_eq!(on_primary, [true, true, true, false]);
    primary.set(false);
    let mut on_insurance = Vec::new();
    for quota in [pro, basic, Quota::per_minute(100)] {
        on_insurance.push(
            limiter
                .check_with("api", &key, 1, quota)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    let plain = limiter.check("api", &key, 1).await.is_ok_and(|d| d.allowed);
    on_insurance.push(plain);
    assert_eq!(
        on_insurance,
        [false, false, false, false],
        "admitted on the insurance under (pro, basic, the limit's own, check)"
    );
}

/// The reference for the test above: on one store, the box reaches every plan.
#[tokio::test]
async fn on_one_store_a_box_reaches_the_callers_other_plans() {
    let limit = Limit::new("api", Quota::per_minute(100))
        .expect("limit")
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let limiter = limiter(limit, MemoryStore::with_clock(clock()));
    let key = Key::from("plan-hopper");
    let basic = Quota::per_minute(3);
    for _ in 0..4 {
        let _ = limiter.check_with("api", &key, 1, basic).await;
    }
    let mut seen = Vec::new();
    for quota in [Quota::per_minute(1_000), basic, Quota::per_minute(100)] {
        seen.push(
            limiter
                .check_with("api", &key, 1, quota)
                .await
                .expect("check")
                .allowed,
        );
    }
    seen.push(limiter.check("api", &key, 1).await.expect("check").allowed);
    assert_eq!(seen, [false, false, false, false]);
}

/// An operator's block made through this process (then seen under the basic plan):
/// on the insurance, another plan does not escape it.
#[tokio::test]
async fn a_carried_operator_block_reaches_the_callers_other_plans() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    let limiter = limiter(
        Limit::new("api", Quota::per_minute(100)).expect("limit"),
        store.clone(),
    );
    let key = Key::from("blocked-hopper");
    let basic = Quota::per_minute(3);
    limiter
        .block("api", &key, Duration::from_secs(3_600))
        .await
        .expect("block");
    assert!(
        !limiter
            .check_with("api", &key, 1, basic)
            .await
            .expect("check")
            .allowed
    );
    primary.set(false);
    let mut on_insurance = Vec::new();
    for quota in [Quota::per_minute(1_000), basic, Quota::per_minute(100)] {
        on_insurance.push(
            limiter
                .check_with("api", &key, 1, quota)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    on_insurance.push(limiter.check("api", &key, 1).await.is_ok_and(|d| d.allowed));
    assert_eq!(
        on_insurance,
        [false, false, false, false],
        "admitted on the insurance under (pro, basic, the limit's own, check)"
    );
}

/// The plan-hop escape on a real Redis primary, killed after the box tripped there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_tripped_on_redis_reaches_the_callers_other_plans_on_the_insurance() {
    let c = clock();
    let mut server = support::redis_server::RedisServer::start();
    let primary = tollgate::RedisStore::from_url(&server.url())
        .expect("url")
        .deadline(Duration::from_millis(200))
        .expect("deadline")
        .with_clock(c.clone());
    let store = Fallback::new(primary, MemoryStore::with_clock(c.clone()))
        .min_down(Duration::from_millis(50))
        .probe_interval(Duration::from_millis(20));
    let limit = Limit::new("api", Quota::per_minute(100))
        .expect("limit")
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let limiter = limiter(limit, store);
    let key = Key::from("plan-hopper");
    let basic = Quota::per_minute(3);
    let mut on_redis = Vec::new();
    for _ in 0..4 {
        on_redis.push(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .expect("check")
                .allowed,
        );
    }
    assert_eq!(on_redis, [true, true, true, false]);
    server.kill();
    let mut on_insurance = Vec::new();
    for quota in [Quota::per_minute(1_000), basic, Quota::per_minute(100)] {
        on_insurance.push(
            limiter
                .check_with("api", &key, 1, quota)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    on_insurance.push(limiter.check("api", &key, 1).await.is_ok_and(|d| d.allowed));
    assert_eq!(
        on_insurance,
        [false, false, false, false],
        "admitted on the insurance under (pro, basic, the limit's own, check)"
    );
}

/// Usage carries across quotas on the insurance as on one store: 50 used of the
/// limit's own 100/min on the primary; the primary down; under a plan of 10/min the
/// key has nothing left (50 ≥ 10), and under its own quota 50 more.
async fn usage_across_plans(store: impl Store, primary: Option<&Switched>) -> (usize, usize) {
    let limiter = limiter(
        Limit::new("api", Quota::per_minute(100)).expect("limit"),
        store,
    );
    let key = Key::from("downgraded");
    assert_eq!(admitted(&limiter, "api", &key, 50).await, 50);
    if let Some(primary) = primary {
        primary.set(false);
    }
    let basic = Quota::per_minute(10);
    let mut under_basic = 0;
    for _ in 0..12 {
        under_basic += usize::from(
            limiter
                .check_with("api", &key, 1, basic)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    let own = admitted(&limiter, "api", &key, 60).await;
    (under_basic, own)
}

#[tokio::test]
async fn on_one_store_usage_carries_to_a_smaller_plan() {
    assert_eq!(
        usage_across_plans(MemoryStore::with_clock(clock()), None).await,
        (0, 50)
    );
}

#[tokio::test]
async fn on_the_insurance_usage_carries_to_a_smaller_plan() {
    let c = clock();
    let primary = Switched::new(&c);
    let store = fallback(&primary, &c);
    assert_eq!(usage_across_plans(store, Some(&primary)).await, (0, 50));
}

/// The forgotten debt on a real Redis primary, killed between the charge and its
/// settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_settled_after_redis_died_is_not_forgotten() {
    let c = clock();
    let mut server = support::redis_server::RedisServer::start();
    let primary = tollgate::RedisStore::from_url(&server.url())
        .expect("url")
        .deadline(Duration::from_millis(200))
        .expect("deadline")
        .with_clock(c.clone());
    let store = Fallback::new(primary, MemoryStore::with_clock(c.clone()))
        .min_down(Duration::from_millis(50))
        .probe_interval(Duration::from_millis(20));
    let limiter = limiter(
        Limit::new("tokens", Quota::per_minute(10_000)).expect("limit"),
        store,
    );
    let key = Key::from("debtor");
    let first = limiter.check("tokens", &key, 1_000).await.expect("check");
    assert!(first.allowed);
    server.kill();
    let settled = limiter.settle(&first, &key, 9_000).await;
    let mut on_insurance = 0;
    for _ in 0..12 {
        on_insurance += usize::from(
            limiter
                .check("tokens", &key, 1_000)
                .await
                .is_ok_and(|d| d.allowed),
        );
    }
    assert!(
        on_insurance <= 1,
        "{on_insurance} × 1,000 admitted after 9,000 used of 10,000 (the settle: {:?})",
        settled.map(|d| d.remaining)
    );
}
