//! Leases (`LeasedStore`): many simulated processes, each its own lease table over ONE
//! shared memory store (an exact stand-in for Redis's answers) on one manual clock,
//! random traffic per process. Across all processes together, every algorithm admits
//! no more than its documented bound (the bounds of `bounds.rs`); a quiet key costs one
//! store call per request; unused units come back; a flood of keys stays within the
//! table's bound; refunds return each unit once.
//!
//! Time only moves forward here: a lease maps the store's time to its own clock by the
//! time elapsed since its charge, which is exact when the two advance together (one
//! Redis server's `TIME` seen from monotonic local clocks, or one injected clock). A
//! store clock that jumps ahead of a process's (skewed injected clocks) is the case
//! leases cannot see; `LeasedStore`'s docs bound what it costs.

use std::time::Duration;

use proptest::prelude::*;
use support::immediate::immediate;
use tollgate::clock::ManualClock;
use tollgate::store::{LeasedStore, SliceSizing};
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Penalty, Quota};

use super::bounds::{BASE_US, PERIOD_US, algorithms, check_fluid_bound, check_window_bounds};

/// Every algorithm that leases (the sliding log passes through).
const LEASABLE: [Algorithm; 6] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowCounters { buckets: 10 },
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

#[derive(Debug, Clone)]
enum Op {
    /// Wait `gap` µs, then process `process` asks for `cost`.
    Arrive { gap: u64, process: usize, cost: u32 },
    /// Process `process` returns its expired leases.
    Release { process: usize },
}

fn op(processes: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (
            prop_oneof![4 => Just(0_u64), 5 => 0..50_000_u64, 2 => 50_000..400_000_u64, 1 => 400_000..2_000_000_u64],
            0..processes,
            prop_oneof![6 => Just(1_u32), 1 => 2..=3_u32],
        )
            .prop_map(|(gap, process, cost)| Op::Arrive { gap, process, cost }),
        1 => (0..processes).prop_map(|process| Op::Release { process }),
    ]
}

fn fluid(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
    )
}

/// Processes sharing one memory store and one clock.
struct Cluster {
    clock: ManualClock,
    stores: Vec<LeasedStore<MemoryStore>>,
    limiters: Vec<Limiter>,
    key: Key,
    now: u64,
    /// Admitted (effective time, cost), over every process.
    admitted: Vec<(u64, u64)>,
    decisions: u64,
}

impl Cluster {
    fn new(
        algorithm: Algorithm,
        quota: Quota,
        processes: usize,
        lease: Duration,
        sizing: SliceSizing,
    ) -> Self {
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let shared = MemoryStore::with_clock(clock.clone());
        let policy = Limit::new("p", quota)
            .expect("valid policy")
            .algorithm(algorithm);
        let stores: Vec<_> = (0..processes)
            .map(|_| {
                LeasedStore::builder(shared.clone())
                    .clock(clock.clone())
                    .max_lease(lease)
                    .and_then(|b| b.processes(1))
                    .and_then(|b| b.sizing(sizing))
                    .expect("valid lease settings")
                    .build()
            })
            .collect();
        let limiters = stores
            .iter()
            .map(|store| {
                Limiter::builder()
                    .limit(policy.clone())
                    .store(store.clone())
                    .build()
                    .expect("valid limiter")
            })
            .collect();
        Self {
            clock,
            stores,
            limiters,
            key: Key::from("k"),
            now: BASE_US,
            admitted: Vec::new(),
            decisions: 0,
        }
    }

    fn set(&mut self, now: u64) {
        self.now = now;
        self.clock.set(Duration::from_micros(now));
    }

