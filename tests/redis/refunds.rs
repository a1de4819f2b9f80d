//! Refunds take back only what was charged: a refund by a decision's receipt returns
//! only what of *that* charge its key still counts (nothing once its window has
//! rolled over or time has repaid it), from the store that took it (through
//! `Fallback`s; dropped when that store is down), and nothing for a request that
//! charged nothing. Through the limiter on memory, Redis and Cluster, over real HTTP
//! with the layer's `count_when`, and against a real Redis stopped mid-way.
//!
//! The hand-computed late-refund tables of every algorithm are in
//! `tests/support/scenarios.rs` (run on every store by the `scenarios` module of
//! `tests/core/`, `tests/redis/` and `tests/cluster/`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use support::http::{Reply, Server};
use support::immediate::immediate;
use tokio::sync::{Semaphore, mpsc, watch};
use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Fallback, Receipt, Store};
use tollgate::{
    Algorithm, Decision, Key, Limiter, MemoryStore, Policy, Quota, RateLimitLayer, StoreError,
    StoreErrorKind, store::StoreCall,
};

/// 2023-11-14T00:00:00Z: windows of a minute, an hour and a day start here.
const BASE: Duration = Duration::from_secs(1_699_920_000);

type TestResult = Result<(), Box<dyn std::error::Error>>;

const ALGORITHMS: [Algorithm; 7] = support::every_algorithm(6);

fn policy(name: &str, quota: Quota, algorithm: Algorithm) -> Policy {
    Policy::new(name, quota)
        .expect("a policy")
        .algorithm(algorithm)
}

/// A limiter of the policies' limits (their request rules play no part).
fn limiter(policies: Vec<Policy>, store: impl Store) -> Limiter {
    Limiter::builder()
        .limits(policies.into_iter().map(|p| p.limit().clone()))
        .store(store)
        .build()
        .expect("a limiter")
}

/// A layer of `policies` (limits and request rules).
fn layer(policies: Vec<Policy>, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policies(policies)
        .store(store)
        .build()
        .expect("a layer")
}

async fn remaining(limiter: &Limiter, policy: &str, key: &Key) -> u64 {
    limiter
        .check(policy, key, 0)
        .await
        .expect("a peek")
        .remaining
}

/// The same policies on every store this build has, each with its own state and the
/// same clock: (store name, limiter).
fn on_every_store(
    clock: &ManualClock,
    policies: &dyn Fn() -> Vec<Policy>,
) -> Vec<(&'static str, Limiter)> {
    vec![
        (
            "memory",
            limiter(policies(), MemoryStore::with_clock(clock.clone())),
        ),
        #[cfg(feature = "redis")]
        ("redis", limiter(policies(), redis::standalone(clock))),
        #[cfg(feature = "redis")]
        ("cluster", limiter(policies(), redis::cluster(clock))),
    ]
}

#[cfg(feature = "redis")]
mod redis {
    use std::time::Duration;

    use support::redis_cluster::shared_cluster;
    use support::redis_server::{shared_server, unique_prefix};
    use tollgate::RedisStore;
    use tollgate::clock::ManualClock;

    /// Generous deadlines: these tests check answers, not speed, on a busy machine.
    fn patient(store: RedisStore, clock: &ManualClock) -> RedisStore {
        store
            .prefix(&unique_prefix("refunds"))
            .denial_cache(0)
            .deadline(Duration::from_secs(5))
            .expect("a deadline")
            .with_clock(clock.clone())
    }

    pub(super) fn standalone(clock: &ManualClock) -> RedisStore {
        patient(
            RedisStore::from_url(&shared_server().url()).expect("a url"),
            clock,
        )
    }

    pub(super) fn cluster(clock: &ManualClock) -> RedisStore {
        patient(
            RedisStore::from_cluster_urls(shared_cluster().urls()).expect("urls"),
            clock,
        )
    }
}

