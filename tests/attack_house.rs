//! Attacks on the promises of the house's second step (issue 25): one store path
//! (`StoreCall`, "a future does nothing until polled"), cancel-safe in-flight acquires,
//! and HTTP rules back in the layer (`RateLimitLayer::reload`, `policies`, `policy`,
//! reloads of the layer's limiter alone). Public API only, each promise counted
//! exactly.
//!
//! Five of them found broken promises when written, all fixed since: two concurrent
//! layer reloads (or a layer reload racing the limiter's) decided requests by one
//! set's limits with the other's rules, and a lease too short for a request's cost was
//! dropped with its units (at cost 33 on 100,000/h, 48,390 charged and never spent).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::http::{Reply, Server};
use tokio::time::{sleep, timeout};
use tollgate::clock::ManualClock;
use tollgate::layer::Costs;
use tollgate::store::{Charge, Fallback, InFlightSlot, LeasedStore, Receipt, Store, StoreCall};
use tollgate::{
    Algorithm, ConfigError, Decision, Key, Limit, Limiter, MemoryStore, Policy, Quota,
    RateLimitLayer, StoreError, StoreErrorKind, key,
};
use tower::{Layer, ServiceExt};

const BASE: Duration = Duration::from_secs(1_699_920_000);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn manual() -> ManualClock {
    ManualClock::new(BASE)
}

fn fixed(name: &str, quota: Quota) -> Limit {
    Limit::new(name, quota)
        .expect("limit")
        .algorithm(Algorithm::FixedWindow)
}

fn limiter_on(store: impl Store, limits: impl IntoIterator<Item = Limit>) -> Limiter {
    Limiter::builder()
        .limits(limits)
        .store(store)
        .build()
        .expect("limiter")
}

// ---------------------------------------------------------------------------------
// A store whose every call is a future: it counts calls made, first polls, polls after
// completion, and side effects on the inner memory store, exactly.
// ---------------------------------------------------------------------------------

const OPS: [&str; 11] = [
    "decide",
    "refund",
    "refund_charge",
    "peek",
    "reset",
    "block",
    "penalize",
    "reserve",
    "acquire_in_flight",
    "decide_one",
    "unused",
];

fn op(name: &str) -> usize {
    OPS.iter().position(|o| *o == name).expect("an op")
}

#[derive(Debug, Default)]
struct Stats {
    /// Calls made (the `StoreCall` built), per op.
    made: [AtomicU64; 11],
    /// Calls first polled, per op.
    started: [AtomicU64; 11],
    /// Calls that reached the inner store (the side effect), per op.
    applied: [AtomicU64; 11],
    /// Calls that ran to their answer, per op.
    finished: [AtomicU64; 11],
    /// Polls of a call after it had answered.
    repolled: AtomicU64,
}

impl Stats {
    fn get(counter: &[AtomicU64; 11], name: &str) -> u64 {
        counter[op(name)].load(Ordering::SeqCst)
    }
    fn made(&self, name: &str) -> u64 {
        Self::get(&self.made, name)
    }
    fn started(&self, name: &str) -> u64 {
        Self::get(&self.started, name)
    }
    fn applied(&self, name: &str) -> u64 {
        Self::get(&self.applied, name)
    }
    fn finished(&self, name: &str) -> u64 {
        Self::get(&self.finished, name)
    }
}

/// Answers only through futures: waits `before`, calls the inner memory store (the
/// side effect, counted), waits `after`, answers. A call dropped during `after` has
/// charged the inner store without its caller seeing the answer: the case the
/// limiter promises to run on and give back.
#[derive(Debug, Clone)]
struct Slow {
    inner: MemoryStore,
    before: Duration,
    after: Duration,
    stats: Arc<Stats>,
}

impl Slow {
    fn new(before: Duration, after: Duration) -> Self {
        Self {
            inner: MemoryStore::with_clock(manual()),
            before,
            after,
            stats: Arc::default(),
        }
    }

    fn call<'a, T: Send + 'a>(
        &'a self,
        name: &'static str,
        effect: impl Future<Output = Result<T, StoreError>> + Send + 'a,
    ) -> StoreCall<'a, T> {
        let i = op(name);
        self.stats.made[i].fetch_add(1, Ordering::SeqCst);
        let stats = self.stats.clone();
        let (before, after) = (self.before, self.after);
        let body = async move {
            stats.started[i].fetch_add(1, Ordering::SeqCst);
            sleep(before).await;
            let answer = effect.await;
            stats.applied[i].fetch_add(1, Ordering::SeqCst);
            sleep(after).await;
            stats.finished[i].fetch_add(1, Ordering::SeqCst);
            answer
        };
        StoreCall::future(Watched {
            future: Box::pin(body),
            done: false,
            stats: self.stats.clone(),
        })
    }
}

/// Records a poll after the answer instead of panicking (an `async` block would), so
/// that a second poll made in a background task is counted, not lost.
struct Watched<F> {
    future: Pin<Box<F>>,
    done: bool,
    stats: Arc<Stats>,
}

impl<T, F: Future<Output = Result<T, StoreError>>> Future for Watched<F> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.done {
            self.stats.repolled.fetch_add(1, Ordering::SeqCst);
            return Poll::Ready(Err(StoreError::new(
                StoreErrorKind::Unavailable,
                "polled after its answer",
            )));
        }
        let answer = self.future.as_mut().poll(cx);
        if answer.is_ready() {
            self.done = true;
        }
        answer
    }
}

impl Store for Slow {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.call("decide", async move { self.inner.decide(charges).await })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.call("refund", async move { self.inner.refund(charge).await })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.call("refund_charge", async move {
            self.inner.refund_charge(charge, receipt).await
        })
    }

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.call("peek", async move { self.inner.peek(limit, key).await })
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        self.call("reset", async move { self.inner.reset(limit, key).await })
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        self.call("block", async move {
            self.inner.block(limit, key, duration).await
        })
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.call("penalize", async move { self.inner.penalize(charge).await })
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        self.call("reserve", async move {
            self.inner.reserve(charge, max_wait).await
        })
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.validate(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.validate_quota(limit)
    }

    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        self.call("acquire_in_flight", async move {
            self.inner.acquire_in_flight(limit, key, max).await
        })
    }

    fn supports_in_flight(&self) -> bool {
        true
    }
}

/// What a cancelled call returned: `Some(answer)` when it finished within `limit`.
async fn within<T>(limit: Duration, call: impl Future<Output = T>) -> Option<T> {
    timeout(limit, call).await.ok()
}

/// Deadlines from 0 to 11 ms, scattered over the calls: every await of a 4 + 4 ms call.
fn deadline(i: u64) -> Duration {
    Duration::from_micros((i * 7_919) % 11_000)
}

/// Lets background work (a call run on, a refund) finish on tokio's paused clock.
async fn settle() {
    for _ in 0..20 {
        sleep(Duration::from_secs(1)).await;
    }
}

async fn used(store: &MemoryStore, limit: &Limit, key: &Key) -> u64 {
    let d = store.peek(limit, key).await.expect("peek");
    d.capacity - d.remaining
}