    fn check(&mut self, process: usize, cost: u32) -> Result<Decision, TestCaseError> {
        let d = immediate(self.limiters[process].check("p", &self.key, cost)).expect("memory");
        self.decisions += 1;
        prop_assert!(d.remaining <= d.capacity, "{d:?}");
        if d.allowed {
            self.admitted.push((self.now, u64::from(cost)));
        } else {
            prop_assert!(d.retry_after.is_none_or(|r| r > Duration::ZERO), "{d:?}");
        }
        Ok(d)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Arrive { gap, process, cost } => {
                self.set(self.now + gap);
                self.check(process, cost)?;
            }
            Op::Release { process } => {
                immediate(self.stores[process].release_expired()).expect("memory");
            }
        }
        Ok(())
    }

    fn calls(&self) -> u64 {
        self.stores.iter().map(LeasedStore::store_calls).sum()
    }
}

proptest! {
    // 256 cases by default; PROPTEST_CASES=20000 for a deeper search.

    #[test]
    fn processes_with_leases_never_admit_more_than_the_documented_bound(
        algorithm in algorithms(),
        limit in 1..=40_u64,
        burst in 1..=40_u64,
        processes in 1..=4_usize,
        lease_ms in prop_oneof![Just(1_u64), 20..=400_u64, Just(1_000)],
        fixed in prop_oneof![3 => Just(None), 1 => (1..=12_u64).prop_map(Some)],
        ops in (1..=4_usize).prop_flat_map(|n| prop::collection::vec(op(n), 1..200)),
    ) {
        let mut quota = Quota::new(limit, Duration::from_micros(PERIOD_US)).expect("valid quota");
        if fluid(algorithm) {
            quota = quota.with_burst(burst).expect("valid burst");
        }
        let sizing = fixed.map_or(SliceSizing::Adaptive, SliceSizing::Fixed);
        let mut cluster =
            Cluster::new(algorithm, quota, processes, Duration::from_millis(lease_ms), sizing);
        for op in &ops {
            let op = match *op {
                Op::Arrive { gap, process, cost } => Op::Arrive { gap, process: process % processes, cost },
                Op::Release { process } => Op::Release { process: process % processes },
            };
            cluster.step(&op)?;
        }
        if fluid(algorithm) {
            check_fluid_bound(&cluster.admitted, limit, burst)?;
        } else {
            check_window_bounds(&cluster.admitted, algorithm, limit)?;
        }
    }
}

fn hot(algorithm: Algorithm, quota: Quota, processes: usize) -> Cluster {
    Cluster::new(
        algorithm,
        quota,
        processes,
        Duration::from_millis(250),
        SliceSizing::Adaptive,
    )
}

#[test]
fn a_hot_key_at_a_frozen_instant_admits_exactly_its_capacity_with_few_store_calls() {
    for algorithm in LEASABLE {
        let mut cluster = hot(algorithm, Quota::per_minute(1_000), 4);
        for i in 0..2_000 {
            cluster.check(i % 4, 1).expect("a decision");
        }
        let admitted: u64 = cluster.admitted.iter().map(|&(_, c)| c).sum();
        assert_eq!(admitted, 1_000, "{algorithm}");
        // Slices of up to 62 (= 1000 / (4·4)) while there is room; denials repeated
        // locally afterwards.
        assert!(
            cluster.calls() < 200,
            "{algorithm}: {} calls",
            cluster.calls()
        );
    }
}

#[test]
fn a_quiet_key_costs_one_store_call_per_request_as_without_leases() {
    for algorithm in LEASABLE {
        let quota = Quota::per_minute(1_000);
        let mut leased = hot(algorithm, quota, 1);
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let plain = Limiter::builder()
            .limit(Limit::new("p", quota).expect("policy").algorithm(algorithm))
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("limiter");
        for i in 1..=50 {
            // One request per 300 ms: each lease (at most 250 ms) has ended.
            let at = BASE_US + i * 300_000;
            leased.set(at);
            clock.set(Duration::from_micros(at));
            let with = leased.check(0, 1).expect("a decision");
            let without = immediate(plain.check("p", &Key::from("k"), 1)).expect("memory");
            assert_eq!(with, without, "{algorithm}, request {i}");
        }
        assert_eq!(leased.calls(), 50, "{algorithm}");
    }
}