// ---------------------------------------------------------------------------------------
// Through the limiter, on every store.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_decision_that_charged_nothing_gives_nothing_back() -> TestResult {
    let clock = ManualClock::new(BASE);
    let policies = || {
        vec![
            policy("burst", Quota::per_minute(1), Algorithm::FixedWindow),
            policy("daily", Quota::per_minute(5), Algorithm::FixedWindow),
        ]
    };
    let alice = Key::from("alice");
    for (store, limiter) in on_every_store(&clock, &policies) {
        let both = [("burst", &alice, 1), ("daily", &alice, 1)];
        let admitted = limiter.check_all(&both).await?;
        assert!(admitted.iter().all(|d| d.receipt().is_some()), "{store}");
        // "burst" denies: "daily" says allowed but was not charged.
        let denied = limiter.check_all(&both).await?;
        assert!(!denied[0].allowed && denied[1].allowed, "{store}");
        assert!(denied.iter().all(|d| d.receipt().is_none()), "{store}");
        let peek = limiter.check("daily", &alice, 0).await?;
        let refused = limiter.check("burst", &alice, 1).await?;
        for uncharged in [&denied[0], &denied[1], &peek, &refused] {
            limiter.refund_charge(uncharged, &alice, 1).await?;
        }
        assert_eq!(remaining(&limiter, "daily", &alice).await, 4, "{store}");
        assert_eq!(remaining(&limiter, "burst", &alice).await, 0, "{store}");
        // The charge that was made comes back.
        limiter.refund_charge(&admitted[1], &alice, 1).await?;
        assert_eq!(remaining(&limiter, "daily", &alice).await, 5, "{store}");
    }
    Ok(())
}

#[tokio::test]
async fn a_refund_returns_at_most_what_its_request_was_charged() -> TestResult {
    let clock = ManualClock::new(BASE);
    let policies = || vec![policy("api", Quota::per_minute(5), Algorithm::FixedWindow)];
    let alice = Key::from("alice");
    for (store, limiter) in on_every_store(&clock, &policies) {
        let small = limiter.check("api", &alice, 1).await?;
        limiter.check("api", &alice, 2).await?;
        // Asking for 5 back takes back the 1 that was charged, not the other 2.
        limiter.refund_charge(&small, &alice, 5).await?;
        assert_eq!(remaining(&limiter, "api", &alice).await, 3, "{store}");
    }
    Ok(())
}

/// Cross-check of the all-or-nothing undo: a batch naming one key twice, each part
/// fitting alone but not both, is charged then undone inside one store call. The
/// undo must take back exactly those charges, not older ones of the key's history
/// (a previous window's, a partly repaid debt).
#[tokio::test]
async fn a_batch_undone_for_naming_one_key_twice_leaves_the_key_as_it_was() -> TestResult {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE + Duration::from_secs(50));
        let policies = || vec![policy("p", Quota::per_minute(6), algorithm)];
        let alice = Key::from("alice");
        for (store, limiter) in on_every_store(&clock, &policies) {
            clock.set(BASE + Duration::from_secs(50));
            limiter.check("p", &alice, 3).await?;
            // The next window (and sub-window): the key has history and quota left.
            clock.set(BASE + Duration::from_secs(65));
            limiter.check("p", &alice, 1).await?;
            let before = limiter.check("p", &alice, 0).await?;
            let left = u32::try_from(before.remaining)?;
            assert!(left > 0, "{algorithm} on {store}: {before:?}");
            let twice = limiter
                .check_all(&[("p", &alice, left), ("p", &alice, left)])
                .await?;
            assert!(!twice.iter().all(|d| d.allowed), "{algorithm} on {store}");
            let after = limiter.check("p", &alice, 0).await?;
            assert_eq!(after, before, "{algorithm} on {store}");
        }
    }
    Ok(())
}

