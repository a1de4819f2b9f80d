//! A primary that fails half its calls, in runs, for `Fallback` tests on every store:
//! the real store behind it (memory or Redis) answers the other half.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Fallback, Store, StoreCall};
use tollgate::{Decision, Key, Limit, Limiter, MemoryStore, Quota, StoreError, StoreErrorKind};

/// `store`, failing its calls in runs of `run`: `run` answered, then `run` failed
/// with a connection error, and so on (half of them, whoever makes them).
#[derive(Debug, Clone)]
pub struct HalfDown<S> {
    store: S,
    run: u64,
    calls: Arc<AtomicU64>,
}

impl<S: Store> HalfDown<S> {
    /// `store`, failing runs of `run` calls every other run.
    pub fn new(store: S, run: u64) -> Self {
        Self {
            store,
            run: run.max(1),
            calls: Arc::default(),
        }
    }

    fn fails(&self) -> bool {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        (call / self.run) % 2 == 1
    }

    fn failure<T>() -> StoreCall<'static, T> {
        StoreCall::ready(Err(StoreError::new(
            StoreErrorKind::Connection,
            "down for half the calls",
        )))
    }
}

impl<S: Store> Store for HalfDown<S> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        if self.fails() {
            return Self::failure();
        }
        self.store.decide(charges)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        if self.fails() {
            return Self::failure();
        }
        self.store.refund(charge)
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        if self.fails() {
            return Self::failure();
        }
        self.store.penalize(charge)
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        if self.fails() {
            return Self::failure();
        }
        self.store.reset(limit, key)
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        if self.fails() {
            return Self::failure();
        }
        self.store.block(limit, key, duration)
    }
}

/// At one frozen instant (`clock`, which `primary` must read too), 200 requests of
/// one key on a limit of 10 per minute, through `Fallback(HalfDown(primary),
/// memory)` switching quickly. Returns how many were admitted, how many times the
/// serving store changed, and what the primary itself leaves the key in the end.
pub async fn admitted_under_a_half_failing_primary<S: Store + Clone>(
    primary: S,
    clock: &ManualClock,
) -> (u64, u64, u64) {
    let limit = || Limit::new("half-down", Quota::per_minute(10)).expect("a limit");
    let store = Fallback::new(
        HalfDown::new(primary.clone(), 3),
        MemoryStore::with_clock(clock.clone()),
    )
    .min_down(Duration::from_millis(5))
    .probe_interval(Duration::from_millis(2));
    let limiter = Limiter::builder()
        .limit(limit())
        .store(store.clone())
        .build()
        .expect("a limiter");
    let key = Key::from("alice");
    let mut admitted = 0;
    for _ in 0..200 {
        if limiter
            .check("half-down", &key, 1)
            .await
            .expect("answered")
            .allowed
        {
            admitted += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // Back on the primary, its catch-up done.
    for _ in 0..2_000 {
        if store.serving_primary() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let on_primary = Limiter::builder()
        .limit(limit())
        .store(primary)
        .build()
        .expect("a limiter");
    let left = on_primary
        .check("half-down", &key, 0)
        .await
        .expect("answered")
        .remaining;
    (admitted, store.switches(), left)
}

/// A memory store that can go down and come back empty, as a restarted server does:
/// while up, a real `MemoryStore` answers (at once, as it always does).
#[derive(Debug, Clone)]
pub struct Restartable {
    state: Arc<std::sync::Mutex<(MemoryStore, bool)>>,
}

impl Default for Restartable {
    fn default() -> Self {
        Self::new()
    }
}

impl Restartable {
    /// Up, empty.
    pub fn new() -> Self {
        Self {
            state: Arc::new(std::sync::Mutex::new((MemoryStore::new(), true))),
        }
    }

    /// Every call fails from now on.
    pub fn go_down(&self) {
        self.lock().1 = false;
    }

    /// Up again, with nothing of what it had.
    pub fn come_back_empty(&self) {
        *self.lock() = (MemoryStore::new(), true);
    }

    /// The store behind, as it is now (for reading it directly).
    pub fn inner(&self) -> MemoryStore {
        self.lock().0.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (MemoryStore, bool)> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The store while up.
    fn serving(&self) -> Option<MemoryStore> {
        let (store, up) = self.lock().clone();
        up.then_some(store)
    }
}

/// A memory store's answer, which it gives at once, or a failure.
fn now<T>(call: Option<StoreCall<'_, T>>) -> StoreCall<'static, T> {
    let Some(call) = call else {
        return HalfDown::<MemoryStore>::failure();
    };
    StoreCall::ready(
        call.into_ready()
            .unwrap_or_else(|_| Err(StoreError::new(StoreErrorKind::Unavailable, "not at once"))),
    )
}

impl Store for Restartable {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        now(self.serving().as_ref().map(|store| store.decide(charges)))
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        now(self.serving().as_ref().map(|store| store.refund(charge)))
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        now(self.serving().as_ref().map(|store| store.penalize(charge)))
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        now(self.serving().as_ref().map(|store| store.reset(limit, key)))
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        now(self
            .serving()
            .as_ref()
            .map(|store| store.block(limit, key, duration)))
    }
}