#[test]
fn unused_units_return_when_the_lease_expires() {
    for algorithm in [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 10 },
    ] {
        let quota = Quota::per_minute(1_000);
        let mut cluster = hot(algorithm, quota, 1);
        cluster.set(BASE_US + 1_000);
        for _ in 0..40 {
            cluster.check(0, 1).expect("a decision");
        }
        // Slices of 1, 2, 4, 8, 16, 32 charged 63; 40 spent: 23 parked here.
        let peek = immediate(cluster.limiters[0].check("p", &cluster.key, 0)).expect("memory");
        assert_eq!(peek.remaining, 1_000 - 63, "{algorithm}");
        // After the lease's 250 ms, a peek returns them first.
        cluster.set(BASE_US + 1_000 + 250_000);
        let peek = immediate(cluster.limiters[0].check("p", &cluster.key, 0)).expect("memory");
        assert_eq!(peek.remaining, 1_000 - 40, "{algorithm}");
        // Nothing is returned twice.
        assert_eq!(
            immediate(cluster.stores[0].release_all()).expect("memory"),
            0
        );
        let peek = immediate(cluster.limiters[0].check("p", &cluster.key, 0)).expect("memory");
        assert_eq!(peek.remaining, 1_000 - 40, "{algorithm}");
    }
}

#[test]
fn a_refund_from_a_lease_goes_back_into_it_once() {
    let quota = Quota::per_minute(1_000);
    let mut cluster = hot(Algorithm::FixedWindow, quota, 1);
    cluster.set(BASE_US + 1_000);
    let mut decisions = Vec::new();
    for _ in 0..10 {
        decisions.push(cluster.check(0, 1).expect("a decision"));
    }
    let (last, before) = (decisions[9].clone(), decisions[8].clone());
    let limiter = cluster.limiters[0].clone();
    immediate(limiter.refund_charge(&last, &cluster.key, 1)).expect("memory");
    // 1 + 2 + 4 + 8 = 15 charged, 10 spent, 1 refunded into the lease: 6 go back.
    assert_eq!(
        immediate(cluster.stores[0].release_all()).expect("memory"),
        6
    );
    let peek = immediate(limiter.check("p", &cluster.key, 0)).expect("memory");
    assert_eq!(peek.remaining, 1_000 - 9);
    // The lease is gone: the refunded receipt moves nothing more (the lease table
    // remembers it; the store never saw it), another goes to the store, for its own
    // unit only, once.
    immediate(limiter.refund_charge(&last, &cluster.key, 1)).expect("memory");
    let peek = immediate(limiter.check("p", &cluster.key, 0)).expect("memory");
    assert_eq!(peek.remaining, 1_000 - 9);
    for _ in 0..2 {
        immediate(limiter.refund_charge(&before, &cluster.key, 1)).expect("memory");
    }
    let peek = immediate(limiter.check("p", &cluster.key, 0)).expect("memory");
    assert_eq!(peek.remaining, 1_000 - 8);
}

#[test]
fn a_flood_of_keys_cannot_grow_the_lease_table_past_its_bound() {
    let clock = ManualClock::new(Duration::from_micros(BASE_US));
    let store = LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock)
        .max_leases(64)
        .expect("a bound")
        .build();
    let limiter = Limiter::builder()
        .limit(Limit::new("p", Quota::per_minute(1_000)).expect("policy"))
        .store(store.clone())
        .build()
        .expect("limiter");
    for i in 0..10_000_u64 {
        assert!(
            immediate(limiter.check("p", &Key::from(i), 1))
                .expect("memory")
                .allowed
        );
        // 64 rounded up to whole shards: 2 per shard × 32 shards.
        assert!(store.leases() <= 64, "{} leases", store.leases());
    }
}

// ---------------------------------------------------------------------------------------
// Operators reach leases at once: a block, reset or penalty through a `LeasedStore`
// drops the key's local slices in the calling process before it returns.
// ---------------------------------------------------------------------------------------