/// A refund by receipt at a random later instant (memory store): `remaining` grows by
/// at most the amount asked back, and not at all once the charge no longer counts —
/// past its reset instant, or for the sliding window (whose previous-window count is
/// not split by charge) from the second window after its own.
fn check_refunds_by_receipt(algorithm: Algorithm, steps: &[(u64, u32, bool, usize, u32)]) {
    const PERIOD_US: u64 = 600_000;
    let clock = ManualClock::new(BASE);
    let quota = Quota::new(6, Duration::from_micros(PERIOD_US)).expect("a quota");
    let limiter = limiter(
        vec![policy("p", quota, algorithm)],
        MemoryStore::with_clock(clock.clone()),
    );
    let key = Key::from("k");
    let mut now = 0_u64;
    // (instant, decision) of each admitted charge.
    let mut charged: Vec<(u64, Decision)> = Vec::new();
    for &(advance, cost, refund, pick, amount) in steps {
        now += advance;
        clock.set(BASE + Duration::from_micros(now));
        if !refund || charged.is_empty() {
            let decision = immediate(limiter.check("p", &key, cost)).expect("memory");
            if decision.receipt().is_some() {
                charged.push((now, decision));
            }
            continue;
        }
        let (at, decision) = &charged[pick % charged.len()];
        let until = at + u64::try_from(decision.reset_after.as_micros()).expect("µs");
        let over = if algorithm == Algorithm::SlidingWindow {
            now / PERIOD_US > (until - 1) / PERIOD_US
        } else {
            now >= until
        };
        let before = immediate(limiter.check("p", &key, 0)).expect("memory");
        immediate(limiter.refund_charge(decision, &key, amount)).expect("memory");
        let after = immediate(limiter.check("p", &key, 0)).expect("memory");
        assert!(
            after.remaining <= before.remaining + u64::from(amount),
            "{algorithm} at {now} µs: {before:?} -> {after:?} for {amount}"
        );
        if over {
            assert_eq!(
                after, before,
                "{algorithm} at {now} µs, charge until {until}"
            );
        }
    }
}

proptest! {
    #[test]
    fn a_refund_by_receipt_returns_at_most_its_amount_and_nothing_once_its_charge_is_over(
        algorithm in prop::sample::select(ALGORITHMS.to_vec()),
        steps in prop::collection::vec(
            (0..250_000_u64, 1..=3_u32, any::<bool>(), any::<usize>(), 0..=4_u32),
            1..80,
        ),
    ) {
        check_refunds_by_receipt(algorithm, &steps);
    }
}

// ---------------------------------------------------------------------------------------
// Over real HTTP: `count_when` refunds by receipt.
// ---------------------------------------------------------------------------------------

/// Login handlers: "slow" reports that it has started (the request is charged by
/// then) and waits for a permit before succeeding; "right" succeeds, anything else
/// fails with 401.
struct Logins {
    entered: mpsc::UnboundedSender<()>,
    gate: Semaphore,
}

async fn login(State(logins): State<Arc<Logins>>, body: String) -> (StatusCode, &'static str) {
    match body.as_str() {
        "slow" => {
            let _ = logins.entered.send(());
            if let Ok(permit) = logins.gate.acquire().await {
                permit.forget();
            }
            (StatusCode::OK, "welcome")
        }
        "right" => (StatusCode::OK, "welcome"),
        _ => (StatusCode::UNAUTHORIZED, "no"),
    }
}

/// A login endpoint behind `layer`, and the receiver of "slow has started".
async fn login_server(
    layer: RateLimitLayer,
) -> (Arc<Server>, Arc<Logins>, mpsc::UnboundedReceiver<()>) {
    let (entered, started) = mpsc::unbounded_channel();
    let logins = Arc::new(Logins {
        entered,
        gate: Semaphore::new(0),
    });
    let app = Router::new()
        .route("/login", post(login))
        .layer(layer)
        .with_state(logins.clone());
    (Arc::new(Server::start(app).await), logins, started)
}

async fn attempt(server: &Server, password: &'static str) -> Reply {
    let request = Request::post("/login")
        .body(Full::new(Bytes::from_static(password.as_bytes())))
        .expect("a request");
    server.send(request).await
}

/// The key of a policy without a key rule: one for everyone.
fn everyone() -> Key {
    let (parts, ()) = Request::get("/").body(()).expect("a request").into_parts();
    tollgate::key::global().extract(&parts).expect("a key")
}

/// Only failed logins count: 3 a minute, fixed window.
fn failed_logins() -> Policy {
    policy("login", Quota::per_minute(3), Algorithm::FixedWindow)
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
}