fn no_call_polled_twice_nor_started_twice(stats: &Stats) {
    assert_eq!(
        stats.repolled.load(Ordering::SeqCst),
        0,
        "a call polled after its answer"
    );
    for name in OPS {
        assert!(
            stats.started(name) <= stats.made(name),
            "{name}: {} started of {} made",
            stats.started(name),
            stats.made(name)
        );
        assert!(stats.finished(name) <= stats.applied(name), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn checks_dropped_at_every_await_leave_exactly_the_admitted_charges() {
    let store = Slow::new(ms(4), ms(4));
    let limit = fixed("api", Quota::per_hour(1_000));
    let limiter = limiter_on(store.clone(), [limit.clone()]);
    let key = Key::from("k");
    let (mut admitted, mut cancelled) = (0_u64, 0_u64);
    for i in 0..300 {
        match within(deadline(i), limiter.check("api", &key, 1)).await {
            Some(Ok(d)) => {
                assert!(d.allowed, "{d:?}");
                admitted += 1;
            }
            Some(Err(e)) => panic!("{e}"),
            None => cancelled += 1,
        }
    }
    settle().await;
    assert!(admitted > 0 && cancelled > 0, "{admitted} / {cancelled}");
    assert_eq!(
        used(&store.inner, &limit, &key).await,
        admitted,
        "charges left by {cancelled} cancelled checks; stats {:?}",
        store.stats
    );
    no_call_polled_twice_nor_started_twice(&store.stats);
}

#[tokio::test(start_paused = true)]
async fn check_alls_dropped_at_every_await_leave_exactly_the_admitted_charges() {
    let store = Slow::new(ms(4), ms(4));
    let (a, b) = (
        fixed("a", Quota::per_hour(1_000)),
        fixed("b", Quota::per_hour(5_000)),
    );
    let limiter = limiter_on(store.clone(), [a.clone(), b.clone()]);
    let key = Key::from("k");
    let other = Key::from("other");
    let mut admitted = 0_u64;
    for i in 0..300 {
        if let Some(answer) = within(
            deadline(i),
            limiter.check_all(&[("a", &key, 1), ("b", &other, 3)]),
        )
        .await
        {
            let decisions = answer.expect("decisions");
            assert!(decisions.iter().all(|d| d.allowed), "{decisions:?}");
            admitted += 1;
        }
    }
    settle().await;
    assert!(admitted > 0 && admitted < 300, "{admitted}");
    assert_eq!(used(&store.inner, &a, &key).await, admitted);
    assert_eq!(used(&store.inner, &b, &other).await, 3 * admitted);
    no_call_polled_twice_nor_started_twice(&store.stats);
}

#[tokio::test(start_paused = true)]
async fn reserves_and_waiters_dropped_at_every_await_leave_exactly_what_they_kept() {
    let store = Slow::new(ms(4), ms(4));
    let limit = fixed("api", Quota::per_hour(1_000));
    let limiter = limiter_on(store.clone(), [limit.clone()]);
    let key = Key::from("k");
    let mut kept = 0_u64;
    for i in 0..200 {
        let answer = if i % 2 == 0 {
            within(deadline(i), limiter.reserve("api", &key, 1, ms(10))).await
        } else {
            within(deadline(i), limiter.until_ready("api", &key, 1, ms(10))).await
        };
        if let Some(answer) = answer {
            assert!(answer.expect("a decision").allowed);
            kept += 1;
        }
    }
    settle().await;
    assert!(kept > 0 && kept < 200, "{kept}");
    assert_eq!(
        used(&store.inner, &limit, &key).await,
        kept,
        "{:?}",
        store.stats
    );
    no_call_polled_twice_nor_started_twice(&store.stats);
}

#[tokio::test(start_paused = true)]
async fn operators_calls_dropped_at_every_await_act_at_most_once_each() {
    let store = Slow::new(ms(4), ms(4));
    let limit = fixed("api", Quota::per_hour(100_000));
    let limiter = limiter_on(store.clone(), [limit.clone()]);
    let key = Key::from("k");
    let calls = 100_u64;

    // penalize: each call charges 1 at most once.
    let mut done = 0;
    for i in 0..calls {
        if within(deadline(i), limiter.penalize("api", &key, 1))
            .await
            .is_some()
        {
            done += 1;
        }
    }
    settle().await;
    let penalized = store.stats.applied("penalize");
    assert!(
        penalized <= calls && penalized >= done,
        "{penalized} of {calls}"
    );
    assert_eq!(used(&store.inner, &limit, &key).await, penalized);

    // refund: each gives back 1 at most once.
    let before = used(&store.inner, &limit, &key).await;
    for i in 0..calls / 2 {
        let _ = within(deadline(i), limiter.refund("api", &key, 1)).await;
    }
    settle().await;
    let refunded = store.stats.applied("refund");
    assert!(refunded <= calls / 2, "{refunded}");
    assert_eq!(used(&store.inner, &limit, &key).await, before - refunded);

    // peek, block, reset: at most once each.
    for i in 0..calls {
        let _ = within(deadline(i), limiter.peek("api", &key)).await;
        let _ = within(deadline(i + 1), limiter.block("api", &key, ms(1))).await;
        let _ = within(deadline(i + 2), limiter.reset("api", &key)).await;
    }
    settle().await;
    for name in ["peek", "block", "reset"] {
        assert!(
            store.stats.applied(name) <= calls,
            "{name}: {:?}",
            store.stats
        );
    }
    no_call_polled_twice_nor_started_twice(&store.stats);
}

#[tokio::test(start_paused = true)]
async fn refund_charges_dropped_at_every_await_give_back_each_charge_at_most_once() {
    let store = Slow::new(ms(4), ms(4));
    let limit = fixed("api", Quota::per_hour(1_000));
    let limiter = limiter_on(store.clone(), [limit.clone()]);
    let key = Key::from("k");
    let mut decisions = Vec::new();
    for _ in 0..100 {
        decisions.push(limiter.check("api", &key, 1).await.expect("a decision"));
    }
    assert_eq!(used(&store.inner, &limit, &key).await, 100);
    for (i, d) in (0_u64..).zip(&decisions) {
        let _ = within(deadline(i), limiter.refund_charge(d, &key, 1)).await;
    }
    settle().await;
    let given = store.stats.applied("refund_charge");
    assert!(given <= 100, "{given}");
    assert_eq!(used(&store.inner, &limit, &key).await, 100 - given);
    // Every decision refunded again, to the end: exactly all of it back, never more.
    for d in &decisions {
        limiter.refund_charge(d, &key, 1).await.expect("refund");
    }
    assert_eq!(used(&store.inner, &limit, &key).await, 0);
    no_call_polled_twice_nor_started_twice(&store.stats);
}

#[tokio::test(start_paused = true)]
async fn a_leased_store_over_slow_futures_cancelled_at_every_await_keeps_exact_counts() {
    let slow = Slow::new(ms(4), ms(4));
    let clock = manual();
    let leased = LeasedStore::builder(slow.clone()).clock(clock).build();
    let limit = fixed("api", Quota::per_hour(1_000));
    let limiter = limiter_on(leased.clone(), [limit.clone()]);
    let key = Key::from("k");
    let mut admitted = 0_u64;
    for i in 0..600 {
        if let Some(answer) = within(deadline(i), limiter.check("api", &key, 1)).await {
            assert!(answer.expect("a decision").allowed);
            admitted += 1;
        }
    }
    settle().await;
    let returned = leased.release_all().await.expect("release");
    settle().await;
    assert_eq!(leased.held(), 0);
    assert_eq!(
        used(&slow.inner, &limit, &key).await,
        admitted,
        "returned {returned}; stats {:?}",
        slow.stats
    );
    no_call_polled_twice_nor_started_twice(&slow.stats);
}

// ---------------------------------------------------------------------------------
// A store that answers ready sometimes and through a future other times.
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Mixed {
    inner: MemoryStore,
    calls: Arc<AtomicU64>,
}

impl Mixed {
    fn pick(&self) -> bool {
        self.calls.fetch_add(1, Ordering::Relaxed).is_multiple_of(3)
    }
}

impl Store for Mixed {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        if self.pick() {
            self.inner.decide(charges)
        } else {
            StoreCall::future(async move {
                tokio::task::yield_now().await;
                self.inner.decide(charges).await
            })
        }
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        if self.pick() {
            self.inner.refund(charge)
        } else {
            StoreCall::future(async move {
                tokio::task::yield_now().await;
                self.inner.refund(charge).await
            })
        }
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            tokio::task::yield_now().await;
            self.inner.refund_charge(charge, receipt).await
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_answering_ready_or_later_admits_exactly_its_quota_under_many_tasks() {
    let store = Mixed {
        inner: MemoryStore::with_clock(manual()),
        calls: Arc::default(),
    };
    let (one, both) = (
        fixed("one", Quota::per_hour(500)),
        fixed("both", Quota::per_hour(300)),
    );
    let limiter = limiter_on(store.clone(), [one.clone(), both.clone()]);
    let admitted = Arc::new(AtomicU64::new(0));
    let admitted_all = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let (limiter, admitted, admitted_all) =
                (limiter.clone(), admitted.clone(), admitted_all.clone());
            tokio::spawn(async move {
                let key = Key::from("hot");
                for _ in 0..100 {
                    if limiter.check("one", &key, 1).await.expect("check").allowed {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    let all = limiter
                        .check_all(&[("one", &Key::from("x"), 1), ("both", &key, 1)])
                        .await
                        .expect("check_all");
                    if all.iter().all(|d| d.allowed) {
                        admitted_all.fetch_add(1, Ordering::SeqCst);
                    }
                    if t % 4 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
    assert_eq!(admitted.load(Ordering::SeqCst), 500);
    assert_eq!(admitted_all.load(Ordering::SeqCst), 300);
    assert_eq!(used(&store.inner, &one, &Key::from("hot")).await, 500);
    assert_eq!(used(&store.inner, &one, &Key::from("x")).await, 300);
    assert_eq!(used(&store.inner, &both, &Key::from("hot")).await, 300);
}

// ---------------------------------------------------------------------------------
// Leases answering ready, several "processes" over one inner store.
// ---------------------------------------------------------------------------------

async fn leased_processes_admit_exactly(
    limit: Limit,
    capacity: u64,
    windows: bool,
    mixed_costs: bool,
) {
    let clock = manual();
    let inner = MemoryStore::with_clock(clock.clone());
    let stores: Vec<LeasedStore<MemoryStore>> = (0..4)
        .map(|_| {
            LeasedStore::builder(inner.clone())
                .clock(clock.clone())
                .processes(4)
                .expect("processes")
                .build()
        })
        .collect();
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for store in &stores {
        let limiter = limiter_on(store.clone(), [limit.clone()]);
        for _ in 0..8 {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            tasks.push(tokio::spawn(async move {
                let key = Key::from("hot");
                for i in 0..150_u32 {
                    let cost = if mixed_costs { 1 + i % 2 } else { 1 };
                    if limiter
                        .check("api", &key, cost)
                        .await
                        .expect("check")
                        .allowed
                    {
                        admitted.fetch_add(u64::from(cost), Ordering::SeqCst);
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("a task");
    }
    let admitted = admitted.load(Ordering::SeqCst);
    let held: u64 = stores.iter().map(LeasedStore::held).sum();
    assert!(
        admitted + held <= capacity,
        "admitted {admitted} + held {held} > {capacity}"
    );
    if windows {
        // Leased units are charged: the store counts admissions plus held units, and
        // what held units keep from other processes is under a quarter of the capacity.
        let before = used(&inner, &limit, &Key::from("hot")).await;
        let returned = {
            let mut n = 0;
            for store in &stores {
                n += store.release_all().await.expect("release");
            }
            n
        };
        let after = used(&inner, &limit, &Key::from("hot")).await;
        assert_eq!(
            before,
            admitted + held,
            "used {before} = admitted {admitted} + held {held}? returned {returned}, used after {after}"
        );
        assert!(held < capacity / 4, "{held}");
        for store in &stores {
            store.release_all().await.expect("release");
        }
        assert_eq!(used(&inner, &limit, &Key::from("hot")).await, admitted);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_stores_sharing_one_inner_store_admit_exactly_a_fixed_window() {
    leased_processes_admit_exactly(fixed("api", Quota::per_hour(1_000)), 1_000, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_stores_sharing_one_inner_store_account_for_every_unit_with_mixed_costs() {
    leased_processes_admit_exactly(fixed("api", Quota::per_hour(1_000)), 1_000, true, true).await;
}

/// One caller, one cost, one `LeasedStore` over a memory store: every unit the store
/// charges is spent, held or returned (`held`: "charged to the backing store, not yet
/// spent here, nor returned"; `release_all` returns the unused units of the window
/// algorithms), and what leases keep back is under a quarter of the capacity.
#[tokio::test]
async fn a_leased_store_spends_holds_or_returns_every_unit_it_charges() {
    let mut failures = Vec::new();
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 10 },
    ] {
        for cost in [2_u32, 3, 17, 33] {
            let clock = manual();
            let inner = MemoryStore::with_clock(clock.clone());
            let limit = Limit::new("api", Quota::per_hour(100_000))
                .expect("limit")
                .algorithm(algorithm);
            let store = LeasedStore::builder(inner.clone()).clock(clock).build();
            let limiter = limiter_on(store.clone(), [limit.clone()]);
            let key = Key::from("hot");
            let mut admitted = 0_u64;
            for _ in 0..(200_000 / cost) {
                if limiter
                    .check("api", &key, cost)
                    .await
                    .expect("check")
                    .allowed
                {
                    admitted += u64::from(cost);
                }
            }
            let held = store.held();
            let charged = used(&inner, &limit, &key).await;
            let returned = store.release_all().await.expect("release");
            let after = used(&inner, &limit, &key).await;
            if charged != admitted + held || after != admitted {
                failures.push(format!(
                    "{algorithm:?} cost {cost}: admitted {admitted} of 100000, charged {charged}, \
                     held {held}, returned {returned}, lost {}",
                    after - admitted
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_stores_sharing_one_inner_store_never_exceed_a_gcra_burst() {
    let limit = Limit::new(
        "api",
        Quota::per_hour(1_000).with_burst(700).expect("burst"),
    )
    .expect("limit");
    leased_processes_admit_exactly(limit, 700, false, true).await;
}

// ---------------------------------------------------------------------------------
// The layer's reload under real HTTP requests.
// ---------------------------------------------------------------------------------

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

fn fixed_policy(name: &str, quota: Quota) -> Policy {
    Policy::new(name, quota)
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
}

/// A: "api" 1000/min per `x-user`, cost 1; "global".
fn set_a() -> Vec<Policy> {
    vec![
        fixed_policy("api", Quota::per_minute(1_000)).key(key::header("x-user").expect("name")),
        fixed_policy("global", Quota::per_minute(1_000_000)).key(key::global()),
    ]
}

/// B: "api" 2000/min per `x-tenant`, cost 2; "daily"; an in-flight bound.
fn set_b() -> Vec<Policy> {
    vec![
        fixed_policy("api", Quota::per_minute(2_000))
            .key(key::header("x-tenant").expect("name"))
            .costs(Costs::new().default(2))
            .in_flight(1_000)
            .expect("in flight"),
        fixed_policy("daily", Quota::per_day(1_000_000)).key(key::global()),
    ]
}

fn request(user: usize) -> Request<Full<Bytes>> {
    Request::get("/")
        .header("x-user", format!("user-{user}"))
        .header("x-tenant", "t")
        .body(Full::default())
        .expect("request")
}

fn member<'a>(reply: &'a Reply, name: &str) -> Option<&'a str> {
    reply
        .header("ratelimit")
        .split(", ")
        .find(|m| m.starts_with(&format!("\"{name}\";")))
}

fn remaining(reply: &Reply, name: &str) -> u64 {
    let member = member(reply, name).unwrap_or_else(|| panic!("no {name} in {reply:?}"));
    member
        .split(';')
        .find_map(|p| p.strip_prefix("r="))
        .expect("r")
        .parse()
        .expect("a number")
}

const POLICY_A: &str = r#""api";q=1000;w=60, "global";q=1000000;w=60"#;
// B's in-flight bound is advertised after its quotas (draft-11's concurrency quota).
const POLICY_B: &str =
    r#""api";q=2000;w=60, "daily";q=1000000;w=86400, "api";q=1000;qu="concurrent-requests""#;
const POLICY_C: &str = r#""api";q=3000;w=60"#;
/// C's limit re-paired with B's rules: B's in-flight bound is advertised too.
const POLICY_C_B_RULES: &str = r#""api";q=3000;w=60, "api";q=1000;qu="concurrent-requests""#;

/// Which set's limits decided `reply`, checking that the rules agree where they can
/// be known: under A's limits with A's rules a fresh user has r = 999; a tenant charge
/// (B's rule) always costs 2, so the tenant's usage stays even whatever limit counts it.
fn decided_by(reply: &Reply) -> char {
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    let api = remaining(reply, "api");
    match reply.header("ratelimit-policy") {
        POLICY_A => {
            assert!(member(reply, "global").is_some(), "{reply:?}");
            assert_eq!(api, 999, "A's limit with B's rules: {reply:?}");
            'A'
        }
        POLICY_B => {
            assert!(member(reply, "daily").is_some(), "{reply:?}");
            assert!(api <= 1_998, "B's limit with A's key rule: {reply:?}");
            assert_eq!((2_000 - api) % 2, 0, "B's limit with A's cost: {reply:?}");
            'B'
        }
        POLICY_C => {
            // C's limit with A's rules (a fresh user) or B's (the tenant, cost 2).
            assert!(api == 2_999 || (3_000 - api).is_multiple_of(2), "{reply:?}");
            'C'
        }
        POLICY_C_B_RULES => {
            // C's limit with B's rules: the tenant, cost 2.
            assert!((3_000 - api).is_multiple_of(2), "{reply:?}");
            'C'
        }
        other => panic!("a policy header of no set: {other:?} in {reply:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn layer_reloads_racing_limiter_reloads_decide_each_request_by_one_whole_set() {
    let layer = RateLimitLayer::builder()
        .policies(set_b())
        .store(MemoryStore::with_clock(manual()))
        .build()
        .expect("layer");
    let server = Arc::new(Server::start(app(layer.clone())).await);
    assert_eq!(decided_by(&server.send(request(0)).await), 'B');

    let done = Arc::new(AtomicBool::new(false));
    let reloader = {
        let (layer, done) = (layer.clone(), done.clone());
        tokio::spawn(async move {
            let mut n = 0_u32;
            while !done.load(Ordering::Relaxed) {
                layer
                    .reload(if n.is_multiple_of(2) {
                        set_a()
                    } else {
                        set_b()
                    })
                    .expect("a valid set");
                n += 1;
                tokio::task::yield_now().await;
            }
        })
    };
    let limits_reloader = {
        let (layer, done) = (layer.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                layer
                    .limiter()
                    .reload([fixed("api", Quota::per_minute(3_000))])
                    .expect("a valid set");
                tokio::task::yield_now().await;
            }
        })
    };
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let server = server.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for i in 0..80 {
                    seen.push(decided_by(&server.send(request(1 + c * 100 + i)).await));
                }
                seen
            })
        })
        .collect();
    let mut seen = Vec::new();
    for client in clients {
        seen.extend(client.await.expect("a client"));
    }
    done.store(true, Ordering::Relaxed);
    reloader.await.expect("reloader");
    limits_reloader.await.expect("limits reloader");
    assert_eq!(seen.len(), 320);

    // At rest, the layer's policies are its limiter's limits, name by name.
    let policies: Vec<(String, Quota)> = layer
        .policies()
        .iter()
        .map(|p| (p.name().to_owned(), p.quota()))
        .collect();
    let limits: Vec<(String, Quota)> = layer
        .limiter()
        .limits()
        .iter()
        .map(|l| (l.name().to_owned(), l.quota()))
        .collect();
    assert_eq!(policies, limits);
    // And the next request is decided by that set.
    let last = server.send(request(10_000)).await;
    let expected = match limits.len() {
        1 => 'C',
        _ if limits[1].0 == "global" => 'A',
        _ => 'B',
    };
    assert_eq!(decided_by(&last), expected, "{limits:?}");
}

fn parts() -> http::request::Parts {
    Request::get("/")
        .header("x-user", "u")
        .header("x-tenant", "t")
        .body(())
        .expect("request")
        .into_parts()
        .0
}

#[tokio::test]
async fn a_refused_layer_reload_keeps_the_old_rules_and_limits() {
    let layer = RateLimitLayer::builder()
        .policies(set_b())
        .store(MemoryStore::with_clock(manual()))
        .build()
        .expect("layer");
    let server = Server::start(app(layer.clone())).await;
    assert_eq!(decided_by(&server.send(request(0)).await), 'B');

    let refusals: Vec<(&str, Result<(), ConfigError>)> = vec![
        ("empty", layer.reload(Vec::<Policy>::new())),
        ("twice", layer.reload(set_a().into_iter().chain(set_a()))),
        (
            "cost over burst",
            layer
                .reload([fixed_policy("api", Quota::per_minute(5)).costs(Costs::new().default(6))]),
        ),
        (
            "headers too long",
            layer.reload((0..200).map(|i| {
                fixed_policy(
                    &format!("a-rather-long-policy-name-{i:04}"),
                    Quota::per_day(1_000_000),
                )
            })),
        ),
    ];
    for (what, refused) in refusals {
        let err = refused.expect_err(what);
        assert!(!err.to_string().is_empty(), "{what}");
    }
    // B's limits and B's rules, untouched.
    let api = layer.policy("api").expect("api");
    assert_eq!(api.quota(), Quota::per_minute(2_000));
    assert_eq!(api.cost_of(&parts()), 2);
    assert_eq!(api.get_in_flight(), Some(1_000));
    let other_user = Request::get("/")
        .header("x-user", "someone-else")
        .header("x-tenant", "t")
        .body(())
        .expect("request")
        .into_parts()
        .0;
    assert!(api.key_of(&parts()).is_some());
    assert_eq!(
        api.key_of(&parts()),
        api.key_of(&other_user),
        "keyed by tenant"
    );
    assert_eq!(
        layer.limiter().limit("api").map(|l| l.quota()),
        Some(Quota::per_minute(2_000))
    );
    let names: Vec<&str> = layer.policies().iter().map(Policy::name).collect();
    assert_eq!(names, ["api", "daily"]);
    for user in 1..4 {
        assert_eq!(decided_by(&server.send(request(user)).await), 'B');
    }
}

#[tokio::test]
async fn usage_carries_over_a_layer_reload_and_clones_see_it() {
    let layer = RateLimitLayer::builder()
        .policy(fixed_policy("api", Quota::per_minute(10)).key(key::header("x-user").expect("h")))
        .store(MemoryStore::with_clock(manual()))
        .build()
        .expect("layer");
    let clone = layer.clone();
    let server = Server::start(app(clone.clone())).await;
    for _ in 0..8 {
        assert_eq!(server.send(request(1)).await.status, StatusCode::OK);
    }
    layer
        .reload([fixed_policy("api", Quota::per_minute(20))
            .key(key::header("x-user").expect("h"))
            .costs(Costs::new().default(3))])
        .expect("reload");
    assert_eq!(clone.policy("api").expect("api").cost_of(&parts()), 3);
    let reply = server.send(request(1)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(remaining(&reply, "api"), 20 - 8 - 3, "{reply:?}");
    // Downgraded below the usage: none left.
    clone
        .reload([fixed_policy("api", Quota::per_minute(5)).key(key::header("x-user").expect("h"))])
        .expect("reload");
    assert_eq!(
        layer.policy("api").expect("api").quota(),
        Quota::per_minute(5)
    );
    assert_eq!(
        server.send(request(1)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(server.send(request(2)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn two_layers_over_one_limiter_keep_their_own_rules() {
    let first = RateLimitLayer::builder()
        .policy(
            fixed_policy("api", Quota::per_minute(100))
                .key(key::header("x-user").expect("h"))
                .costs(Costs::new().default(2)),
        )
        .store(MemoryStore::with_clock(manual()))
        .build()
        .expect("layer");
    let second = RateLimitLayer::new(first.limiter().clone());
    // The second layer's rules are the defaults; the first keeps its own.
    assert_eq!(second.policy("api").expect("api").cost_of(&parts()), 1);
    assert_eq!(first.policy("api").expect("api").cost_of(&parts()), 2);

    // The second reloads with rules of its own (limits shared, rules not).
    second
        .reload([fixed_policy("api", Quota::per_minute(200))
            .key(key::header("x-tenant").expect("h"))
            .costs(Costs::new().default(5))])
        .expect("reload");
    let (one, two) = (
        first.policy("api").expect("api"),
        second.policy("api").expect("api"),
    );
    assert_eq!(one.quota(), Quota::per_minute(200), "limits are shared");
    assert_eq!(two.cost_of(&parts()), 5);
    assert_eq!(
        one.cost_of(&parts()),
        2,
        "the first layer's rules taken over"
    );

    let s1 = Server::start(app(first.clone())).await;
    let s2 = Server::start(app(second.clone())).await;
    let r1 = s1.send(request(7)).await;
    assert_eq!(
        remaining(&r1, "api"),
        198,
        "first: per x-user, cost 2: {r1:?}"
    );
    let r2 = s2.send(request(7)).await;
    assert_eq!(
        remaining(&r2, "api"),
        195,
        "second: per x-tenant, cost 5: {r2:?}"
    );
    // And a reload of the first keeps the second's rules.
    first
        .reload([fixed_policy("api", Quota::per_minute(300))
            .key(key::header("x-user").expect("h"))
            .costs(Costs::new().default(2))])
        .expect("reload");
    assert_eq!(second.policy("api").expect("api").cost_of(&parts()), 5);
    let r2 = s2.send(request(8)).await;
    assert_eq!(
        remaining(&r2, "api"),
        290,
        "second after the first's reload: {r2:?}"
    );
}

// ---------------------------------------------------------------------------------
// In-flight slots through the layer: clients giving up at random points.
// ---------------------------------------------------------------------------------

/// Counts a handler out when it ends, however it ends.
struct Done(Arc<AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves "/slow" (sleeps `n` ms from `?n=`) and "/" behind `layer`, and counts the
/// handlers running.
fn slow_app(layer: RateLimitLayer, running: Arc<AtomicUsize>) -> Router {
    Router::new()
        .route(
            "/slow",
            get(move |q: axum::extract::RawQuery| {
                let running = running.clone();
                async move {
                    running.fetch_add(1, Ordering::SeqCst);
                    let _done = Done(running);
                    let n: u64 =
                        q.0.and_then(|q| q.strip_prefix("n=").and_then(|n| n.parse().ok()))
                            .unwrap_or(0);
                    sleep(ms(n)).await;
                    "slow"
                }
            }),
        )
        .route("/", get(|| async { "ok" }))
        .layer(layer)
}

/// 120 requests, 6 at a time, each with a handler of 0–24 ms and a client giving up
/// after 0–24 ms; then every slot must be free: the next request is admitted at once.
async fn clients_giving_up_leave_no_slot(layer: RateLimitLayer) -> (u64, u64) {
    let running = Arc::new(AtomicUsize::new(0));
    let app = Arc::new(Server::start(slow_app(layer, running.clone())).await);
    let (ok, left) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let tasks: Vec<_> = (0..6_u64)
        .map(|t| {
            let (app, ok, left) = (app.clone(), ok.clone(), left.clone());
            tokio::spawn(async move {
                for i in 0..20_u64 {
                    let seed = (t * 31 + i * 17) % 25;
                    let patience = (t * 13 + i * 7) % 25;
                    let req = Request::get(format!("/slow?n={seed}"))
                        .body(Full::default())
                        .expect("request");
                    match timeout(ms(patience), app.send(req)).await {
                        Ok(_) => ok.fetch_add(1, Ordering::SeqCst),
                        Err(_) => left.fetch_add(1, Ordering::SeqCst),
                    };
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a client");
    }
    // Everything ends: no handler runs any more (bounded wait, not a speed test).
    for _ in 0..500 {
        if running.load(Ordering::SeqCst) == 0 {
            break;
        }
        sleep(ms(10)).await;
    }
    assert_eq!(running.load(Ordering::SeqCst), 0, "handlers still running");
    (ok.load(Ordering::SeqCst), left.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_giving_up_at_random_points_leave_no_memory_slot_held() {
    let store = MemoryStore::new();
    let layer = RateLimitLayer::builder()
        .policy(Policy::in_flight_only("slow", 2).expect("policy"))
        .store(store.clone())
        .build()
        .expect("layer");
    let (served, gave_up) = clients_giving_up_leave_no_slot(layer.clone()).await;
    assert!(served > 0 && gave_up > 0, "{served} / {gave_up}");
    for _ in 0..200 {
        if store.in_flight_keys() == 0 {
            break;
        }
        sleep(ms(10)).await;
    }
    assert_eq!(store.in_flight_keys(), 0, "a slot outlived its request");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_giving_up_at_random_points_leave_no_redis_slot_held() {
    use support::redis_server::RedisServer;
    let redis = RedisServer::start();
    let store = tollgate::RedisStore::from_url(&redis.url())
        .expect("url")
        .prefix("attack-house")
        .deadline(Duration::from_secs(5))
        .expect("deadline");
    let layer = RateLimitLayer::builder()
        .policy(Policy::in_flight_only("slow", 1).expect("policy"))
        .store(store)
        .build()
        .expect("layer");
    let (ok, left) = clients_giving_up_leave_no_slot(layer.clone()).await;
    assert!(ok > 0 && left > 0, "{ok} / {left}");
    let server = Server::start(slow_app(layer, Arc::default())).await;
    // The slot of every request whose client left is free: the next one is served
    // (a few tries for the server to see the last connections close, far below the
    // 10 s lease TTL a leaked slot would hold for).
    let mut refused = 0;
    for _ in 0..40 {
        if server.get("/slow?n=0").await.status == StatusCode::OK {
            break;
        }
        refused += 1;
        sleep(ms(50)).await;
    }
    assert!(refused < 40, "a slot held after every request ended");
    assert_eq!(server.get("/slow?n=0").await.status, StatusCode::OK);
}

// ---------------------------------------------------------------------------------
// Stores that wrap another pass slots on.
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn in_flight_policies_work_over_wrapping_stores() {
    let leased = LeasedStore::new(MemoryStore::new());
    let fallback = Fallback::new(MemoryStore::new(), MemoryStore::new());
    let policy = || {
        Policy::in_flight_only("uploads", 1)
            .expect("policy")
            .key(key::header("x-user").expect("h"))
    };
    for (what, built) in [
        (
            "leased",
            RateLimitLayer::builder()
                .policy(policy())
                .store(leased)
                .build(),
        ),
        (
            "fallback",
            RateLimitLayer::builder()
                .policy(policy())
                .store(fallback)
                .build(),
        ),
    ] {
        let layer = built.unwrap_or_else(|e| panic!("{what}: {e}"));
        let server = Server::start(app(layer)).await;
        assert_eq!(
            server.send(request(1)).await.status,
            StatusCode::OK,
            "{what}"
        );
    }
}

// ---------------------------------------------------------------------------------
// Bad input to the layer's builder: clear errors naming the input, no panic.
// ---------------------------------------------------------------------------------

#[derive(Debug)]
struct NoSlots(MemoryStore);

impl Store for NoSlots {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.0.decide(charges)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.0.refund(charge)
    }
}

#[test]
fn the_layer_builder_refuses_bad_input_naming_it() {
    let none = RateLimitLayer::builder().build().expect_err("no policy");
    assert!(!none.to_string().is_empty());

    let twice = RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_second(5)).expect("policy"))
        .policy(Policy::new("other", Quota::per_second(5)).expect("policy"))
        .policy(Policy::new("api", Quota::per_minute(5)).expect("policy"))
        .build()
        .expect_err("a name twice");
    assert!(twice.to_string().contains("\"api\""), "{twice}");

    let slots = RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_second(5)).expect("policy"))
        .policy(Policy::in_flight_only("uploads", 3).expect("policy"))
        .store(NoSlots(MemoryStore::new()))
        .build()
        .expect_err("no slots");
    assert!(slots.to_string().contains("\"uploads\""), "{slots}");

    let rate_and_slots = RateLimitLayer::builder()
        .policy(
            Policy::new("reports", Quota::per_second(5))
                .expect("policy")
                .in_flight(2)
                .expect("in flight"),
        )
        .store(NoSlots(MemoryStore::new()))
        .build()
        .expect_err("no slots");
    assert!(
        rate_and_slots.to_string().contains("\"reports\""),
        "{rate_and_slots}"
    );

    let cost = RateLimitLayer::builder()
        .policy(
            Policy::new("api", Quota::per_minute(5))
                .expect("policy")
                .costs(
                    Costs::new()
                        .route(http::Method::POST, "/big", 6)
                        .expect("route"),
                ),
        )
        .build()
        .expect_err("a cost over the burst");
    assert!(cost.to_string().contains("/big"), "{cost}");

    // The same errors through a reload of a working layer.
    let layer = RateLimitLayer::builder()
        .policy(Policy::new("api", Quota::per_second(5)).expect("policy"))
        .store(NoSlots(MemoryStore::new()))
        .build()
        .expect("layer");
    let err = layer
        .reload([Policy::in_flight_only("uploads", 3).expect("policy")])
        .expect_err("no slots");
    assert!(err.to_string().contains("\"uploads\""), "{err}");
    assert_eq!(layer.policies().len(), 1);
}

// ---------------------------------------------------------------------------------
// The layer over a store answering through futures, its callers leaving at every
// await (a Tower stack on tokio's paused clock: dropping the response future is the
// client going away).
// ---------------------------------------------------------------------------------

/// Every request keyed "k".
#[allow(clippy::unnecessary_wraps)]
fn one_key(_: &http::request::Parts) -> Option<Key> {
    Some(Key::from("k"))
}

type Inner = tower::util::BoxCloneSyncService<
    Request<Full<Bytes>>,
    http::Response<Full<Bytes>>,
    std::convert::Infallible,
>;

fn handler(work: Duration) -> Inner {
    tower::util::BoxCloneSyncService::new(tower::service_fn(
        move |_req: Request<Full<Bytes>>| async move {
            sleep(work).await;
            Ok::<_, std::convert::Infallible>(http::Response::new(Full::<Bytes>::default()))
        },
    ))
}

/// Sends 200 requests through `layer` around a handler of 3 ms, each given up after
/// 0–29 ms; returns how many got a 200 and how many a 429.
async fn leave_at_every_await(layer: &RateLimitLayer) -> (u64, u64) {
    let service = layer.layer(handler(ms(3)));
    let (mut ok, mut refused) = (0, 0);
    for i in 0..200_u64 {
        let patience = Duration::from_micros((i * 7_919) % 30_000);
        let req = Request::get("/").body(Full::default()).expect("request");
        if let Ok(response) = timeout(patience, service.clone().oneshot(req)).await {
            match response.expect("infallible").status() {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => refused += 1,
                other => panic!("{other}"),
            }
        }
    }
    settle().await;
    (ok, refused)
}

#[tokio::test(start_paused = true)]
async fn the_layer_over_futures_keeps_exactly_the_charges_of_requests_served() {
    for wait in [false, true] {
        let store = Slow::new(ms(4), ms(4));
        let policy = fixed_policy("api", Quota::per_hour(1_000)).key(one_key);
        let limit = policy.limit().clone();
        let layer = RateLimitLayer::builder()
            .policy(policy)
            .store(store.clone())
            .build()
            .expect("layer");
        let layer = if wait {
            layer.wait(Duration::from_secs(10))
        } else {
            layer
        };
        let (ok, refused) = leave_at_every_await(&layer).await;
        assert_eq!(refused, 0);
        assert!(ok > 0 && ok < 200, "{ok}");
        // A request charged and then left in its handler keeps its charge (it was
        // served); one that left while its decision was on the wire gives it back.
        let charged = used(&store.inner, &limit, &Key::from("k")).await;
        let reached_handler = store.stats.applied("decide") + store.stats.applied("reserve")
            - store.stats.applied("refund_charge");
        assert_eq!(
            charged, reached_handler,
            "wait {wait}: stats {:?}",
            store.stats
        );
        assert!(charged >= ok, "wait {wait}: {charged} < {ok}");
        no_call_polled_twice_nor_started_twice(&store.stats);
    }
}

#[tokio::test(start_paused = true)]
async fn the_layer_over_futures_leaves_no_slot_when_callers_leave_at_every_await() {
    let store = Slow::new(ms(4), ms(4));
    let layer = RateLimitLayer::builder()
        .policy(
            fixed_policy("api", Quota::per_hour(1_000))
                .key(one_key)
                .in_flight(1)
                .expect("in flight"),
        )
        .store(store.clone())
        .build()
        .expect("layer");
    let (ok, _) = leave_at_every_await(&layer).await;
    assert!(ok > 0, "{ok}");
    assert_eq!(
        store.inner.in_flight_keys(),
        0,
        "a slot held: {:?}",
        store.stats
    );
    // And the next request is admitted at once.
    let reply = layer
        .layer(handler(ms(0)))
        .oneshot(Request::get("/").body(Full::default()).expect("request"))
        .await
        .expect("infallible");
    assert_eq!(reply.status(), StatusCode::OK);
    no_call_polled_twice_nor_started_twice(&store.stats);
}

// ---------------------------------------------------------------------------------
// In-flight slots across a layer reload.
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_taken_before_a_layer_reload_is_counted_and_given_back_after_it() {
    let store = MemoryStore::with_clock(manual());
    let reports = |max: Option<u32>, quota: u64| {
        let p = fixed_policy("reports", Quota::per_minute(quota)).key(key::global());
        match max {
            Some(max) => p.in_flight(max).expect("in flight"),
            None => p,
        }
    };
    let layer = RateLimitLayer::builder()
        .policy(reports(Some(1), 100))
        .store(store.clone())
        .build()
        .expect("layer");
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let service = {
        let gate = gate.clone();
        layer.layer(tower::util::BoxCloneSyncService::new(tower::service_fn(
            move |_req: Request<Full<Bytes>>| {
                let gate = gate.clone();
                async move {
                    gate.acquire().await.expect("open").forget();
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::<Bytes>::default()))
                }
            },
        )))
    };
    let send = |service: tollgate::layer::RateLimit<Inner>| {
        tokio::spawn(service.oneshot(Request::get("/").body(Full::default()).expect("request")))
    };
    let first = send(service.clone());
    while store.in_flight_keys() == 0 {
        tokio::task::yield_now().await;
    }
    // Same name, same bound, another quota: the running request still holds its slot.
    layer.reload([reports(Some(1), 200)]).expect("reload");
    gate.add_permits(1);
    let second = send(service.clone());
    let second = second.await.expect("task").expect("infallible");
    // The gate's one permit went to whichever handler ran: only one may have.
    assert_eq!(
        second.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "two slots of a bound of 1"
    );
    let first = first.await.expect("task").expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
    drop(first);
    assert_eq!(store.in_flight_keys(), 0);

    // Taken under a bound, given back after a reload that drops the bound.
    let held = send(service.clone());
    while store.in_flight_keys() == 0 {
        tokio::task::yield_now().await;
    }
    layer.reload([reports(None, 200)]).expect("reload");
    gate.add_permits(1);
    drop(held.await.expect("task").expect("infallible"));
    assert_eq!(store.in_flight_keys(), 0, "a slot outlived a reload");
    // And back to a bound of 1: the slot is free.
    layer.reload([reports(Some(1), 200)]).expect("reload");
    gate.add_permits(1);
    let again = send(service.clone())
        .await
        .expect("task")
        .expect("infallible");
    assert_eq!(again.status(), StatusCode::OK);
}

// ---------------------------------------------------------------------------------
// Reloads of one layer racing each other (two clones, two config watchers).
// ---------------------------------------------------------------------------------

/// "api" 1000/min keyed per user at cost 1, or 1001/min keyed per tenant at cost 2:
/// the quota tells which set a policy came from, the cost which rules.
fn racing_set(second: bool) -> Vec<Policy> {
    if second {
        vec![
            fixed_policy("api", Quota::per_minute(1_001))
                .key(key::header("x-tenant").expect("name"))
                .costs(Costs::new().default(2)),
        ]
    } else {
        vec![
            fixed_policy("api", Quota::per_minute(1_000)).key(key::header("x-user").expect("name")),
        ]
    }
}

/// The (quota, cost) pairs that are not one set's.
fn mixed(layer: &RateLimitLayer) -> Option<(u64, u32)> {
    let api = layer.policy("api").expect("api");
    let (count, cost) = (api.quota().limit(), api.cost_of(&parts()));
    match (count, cost) {
        (1_000, 1) | (1_001, 2) => None,
        other => Some(other),
    }
}

#[test]
fn layer_reloads_racing_each_other_never_pair_one_sets_limits_with_anothers_rules() {
    let layer = RateLimitLayer::builder()
        .policies(racing_set(false))
        .build()
        .expect("layer");
    let stop = Arc::new(AtomicBool::new(false));
    let reloaders: Vec<_> = [false, true]
        .into_iter()
        .map(|second| {
            let (layer, stop) = (layer.clone(), stop.clone());
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    layer.reload(racing_set(second)).expect("a valid set");
                }
            })
        })
        .collect();
    let mut seen = Vec::new();
    while !reloaders.iter().all(std::thread::JoinHandle::is_finished) {
        if let Some(pair) = mixed(&layer) {
            seen.push(pair);
            stop.store(true, Ordering::Relaxed);
        }
    }
    for r in reloaders {
        r.join().expect("a reloader");
    }
    if let Some(pair) = mixed(&layer) {
        seen.push(pair);
    }
    assert!(
        seen.is_empty(),
        "limits of one set with rules of the other: {seen:?}"
    );
}

/// Sends `n` requests of fresh users of the tenant "t" through `layer` and returns
/// those decided by a limit with rules of another set: a fresh user under the first
/// set has r = 999 of q = 1000; the tenant under the second is only ever charged 2 at
/// a time, so r of q = 1001 stays odd (or 0 once spent: usage carries over from
/// 3000/min); q = 3000 (a limiter reload) may come with either set's rules (r = 2999,
/// or even).
async fn decided_by_mixed_sets(layer: &RateLimitLayer, n: usize) -> Vec<String> {
    let service = layer.layer(handler(Duration::ZERO));
    let mut wrong = Vec::new();
    for user in 0..n {
        let req = Request::get("/")
            .header("x-user", format!("user-{user}"))
            .header("x-tenant", "t")
            .body(Full::default())
            .expect("request");
        let response = service.clone().oneshot(req).await.expect("infallible");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let (policy, limit) = (header("ratelimit-policy"), header("ratelimit"));
        let r: u64 = limit
            .split(';')
            .find_map(|p| p.strip_prefix("r="))
            .and_then(|r| r.parse().ok())
            .unwrap_or(u64::MAX);
        let whole = match policy.as_str() {
            r#""api";q=1000;w=60"# => r == 999,
            r#""api";q=1001;w=60"# => r % 2 == 1 || r == 0,
            r#""api";q=3000;w=60"# => r == 2_999 || r.is_multiple_of(2),
            _ => false,
        };
        if !whole {
            wrong.push(format!("{policy} / {limit}"));
        }
    }
    wrong
}

/// Requests through the layer while two threads reload it with the two racing sets:
/// each must be decided by one set's limit with that set's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_racing_layer_reloads_are_decided_by_one_whole_set() {
    const REQUESTS: usize = 20_000;
    let layer = RateLimitLayer::builder()
        .policies(racing_set(false))
        .store(MemoryStore::with_clock(manual()))
        .build()
        .expect("layer");
    let stop = Arc::new(AtomicBool::new(false));
    let reloaders: Vec<_> = [false, true]
        .into_iter()
        .map(|second| {
            let (layer, stop) = (layer.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    layer.reload(racing_set(second)).expect("a valid set");
                }
            })
        })
        .collect();
    let wrong = decided_by_mixed_sets(&layer, REQUESTS).await;
    stop.store(true, Ordering::Relaxed);
    for r in reloaders {
        r.join().expect("a reloader");
    }
    // At rest, the layer's state is one set's.
    assert_eq!(
        mixed(&layer),
        None,
        "at rest: a limit of one set with the rules of the other"
    );
    assert!(
        wrong.is_empty(),
        "{} of {REQUESTS} requests decided by a limit of one set with the rules of the other, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
}

/// One thread reloads the layer (alternating the two sets), another its limiter alone
/// (3000/min, keeping whatever rules the layer has): every request is still decided
/// by a limit with its own set's rules, or by the limiter's limit with either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_a_layer_reload_racing_a_limiter_reload_are_decided_by_one_whole_set() {
    const REQUESTS: usize = 20_000;
    let layer = RateLimitLayer::builder()
        .policies(racing_set(false))
        .store(MemoryStore::with_clock(manual()))
        .build()
        .expect("layer");
    let stop = Arc::new(AtomicBool::new(false));
    let layer_reloader = {
        let (layer, stop) = (layer.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut second = false;
            while !stop.load(Ordering::Relaxed) {
                layer.reload(racing_set(second)).expect("a valid set");
                second = !second;
            }
        })
    };
    let limiter_reloader = {
        let (layer, stop) = (layer.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                layer
                    .limiter()
                    .reload([fixed("api", Quota::per_minute(3_000))])
                    .expect("a valid set");
            }
        })
    };
    let wrong = decided_by_mixed_sets(&layer, REQUESTS).await;
    stop.store(true, Ordering::Relaxed);
    layer_reloader.join().expect("a reloader");
    limiter_reloader.join().expect("a reloader");
    assert!(
        wrong.is_empty(),
        "{} of {REQUESTS} requests decided by a limit of one set with the rules of the other, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(3)]
    );
}

// ---------------------------------------------------------------------------------
// Redis: callers leaving during and right after a stall, with a slot and a rate
// decision on the wire.
// ---------------------------------------------------------------------------------

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_leaving_around_a_redis_stall_keep_no_slot_and_no_charge() {
    use support::in_flight::stall;
    use support::redis_server::RedisServer;
    let server = RedisServer::start();
    let store = || {
        tollgate::RedisStore::from_url(&server.url())
            .expect("url")
            .prefix("stall")
            .deadline(Duration::from_secs(5))
            .expect("deadline")
    };
    let policy = fixed_policy("jobs", Quota::per_hour(1_000))
        .key(one_key)
        .in_flight(2)
        .expect("in flight");
    let limit = policy.limit().clone();
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store())
        .build()
        .expect("layer");
    let reached = Arc::new(AtomicU64::new(0));
    let service = layer.layer(tower::util::BoxCloneSyncService::new(tower::service_fn({
        let reached = reached.clone();
        move |_req: Request<Full<Bytes>>| {
            reached.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, std::convert::Infallible>(http::Response::new(Full::<Bytes>::default()))
            }
        }
    })));
    let call = |patience: Duration| {
        let service = service.clone();
        tokio::spawn(async move {
            let req = Request::get("/").body(Full::default()).expect("request");
            timeout(patience, service.oneshot(req))
                .await
                .ok()
                .map(|r| r.expect("infallible").status())
        })
    };
    assert_eq!(
        call(Duration::from_secs(5)).await.expect("task"),
        Some(StatusCode::OK)
    );
    let busy = stall(server.port(), ms(600)).await;
    let callers: Vec<_> = (1..=16_u64).map(|i| call(ms(45 * i))).collect();
    tokio::task::spawn_blocking(move || busy.join())
        .await
        .expect("join")
        .expect("the stall");
    let mut answers = Vec::new();
    for c in callers {
        answers.push(c.await.expect("task"));
    }
    assert!(answers.iter().any(Option::is_none), "{answers:?}");

    // Charges: exactly the requests that reached the handler (a bounded wait for the
    // give-backs of calls that were on the wire, each a round trip).
    let observer = limiter_on(store(), [limit.clone()]);
    let key = Key::from("k");
    let mut charged = 0;
    for _ in 0..100 {
        let d = observer.peek("jobs", &key).await.expect("peek");
        charged = d.capacity - d.remaining;
        if charged == reached.load(Ordering::SeqCst) {
            break;
        }
        sleep(ms(20)).await;
    }
    assert_eq!(
        charged,
        reached.load(Ordering::SeqCst),
        "answers {answers:?}"
    );
    // Slots: both free at once.
    let probe = store();
    let one = probe
        .acquire_in_flight(&limit, &key, 2)
        .await
        .expect("acquire");
    let two = probe
        .acquire_in_flight(&limit, &key, 2)
        .await
        .expect("acquire");
    assert!(
        one.is_some() && two.is_some(),
        "a slot held after the stall; answers {answers:?}"
    );
}

/// Many tasks share one key's lease over a store answering through futures; the task
/// charging the next slice is often cancelled while others wait for its units. No
/// task hangs, and every unit is spent or returned.
#[tokio::test(start_paused = true)]
async fn leases_over_futures_survive_their_slice_charger_being_cancelled() {
    let slow = Slow::new(ms(4), ms(4));
    let leased = LeasedStore::builder(slow.clone()).clock(manual()).build();
    let limit = fixed("api", Quota::per_hour(100_000));
    let limiter = limiter_on(leased.clone(), [limit.clone()]);
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..40_u64)
        .map(|t| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            tokio::spawn(async move {
                let key = Key::from("hot");
                for i in 0..30_u64 {
                    // Every fourth task never gives up: it must not wait forever.
                    let patience = if t % 4 == 0 {
                        Duration::from_secs(3_600)
                    } else {
                        deadline(t * 31 + i)
                    };
                    match timeout(patience, limiter.check("api", &key, 1)).await {
                        Ok(answer) => {
                            assert!(answer.expect("a decision").allowed);
                            admitted.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => assert!(t % 4 != 0, "a patient caller waited an hour"),
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
    settle().await;
    leased.release_all().await.expect("release");
    settle().await;
    let admitted = admitted.load(Ordering::SeqCst);
    assert!(admitted >= 300, "{admitted}");
    assert_eq!(leased.held(), 0);
    assert_eq!(
        used(&slow.inner, &limit, &Key::from("hot")).await,
        admitted,
        "{:?}",
        slow.stats
    );
    no_call_polled_twice_nor_started_twice(&slow.stats);
}

#[test]
fn a_wrapper_over_a_store_without_slots_is_refused_naming_the_policy() {
    let err = RateLimitLayer::builder()
        .policy(Policy::in_flight_only("uploads", 2).expect("policy"))
        .store(LeasedStore::new(NoSlots(MemoryStore::new())))
        .build()
        .expect_err("no slots under the leases");
    assert!(err.to_string().contains("\"uploads\""), "{err}");
}

/// A fallback whose primary answers through futures: checks cancelled at every
/// await leave the primary charged exactly for the admitted ones, and the insurance
/// store untouched.
#[tokio::test(start_paused = true)]
async fn a_fallback_over_futures_keeps_exact_charges_when_checks_are_cancelled() {
    let primary = Slow::new(ms(4), ms(4));
    let insurance = MemoryStore::with_clock(manual());
    let limit = fixed("api", Quota::per_hour(1_000));
    let limiter = limiter_on(
        Fallback::new(primary.clone(), insurance.clone()),
        [limit.clone()],
    );
    let key = Key::from("k");
    let mut admitted = 0;
    for i in 0..300 {
        if let Some(answer) = within(deadline(i), limiter.check("api", &key, 1)).await {
            assert!(answer.expect("a decision").allowed);
            admitted += 1;
        }
    }
    settle().await;
    assert!(admitted > 0 && admitted < 300, "{admitted}");
    assert_eq!(
        used(&primary.inner, &limit, &key).await,
        admitted,
        "{:?}",
        primary.stats
    );
    assert_eq!(used(&insurance, &limit, &key).await, 0);
    no_call_polled_twice_nor_started_twice(&primary.stats);
}

/// Wait mode over a store answering through futures: 60 concurrent callers of one
/// key, held for their leaky-bucket places (100 ms apart), leave at scattered points.
/// The layer never holds more than `max_held_per_key`, and once every caller is gone
/// it holds nothing.
#[tokio::test(start_paused = true)]
async fn held_requests_leaving_at_every_await_leave_the_layer_holding_nothing() {
    let store = Slow::new(ms(4), ms(4));
    let policy = Policy::new("api", Quota::per_second(10).with_burst(1).expect("burst"))
        .expect("policy")
        .algorithm(Algorithm::LeakyBucket)
        .max_delay(Duration::from_secs(100))
        .key(one_key);
    let layer = RateLimitLayer::builder()
        .policy(policy)
        .store(store.clone())
        .build()
        .expect("layer")
        .wait(Duration::from_secs(100))
        .max_held_per_key(5);
    let service = layer.layer(handler(ms(1)));
    let callers: Vec<_> = (0..60_u64)
        .map(|i| {
            let service = service.clone();
            tokio::spawn(async move {
                let patience = ms((i * 7_919) % 900);
                let req = Request::get("/").body(Full::default()).expect("request");
                timeout(patience, service.oneshot(req))
                    .await
                    .ok()
                    .map(|r| r.expect("infallible").status())
            })
        })
        .collect();
    let mut most = 0;
    while !callers.iter().all(tokio::task::JoinHandle::is_finished) {
        most = most.max(layer.held());
        sleep(ms(1)).await;
    }
    let mut answers = Vec::new();
    for c in callers {
        answers.push(c.await.expect("task"));
    }
    settle().await;
    assert!(most <= 5, "held {most} for one key");
    assert_eq!(layer.held(), 0, "answers {answers:?}");
    assert!(answers.contains(&Some(StatusCode::OK)), "{answers:?}");
    no_call_polled_twice_nor_started_twice(&store.stats);
}

/// In wait mode, requests queue for a slot (first come, first served per key) and
/// give up at random points, waiting or running: afterwards no slot is held and no
/// request waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_for_a_slot_giving_up_at_random_points_leave_no_slot_held() {
    let store = MemoryStore::new();
    let layer = RateLimitLayer::builder()
        .policy(
            Policy::in_flight_only("slow", 1)
                .expect("policy")
                .wait(Duration::from_secs(10)),
        )
        .store(store.clone())
        .build()
        .expect("layer");
    let (ok, left) = clients_giving_up_leave_no_slot(layer.clone()).await;
    assert!(ok > 0 && left > 0, "{ok} / {left}");
    for _ in 0..200 {
        if store.in_flight_keys() == 0 && layer.held() == 0 {
            break;
        }
        sleep(ms(10)).await;
    }
    assert_eq!(store.in_flight_keys(), 0, "a slot outlived its request");
    assert_eq!(layer.held(), 0, "a waiter outlived its request");
    let server = Server::start(slow_app(layer, Arc::default())).await;
    assert_eq!(server.get("/slow?n=0").await.status, StatusCode::OK);
}

/// Four leased "processes" over one memory store, the clock moving 250 ms between
/// rounds of 40 requests: a fixed window admits at most its quota in each window, and
/// GCRA at most `B + L·t/P` by every instant, leases or not.
#[tokio::test]
async fn leases_answering_ready_keep_each_algorithms_bound_while_time_moves() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::Gcra,
        Algorithm::TokenBucket,
    ] {
        let clock = manual();
        let inner = MemoryStore::with_clock(clock.clone());
        let limit = Limit::new("api", Quota::per_minute(100))
            .expect("limit")
            .algorithm(algorithm);
        let limiters: Vec<Limiter> = (0..4)
            .map(|_| {
                let store = LeasedStore::builder(inner.clone())
                    .clock(clock.clone())
                    .processes(4)
                    .expect("processes")
                    .build();
                limiter_on(store, [limit.clone()])
            })
            .collect();
        let key = Key::from("hot");
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        let mut total = 0_u64;
        for step in 0..2_400_u64 {
            let elapsed_ms = step * 250;
            for (i, limiter) in limiters.iter().enumerate() {
                for j in 0..10_u32 {
                    let cost = 1 + (j + u32::try_from(i).expect("small")) % 3;
                    if limiter
                        .check("api", &key, cost)
                        .await
                        .expect("check")
                        .allowed
                    {
                        total += u64::from(cost);
                        *per_window.entry(elapsed_ms / 60_000).or_default() += u64::from(cost);
                    }
                }
            }
            if algorithm != Algorithm::FixedWindow {
                let bound = 100 + 100 * elapsed_ms / 60_000;
                assert!(
                    total <= bound,
                    "{algorithm:?}: {total} by {elapsed_ms} ms > {bound}"
                );
            }
            clock.advance(ms(250));
        }
        if algorithm == Algorithm::FixedWindow {
            let over: Vec<_> = per_window.iter().filter(|(_, n)| **n > 100).collect();
            assert!(over.is_empty(), "windows over 100: {over:?}");
        }
        assert!(total > 0);
    }
}

/// The mixed store under many threads, half the checks given up at their first
/// `Pending`: a check answered ready is kept, one on its way is given back, and the
/// store ends charged exactly for the admitted ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_answering_ready_or_later_keeps_exact_charges_when_checks_are_dropped() {
    let store = Mixed {
        inner: MemoryStore::with_clock(manual()),
        calls: Arc::default(),
    };
    let limit = fixed("api", Quota::per_hour(100_000));
    let limiter = limiter_on(store.clone(), [limit.clone()]);
    let admitted = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            tokio::spawn(async move {
                let key = Key::from("hot");
                for i in 0..300 {
                    let patience = if i % 2 == 0 {
                        Duration::ZERO
                    } else {
                        Duration::from_secs(60)
                    };
                    if let Ok(answer) = timeout(patience, limiter.check("api", &key, 1)).await {
                        assert!(answer.expect("a decision").allowed);
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a task");
    }
    let key = Key::from("hot");
    let admitted = admitted.load(Ordering::SeqCst);
    // The give-backs of dropped checks run on in the background: a bounded wait.
    let mut charged = 0;
    for _ in 0..200 {
        charged = used(&store.inner, &limit, &key).await;
        if charged == admitted {
            break;
        }
        sleep(ms(10)).await;
    }
    assert!(admitted > 1_200, "{admitted}");
    assert_eq!(charged, admitted);
}

/// Requests through the layer from many tasks at once, over a store that answers
/// ready or later and over leases answering ready: exactly the quota is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_layer_over_ready_or_later_stores_serves_exactly_its_quota() {
    let mixed = Mixed {
        inner: MemoryStore::with_clock(manual()),
        calls: Arc::default(),
    };
    let leased = LeasedStore::builder(MemoryStore::with_clock(manual()))
        .clock(manual())
        .build();
    let layers = [
        RateLimitLayer::builder()
            .policy(fixed_policy("api", Quota::per_hour(500)).key(one_key))
            .store(mixed)
            .build()
            .expect("layer"),
        RateLimitLayer::builder()
            .policy(fixed_policy("api", Quota::per_hour(500)).key(one_key))
            .store(leased)
            .build()
            .expect("layer"),
    ];
    for layer in layers {
        let service = layer.layer(handler(Duration::ZERO));
        let served = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (service, served) = (service.clone(), served.clone());
                tokio::spawn(async move {
                    for _ in 0..150 {
                        let req = Request::get("/").body(Full::default()).expect("request");
                        let status = service
                            .clone()
                            .oneshot(req)
                            .await
                            .expect("infallible")
                            .status();
                        if status == StatusCode::OK {
                            served.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a task");
        }
        assert_eq!(served.load(Ordering::SeqCst), 500);
    }
}