/// 1000/h fixed window on one leased memory store, slices of 64 (the cap with one
/// process), and the store; the clock stands still.
fn operated() -> (LeasedStore<MemoryStore>, Limiter) {
    let clock = ManualClock::new(Duration::from_micros(BASE_US));
    let store = LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock)
        .processes(1)
        .expect("processes")
        .sizing(SliceSizing::Fixed(64))
        .expect("sizing")
        .build();
    let limiter = Limiter::builder()
        .limit(
            Limit::new("api", Quota::per_hour(1_000))
                .expect("policy")
                .algorithm(Algorithm::FixedWindow),
        )
        .store(store.clone())
        .build()
        .expect("limiter");
    (store, limiter)
}

/// Nine requests: one slice of 64 charged, 55 parked in the lease.
fn park_55(store: &LeasedStore<MemoryStore>, limiter: &Limiter, key: &Key) {
    for _ in 0..9 {
        assert!(
            immediate(limiter.check("api", key, 1))
                .expect("memory")
                .allowed
        );
    }
    assert_eq!(store.held(), 55);
}

fn admitted(limiter: &Limiter, key: &Key, tries: usize) -> usize {
    (0..tries)
        .filter(|_| {
            immediate(limiter.check("api", key, 1))
                .expect("memory")
                .allowed
        })
        .count()
}

#[test]
fn a_leased_block_admits_nothing_more_in_the_process_that_set_it() {
    let (store, limiter) = operated();
    let key = Key::from("mallory");
    park_55(&store, &limiter, &key);
    immediate(limiter.block("api", &key, Duration::from_secs(3_600))).expect("memory");
    assert_eq!(store.held(), 0);
    // Before the fix: the 55 parked units were admitted at the same instant.
    assert_eq!(admitted(&limiter, &key, 100), 0);
}

#[test]
fn a_leased_reset_admits_a_fresh_quota_and_no_parked_unit_on_top() {
    let (store, limiter) = operated();
    let key = Key::from("alice");
    park_55(&store, &limiter, &key);
    immediate(limiter.reset("api", &key)).expect("memory");
    assert_eq!(store.held(), 0);
    // Before the fix: 1 055 at the reset instant.
    assert_eq!(admitted(&limiter, &key, 2_000), 1_000);
}

#[test]
fn a_leased_penalty_is_not_spent_around_from_the_lease() {
    let (store, limiter) = operated();
    let key = Key::from("mallory");
    park_55(&store, &limiter, &key);
    // 64 counted + 1 000 owed: nothing left in this window.
    let after = immediate(limiter.penalize("api", &key, 1_000)).expect("memory");
    assert_eq!(after.remaining, 0);
    assert_eq!(store.held(), 0);
    assert_eq!(admitted(&limiter, &key, 100), 0);
}

#[test]
fn a_leased_block_drops_the_leases_of_plan_callers_too() {
    let (store, limiter) = operated();
    let key = Key::from("mallory");
    let plan = Quota::per_hour(10_000);
    for _ in 0..9 {
        assert!(
            immediate(limiter.check_with("api", &key, 1, plan))
                .expect("memory")
                .allowed
        );
    }
    assert_eq!(store.held(), 55);
    immediate(limiter.block("api", &key, Duration::from_secs(3_600))).expect("memory");
    // The plan caller's lease (another quota, another lease) is gone too; whether
    // the store's block reaches the plan caller's own record is the store's part.
    assert_eq!(store.held(), 0);
}

#[test]
fn other_keys_keep_their_leases_through_an_operators_call() {
    let (store, limiter) = operated();
    let (mallory, alice) = (Key::from("mallory"), Key::from("alice"));
    park_55(&store, &limiter, &alice);
    immediate(limiter.block("api", &mallory, Duration::from_secs(3_600))).expect("memory");
    assert_eq!(store.held(), 55);
    let calls = store.store_calls();
    assert_eq!(admitted(&limiter, &alice, 55), 55);
    assert_eq!(
        store.store_calls(),
        calls,
        "spent from the lease, no store call"
    );
}