/// Counts the refunds a store has finished (whatever their result), so a test can
/// wait for the layer's background refunds without a wall-clock guess.
#[derive(Debug, Clone)]
struct Counted<S> {
    inner: S,
    finished: Arc<watch::Sender<usize>>,
}

impl<S: Store> Counted<S> {
    fn new(inner: S) -> Self {
        Self {
            inner,
            finished: Arc::new(watch::channel(0).0),
        }
    }

    /// Waits until `n` refunds have finished.
    async fn refunds(&self, n: usize) {
        let mut finished = self.finished.subscribe();
        finished
            .wait_for(|&done| done >= n)
            .await
            .expect("sender alive");
    }
}

impl<S: Store> Store for Counted<S> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.inner.decide(charges)
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            let result = self.inner.refund(charge).await;
            self.finished.send_modify(|done| *done += 1);
            result
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            let result = self.inner.refund_charge(charge, receipt).await;
            self.finished.send_modify(|done| *done += 1);
            result
        })
    }
}

/// Three slow successful logins are charged in one window and answered in the next,
/// after three failed logins filled it. Their refunds must take nothing from the new
/// window: a fourth failed login is still refused. (Refunding the newest charges, the
/// three refunds emptied the new window: three more failed logins got through.)
async fn slow_logins_straddling_an_edge(
    layer: RateLimitLayer,
    clock: &ManualClock,
    refunds_done: impl AsyncFn(usize),
) {
    const SLOW: usize = 3;
    clock.set(BASE + Duration::from_secs(59));
    let (server, logins, mut started) = login_server(layer.clone()).await;
    let slow: Vec<_> = (0..SLOW)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { attempt(&server, "slow").await.status })
        })
        .collect();
    for _ in 0..SLOW {
        started.recv().await.expect("a slow login started");
    }
    // Charged in the window ending at 60 s; answered in the next one.
    clock.set(BASE + Duration::from_millis(60_001));
    for _ in 0..3 {
        assert_eq!(
            attempt(&server, "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    logins.gate.add_permits(SLOW);
    for request in slow {
        assert_eq!(request.await.expect("no panic"), StatusCode::OK);
    }
    refunds_done(SLOW).await;
    assert_eq!(
        attempt(&server, "wrong").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(remaining(layer.limiter(), "login", &everyone()).await, 0);
}

#[tokio::test]
async fn slow_requests_straddling_a_window_edge_refund_nothing_into_the_new_window() {
    let clock = ManualClock::new(BASE);
    // The memory store refunds before the response leaves.
    let layer = layer(
        vec![failed_logins()],
        MemoryStore::with_clock(clock.clone()),
    );
    slow_logins_straddling_an_edge(layer, &clock, async |_| {}).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn slow_requests_straddling_a_window_edge_refund_nothing_into_the_new_window_on_redis() {
    let clock = ManualClock::new(BASE);
    let store = Counted::new(redis::standalone(&clock));
    let layer = layer(vec![failed_logins()], store.clone());
    slow_logins_straddling_an_edge(layer, &clock, async |n| store.refunds(n).await).await;
}

#[tokio::test]
async fn a_shadow_denied_request_is_refunded_nothing() {
    let clock = ManualClock::new(BASE);
    let layer = layer(
        vec![failed_logins()],
        MemoryStore::with_clock(clock.clone()),
    );
    let (server, _, _) = login_server(layer.clone().shadow(true)).await;
    for _ in 0..3 {
        assert_eq!(
            attempt(&server, "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    // Denied in the shadow (so served) and not counted: it charged nothing, so
    // nothing comes back.
    assert_eq!(attempt(&server, "right").await.status, StatusCode::OK);
    assert_eq!(remaining(layer.limiter(), "login", &everyone()).await, 0);
}

/// A memory store that fails every call while `down` is set, as a store in an outage.
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

    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn outage(&self) -> Option<StoreError> {
        self.down
            .load(Ordering::SeqCst)
            .then(|| StoreError::new(StoreErrorKind::Connection, "down for the test"))
    }
}

impl Store for Flaky {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        match self.outage() {
            Some(error) => StoreCall::ready(Err(error)),
            None => self.inner.decide(charges),
        }
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        match self.outage() {
            Some(error) => StoreCall::ready(Err(error)),
            None => self.inner.refund(charge),
        }
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        match self.outage() {
            Some(error) => StoreCall::ready(Err(error)),
            None => self.inner.refund_charge(charge, receipt),
        }
    }
}

#[tokio::test]
async fn a_request_served_while_the_store_failed_is_refunded_nothing() {
    let clock = ManualClock::new(BASE);
    let flaky = Flaky::new(&clock);
    let store = Counted::new(flaky.clone());
    let layer = layer(vec![failed_logins()], store.clone());
    let (server, logins, mut started) = login_server(layer.clone()).await;
    for _ in 0..2 {
        assert_eq!(
            attempt(&server, "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    // A short outage: the login is served (fail open) without a charge, and answered
    // once the store is back.
    flaky.set_down(true);
    let during = {
        let server = server.clone();
        tokio::spawn(async move { attempt(&server, "slow").await.status })
    };
    started.recv().await.expect("started");
    flaky.set_down(false);
    logins.gate.add_permits(1);
    assert_eq!(during.await.expect("no panic"), StatusCode::OK);
    // A login that is charged and refunded: its refund is queued after any the served
    // one would have made, so once it is done both would be.
    assert_eq!(attempt(&server, "right").await.status, StatusCode::OK);
    store.refunds(1).await;
    // One failed login left, not two.
    assert_eq!(
        attempt(&server, "wrong").await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        attempt(&server, "wrong").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

// ---------------------------------------------------------------------------------------
// Fallback: a refund goes to the store that took the charge.
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn refunds_go_to_the_store_that_took_the_charge_through_nested_fallbacks() -> TestResult {
    let clock = ManualClock::new(BASE);
    let (a, b) = (Flaky::new(&clock), Flaky::new(&clock));
    let c = MemoryStore::with_clock(clock.clone());
    let inner = Fallback::new(a.clone(), b.clone()).probe_interval(Duration::ZERO);
    let store = Fallback::new(inner, c.clone()).probe_interval(Duration::ZERO);
    let api = || vec![policy("api", Quota::per_minute(5), Algorithm::FixedWindow)];
    let limiter = limiter(api(), store);
    let [on_a, on_b, on_c] = [a.inner.clone(), b.inner.clone(), c].map(|s| self::limiter(api(), s));
    let alice = Key::from("alice");
    let left = async |store: &Limiter| remaining(store, "api", &alice).await;

    let charged_on_a = limiter.check("api", &alice, 1).await?;
    a.set_down(true);
    let charged_on_b = limiter.check("api", &alice, 2).await?;
    b.set_down(true);
    let charged_on_c = limiter.check("api", &alice, 3).await?;
    // C starts alice where the inner fallback left her (2 used on B; `Flaky` has no
    // `penalize`, so B started her afresh), then charges 3.
    assert_eq!(
        (left(&on_a).await, left(&on_b).await, left(&on_c).await),
        (4, 3, 0)
    );

    // A is down: its refund is dropped, not given to B or C.
    let dropped = limiter.refund_charge(&charged_on_a, &alice, 1).await;
    assert_eq!(
        dropped.map_err(|e| e.kind()),
        Err(StoreErrorKind::Unavailable)
    );
    // C took its charge and is up: its refund goes there.
    limiter.refund_charge(&charged_on_c, &alice, 3).await?;
    assert_eq!(
        (left(&on_a).await, left(&on_b).await, left(&on_c).await),
        (4, 3, 3)
    );

    // Everything is back and serving from A again.
    a.set_down(false);
    b.set_down(false);
    limiter.check("api", &alice, 0).await?;
    limiter.refund_charge(&charged_on_b, &alice, 2).await?;
    assert_eq!(
        (left(&on_a).await, left(&on_b).await, left(&on_c).await),
        (4, 5, 3)
    );
    limiter.refund_charge(&charged_on_a, &alice, 1).await?;
    assert_eq!(
        (left(&on_a).await, left(&on_b).await, left(&on_c).await),
        (5, 5, 3)
    );
    Ok(())
}

/// An operator's refund (no receipt) goes to the store serving now; when that store
/// fails it, the refund is dropped, not given to the other store, whose charges are
/// not the primary's to give back.
#[tokio::test]
async fn an_operator_refund_the_primary_fails_is_not_redirected_to_the_insurance_store()
-> TestResult {
    let clock = ManualClock::new(BASE);
    let primary = Flaky::new(&clock);
    let insurance = MemoryStore::with_clock(clock.clone());
    let api = || vec![policy("api", Quota::per_minute(5), Algorithm::FixedWindow)];
    let store = Fallback::new(primary.clone(), insurance.clone()).probe_interval(Duration::ZERO);
    let limiter = limiter(api(), store.clone());
    let on_insurance = self::limiter(api(), insurance);
    let alice = Key::from("alice");
    primary.set_down(true);
    limiter.check("api", &alice, 2).await?;
    primary.set_down(false);
    limiter.check("api", &alice, 1).await?;
    assert!(store.serving_primary());
    // The primary fails just as the refund arrives.
    primary.set_down(true);
    let failed = limiter.refund("api", &alice, 2).await;
    assert_eq!(
        failed.map_err(|e| e.kind()),
        Err(StoreErrorKind::Connection)
    );
    assert_eq!(remaining(&on_insurance, "api", &alice).await, 3);
    Ok(())
}

/// A slow successful login is charged on the primary, which fails before the answer;
/// failed logins fill the insurance store meanwhile. The refund of the slow login must
/// not go to the insurance store (which would let a fourth failed login through).
#[tokio::test]
async fn a_refund_for_a_primary_that_went_down_is_dropped_not_given_to_the_insurance_store() {
    let clock = ManualClock::new(BASE);
    let primary = Flaky::new(&clock);
    let insurance = MemoryStore::with_clock(clock.clone());
    let store = Counted::new(Fallback::new(primary.clone(), insurance.clone()));
    let layer = layer(vec![failed_logins()], store.clone());
    let (server, logins, mut started) = login_server(layer.clone()).await;
    let slow = {
        let server = server.clone();
        tokio::spawn(async move { attempt(&server, "slow").await.status })
    };
    started.recv().await.expect("started");
    primary.set_down(true);
    // The insurance store starts the key where the primary left it (the slow login's
    // charge): two failed logins fill it.
    for _ in 0..2 {
        assert_eq!(
            attempt(&server, "wrong").await.status,
            StatusCode::UNAUTHORIZED
        );
    }
    logins.gate.add_permits(1);
    assert_eq!(slow.await.expect("no panic"), StatusCode::OK);
    store.refunds(1).await;
    assert_eq!(
        attempt(&server, "wrong").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The primary still counts the slow login: its refund was dropped.
    let on_primary = self::limiter(vec![failed_logins()], primary.inner.clone());
    assert_eq!(remaining(&on_primary, "login", &everyone()).await, 2);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_refund_for_a_stopped_redis_primary_is_dropped_and_the_insurance_store_gains_nothing()
-> TestResult {
    use support::redis_server::RedisServer;
    use tollgate::RedisStore;

    let server = RedisServer::start();
    let clock = ManualClock::new(BASE);
    // What is tested is where refunds go, not speed: a deadline a busy machine meets.
    let redis = RedisStore::from_url(&server.url())?
        .deadline(Duration::from_secs(1))?
        .denial_cache(0)
        .with_clock(clock.clone());
    let memory = MemoryStore::with_clock(clock.clone());
    let fallback = Fallback::new(redis.clone(), memory.clone()).probe_interval(Duration::ZERO);
    let api = || vec![policy("api", Quota::per_minute(5), Algorithm::FixedWindow)];
    let limiter = limiter(api(), fallback.clone());
    let (on_redis, on_memory) = (self::limiter(api(), redis), self::limiter(api(), memory));
    let alice = Key::from("alice");

    let on_primary = limiter.check("api", &alice, 2).await?;
    server.pause();
    // Stopped between charge and refund: the refund times out and is dropped.
    let failed = limiter.refund_charge(&on_primary, &alice, 2).await;
    assert_eq!(failed.map_err(|e| e.kind()), Err(StoreErrorKind::Timeout));
    // While Redis is stopped the memory store serves; a refund of Redis' charge is
    // dropped at once, never given to it.
    let on_insurance = limiter.check("api", &alice, 1).await?;
    assert!(!fallback.serving_primary());
    let dropped = limiter.refund_charge(&on_primary, &alice, 2).await;
    assert_eq!(
        dropped.map_err(|e| e.kind()),
        Err(StoreErrorKind::Unavailable)
    );
    // The memory store started alice where Redis left her (2 used), then charged 1.
    assert_eq!(remaining(&on_memory, "api", &alice).await, 2);

    server.resume();
    // Back on Redis, which still counts its charge. The calls that timed out while it
    // was stopped had reached its socket: a timeout's outcome is unknown, and the
    // store keeps a connection that is only slow, so each may run now: the refund of
    // 2 (when its script was loaded there: on Redis 6.2 the decision loaded it, where
    // Redis 7 decided through the function library and the refund's `EVALSHA` finds
    // no script) and the probe's charge of 1 that the memory store answered (when it
    // was sent before the store gave up on the connection). And, before Redis decides
    // again, the one request the memory store admitted is charged to it. Nothing else.
    let back = limiter.check("api", &alice, 0).await?.remaining;
    let outcomes = [3 - 1, 3 + 2 - 1, 3 - 1 - 1, 3 + 2 - 1 - 1];
    assert!(outcomes.contains(&back), "redis counts {back} left");
    assert!(fallback.serving_primary());
    // The memory store's charge is refunded there, and on Redis, which was charged
    // it on recovery; Redis' own charge on Redis.
    limiter.refund_charge(&on_insurance, &alice, 1).await?;
    assert_eq!(remaining(&on_memory, "api", &alice).await, 3);
    assert_eq!(remaining(&on_redis, "api", &alice).await, (back + 1).min(5));
    limiter.refund_charge(&on_primary, &alice, 2).await?;
    // All of Redis' own charge back, and the admission carried back to it.
    assert_eq!(remaining(&on_redis, "api", &alice).await, 5);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Redis Cluster: receipts through a batch across slots; memory and Redis alike.
// ---------------------------------------------------------------------------------------

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_batch_across_slots_gives_receipts_only_when_every_slot_charged() -> TestResult {
    let clock = ManualClock::new(BASE);
    let limiter = limiter(
        vec![
            policy("user", Quota::per_minute(10), Algorithm::SlidingWindowLog),
            policy("tenant", Quota::per_minute(2), Algorithm::FixedWindow),
        ],
        redis::cluster(&clock),
    );
    // Different keys: different slots, charged slot by slot.
    let (alice, acme) = (Key::from("alice"), Key::from("acme"));
    let batch = [("user", &alice, 1), ("tenant", &acme, 1)];
    let charged = limiter.check_all(&batch).await?;
    assert!(charged.iter().all(|d| d.receipt().is_some()));
    limiter.check_all(&batch).await?;
    // "tenant" denies: "user", charged on its slot first, was taken back by its
    // receipt, and its decision carries none.
    let denied = limiter.check_all(&batch).await?;
    assert!(denied[0].allowed && !denied[1].allowed);
    assert!(denied.iter().all(|d| d.receipt().is_none()));
    assert_eq!(remaining(&limiter, "user", &alice).await, 8);
    limiter.refund_charge(&denied[0], &alice, 1).await?;
    assert_eq!(remaining(&limiter, "user", &alice).await, 8);
    // Each slot's charge comes back by its own receipt.
    limiter.refund_charge(&charged[0], &alice, 1).await?;
    limiter.refund_charge(&charged[1], &acme, 1).await?;
    assert_eq!(remaining(&limiter, "user", &alice).await, 9);
    assert_eq!(remaining(&limiter, "tenant", &acme).await, 1);
    Ok(())
}

/// Random sequences of checks, refunds of random earlier decisions by their receipts
/// (late, partial, repeated, of denials), operator refunds and a clock that mostly
/// moves forwards: every store answers as the memory store, receipts included.
#[cfg(feature = "redis")]
#[tokio::test]
async fn receipt_refunds_answer_alike_on_memory_redis_scripts_and_cluster() -> TestResult {
    use support::rng::Rng;

    let cases: [(&str, Option<u64>, Algorithm); 14] = [
        ("5/s", None, Algorithm::FixedWindow),
        ("7 per 3 seconds", None, Algorithm::FixedWindow),
        ("10/s", None, Algorithm::SlidingWindow),
        ("13 per 7 seconds", None, Algorithm::SlidingWindow),
        ("8/s", None, Algorithm::SlidingWindowCounters { buckets: 4 }),
        (
            "12/min",
            None,
            Algorithm::SlidingWindowCounters { buckets: 6 },
        ),
        ("5/s", None, Algorithm::SlidingWindowLog),
        ("9 per 2 seconds", None, Algorithm::SlidingWindowLog),
        ("10/s", Some(5), Algorithm::TokenBucket),
        ("7 per 3 seconds", Some(4), Algorithm::TokenBucket),
        ("10/s", Some(5), Algorithm::Gcra),
        ("3/s", None, Algorithm::Gcra),
        ("10/s", Some(3), Algorithm::LeakyBucket),
        ("7 per 3 seconds", Some(4), Algorithm::LeakyBucket),
    ];
    for (case, (quota, burst, algorithm)) in cases.into_iter().enumerate() {
        let mut q: Quota = quota.parse()?;
        if let Some(b) = burst {
            q = q.with_burst(b)?;
        }
        let clock = ManualClock::new(BASE);
        let policies = || vec![policy("diff", q, algorithm)];
        let limiters = [
            limiter(policies(), MemoryStore::with_clock(clock.clone())),
            limiter(policies(), redis::standalone(&clock)),
            limiter(policies(), redis::standalone(&clock).functions(false)),
            limiter(policies(), redis::cluster(&clock)),
        ];
        let capacity = burst.unwrap_or(q.limit());
        let period_us = u64::try_from(q.period().as_micros())?;
        let key = Key::from("subject");
        let mut rng = Rng(0x5eed_1234_abcd_0001 ^ case as u64);
        let mut now = 0_u64;
        // Each store's decisions so far, to refund by receipt.
        let mut history: Vec<Vec<Decision>> = vec![Vec::new(); limiters.len()];
        for step in 0..300 {
            match rng.below(10) {
                0 => now += rng.below(period_us * 2),
                1 => now = now.saturating_sub(rng.below(period_us / 3 + 1)),
                2..=4 => {}
                _ => now += rng.below(period_us / capacity.max(1) + 2),
            }
            clock.set(BASE + Duration::from_micros(now));
            let at = format!("{algorithm} at {quota} (burst {burst:?}), step {step}, t = {now} µs");
            let op = if step == 0 { 9 } else { rng.below(10) };
            if op < 3 && !history[0].is_empty() {
                let of = history[0].len() - 1 - rng.below(history[0].len().min(12) as u64) as usize;
                let amount = rng.below(capacity + 2) as u32;
                for (limiter, decisions) in limiters.iter().zip(&history) {
                    limiter.refund_charge(&decisions[of], &key, amount).await?;
                }
                continue;
            }
            if op == 3 {
                let amount = rng.below(capacity + 2) as u32;
                for limiter in &limiters {
                    limiter.refund("diff", &key, amount).await?;
                }
                continue;
            }
            let cost = match rng.below(6) {
                _ if step == 0 => 1,
                0 => 0,
                1 => capacity as u32 + 1,
                _ => rng.below(capacity.min(4)) as u32 + 1,
            };
            let mut decisions = Vec::new();
            for limiter in &limiters {
                decisions.push(limiter.check("diff", &key, cost).await?);
            }
            for (store, got) in ["redis", "scripts", "cluster"].iter().zip(&decisions[1..]) {
                assert_eq!(got, &decisions[0], "{store}: {at}, cost {cost}");
                assert_eq!(
                    got.receipt(),
                    decisions[0].receipt(),
                    "{store}: {at}, cost {cost}"
                );
            }
            for (decisions_of, decision) in history.iter_mut().zip(decisions) {
                decisions_of.push(decision);
            }
        }
    }
    Ok(())
}