// ---------------------------------------------------------------------------------------
// One denial rule: a penalty box counts every rejection, whether the store or a lease
// table answers it (issue 35, case 5). Before: the table repeated the first rejection
// for up to `max_lease`, uncounted, and the box never tripped (the caller was admitted
// 61 s later); a slice that did not fit counted as a rejection of its own.
// ---------------------------------------------------------------------------------------

/// A limiter of one limit on `store`.
fn one_limit(limit: Limit, store: impl tollgate::store::Store + 'static) -> Limiter {
    Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("limiter")
}

/// A leased memory store on `clock` (processes 1, `sizing`), and its backing store.
fn leased_on(clock: &ManualClock, sizing: SliceSizing) -> LeasedStore<MemoryStore> {
    LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock.clone())
        .processes(1)
        .expect("processes")
        .sizing(sizing)
        .expect("sizing")
        .build()
}

#[test]
fn a_penalty_box_trips_at_the_third_rejection_through_a_lease_as_without_it() {
    let penalty = support::leases::case_five_penalty(false);
    let expected = support::leases::tripped_at_the_third_rejection(3, Duration::from_secs(600));
    for algorithm in Algorithm::ALL {
        for sizing in [SliceSizing::Adaptive, SliceSizing::Fixed(2)] {
            let limit = Limit::new("login", Quota::per_minute(3))
                .expect("policy")
                .algorithm(algorithm)
                .penalty(penalty);
            let key = Key::from("mallory");
            let clock = ManualClock::new(Duration::from_micros(BASE_US));
            let plain = one_limit(limit.clone(), MemoryStore::with_clock(clock.clone()));
            let told = immediate(support::leases::rejected_every_100_ms(
                &plain, "login", &key, &clock, 3,
            ));
            assert_eq!(told, expected, "{algorithm} without a lease");

            let clock = ManualClock::new(Duration::from_micros(BASE_US));
            let leased = one_limit(limit, leased_on(&clock, sizing));
            let told = immediate(support::leases::rejected_every_100_ms(
                &leased, "login", &key, &clock, 3,
            ));
            assert_eq!(told, expected, "{algorithm} through a lease ({sizing:?})");
        }
    }
}

#[test]
fn a_penalty_box_counts_every_rejection_of_a_hot_leased_key() {
    // 64/min with slices of 8: the quota is spent from leases, the rejections follow.
    let expected = support::leases::tripped_at_the_third_rejection(64, Duration::from_secs(600));
    for algorithm in LEASABLE {
        let mut limit = Limit::new("api", Quota::per_minute(64))
            .expect("policy")
            .algorithm(algorithm)
            .penalty(support::leases::case_five_penalty(false));
        if algorithm == Algorithm::LeakyBucket {
            // The whole queue at one instant: 63 places of 0.94 s.
            limit = limit.max_delay(Duration::from_secs(60));
        }
        let key = Key::from("mallory");
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let store = leased_on(&clock, SliceSizing::Fixed(8));
        let leased = one_limit(limit, store.clone());
        let told = immediate(support::leases::rejected_every_100_ms(
            &leased, "api", &key, &clock, 64,
        ));
        assert_eq!(told, expected, "{algorithm}");
        assert!(store.store_calls() < 64, "{algorithm}: leased, not passed");
    }
}

#[test]
fn an_escalating_penalty_box_trips_through_a_lease_as_without_it() {
    let penalty = support::leases::case_five_penalty(true);
    let first = support::leases::tripped_at_the_third_rejection(3, Duration::from_secs(600));
    let second = support::leases::tripped_at_the_third_rejection(3, Duration::from_secs(1_200));
    for algorithm in Algorithm::ALL {
        let limit = Limit::new("login", Quota::per_minute(3))
            .expect("policy")
            .algorithm(algorithm)
            .penalty(penalty);
        let key = Key::from("mallory");
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let leased = one_limit(limit, leased_on(&clock, SliceSizing::Adaptive));
        let stream = || support::leases::rejected_every_100_ms(&leased, "login", &key, &clock, 3);
        assert_eq!(immediate(stream()), first, "{algorithm}: the first trip");
        // Past the 10-minute block (and the quota back): the second trip, 20 minutes.
        clock.advance(Duration::from_secs(600));
        assert_eq!(immediate(stream()), second, "{algorithm}: the second trip");
        let d = immediate(leased.check("login", &key, 1)).expect("memory");
        assert_eq!(d.trips, 2, "{algorithm}");
    }
}

#[test]
fn a_slice_that_does_not_fit_is_not_counted_as_a_rejection() {
    // Two rejections within a minute trip the box. A leased process spends its slice of
    // 8 while another process takes all but one unit of the rest: its next slice
    // (8, of the 56 it last saw left) does not fit, the request's own unit does.
    let penalty = Penalty::after(2)
        .within(Duration::from_secs(60))
        .block_for(Duration::from_secs(600));
    for algorithm in [Algorithm::FixedWindow, Algorithm::SlidingWindow] {
        let limit = Limit::new("api", Quota::per_minute(64))
            .expect("policy")
            .algorithm(algorithm)
            .penalty(penalty);
        let key = Key::from("busy");
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let memory = MemoryStore::with_clock(clock.clone());
        let store = LeasedStore::builder(memory.clone())
            .clock(clock.clone())
            .processes(1)
            .expect("processes")
            .sizing(SliceSizing::Fixed(8))
            .expect("sizing")
            .build();
        let leased = one_limit(limit.clone(), store.clone());
        let other = one_limit(limit, memory);
        assert_eq!(admitted_of(&leased, "api", &key, 8), 8);
        assert_eq!(store.held(), 0);
        assert_eq!(admitted_of(&other, "api", &key, 55), 55);
        // The slice of 8 does not fit; the unit does: admitted, and no offence.
        assert_eq!(admitted_of(&leased, "api", &key, 1), 1, "{algorithm}");
        // The first rejection: counted once, not blocked.
        let d = immediate(leased.check("api", &key, 1)).expect("memory");
        assert_eq!((d.allowed, d.blocked_for), (false, None), "{algorithm}");
        // The second trips the box, as it would without the lease.
        let d = immediate(leased.check("api", &key, 1)).expect("memory");
        assert_eq!(
            (d.allowed, d.blocked_for),
            (false, Some(Duration::from_secs(600))),
            "{algorithm}"
        );
    }
}

fn admitted_of(limiter: &Limiter, name: &str, key: &Key, tries: usize) -> usize {
    (0..tries)
        .filter(|_| {
            immediate(limiter.check(name, key, 1))
                .expect("memory")
                .allowed
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_rejections_through_leases_are_each_counted_once() {
    // Four processes × 16 tasks on one key at a frozen instant, 2,560 requests on
    // 1,000/min: exactly two rejections before the third trips the box.
    let penalty = Penalty::after(3)
        .within(Duration::from_secs(60))
        .block_for(Duration::from_secs(600));
    for algorithm in LEASABLE {
        let clock = ManualClock::new(Duration::from_micros(BASE_US));
        let memory = MemoryStore::with_clock(clock.clone());
        let stores: Vec<_> = (0..4)
            .map(|_| {
                LeasedStore::builder(memory.clone())
                    .clock(clock.clone())
                    .build()
            })
            .collect();
        let limit = Limit::new("hot", Quota::per_minute(1_000))
            .expect("policy")
            .algorithm(algorithm)
            .penalty(penalty);
        support::leases::assert_each_rejection_counted_once(&stores, &limit, 16, 40, 1_000).await;
    }
}
