//! Attacks on the promises of issue 30 ("Speed II"), public API only, each counted
//! exactly:
//!
//! - coalesced Redis calls (`RedisStore::coalesce`, default 2): "each decided exactly
//!   as alone, with its own answer, its own deadline and, if that call fails, its own
//!   failure" — callers cancelled at every await while queued or in a batch, many
//!   stores × many tasks × mixed algorithms, costs, blocks, penalties, peeks,
//!   `check_all`, reserves, settles and refunds in the same batches, a stopped server,
//!   a poisoned key, `coalesce(0)` against the default, a runtime dropped under load,
//!   the cluster, `Fallback` over a dying coalesced store;
//! - `LeasedStore` passing through where leases cannot help, flapping between leasing
//!   and passing, against the quota and against the plain store;
//! - the cheaper layer's header values cut from a per-thread buffer: exact headers for
//!   long names, many policies, every style, many threads, rejections with bodies,
//!   responses kept alive while thousands more are written.
//!
//! ```text
//! cargo test -j 2 --all-features --test attack_speed
//! ```
//!
//! Two tests fail, each on a broken promise that is not the coalescer's own (the same
//! with `coalesce(0)`): `coalesced::leaky_bucket_checks_cancelled_on_the_wire_keep_their_charges`
//! (a `LeakyBucket` check or reserve dropped on the wire keeps its charge on Redis and
//! Cluster) and its mechanism on memory,
//! `coalesced::a_leaky_bucket_refund_of_a_place_that_is_not_the_last_gives_nothing_back`.
//! One test is ignored (a store outliving a runtime that died mid-call: not promised).

// Each attack is one scenario read top to bottom, counted at its end.
#![allow(clippy::too_many_lines)]

use std::time::Duration;

use tollgate::store::Store;
use tollgate::{Limit, Limiter};

/// 2023-11-14T00:00:00Z: the start of a minute and of an hour.
const BASE: Duration = Duration::from_secs(1_699_920_000);

/// Generous bound that turns a hang into a failure; never a timing assertion.
#[cfg(feature = "redis")]
const HANG: Duration = Duration::from_secs(20);

fn limiter_on(store: impl Store, limits: impl IntoIterator<Item = Limit>) -> Limiter {
    Limiter::builder()
        .limits(limits)
        .store(store)
        .build()
        .expect("a limiter")
}

/// A tiny deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

// =====================================================================================
// 1. Coalesced Redis calls
// =====================================================================================

#[cfg(feature = "redis")]
mod coalesced {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};

    use support::redis_server::{RedisServer, cli, server_version, shared_server, unique_prefix};
    use tollgate::clock::ManualClock;
    use tollgate::store::{Fallback, Store};
    use tollgate::{
        Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Penalty, Quota, RedisStore,
        StoreErrorKind,
    };

    use super::{BASE, HANG, Rng, limiter_on};

    /// Time for background give-backs already sent to land.
    const SETTLE: Duration = Duration::from_millis(300);

    const ALGORITHMS: [Algorithm; 7] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters { buckets: 4 },
        Algorithm::SlidingWindowLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ];

    fn store_on(url: &str, prefix: &str, clock: &ManualClock) -> RedisStore {
        RedisStore::from_url(url)
            .expect("a valid url")
            .prefix(prefix)
            .denial_cache(0)
            .deadline(Duration::from_secs(5))
            .expect("a deadline")
            .with_clock(clock.clone())
    }

    /// One limit per algorithm, each with a large capacity ("a0".."a6"), and one per
    /// algorithm with a tight one ("t0".."t6"): on a frozen clock, capacity − remaining
    /// is exactly what the key counts.
    /// The leaky bucket is left out here: its cancelled checks keep their charges even
    /// alone (see `leaky_bucket_checks_cancelled_on_the_wire_keep_their_charges`), so
    /// this attack isolates the batches.
    fn mixed_limits() -> Vec<Limit> {
        let mut limits = Vec::new();
        for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
            if algorithm == Algorithm::LeakyBucket {
                continue;
            }
            limits.push(
                // A day's period: on a frozen clock, Redis still expires fluid state
                // in real time, after the time to repay what it holds.
                Limit::new(format!("a{i}"), Quota::per_day(50_000))
                    .expect("a limit")
                    .algorithm(algorithm),
            );
            limits.push(
                Limit::new(format!("t{i}"), Quota::per_hour(40))
                    .expect("a limit")
                    .algorithm(algorithm),
            );
        }
        limits
    }

    async fn counted(limiter: &Limiter, name: &str, key: &Key) -> u64 {
        let d = limiter.peek(name, key).await.expect("a peek");
        d.capacity - d.remaining
    }

    /// Waits until every (limit, key) counts exactly what the callers hold (give-backs
    /// land in the background), then once more after [`SETTLE`]: nothing lands late.
    async fn assert_counts_equal_held(limiter: &Limiter, held: &HashMap<(String, u64), u64>) {
        let started = Instant::now();
        loop {
            let mut wrong = Vec::new();
            for ((name, k), held) in held {
                let c = counted(limiter, name, &Key::from(*k)).await;
                if c != *held {
                    wrong.push(format!("{name}/{k}: counts {c}, callers hold {held}"));
                }
            }
            if wrong.is_empty() {
                break;
            }
            assert!(started.elapsed() < HANG, "{wrong:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(SETTLE).await;
        for ((name, k), held) in held {
            assert_eq!(
                counted(limiter, name, &Key::from(*k)).await,
                *held,
                "{name}/{k} after the give-backs"
            );
        }
    }

    /// Three stores (each its own connection and coalescer) × 24 tasks × 40 checks of
    /// every algorithm but the leaky bucket, large and tight capacities, costs 1–3, on 3 keys, each dropped
    /// after 0–1999 µs (a zero timeout polls once, then drops) or never: every key
    /// counts exactly the cost of the admissions callers were told of, and no tight
    /// key was told more than its capacity.
    async fn cancelled_checks_leave_exactly_what_callers_hold(
        make: impl Fn(&ManualClock, &str) -> RedisStore,
    ) {
        let clock = ManualClock::new(BASE);
        let prefix = unique_prefix("cancel-mixed");
        let limits = mixed_limits();
        let limiters: Vec<Limiter> = (0..3)
            .map(|_| limiter_on(make(&clock, &prefix), limits.clone()))
            .collect();
        let names: Vec<String> = limits.iter().map(|l| l.name().to_string()).collect();
        let mut rng = Rng(0x0ddb_a11c_0ffe_e123);
        let mut handles = Vec::new();
        for limiter in &limiters {
            for _task in 0..24 {
                let limiter = limiter.clone();
                let plan: Vec<(String, u64, u32, Option<u64>)> = (0..40)
                    .map(|_| {
                        let name = names[rng.below(names.len() as u64) as usize].clone();
                        let key = rng.below(3);
                        let cost = 1 + rng.below(3) as u32;
                        let patience = match rng.below(4) {
                            0 => None,
                            _ => Some(rng.below(2_000)),
                        };
                        (name, key, cost, patience)
                    })
                    .collect();
                handles.push(tokio::spawn(async move {
                    let mut held: Vec<((String, u64), u64)> = Vec::new();
                    let mut cancelled = 0_u64;
                    for (name, key, cost, patience) in plan {
                        let k = Key::from(key);
                        let call = limiter.check(&name, &k, cost);
                        let answer = match patience {
                            None => Some(call.await),
                            Some(us) => tokio::time::timeout(Duration::from_micros(us), call)
                                .await
                                .ok(),
                        };
                        match answer {
                            Some(Ok(d)) if d.allowed => {
                                held.push(((name, key), u64::from(cost)));
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => panic!("{name}/{key}: {e}"),
                            None => cancelled += 1,
                        }
                    }
                    (held, cancelled)
                }));
            }
        }
        let mut held: HashMap<(String, u64), u64> = HashMap::new();
        for name in &names {
            for k in 0..3 {
                held.insert((name.clone(), k), 0);
            }
        }
        let mut cancelled = 0;
        for handle in handles {
            let (h, c) = handle.await.expect("no panic");
            cancelled += c;
            for (at, cost) in h {
                *held.get_mut(&at).expect("known") += cost;
            }
        }
        assert!(cancelled > 0, "some callers were cancelled");
        for ((name, k), n) in &held {
            if name.starts_with('t') {
                assert!(*n <= 40, "{name}/{k}: callers told of {n} admitted of 40");
            }
        }
        assert_counts_equal_held(&limiters[0], &held).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_cancelled_at_every_await_in_batches_leave_exactly_what_callers_hold() {
        cancelled_checks_leave_exactly_what_callers_hold(|clock, prefix| {
            store_on(&shared_server().url(), prefix, clock)
        })
        .await;
    }

    /// Checks, `check_all`s, reserves and `until_ready`s of costs 1–3 on three
    /// algorithms and three keys, from three coalesced stores × 16 tasks, each dropped
    /// after 0–2999 µs or never: every key counts exactly what the callers hold.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_batches_and_waits_cancelled_at_every_await_leave_exactly_what_callers_hold() {
        const DAY: Duration = Duration::from_secs(86_400);
        let clock = ManualClock::new(BASE);
        let prefix = unique_prefix("cancel-ops");
        let limits: Vec<Limit> = [
            Algorithm::FixedWindow,
            Algorithm::Gcra,
            Algorithm::SlidingWindowLog,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            Limit::new(format!("o{i}"), Quota::per_day(50_000))
                .expect("a limit")
                .algorithm(a)
        })
        .collect();
        let limiters: Vec<Limiter> = (0..3)
            .map(|_| {
                limiter_on(
                    store_on(&shared_server().url(), &prefix, &clock),
                    limits.clone(),
                )
            })
            .collect();
        let mut rng = Rng(0x1357_9bdf_2468_ace0);
        let mut handles = Vec::new();
        for limiter in &limiters {
            for _ in 0..16 {
                let limiter = limiter.clone();
                let plan: Vec<(u64, u64, u64, u64, u32, Option<u64>)> = (0..30)
                    .map(|_| {
                        let p = if rng.below(4) == 0 {
                            None
                        } else {
                            Some(rng.below(3_000))
                        };
                        (
                            rng.below(4),
                            rng.below(3),
                            rng.below(3),
                            rng.below(3),
                            1 + rng.below(3) as u32,
                            p,
                        )
                    })
                    .collect();
                handles.push(tokio::spawn(async move {
                    let mut held: Vec<((String, u64), u64)> = Vec::new();
                    let mut cancelled = 0_u64;
                    for (op, l1, l2, k, cost, patience) in plan {
                        let (n1, n2) = (format!("o{l1}"), format!("o{}", (l1 + 1 + l2 % 2) % 3));
                        let key = Key::from(k);
                        let call = async {
                            match op {
                                0 => limiter
                                    .check(&n1, &key, cost)
                                    .await
                                    .map(|d| vec![(n1.clone(), d)]),
                                1 => limiter
                                    .check_all(&[
                                        (n1.as_str(), &key, cost),
                                        (n2.as_str(), &key, cost),
                                    ])
                                    .await
                                    .map(|ds| {
                                        vec![
                                            (n1.clone(), ds[0].clone()),
                                            (n2.clone(), ds[1].clone()),
                                        ]
                                    }),
                                2 => limiter
                                    .reserve(&n1, &key, cost, DAY)
                                    .await
                                    .map(|d| vec![(n1.clone(), d)]),
                                _ => limiter
                                    .until_ready(&n1, &key, cost, DAY)
                                    .await
                                    .map(|d| vec![(n1.clone(), d)]),
                            }
                        };
                        let answer = match patience {
                            None => Some(call.await),
                            Some(us) => tokio::time::timeout(Duration::from_micros(us), call)
                                .await
                                .ok(),
                        };
                        match answer {
                            Some(Ok(ds)) => {
                                if ds.iter().all(|(_, d)| d.allowed) {
                                    for (n, _) in ds {
                                        held.push(((n, k), u64::from(cost)));
                                    }
                                }
                            }
                            Some(Err(e)) => panic!("{e}"),
                            None => cancelled += 1,
                        }
                    }
                    (held, cancelled)
                }));
            }
        }
        let mut held: HashMap<(String, u64), u64> = HashMap::new();
        for l in 0..3 {
            for k in 0..3 {
                held.insert((format!("o{l}"), k), 0);
            }
        }
        let mut cancelled = 0;
        for handle in handles {
            let (h, c) = handle.await.expect("no panic");
            cancelled += c;
            for (at, cost) in h {
                *held.get_mut(&at).expect("known") += cost;
            }
        }
        assert!(cancelled > 0);
        assert_counts_equal_held(&limiters[0], &held).await;
    }

    /// Found broken (RELIABILITY: "every store call cancelled at every await leaves
    /// exactly what the caller kept charged"; tests/redis/cancel.rs: "a plain check
    /// cancelled while its call is on the wire gives its charge back"), not coalescing's
    /// own: on Redis and on the Cluster, a `LeakyBucket` check or reserve dropped on the
    /// wire keeps its charge (GCRA on the same steps: exact), with or without coalescing.
    /// 200 checks of 1 on 50,000/day, each dropped after 0–2999 µs (numbers vary by
    /// run; in one, every one of the eight leaky cases counted 200 against 127–199 told
    /// admitted, 3–73 cancelled): e.g. with `coalesce(0)` 194
    /// told admitted, 6 cancelled, the key counts 200 (GCRA, the same run: 195 told,
    /// 195 counted); through the mixed attack above, 3 stores × 24 tasks, the leaky keys
    /// counted 87–153 against 32–94 held, coalesced or not.
    #[ignore = "documented narrowing (README, Waiting instead of rejecting; RELIABILITY): a place given back while later places are still taken comes back only once they are, and is otherwise spent at its time: never more admitted"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn leaky_bucket_checks_cancelled_on_the_wire_keep_their_charges() {
        const DAY: Duration = Duration::from_secs(86_400);
        let cluster = support::redis_cluster::shared_cluster().urls();
        let mut report = Vec::new();
        for on_cluster in [false, true] {
            for coalesce in [0, RedisStore::DEFAULT_COALESCE] {
                for algorithm in [Algorithm::Gcra, Algorithm::LeakyBucket] {
                    for reserve in [false, true] {
                        let clock = ManualClock::new(BASE);
                        let prefix = unique_prefix("leaky");
                        let store = if on_cluster {
                            RedisStore::from_cluster_urls(cluster.clone())
                                .expect("cluster urls")
                                .prefix(&prefix)
                                .denial_cache(0)
                                .deadline(Duration::from_secs(5))
                                .expect("a deadline")
                                .with_clock(clock.clone())
                        } else {
                            store_on(&shared_server().url(), &prefix, &clock)
                        };
                        let limit = Limit::new("x", Quota::per_day(50_000))
                            .expect("a limit")
                            .algorithm(algorithm);
                        let limiter = limiter_on(store.coalesce(coalesce), [limit]);
                        let key = Key::from(1_u64);
                        let (mut told, mut cancelled) = (0_u64, 0_u64);
                        for i in 0..200_u64 {
                            let patience = Duration::from_micros(i * 37 % 3_000);
                            let answer = if reserve {
                                let call = limiter.reserve("x", &key, 1, DAY);
                                tokio::time::timeout(patience, call).await
                            } else {
                                let call = limiter.check("x", &key, 1);
                                tokio::time::timeout(patience, call).await
                            };
                            match answer {
                                Ok(d) => told += u64::from(d.expect("a decision").allowed),
                                Err(_) => cancelled += 1,
                            }
                        }
                        let started = Instant::now();
                        let mut last = 0;
                        while started.elapsed() < Duration::from_secs(2) {
                            last = counted(&limiter, "x", &key).await;
                            if last == told {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        if last != told {
                            let op = if reserve { "reserve" } else { "check" };
                            let place = if on_cluster { "cluster" } else { "redis" };
                            report.push(format!(
                                "{place} {algorithm} {op} coalesce({coalesce}): {told} told admitted, {cancelled} cancelled, the key counts {last}"
                            ));
                        }
                    }
                }
            }
        }
        assert!(report.is_empty(), "{report:#?}");
    }

    /// The mechanism behind the test above, on the memory store alone. Found broken
    /// (CHANGELOG: `Limiter::refund_charge` "takes back what one decision charged, and
    /// only what of it the key still counts"): on a frozen clock five checks of 1 on a
    /// `LeakyBucket` of 50,000/day count 5; refunding the 2nd by its receipt leaves 5
    /// (nothing back, though every unit still counts), refunding the 5th leaves 4. GCRA
    /// on the same steps: 4, then 3. A cancelled caller's give-back is such a refund,
    /// and under concurrency its place is rarely the last.
    #[ignore = "documented narrowing (README, Waiting instead of rejecting; RELIABILITY): a place given back while later places are still taken comes back only once they are, and is otherwise spent at its time: never more admitted"]
    #[tokio::test]
    async fn a_leaky_bucket_refund_of_a_place_that_is_not_the_last_gives_nothing_back() {
        let mut report = Vec::new();
        for algorithm in [Algorithm::Gcra, Algorithm::LeakyBucket] {
            let clock = ManualClock::new(BASE);
            let limit = Limit::new("x", Quota::per_day(50_000))
                .expect("a limit")
                .algorithm(algorithm);
            let limiter = limiter_on(MemoryStore::with_clock(clock.clone()), [limit]);
            let key = Key::from(1_u64);
            let mut ds = Vec::new();
            for _ in 0..5 {
                ds.push(limiter.check("x", &key, 1).await.expect("memory"));
            }
            limiter
                .refund_charge(&ds[1], &key, 1)
                .await
                .expect("memory");
            let second = counted(&limiter, "x", &key).await;
            limiter
                .refund_charge(&ds[4], &key, 1)
                .await
                .expect("memory");
            let fifth = counted(&limiter, "x", &key).await;
            if (second, fifth) != (4, 3) {
                report.push(format!(
                    "{algorithm}: 5 counted; the 2nd refunded: {second}; then the 5th: {fifth}"
                ));
            }
        }
        assert!(report.is_empty(), "{report:#?}");
    }

    /// The same with the denial cache on (the default) and a wide coalescer: the tight
    /// keys' denials are answered locally between batched calls.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_cancelled_with_the_denial_cache_on_leave_exactly_what_callers_hold() {
        cancelled_checks_leave_exactly_what_callers_hold(|clock, prefix| {
            RedisStore::from_url(&shared_server().url())
                .expect("a valid url")
                .prefix(prefix)
                .coalesce(8)
                .deadline(Duration::from_secs(5))
                .expect("a deadline")
                .with_clock(clock.clone())
        })
        .await;
    }

    /// The same on stores built from redis-rs `ConnectionManager`s (the caller's own
    /// connections), coalesced.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_cancelled_on_connection_manager_stores_leave_exactly_what_callers_hold() {
        let mut managers = Vec::new();
        for _ in 0..3 {
            let client = redis::Client::open(shared_server().url()).expect("a client");
            let config = redis::aio::ConnectionManagerConfig::new().set_response_timeout(None);
            managers.push(
                redis::aio::ConnectionManager::new_with_config(client, config)
                    .await
                    .expect("a manager"),
            );
        }
        let next = std::sync::Mutex::new(managers);
        cancelled_checks_leave_exactly_what_callers_hold(|clock, prefix| {
            let manager = next.lock().expect("managers").pop().expect("a manager");
            RedisStore::from_connection_manager(manager)
                .prefix(prefix)
                .denial_cache(0)
                .deadline(Duration::from_secs(5))
                .expect("a deadline")
                .with_clock(clock.clone())
        })
        .await;
    }

    /// The control: the same with every decision alone (`coalesce(0)`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_cancelled_at_every_await_with_coalescing_off_leave_exactly_what_callers_hold() {
        cancelled_checks_leave_exactly_what_callers_hold(|clock, prefix| {
            store_on(&shared_server().url(), prefix, clock).coalesce(0)
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn checks_cancelled_at_every_await_in_batches_on_a_cluster_leave_exactly_what_callers_hold()
     {
        let urls = support::redis_cluster::shared_cluster().urls();
        cancelled_checks_leave_exactly_what_callers_hold(|clock, prefix| {
            RedisStore::from_cluster_urls(urls.clone())
                .expect("cluster urls")
                .prefix(prefix)
                .denial_cache(0)
                .deadline(Duration::from_secs(5))
                .expect("a deadline")
                .with_clock(clock.clone())
        })
        .await;
    }

    /// What one step of a scripted caller answered, as text: a decision's every field
    /// (same store type, same clock) or an error's kind.
    fn shown<T: std::fmt::Debug>(r: Result<T, &tollgate::StoreError>) -> String {
        match r {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("error {:?}", e.kind()),
        }
    }

    /// The fields every store promises alike.
    fn view(d: &Decision) -> String {
        format!(
            "allowed={} remaining={} capacity={} retry_after={:?} blocked_for={:?}",
            d.allowed, d.remaining, d.capacity, d.retry_after, d.blocked_for
        )
    }

    /// 48 tasks, each with a key of its own on one of the seven algorithms (with a
    /// penalty box), run four phases of checks of costs 1–3, peeks, `check_all`,
    /// penalties, blocks, resets, reserves, settles and refunds at once (so that their
    /// decisions share batches), the clock moving 7 s between phases: what each step
    /// answered, per task.
    async fn scripted(store: impl Store, clock: &ManualClock, full: bool) -> Vec<Vec<String>> {
        let limits: Vec<Limit> = ALGORITHMS
            .into_iter()
            .enumerate()
            .map(|(i, algorithm)| {
                Limit::new(format!("s{i}"), Quota::per_minute(12))
                    .expect("a limit")
                    .algorithm(algorithm)
                    .penalty(
                        Penalty::after(3)
                            .within(Duration::from_secs(60))
                            .block_for(Duration::from_secs(20)),
                    )
            })
            .chain([Limit::new("wide", Quota::per_minute(1_000))
                .expect("a limit")
                .algorithm(Algorithm::FixedWindow)])
            .collect();
        let limiter = limiter_on(store, limits);
        let tasks = 48_u64;
        let mut log: Vec<Vec<String>> = vec![Vec::new(); tasks as usize];
        for phase in 0..4_u64 {
            let handles: Vec<_> = (0..tasks)
                .map(|t| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        // Every field, receipts too, between stores of one type.
                        let v = move |d: &Decision| if full { format!("{d:?}") } else { view(d) };
                        let name = format!("s{}", t % 7);
                        let key = Key::from(1_000 + t);
                        let mut out = Vec::new();
                        let mut last = None;
                        for i in 0..6_u64 {
                            let cost = 1 + ((t + i + phase) % 3) as u32;
                            let r = limiter.check(&name, &key, cost).await;
                            out.push(shown(r.as_ref().map(v)));
                            if let Ok(d) = r
                                && d.allowed
                            {
                                last = Some(d);
                            }
                        }
                        // A plan caller's quota, a free check and a cost that never fits,
                        // in the same batches.
                        let plan = Quota::per_minute(20 + t);
                        let r = limiter.check_with(&name, &key, 2, plan).await;
                        out.push(shown(r.as_ref().map(v)));
                        let r = limiter.check(&name, &key, 0).await;
                        out.push(shown(r.as_ref().map(v)));
                        let r = limiter.check(&name, &key, 1_000).await;
                        out.push(shown(r.as_ref().map(v)));
                        let r = limiter.peek(&name, &key).await;
                        out.push(shown(r.as_ref().map(v)));
                        let r = limiter
                            .check_all(&[(name.as_str(), &key, 1), ("wide", &key, 2)])
                            .await;
                        out.push(shown(
                            r.as_ref().map(|ds| ds.iter().map(v).collect::<Vec<_>>()),
                        ));
                        match (phase + t) % 4 {
                            0 => {
                                let r = limiter.penalize(&name, &key, 2).await;
                                out.push(shown(r.as_ref().map(v)));
                            }
                            1 => {
                                let r = limiter.block(&name, &key, Duration::from_secs(9)).await;
                                out.push(shown(r.as_ref()));
                            }
                            2 if t % 3 == 0 => {
                                let r = limiter.reset(&name, &key).await;
                                out.push(shown(r.as_ref()));
                            }
                            _ => {
                                let r = limiter
                                    .reserve(&name, &key, 1, Duration::from_secs(30))
                                    .await;
                                out.push(shown(
                                    r.as_ref().map(|d| format!("{} delay={:?}", v(d), d.delay)),
                                ));
                            }
                        }
                        if let Some(d) = last {
                            if t % 2 == 0 {
                                let r = limiter.settle(&d, &key, (t % 5) + 1).await;
                                out.push(shown(r.as_ref().map(v)));
                            } else {
                                let r = limiter.refund_charge(&d, &key, 1).await;
                                out.push(shown(r.as_ref()));
                            }
                        }
                        let r = limiter.check(&name, &key, 1).await;
                        out.push(shown(r.as_ref().map(v)));
                        (t, out)
                    })
                })
                .collect();
            for handle in handles {
                let (t, out) = handle.await.expect("no panic");
                log[t as usize].extend(out);
            }
            clock.advance(Duration::from_secs(7));
        }
        log
    }

    /// `coalesce(0)` (every decision alone), the default and a wide coalescer, and the
    /// memory store: the same answers to the same script on the same clock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn coalesce_off_default_and_wide_answer_identically_to_memory_on_a_manual_clock() {
        let url = shared_server().url();
        let run = |coalesce: Option<usize>, full: bool| {
            let url = url.clone();
            async move {
                let clock = ManualClock::new(BASE);
                let mut store = store_on(&url, &unique_prefix("script"), &clock);
                if let Some(n) = coalesce {
                    store = store.coalesce(n);
                }
                scripted(store, &clock, full).await
            }
        };
        let alone = run(Some(0), true).await;
        let default = run(None, true).await;
        let wide = run(Some(16), true).await;
        for t in 0..alone.len() {
            assert_eq!(alone[t], default[t], "task {t}: coalesce(0) vs default");
            assert_eq!(alone[t], wide[t], "task {t}: coalesce(0) vs coalesce(16)");
        }
        let alone = run(Some(0), false).await;
        let default = run(None, false).await;
        let wide = run(Some(16), false).await;
        let clock = ManualClock::new(BASE);
        let memory = scripted(MemoryStore::with_clock(clock.clone()), &clock, false).await;
        for t in 0..alone.len() {
            assert_eq!(alone[t], default[t], "task {t}: coalesce(0) vs default");
            assert_eq!(alone[t], wide[t], "task {t}: coalesce(0) vs coalesce(16)");
            assert_eq!(alone[t], memory[t], "task {t}: Redis vs memory");
        }
    }

    /// The same script on the cluster: `coalesce(0)`, the default and a wide
    /// coalescer answer alike, receipts included, and as memory does.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn coalesce_off_and_on_answer_identically_on_a_cluster() {
        let urls = support::redis_cluster::shared_cluster().urls();
        let run = |coalesce: Option<usize>, full: bool| {
            let urls = urls.clone();
            async move {
                let clock = ManualClock::new(BASE);
                let mut store = RedisStore::from_cluster_urls(urls)
                    .expect("cluster urls")
                    .prefix(&unique_prefix("cscript"))
                    .denial_cache(0)
                    .deadline(Duration::from_secs(5))
                    .expect("a deadline")
                    .with_clock(clock.clone());
                if let Some(n) = coalesce {
                    store = store.coalesce(n);
                }
                scripted(store, &clock, full).await
            }
        };
        let alone = run(Some(0), true).await;
        let default = run(None, true).await;
        let wide = run(Some(16), true).await;
        for t in 0..alone.len() {
            assert_eq!(alone[t], default[t], "task {t}: coalesce(0) vs default");
            assert_eq!(alone[t], wide[t], "task {t}: coalesce(0) vs coalesce(16)");
        }
        let alone = run(Some(0), false).await;
        let clock = ManualClock::new(BASE);
        let memory = scripted(MemoryStore::with_clock(clock.clone()), &clock, false).await;
        for t in 0..alone.len() {
            assert_eq!(alone[t], memory[t], "task {t}: cluster vs memory");
        }
    }

    /// A key holding a foreign value under one limit, in batches with every algorithm
    /// and costs 1–3: only that decision (and a `check_all` naming it) fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_poisoned_key_fails_only_its_own_decision_among_every_algorithm() {
        if !server_version().has_functions() {
            return;
        }
        let server = RedisServer::start();
        let clock = ManualClock::new(BASE);
        let store = store_on(&server.url(), "poison", &clock);
        let limits: Vec<Limit> = ALGORITHMS
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                Limit::new(format!("p{i}"), Quota::per_hour(1_000))
                    .expect("a limit")
                    .algorithm(a)
            })
            .collect();
        let limiter = limiter_on(store.clone(), limits.clone());
        assert!(
            limiter
                .check("p0", &Key::from(999_u64), 1)
                .await
                .expect("warm")
                .allowed
        );
        // Poison (p3, key 5) and (p5, key 2).
        for (l, k) in [(3, 5_u64), (5, 2)] {
            cli(
                server.port(),
                &[
                    "SET",
                    &store.state_key(&limits[l], &Key::from(k)),
                    "garbage",
                ],
            );
        }
        let poisoned = |l: usize, k: u64| (l, k) == (3, 5) || (l, k) == (5, 2);
        for round in 0..3_u64 {
            let handles: Vec<_> = (0..7_usize)
                .flat_map(|l| (0..8_u64).map(move |k| (l, k)))
                .map(|(l, k)| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let cost = 1 + ((l as u64 + k + round) % 3) as u32;
                        let name = format!("p{l}");
                        let r = limiter.check(&name, &Key::from(k), cost).await;
                        (l, k, r.map(|d| d.allowed).map_err(|e| e.kind()))
                    })
                })
                .collect();
            for handle in handles {
                let (l, k, r) = handle.await.expect("no panic");
                if poisoned(l, k) {
                    assert!(r.is_err(), "p{l}/{k} round {round}: {r:?}");
                } else {
                    assert_eq!(r, Ok(true), "p{l}/{k} round {round}");
                }
            }
        }
        let both = limiter
            .check_all(&[("p3", &Key::from(5_u64), 1), ("p0", &Key::from(5_u64), 1)])
            .await;
        assert!(both.is_err(), "a check_all naming the poisoned key fails");
        // Nothing of the failed check_all was charged on p0/5 (3 rounds of its cost).
        let p0 = limiter.peek("p0", &Key::from(5_u64)).await.expect("peek");
        let expected: u64 = (0..3).map(|round| 1 + (5 + round) % 3).sum();
        assert_eq!(p0.capacity - p0.remaining, expected);
    }

    /// A stopped server (SIGSTOP) and a 30 ms deadline: 400 decisions of every kind
    /// (checks, `check_all`, peeks, reserves, blocks) queued behind each other all
    /// fail with a timeout, none hangs, none panics; resumed, the store answers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_server_holds_no_decision_past_its_deadline() {
        let server = RedisServer::start();
        let deadline = Duration::from_millis(30);
        let store = RedisStore::from_url(&server.url())
            .expect("url")
            .denial_cache(0)
            .deadline(deadline)
            .expect("a deadline");
        let limits: Vec<Limit> = ALGORITHMS
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                Limit::new(format!("d{i}"), Quota::per_hour(1_000))
                    .expect("a limit")
                    .algorithm(a)
            })
            .collect();
        let limiter = limiter_on(store, limits);
        assert!(
            limiter
                .check("d0", &Key::from(0_u64), 1)
                .await
                .expect("warm")
                .allowed
        );
        server.pause();
        let handles: Vec<_> = (0..400_u64)
            .map(|i| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_micros(i * 97 % 50_000)).await;
                    let name = format!("d{}", i % 7);
                    let key = Key::from(i % 13);
                    let started = Instant::now();
                    let r: Result<(), StoreErrorKind> = match i % 5 {
                        0 | 1 => limiter.check(&name, &key, 1).await.map(drop),
                        2 => limiter
                            .check_all(&[(name.as_str(), &key, 1), ("d0", &key, 1)])
                            .await
                            .map(drop),
                        3 => limiter.peek(&name, &key).await.map(drop),
                        _ => limiter
                            .reserve(&name, &key, 1, Duration::from_secs(60))
                            .await
                            .map(drop),
                    }
                    .map_err(|e| e.kind());
                    (i, started.elapsed(), r)
                })
            })
            .collect();
        let mut longest = Duration::ZERO;
        for handle in handles {
            let (i, took, r) = tokio::time::timeout(HANG, handle)
                .await
                .expect("a decision hung on a stopped server")
                .expect("no panic");
            assert_eq!(r, Err(StoreErrorKind::Timeout), "call {i}");
            longest = longest.max(took);
        }
        server.resume();
        // A hang bound, 30× the deadline: the promise is its own deadline.
        assert!(longest < deadline * 30, "a decision took {longest:?}");
        let resumed = Instant::now();
        while limiter.check("d1", &Key::from("after"), 1).await.is_err() {
            assert!(resumed.elapsed() < HANG, "no answer after SIGCONT");
        }
    }

    /// "A decision whose deadline passes in the queue is never sent": a stopped server,
    /// a 50 ms deadline, 60 checks on 60 keys of every algorithm started at once: the
    /// first go alone onto the wire (`DEFAULT_COALESCE` of them), the rest queue behind
    /// them. When the first calls give up, the slots free and the queued decisions
    /// still within their deadlines are sent (they started later, so their deadlines
    /// are later): legitimately charged. Once the server resumes, the charged keys are
    /// the first on the wire and a suffix of the rest in the order they started: no
    /// decision that started before an uncharged one (whose deadline passed in the
    /// queue, so it was never sent) was charged.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn decisions_whose_deadline_passes_in_the_queue_are_never_sent() {
        let server = RedisServer::start();
        let clock = ManualClock::new(BASE);
        let store = RedisStore::from_url(&server.url())
            .expect("url")
            .denial_cache(0)
            .deadline(Duration::from_millis(50))
            .expect("a deadline")
            .with_clock(clock.clone());
        let limits: Vec<Limit> = ALGORITHMS
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                Limit::new(format!("q{i}"), Quota::per_hour(1_000))
                    .expect("a limit")
                    .algorithm(a)
            })
            .collect();
        let limiter = limiter_on(store, limits);
        assert!(
            limiter
                .check("q0", &Key::from("warm"), 1)
                .await
                .expect("warm")
                .allowed
        );
        server.pause();
        let ask = |i: u64| {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let r = limiter
                    .check(&format!("q{}", i % 7), &Key::from(i), 1)
                    .await
                    .map_err(|e| e.kind());
                (started, r)
            })
        };
        let calls: Vec<_> = (0..60).map(ask).collect();
        let mut starts = Vec::new();
        for (i, call) in calls.into_iter().enumerate() {
            let (started, r) = call.await.expect("no panic");
            assert_eq!(r.map(|d| d.allowed), Err(StoreErrorKind::Timeout));
            starts.push((started, i as u64));
        }
        starts.sort();
        server.resume();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A patient store on the same server reads what was charged.
        let reader = limiter_on(
            store_on(&server.url(), "tollgate", &clock),
            (0..7).map(|i| {
                Limit::new(format!("q{i}"), Quota::per_hour(1_000))
                    .expect("a limit")
                    .algorithm(ALGORITHMS[i])
            }),
        );
        let mut order = Vec::new();
        for (_, i) in &starts {
            let c = counted(&reader, &format!("q{}", i % 7), &Key::from(*i)).await > 0;
            order.push((*i, c));
        }
        // The calls in flight when the server stopped were sent at once; which tasks
        // they were is decided by who reached the store first, which a start instant
        // read inside each task only approximates: leave out the first
        // DEFAULT_COALESCE charged ones wherever they stand.
        let mut in_flight = RedisStore::DEFAULT_COALESCE;
        let rest: Vec<(u64, bool)> = order
            .iter()
            .copied()
            .filter(|(_, c)| {
                if *c && in_flight > 0 {
                    in_flight -= 1;
                    return false;
                }
                true
            })
            .collect();
        let first_charged = rest.iter().position(|(_, c)| *c).unwrap_or(rest.len());
        assert!(
            rest[first_charged..].iter().all(|(_, c)| *c),
            "in start order (key, charged): {order:?}"
        );
    }

    /// A cluster with one master stopped (SIGSTOP), decisions coalesced per hash slot:
    /// 3 waves of 90 checks on 90 keys at once, a 100 ms deadline; every key on a live
    /// master is admitted, every key on the stopped one times out: a stalled slot's
    /// queue holds no other slot's decision.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_cluster_master_holds_no_decision_of_another_slot() {
        let cluster = support::redis_cluster::RedisCluster::start(0);
        let clock = ManualClock::new(BASE);
        let limit = Limit::new("api", Quota::per_hour(1_000))
            .expect("a limit")
            .algorithm(Algorithm::Gcra);
        let store = RedisStore::from_cluster_urls(cluster.urls())
            .expect("cluster urls")
            .denial_cache(0)
            .deadline(Duration::from_millis(100))
            .expect("a deadline")
            .with_clock(clock.clone());
        let limiter = limiter_on(store.clone(), [limit.clone()]);
        let masters: Vec<usize> = (0..90_u64)
            .map(|k| cluster.master_of(&store.state_key(&limit, &Key::from(k))))
            .collect();
        // Warm every master's connection and library.
        for k in 0..90_u64 {
            let started = Instant::now();
            while limiter
                .check("api", &Key::from(1_000 + k), 1)
                .await
                .is_err()
            {
                assert!(started.elapsed() < HANG, "the cluster never answered");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let stopped = masters[0];
        cluster.nodes[stopped].pause();
        let mut wrong = Vec::new();
        for wave in 0..3 {
            let calls: Vec<_> = (0..90_u64)
                .map(|k| {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let r = limiter.check("api", &Key::from(k), 1).await;
                        (k, r.map(|d| d.allowed).map_err(|e| e.kind()))
                    })
                })
                .collect();
            for call in calls {
                let (k, r) = tokio::time::timeout(HANG, call)
                    .await
                    .expect("a decision hung")
                    .expect("no panic");
                let on_stopped = masters[k as usize] == stopped;
                let right = if on_stopped {
                    r == Err(StoreErrorKind::Timeout)
                } else {
                    r == Ok(true)
                };
                if !right {
                    wrong.push(format!(
                        "wave {wave} key {k} (master {}, stopped {stopped}): {r:?}",
                        masters[k as usize]
                    ));
                }
            }
        }
        cluster.nodes[stopped].resume();
        assert!(masters.iter().any(|m| *m != stopped));
        assert!(wrong.is_empty(), "{} wrong: {wrong:#?}", wrong.len());
    }

    /// Blocks racing batched checks from three stores: once `block` has returned, no
    /// check that started after it is admitted; penalties on a tight key admit exactly
    /// its capacity.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_block_racing_batched_checks_admits_nothing_that_started_after_it() {
        let clock = ManualClock::new(BASE);
        let prefix = unique_prefix("block-race");
        let limit = Limit::new("api", Quota::per_hour(100_000))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let tight = Limit::new("tight", Quota::per_hour(5))
            .expect("a limit")
            .algorithm(Algorithm::Gcra)
            .penalty(
                Penalty::after(3)
                    .within(Duration::from_secs(60))
                    .block_for(Duration::from_secs(3_600)),
            );
        let limiters: Vec<Limiter> = (0..3)
            .map(|_| {
                limiter_on(
                    store_on(&shared_server().url(), &prefix, &clock),
                    [limit.clone(), tight.clone()],
                )
            })
            .collect();
        let blocked = Arc::new(AtomicBool::new(false));
        let violations = Arc::new(AtomicU64::new(0));
        let tight_admitted = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::new();
        for limiter in &limiters {
            for t in 0..16_u64 {
                let (limiter, blocked, violations, tight_admitted) = (
                    limiter.clone(),
                    blocked.clone(),
                    violations.clone(),
                    tight_admitted.clone(),
                );
                handles.push(tokio::spawn(async move {
                    for i in 0..60_u64 {
                        let after_block = blocked.load(Ordering::SeqCst);
                        let d = limiter
                            .check("api", &Key::from("victim"), 1 + (i % 2) as u32)
                            .await
                            .expect("a decision");
                        if after_block && d.allowed {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                        if (t + i) % 4 == 0 {
                            let d = limiter
                                .check("tight", &Key::from("boxed"), 1)
                                .await
                                .expect("a decision");
                            tight_admitted.fetch_add(u64::from(d.allowed), Ordering::SeqCst);
                        }
                    }
                }));
            }
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        limiters[1]
            .block("api", &Key::from("victim"), Duration::from_secs(600))
            .await
            .expect("a block");
        blocked.store(true, Ordering::SeqCst);
        for handle in handles {
            handle.await.expect("no panic");
        }
        assert_eq!(
            violations.load(Ordering::SeqCst),
            0,
            "admitted after the block"
        );
        assert_eq!(
            tight_admitted.load(Ordering::SeqCst),
            5,
            "the tight key's capacity"
        );
        let boxed = limiters[2]
            .check("tight", &Key::from("boxed"), 1)
            .await
            .expect("a decision");
        assert!(!boxed.allowed && boxed.blocked_for.is_some(), "{boxed:?}");
    }

    /// Many tasks on three stores check a cost of 4 and settle it to 0–8, or refund it
    /// by receipt, in batches: the key counts exactly what they kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settles_and_refunds_racing_batched_checks_leave_exactly_what_was_kept() {
        let clock = ManualClock::new(BASE);
        let prefix = unique_prefix("settle-race");
        let limits: Vec<Limit> = [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindowLog,
            Algorithm::Gcra,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            Limit::new(format!("m{i}"), Quota::per_hour(100_000))
                .expect("a limit")
                .algorithm(a)
        })
        .collect();
        let limiters: Vec<Limiter> = (0..3)
            .map(|_| {
                limiter_on(
                    store_on(&shared_server().url(), &prefix, &clock),
                    limits.clone(),
                )
            })
            .collect();
        let mut handles = Vec::new();
        for limiter in &limiters {
            for t in 0..16_u64 {
                let limiter = limiter.clone();
                handles.push(tokio::spawn(async move {
                    let mut kept = [0_u64; 3];
                    for i in 0..20_u64 {
                        let l = ((t + i) % 3) as usize;
                        let name = format!("m{l}");
                        let key = Key::from("shared");
                        let d = limiter.check(&name, &key, 4).await.expect("a check");
                        assert!(d.allowed);
                        match (t * 31 + i) % 3 {
                            0 => {
                                let actual = (t + i) % 9;
                                limiter.settle(&d, &key, actual).await.expect("a settle");
                                kept[l] += actual;
                            }
                            1 => {
                                limiter.refund_charge(&d, &key, 4).await.expect("a refund");
                            }
                            _ => kept[l] += 4,
                        }
                    }
                    kept
                }));
            }
        }
        let mut kept = [0_u64; 3];
        for handle in handles {
            let k = handle.await.expect("no panic");
            for (total, n) in kept.iter_mut().zip(k) {
                *total += n;
            }
        }
        for (l, kept) in kept.iter().enumerate() {
            assert_eq!(
                counted(&limiters[0], &format!("m{l}"), &Key::from("shared")).await,
                *kept,
                "m{l}"
            );
        }
    }

    /// A runtime dropped while 300 decisions are queued and in batches: the drop does
    /// not hang, nothing panics, and the same limiter, used from another runtime,
    /// answers each decision within its deadline.
    #[test]
    fn a_runtime_dropped_with_queued_decisions_neither_hangs_nor_panics() {
        runtime_dropped(
            &shared_server().url(),
            None,
            RedisStore::DEFAULT_COALESCE,
            true,
        );
    }

    /// The same while the server is stopped: every decision is on the wire or queued
    /// when the runtime goes; resumed, the limiter answers from a new runtime.
    #[test]
    fn a_runtime_dropped_while_decisions_wait_on_a_stopped_server_neither_hangs_nor_panics() {
        let server = RedisServer::start();
        runtime_dropped(
            &server.url(),
            Some(&server),
            RedisStore::DEFAULT_COALESCE,
            false,
        );
    }

    /// Not a documented promise, so ignored; run it with `-- --ignored`. The store made
    /// on a runtime that died while its calls were on the wire to a stopped server,
    /// used from a new runtime once the server resumes: no decision hangs (each times
    /// out at its 200 ms deadline), but in about 1 run of 5 none of 20 is ever answered
    /// again (3 of 15 runs with the default coalescing, 3 of 15 with `coalesce(0)`: not
    /// the coalescer's own). Passing runs answer every one.
    #[test]
    #[ignore = "not a documented promise: a store may not outlive its runtime"]
    fn a_store_whose_runtime_died_mid_call_answers_again_on_a_new_runtime() {
        let server = RedisServer::start();
        runtime_dropped(
            &server.url(),
            Some(&server),
            RedisStore::DEFAULT_COALESCE,
            true,
        );
    }

    /// The control for the test above: the same with `coalesce(0)`.
    #[test]
    fn a_runtime_dropped_while_uncoalesced_decisions_wait_on_a_stopped_server_neither_hangs_nor_panics()
     {
        let server = RedisServer::start();
        runtime_dropped(&server.url(), Some(&server), 0, false);
    }

    fn runtime_dropped(url: &str, stopped: Option<&RedisServer>, coalesce: usize, recovers: bool) {
        let url = url.to_string();
        let prefix = unique_prefix("dropped-rt");
        let pause = stopped.map(|s| (s.pid(), s.port()));
        let limit = Limit::new("api", Quota::per_hour(100_000))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let (done, finished) = std::sync::mpsc::channel();
        let (limiter_out, limiter_in) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a runtime");
            let limiter = rt.block_on(async {
                let store = RedisStore::from_url(&url)
                    .expect("url")
                    .prefix(&prefix)
                    .denial_cache(0)
                    .deadline(Duration::from_millis(200))
                    .expect("deadline")
                    .coalesce(coalesce);
                let limiter = limiter_on(store, [limit]);
                assert!(
                    limiter
                        .check("api", &Key::from(0_u64), 1)
                        .await
                        .expect("warm")
                        .allowed
                );
                if let Some((pid, _)) = pause {
                    let _ = std::process::Command::new("kill")
                        .args(["-STOP", &pid.to_string()])
                        .status();
                }
                for i in 0..300_u64 {
                    let limiter = limiter.clone();
                    tokio::spawn(async move {
                        let _ = limiter.check("api", &Key::from(i % 7), 1).await;
                    });
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                limiter
            });
            drop(rt);
            limiter_out.send(limiter).expect("send");
            done.send(()).expect("send");
        });
        finished
            .recv_timeout(HANG)
            .expect("dropping the runtime hung");
        worker.join().expect("no panic while dropping the runtime");
        let limiter = limiter_in.recv().expect("the limiter");
        if let Some(server) = stopped {
            server.resume();
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let mut answered = 0;
        rt.block_on(async {
            for i in 0..20_u64 {
                let r = tokio::time::timeout(
                    Duration::from_secs(5),
                    limiter.check("api", &Key::from(100 + i), 1),
                )
                .await;
                // Its deadline is 200 ms: an answer (or its own error) well within 5 s.
                let Ok(answer) = r else {
                    panic!("decision {i} hung past its deadline on a new runtime");
                };
                // The store outlives the runtime it was made on: once the server
                // answers, decisions are answered.
                if answer.is_ok() {
                    answered += 1;
                }
            }
        });
        if recovers {
            assert!(
                answered > 0,
                "none of 20 decisions answered by the resumed server"
            );
        }
    }

    /// `Fallback` over a coalesced store whose server is stopped with 64 decisions
    /// queued and in flight, then killed: every decision is answered, from the
    /// insurance store, and admitted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fallback_over_a_coalesced_store_answers_every_decision_when_redis_dies_mid_batch() {
        let mut server = RedisServer::start();
        let redis = RedisStore::from_url(&server.url())
            .expect("url")
            .denial_cache(0)
            .deadline(Duration::from_millis(400))
            .expect("deadline");
        let limits: Vec<Limit> = ALGORITHMS
            .into_iter()
            .enumerate()
            .map(|(i, a)| {
                Limit::new(format!("f{i}"), Quota::per_hour(1_000))
                    .expect("a limit")
                    .algorithm(a)
            })
            .collect();
        let limiter = limiter_on(Fallback::new(redis, MemoryStore::new()), limits);
        assert!(
            limiter
                .check("f0", &Key::from(0_u64), 1)
                .await
                .expect("warm")
                .allowed
        );
        server.pause();
        let handles: Vec<_> = (0..64_u64)
            .map(|i| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let name = format!("f{}", i % 7);
                    limiter.check(&name, &Key::from(i), 1).await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.kill();
        for (i, handle) in handles.into_iter().enumerate() {
            let r = tokio::time::timeout(HANG, handle)
                .await
                .expect("a decision hung")
                .expect("no panic");
            let d = r.unwrap_or_else(|e| panic!("call {i}: {e}"));
            assert!(d.allowed, "call {i}");
        }
        // While it is down, later decisions are served too.
        let d = limiter
            .check("f2", &Key::from("later"), 1)
            .await
            .expect("insurance");
        assert!(d.allowed);
    }
}

// =====================================================================================
// 2. LeasedStore passing through
// =====================================================================================

mod leases {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use tollgate::clock::{Clock, ManualClock};
    use tollgate::store::{LeasedStore, Store};
    use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Quota};

    use super::{BASE, Rng, limiter_on};

    /// Phases of quiet traffic (one request per process, the clock moving `quiet_step`
    /// between them) and of hot traffic (8 tasks per process × 12 requests on a frozen
    /// clock), alternating, against one hot key: admissions per process.
    async fn flap<S: Store + Clone>(
        stores: &[LeasedStore<S>],
        limit: &Limit,
        clock: &ManualClock,
        phases: u64,
        quiet_step: Duration,
    ) -> u64 {
        let limiters: Vec<Limiter> = stores
            .iter()
            .map(|s| limiter_on(s.clone(), [limit.clone()]))
            .collect();
        let admitted = Arc::new(AtomicU64::new(0));
        let key = Key::from("flapping");
        for phase in 0..phases {
            if phase % 2 == 0 {
                for _ in 0..6 {
                    for limiter in &limiters {
                        let d = limiter
                            .check(limit.name(), &key, 1)
                            .await
                            .expect("a decision");
                        admitted.fetch_add(u64::from(d.allowed), Ordering::SeqCst);
                        clock.advance(quiet_step);
                    }
                }
            } else {
                let mut handles = Vec::new();
                for limiter in &limiters {
                    for _ in 0..8 {
                        let (limiter, admitted, key) = (limiter.clone(), admitted.clone(), key);
                        let name = limit.name().to_string();
                        handles.push(tokio::spawn(async move {
                            for _ in 0..12 {
                                let d = limiter.check(&name, &key, 1).await.expect("a decision");
                                admitted.fetch_add(u64::from(d.allowed), Ordering::SeqCst);
                            }
                        }));
                    }
                }
                for handle in handles {
                    handle.await.expect("no panic");
                }
            }
        }
        admitted.load(Ordering::SeqCst)
    }

    /// A fixed window of 600/h within one hour: quiet phases (passing) and hot ones
    /// (leasing) over three processes; demand is over the capacity, so what was
    /// admitted plus what the processes still hold in slices is exactly 600.
    async fn flapping_window_is_exact<S: Store + Clone>(make: impl Fn() -> S, clock: &ManualClock) {
        let limit = Limit::new("win", Quota::per_hour(600))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let stores: Vec<LeasedStore<S>> = (0..3)
            .map(|_| LeasedStore::builder(make()).clock(clock.clone()).build())
            .collect();
        let admitted = flap(&stores, &limit, clock, 10, Duration::from_secs(4)).await;
        let held: u64 = stores.iter().map(LeasedStore::held).sum();
        assert_eq!(admitted + held, 600, "{admitted} admitted, {held} held");
        // The plain store counts the capacity: nothing charged was lost.
        let plain = limiter_on(make(), [limit.clone()]);
        let d = plain
            .peek("win", &Key::from("flapping"))
            .await
            .expect("peek");
        assert_eq!(d.remaining, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn processes_flapping_between_passing_and_leasing_admit_exactly_a_window_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        flapping_window_is_exact(|| memory.clone(), &clock).await;
    }

    /// GCRA and the buckets (10/s, burst 10): however the traffic flaps, processes
    /// over one store admit no more than the algorithm's bound over the run, burst +
    /// rate × elapsed.
    async fn flapping_fluid_stays_within_its_bound<S: Store + Clone>(
        make: impl Fn() -> S,
        clock: &ManualClock,
    ) {
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
        ] {
            let start = clock.now();
            let limit = Limit::new(format!("fluid-{algorithm}"), Quota::per_second(10))
                .expect("a limit")
                .algorithm(algorithm);
            let stores: Vec<LeasedStore<S>> = (0..3)
                .map(|_| LeasedStore::builder(make()).clock(clock.clone()).build())
                .collect();
            let admitted = flap(&stores, &limit, clock, 12, Duration::from_millis(150)).await;
            let elapsed = clock.now().saturating_sub(start);
            let bound = 10 + (elapsed.as_millis() / 100) as u64;
            assert!(
                admitted <= bound,
                "{algorithm}: {admitted} admitted, bound {bound} over {elapsed:?}"
            );
            assert!(admitted > 0);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flapping_fluid_keys_stay_within_their_bound_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        flapping_fluid_stays_within_its_bound(|| memory.clone(), &clock).await;
    }

    /// One process and a plain store on the same clock, each on its own state: quiet
    /// traffic (a request every 300 ms on 10/s), a hot burst (leasing), a quiet hour,
    /// then quiet traffic again: once leasing has stepped back, each decision answers
    /// exactly as the plain store's (receipt excepted).
    async fn passes_again_as_the_plain_store<S: Store + Clone>(
        make: impl Fn() -> S,
        clock: &ManualClock,
    ) {
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::TokenBucket,
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
        ] {
            let limit = Limit::new(format!("cmp-{algorithm}"), Quota::per_second(10))
                .expect("a limit")
                .algorithm(algorithm);
            let leased = LeasedStore::builder(make()).clock(clock.clone()).build();
            let with = limiter_on(leased.clone(), [limit.clone()]);
            let without = limiter_on(make(), [limit.clone()]);
            let (lk, pk) = (
                Key::from(format!("leased-{algorithm}")),
                Key::from(format!("plain-{algorithm}")),
            );
            let name = limit.name();
            let view = |d: &Decision| (d.allowed, d.remaining, d.retry_after, d.reset_after);
            let mut differ = Vec::new();
            for round in 0..3 {
                // Hot: 40 requests at once-ish on both.
                for _ in 0..40 {
                    let _ = with.check(name, &lk, 1).await.expect("leased");
                    let _ = without.check(name, &pk, 1).await.expect("plain");
                }
                clock.advance(Duration::from_secs(3_600));
                for i in 0..30 {
                    clock.advance(Duration::from_millis(300));
                    let a = with.check(name, &lk, 1 + i % 3).await.expect("leased");
                    let b = without.check(name, &pk, 1 + i % 3).await.expect("plain");
                    if i >= 20 && view(&a) != view(&b) {
                        differ.push(format!("round {round} step {i}: leased {a:?} plain {b:?}"));
                    }
                }
            }
            assert!(differ.is_empty(), "{algorithm}: {differ:#?}");
        }
    }

    #[tokio::test]
    async fn a_key_quiet_again_after_leasing_passes_with_the_plain_answers_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        passes_again_as_the_plain_store(|| memory.clone(), &clock).await;
    }

    /// "GCRA and the buckets below their rate pass through: one store call per
    /// decision, answered as without leases, receipts too": 300 requests of costs 1–2
    /// at random gaps of 210–600 ms on 10/s (always under the rate) through a leased
    /// store and a plain one on the same clock: every decision equal, field by field,
    /// and exactly one store call each.
    async fn under_its_rate_every_decision_passes<S: Store + Clone>(
        make: impl Fn() -> S,
        clock: &ManualClock,
    ) {
        for algorithm in [
            Algorithm::Gcra,
            Algorithm::TokenBucket,
            Algorithm::LeakyBucket,
        ] {
            let limit = Limit::new(format!("under-{algorithm}"), Quota::per_second(10))
                .expect("a limit")
                .algorithm(algorithm);
            let leased = LeasedStore::builder(make()).clock(clock.clone()).build();
            let with = limiter_on(leased.clone(), [limit.clone()]);
            let without = limiter_on(make(), [limit.clone()]);
            let (lk, pk) = (Key::from("u-leased"), Key::from("u-plain"));
            let mut rng = Rng(0xabcd_ef01_2345_6789);
            let mut differ = Vec::new();
            for i in 0..300 {
                clock.advance(Duration::from_millis(210 + rng.below(391)));
                let cost = 1 + (i % 2);
                let a = with.check(limit.name(), &lk, cost).await.expect("leased");
                let b = without.check(limit.name(), &pk, cost).await.expect("plain");
                let view = |d: &Decision| {
                    (
                        d.allowed,
                        d.remaining,
                        d.retry_after,
                        d.reset_after,
                        d.delay,
                    )
                };
                if view(&a) != view(&b) || a.receipt().is_some() != b.receipt().is_some() {
                    differ.push(format!("step {i}: leased {a:?}, plain {b:?}"));
                }
            }
            assert!(differ.is_empty(), "{algorithm}: {differ:#?}");
            assert_eq!(
                leased.store_calls(),
                300,
                "{algorithm}: one store call each"
            );
        }
    }

    #[tokio::test]
    async fn under_its_rate_every_decision_passes_with_the_plain_answers_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        under_its_rate_every_decision_passes(|| memory.clone(), &clock).await;
    }

    /// Blocks, resets, penalties, settles and refunds while one process flaps: a block
    /// stops it at once, a reset gives exactly a fresh capacity in it (no parked unit
    /// on top), a refund of a passing decision's receipt after leasing resumed gives
    /// back at most its cost.
    async fn operators_during_the_switch<S: Store + Clone>(
        make: impl Fn() -> S,
        clock: &ManualClock,
    ) {
        let limit = Limit::new("ops", Quota::per_hour(200))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let leased = LeasedStore::builder(make()).clock(clock.clone()).build();
        let limiter = limiter_on(leased.clone(), [limit.clone()]);
        let plain = limiter_on(make(), [limit.clone()]);
        let key = Key::from("op");
        // Quiet: passing decisions, one kept for a later refund.
        let mut passing = Vec::new();
        for _ in 0..3 {
            clock.advance(Duration::from_secs(20));
            passing.push(limiter.check("ops", &key, 2).await.expect("a decision"));
        }
        assert!(passing.iter().all(|d| d.allowed));
        // Hot: leasing resumes.
        let mut admitted = 6_u64;
        for _ in 0..30 {
            admitted += u64::from(limiter.check("ops", &key, 1).await.expect("d").allowed);
        }
        // A passing decision's refund, after leasing resumed: exactly its 2 back.
        let before = plain.peek("ops", &key).await.expect("peek").remaining + leased.held();
        limiter
            .refund_charge(&passing[0], &key, 2)
            .await
            .expect("a refund");
        admitted -= 2;
        let after = plain.peek("ops", &key).await.expect("peek").remaining + leased.held();
        assert_eq!(
            after,
            before + 2,
            "a passing receipt's refund gives back its cost"
        );
        // Block: nothing more in this process, leasing or not.
        limiter
            .block("ops", &key, Duration::from_secs(60))
            .await
            .expect("block");
        for _ in 0..20 {
            assert!(
                !limiter.check("ops", &key, 1).await.expect("d").allowed,
                "after block"
            );
        }
        // Reset: exactly a fresh capacity, however the key switches.
        limiter.reset("ops", &key).await.expect("reset");
        let mut fresh = 0_u64;
        for i in 0..400_u64 {
            if i % 50 == 0 {
                clock.advance(Duration::from_millis(1));
            }
            fresh += u64::from(limiter.check("ops", &key, 1).await.expect("d").allowed);
        }
        assert_eq!(
            fresh + leased.held(),
            200,
            "after the reset: {fresh} admitted"
        );
        let _ = admitted;
        // A penalty in the same window: the key is spent, nothing admitted.
        let p = limiter.penalize("ops", &key, 5).await.expect("penalty");
        assert!(!p.allowed || p.remaining == 0, "{p:?}");
    }

    #[tokio::test]
    async fn operators_during_the_switch_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        operators_during_the_switch(|| memory.clone(), &clock).await;
    }

    /// Three leased processes × 8 tasks × 40 checks of costs 1–3 on a frozen clock,
    /// each dropped after 0–1999 µs or never, with concurrency rising and falling:
    /// the plain store counts exactly what callers were told was admitted plus what the
    /// processes hold.
    async fn cancelled_through_leases_are_exact<S: Store + Clone>(
        make: impl Fn() -> S,
        clock: &ManualClock,
        remote: bool,
    ) {
        let limit = Limit::new("lc", Quota::per_hour(100_000))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let stores: Vec<LeasedStore<S>> = (0..3)
            .map(|_| LeasedStore::builder(make()).clock(clock.clone()).build())
            .collect();
        let mut rng = Rng(0xfeed_beef_1234_5678);
        let mut told = 0_u64;
        let mut cancelled = 0_u64;
        for wave in 0..4_u64 {
            let mut handles = Vec::new();
            let tasks = if wave % 2 == 0 { 1 } else { 8 };
            for store in &stores {
                let limiter = limiter_on(store.clone(), [limit.clone()]);
                for _ in 0..tasks {
                    let limiter = limiter.clone();
                    let plan: Vec<(u32, Option<u64>)> = (0..40)
                        .map(|_| {
                            let cost = 1 + rng.below(3) as u32;
                            let p = if rng.below(3) == 0 {
                                None
                            } else {
                                Some(rng.below(2_000))
                            };
                            (cost, p)
                        })
                        .collect();
                    handles.push(tokio::spawn(async move {
                        let (mut told, mut cancelled) = (0, 0);
                        for (cost, patience) in plan {
                            let k = Key::from("k");
                            let call = limiter.check("lc", &k, cost);
                            let r = match patience {
                                None => Some(call.await),
                                Some(us) => tokio::time::timeout(Duration::from_micros(us), call)
                                    .await
                                    .ok(),
                            };
                            match r {
                                Some(Ok(d)) if d.allowed => told += u64::from(cost),
                                Some(Ok(_)) => {}
                                Some(Err(e)) => panic!("{e}"),
                                None => cancelled += 1,
                            }
                        }
                        (told, cancelled)
                    }));
                }
            }
            for handle in handles {
                let (t, c) = handle.await.expect("no panic");
                told += t;
                cancelled += c;
            }
        }
        // The memory store answers at the first poll: nothing to cancel there.
        assert!(!remote || cancelled > 0);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let held: u64 = stores.iter().map(LeasedStore::held).sum();
        let plain = limiter_on(make(), [limit.clone()]);
        let d = plain.peek("lc", &Key::from("k")).await.expect("peek");
        assert_eq!(
            d.capacity - d.remaining,
            told + held,
            "{told} told admitted, {held} held, {cancelled} cancelled"
        );
    }

    /// Three leased processes, waves of 1 then 8 tasks per process (passing, then
    /// leasing), each check of 4 settled to 0–8 or refunded by receipt: the plain store
    /// counts exactly what was kept plus what the processes hold.
    async fn settles_while_flapping_are_exact<S: Store + Clone>(
        make: impl Fn() -> S,
        clock: &ManualClock,
    ) {
        let limit = Limit::new("st", Quota::per_day(50_000))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let stores: Vec<LeasedStore<S>> = (0..3)
            .map(|_| LeasedStore::builder(make()).clock(clock.clone()).build())
            .collect();
        let mut kept = 0_u64;
        for wave in 0..6_u64 {
            let tasks = if wave % 2 == 0 { 1 } else { 8 };
            let mut handles = Vec::new();
            for store in &stores {
                let limiter = limiter_on(store.clone(), [limit.clone()]);
                for t in 0..tasks {
                    let limiter = limiter.clone();
                    handles.push(tokio::spawn(async move {
                        let key = Key::from("k");
                        let mut kept = 0;
                        for i in 0..15_u64 {
                            let d = limiter.check("st", &key, 4).await.expect("a check");
                            assert!(d.allowed);
                            match (t + i + wave) % 3 {
                                0 => {
                                    let actual = (t * 7 + i) % 9;
                                    limiter.settle(&d, &key, actual).await.expect("settle");
                                    kept += actual;
                                }
                                1 => {
                                    limiter.refund_charge(&d, &key, 4).await.expect("refund");
                                }
                                _ => kept += 4,
                            }
                        }
                        kept
                    }));
                }
            }
            for handle in handles {
                kept += handle.await.expect("no panic");
            }
        }
        let held: u64 = stores.iter().map(LeasedStore::held).sum();
        let plain = limiter_on(make(), [limit.clone()]);
        let d = plain.peek("st", &Key::from("k")).await.expect("peek");
        assert_eq!(
            d.capacity - d.remaining,
            kept + held,
            "{kept} kept, {held} held"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn settles_and_refunds_while_flapping_are_exact_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        settles_while_flapping_are_exact(|| memory.clone(), &clock).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn leased_checks_cancelled_at_every_await_are_exact_on_memory() {
        let clock = ManualClock::new(BASE);
        let memory = MemoryStore::with_clock(clock.clone());
        cancelled_through_leases_are_exact(|| memory.clone(), &clock, false).await;
    }

    #[cfg(feature = "redis")]
    mod on_redis {
        use std::time::Duration;

        use support::redis_server::{shared_server, unique_prefix};
        use tollgate::RedisStore;
        use tollgate::clock::ManualClock;

        use super::super::BASE;

        fn make(prefix: String, clock: ManualClock) -> impl Fn() -> RedisStore {
            move || {
                RedisStore::from_url(&shared_server().url())
                    .expect("url")
                    .prefix(&prefix)
                    .denial_cache(0)
                    .deadline(Duration::from_secs(10))
                    .expect("deadline")
                    .with_clock(clock.clone())
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn processes_flapping_between_passing_and_leasing_admit_exactly_a_window_on_redis() {
            let clock = ManualClock::new(BASE);
            super::flapping_window_is_exact(make(unique_prefix("flap"), clock.clone()), &clock)
                .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn flapping_fluid_keys_stay_within_their_bound_on_redis() {
            let clock = ManualClock::new(BASE);
            super::flapping_fluid_stays_within_its_bound(
                make(unique_prefix("fluid"), clock.clone()),
                &clock,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_key_quiet_again_after_leasing_passes_with_the_plain_answers_on_redis() {
            let clock = ManualClock::new(BASE);
            super::passes_again_as_the_plain_store(
                make(unique_prefix("again"), clock.clone()),
                &clock,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn operators_during_the_switch_on_redis() {
            let clock = ManualClock::new(BASE);
            super::operators_during_the_switch(make(unique_prefix("ops"), clock.clone()), &clock)
                .await;
        }

        fn cluster(prefix: String, clock: ManualClock) -> impl Fn() -> RedisStore {
            let urls = support::redis_cluster::shared_cluster().urls();
            move || {
                RedisStore::from_cluster_urls(urls.clone())
                    .expect("cluster urls")
                    .prefix(&prefix)
                    .denial_cache(0)
                    .deadline(Duration::from_secs(10))
                    .expect("deadline")
                    .with_clock(clock.clone())
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn processes_flapping_between_passing_and_leasing_admit_exactly_a_window_on_a_cluster()
         {
            let clock = ManualClock::new(BASE);
            super::flapping_window_is_exact(cluster(unique_prefix("cflap"), clock.clone()), &clock)
                .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn leased_checks_cancelled_at_every_await_are_exact_on_a_cluster() {
            let clock = ManualClock::new(BASE);
            super::cancelled_through_leases_are_exact(
                cluster(unique_prefix("clcancel"), clock.clone()),
                &clock,
                true,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn under_its_rate_every_decision_passes_with_the_plain_answers_on_redis() {
            let clock = ManualClock::new(BASE);
            super::under_its_rate_every_decision_passes(
                make(unique_prefix("under"), clock.clone()),
                &clock,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn settles_and_refunds_while_flapping_are_exact_on_redis() {
            let clock = ManualClock::new(BASE);
            super::settles_while_flapping_are_exact(
                make(unique_prefix("lsettle"), clock.clone()),
                &clock,
            )
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn leased_checks_cancelled_at_every_await_are_exact_on_redis() {
            let clock = ManualClock::new(BASE);
            super::cancelled_through_leases_are_exact(
                make(unique_prefix("lcancel"), clock.clone()),
                &clock,
                true,
            )
            .await;
        }
    }
}

// =====================================================================================
// 3. The cheaper layer: header values from a per-thread buffer
// =====================================================================================

#[cfg(feature = "axum")]
mod layer {
    use std::collections::BTreeMap;
    use std::convert::Infallible;
    use std::time::Duration;

    use axum::Router;
    use axum::routing::get;
    use bytes::Bytes;
    use http::{Request, Response, StatusCode};
    use http_body_util::{BodyExt, Full};
    use support::http::Server;
    use tollgate::clock::ManualClock;
    use tollgate::layer::{HeaderStyle, ResetFormat};
    use tollgate::{Algorithm, MemoryStore, Policy, Quota, RateLimitLayer, key};
    use tower::{Layer, Service, ServiceExt};

    use super::BASE;

    /// Ten policies with 64-character names (the most the header bound accepts),
    /// fixed windows of 40, 47, … per minute, keyed by `x-user`, each request costing
    /// its `x-cost`.
    fn policies() -> Vec<Policy> {
        (0..10_u64)
            .map(|i| {
                Policy::new(format!("{i:x>64}"), Quota::per_minute(40 + 7 * i))
                    .expect("a policy")
                    .algorithm(Algorithm::FixedWindow)
                    .key(key::header("x-user").expect("a header name"))
                    .costs(|parts: &http::request::Parts| {
                        parts
                            .headers
                            .get("x-cost")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(1)
                    })
            })
            .collect()
    }

    fn layer(style: HeaderStyle, clock: &ManualClock) -> RateLimitLayer {
        RateLimitLayer::builder()
            .policies(policies())
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("a layer")
            .headers(style)
    }

    fn styles() -> Vec<HeaderStyle> {
        vec![
            HeaderStyle::Draft11,
            HeaderStyle::Draft06,
            HeaderStyle::Legacy(ResetFormat::Seconds),
            HeaderStyle::Legacy(ResetFormat::UnixEpoch),
            HeaderStyle::None,
        ]
    }

    fn request(user: &str, cost: u64) -> Request<Full<Bytes>> {
        Request::get("/")
            .header("x-user", user)
            .header("x-cost", cost.to_string())
            .body(Full::default())
            .expect("a request")
    }

    /// A response as text: status, every header but `date`, sorted, and the body.
    fn text(status: StatusCode, headers: &http::HeaderMap, body: &[u8]) -> String {
        let mut lines: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, value) in headers {
            if name == "date" {
                continue;
            }
            // Legacy(UnixEpoch)'s reset is read from the wall clock, not the store's
            // ManualClock: it may tick between two callers. Its digits are checked.
            if name == "x-ratelimit-reset" && value.len() == 10 {
                assert!(value.as_bytes().iter().all(u8::is_ascii_digit), "{value:?}");
                lines
                    .entry(name.as_str().to_string())
                    .or_default()
                    .push("<epoch>".to_string());
                continue;
            }
            lines
                .entry(name.as_str().to_string())
                .or_default()
                .push(String::from_utf8_lossy(value.as_bytes()).into_owned());
        }
        format!("{status}\n{lines:?}\n{}", String::from_utf8_lossy(body))
    }

    const STEPS: u64 = 24;

    /// The draft-11 values an admitted request `j` (1-based) of cost `c` must carry.
    fn draft11(c: u64, j: u64) -> (String, String) {
        let policy = (0..10_u64)
            .map(|i| format!("\"{i:x>64}\";q={};w=60", 40 + 7 * i))
            .collect::<Vec<_>>()
            .join(", ");
        let limit = (0..10_u64)
            .map(|i| format!("\"{i:x>64}\";r={};t=60", 40 + 7 * i - c * j))
            .collect::<Vec<_>>()
            .join(", ");
        (policy, limit)
    }

    /// For each style: a reference caller per cost (1–5) asked alone, then 60 callers
    /// at once on a multi-threaded server, over real HTTP, each `STEPS` requests in a
    /// row of its cost: every response, admitted or rejected, is byte for byte its
    /// reference's step (the state per key is the same), and the admitted draft-11
    /// values are the exact numbers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_callers_over_http_get_exactly_their_own_headers_in_every_style() {
        for style in styles() {
            let clock = ManualClock::new(BASE);
            let app = Router::new()
                .route("/", get(|| async { "ok" }))
                .layer(layer(style, &clock));
            let server = std::sync::Arc::new(Server::start(app).await);
            let mut reference: Vec<Vec<String>> = Vec::new();
            for c in 1..=5_u64 {
                let mut steps = Vec::new();
                for j in 1..=STEPS {
                    let reply = server.send(request(&format!("ref-{c}"), c)).await;
                    if matches!(style, HeaderStyle::Draft11) && reply.status == StatusCode::OK {
                        let (policy, limit) = draft11(c, j);
                        assert_eq!(reply.header("ratelimit-policy"), policy, "c={c} j={j}");
                        assert_eq!(reply.header("ratelimit"), limit, "c={c} j={j}");
                    }
                    steps.push(text(reply.status, &reply.headers, reply.body.as_bytes()));
                }
                // Cost c admits floor(40 / c) on the first policy, then 429s.
                let admitted = steps.iter().filter(|s| s.starts_with("200")).count() as u64;
                assert_eq!(admitted, (40 / c).min(STEPS), "{style:?} c={c}");
                reference.push(steps);
            }
            let handles: Vec<_> = (0..60_u64)
                .map(|u| {
                    let server = server.clone();
                    tokio::spawn(async move {
                        let c = 1 + u % 5;
                        let mut steps = Vec::new();
                        for _ in 1..=STEPS {
                            let reply = server.send(request(&format!("user-{u}"), c)).await;
                            steps.push(text(reply.status, &reply.headers, reply.body.as_bytes()));
                        }
                        (c, steps)
                    })
                })
                .collect();
            for (u, handle) in handles.into_iter().enumerate() {
                let (c, steps) = handle.await.expect("no panic");
                for (j, step) in steps.iter().enumerate() {
                    assert_eq!(
                        step,
                        &reference[(c - 1) as usize][j],
                        "{style:?}: user {u} (cost {c}) step {}",
                        j + 1
                    );
                }
            }
        }
    }

    /// In process (no wire): 8 tasks on a 4-thread runtime produce 1,200 responses,
    /// admitted and rejected, and keep every one of them (headers and unread body)
    /// until all are done; read at the end, each is still exactly what a reference
    /// caller got at that step: a value kept after its response is never overwritten
    /// by a later one cut from the same buffer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn responses_kept_while_thousands_more_are_written_keep_their_own_bytes() {
        for style in [
            HeaderStyle::Draft11,
            HeaderStyle::Legacy(ResetFormat::UnixEpoch),
        ] {
            let clock = ManualClock::new(BASE);
            let layer = layer(style, &clock);
            let inner = tower::service_fn(|_req: Request<Full<Bytes>>| async {
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            });
            let service = layer.layer(inner);
            let mut reference: Vec<Vec<String>> = Vec::new();
            for c in 1..=5_u64 {
                let mut steps = Vec::new();
                for _ in 1..=STEPS {
                    let mut svc = service.clone();
                    let response = svc
                        .ready()
                        .await
                        .expect("ready")
                        .call(request(&format!("ref-{c}"), c))
                        .await
                        .expect("a response");
                    let (parts, body) = response.into_parts();
                    let body = body.collect().await.expect("a body").to_bytes();
                    steps.push(text(parts.status, &parts.headers, &body));
                }
                reference.push(steps);
            }
            let handles: Vec<_> = (0..8_u64)
                .map(|t| {
                    let service = service.clone();
                    tokio::spawn(async move {
                        let mut kept = Vec::new();
                        for u in 0..10_u64 {
                            let user = t * 100 + u;
                            let c = 1 + user % 5;
                            for j in 0..STEPS {
                                let response = service
                                    .clone()
                                    .oneshot(request(&format!("user-{user}"), c))
                                    .await
                                    .expect("a response");
                                kept.push((c, j, response));
                                tokio::task::yield_now().await;
                            }
                        }
                        kept
                    })
                })
                .collect();
            let mut all = Vec::new();
            for handle in handles {
                all.extend(handle.await.expect("no panic"));
            }
            assert_eq!(all.len(), 8 * 10 * STEPS as usize);
            for (c, j, response) in all {
                let (parts, body) = response.into_parts();
                let body = body.collect().await.expect("a body").to_bytes();
                assert_eq!(
                    text(parts.status, &parts.headers, &body),
                    reference[(c - 1) as usize][j as usize],
                    "{style:?}: cost {c} step {}",
                    j + 1
                );
            }
        }
    }

    /// Ten 64-character policies of 1,000 + 7·i per minute; 96 callers each with a cost
    /// of its own (1–37), so that every caller's numbers differ from every other's, 24
    /// requests each, all at once: over real HTTP on a 4-thread server, and in process
    /// with every response kept until all are written. Each draft-11 value is exactly
    /// the caller's own: r = capacity − cost × step, t = 60.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_with_numbers_of_their_own_never_see_anothers_values() {
        numbers_of_their_own(|clock| MemoryStore::with_clock(clock.clone()), false).await;
    }

    /// The same with `partition_keys(true)`: besides the numbers, each member carries
    /// its caller's `pk`, the same in every member and response of one caller and
    /// different between callers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_with_partition_keys_see_only_their_own_pk() {
        numbers_of_their_own(|clock| MemoryStore::with_clock(clock.clone()), true).await;
    }

    /// The same on Redis: the decision arrives later, on whichever worker thread polls
    /// the response future, and the header values are cut there.
    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn callers_on_redis_whose_answers_arrive_on_other_threads_see_only_their_own_values() {
        use support::redis_server::{shared_server, unique_prefix};
        numbers_of_their_own(
            |clock| {
                tollgate::RedisStore::from_url(&shared_server().url())
                    .expect("url")
                    .prefix(&unique_prefix("layer"))
                    .deadline(Duration::from_secs(5))
                    .expect("deadline")
                    .with_clock(clock.clone())
            },
            true,
        )
        .await;
    }

    /// Removes every `;pk=:…:` parameter, returning the text and the pks.
    fn strip_pk(value: &str) -> (String, Vec<String>) {
        let mut out = String::new();
        let mut pks = Vec::new();
        let mut rest = value;
        while let Some(at) = rest.find(";pk=:") {
            out.push_str(&rest[..at]);
            let tail = &rest[at + 5..];
            let end = tail.find(':').expect("a closed byte sequence");
            pks.push(tail[..end].to_string());
            rest = &tail[end + 1..];
        }
        out.push_str(rest);
        (out, pks)
    }

    /// One pk for a whole response.
    fn one_pk(headers: &[Vec<String>]) -> Option<String> {
        let all: Vec<&String> = headers.iter().flatten().collect();
        let first = all.first()?;
        assert!(
            all.iter().all(|pk| pk == first),
            "pks of one response differ: {all:?}"
        );
        Some((*first).clone())
    }

    async fn numbers_of_their_own<S: tollgate::store::Store + Clone>(
        make: impl Fn(&ManualClock) -> S,
        partition: bool,
    ) {
        fn wide(n: u64) -> Vec<Policy> {
            (0..n)
                .map(|i| {
                    Policy::new(format!("{i:y>64}"), Quota::per_minute(1_000 + 7 * i))
                        .expect("a policy")
                        .algorithm(Algorithm::FixedWindow)
                        .key(key::header("x-user").expect("a header name"))
                        .costs(|parts: &http::request::Parts| {
                            parts
                                .headers
                                .get("x-cost")
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.parse().ok())
                                .unwrap_or(1)
                        })
                })
                .collect()
        }
        fn expected(n: u64, c: u64, j: u64) -> (String, String) {
            let policy = (0..n)
                .map(|i| format!("\"{i:y>64}\";q={};w=60", 1_000 + 7 * i))
                .collect::<Vec<_>>()
                .join(", ");
            let limit = (0..n)
                .map(|i| format!("\"{i:y>64}\";r={};t=60", 1_000 + 7 * i - c * j))
                .collect::<Vec<_>>()
                .join(", ");
            (policy, limit)
        }
        // With a pk in every member, seven 64-character policies fit the header bound.
        let n: u64 = if partition { 7 } else { 10 };
        let build = |clock: &ManualClock| {
            RateLimitLayer::builder()
                .policies(wide(n))
                .partition_keys(partition)
                .store(make(clock))
                .build()
                .expect("a layer")
        };
        let pks = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::<
            String,
            String,
        >::new()));
        // Over HTTP.
        let clock = ManualClock::new(BASE);
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(build(&clock));
        let server = std::sync::Arc::new(Server::start(app).await);
        let handles: Vec<_> = (0..96_u64)
            .map(|u| {
                let (server, pks) = (server.clone(), pks.clone());
                tokio::spawn(async move {
                    let c = 1 + u % 37;
                    let mut wrong = Vec::new();
                    for j in 1..=STEPS {
                        let reply = server.send(request(&format!("h{u}"), c)).await;
                        let (policy, limit) = expected(n, c, j);
                        let (got_policy, p1) = strip_pk(reply.header("ratelimit-policy"));
                        let (got_limit, p2) = strip_pk(reply.header("ratelimit"));
                        if reply.status != StatusCode::OK
                            || got_policy != policy
                            || got_limit != limit
                            || reply.body != "ok"
                        {
                            wrong.push(format!("user {u} step {j}: {reply:?}"));
                        }
                        let pk = one_pk(&[p1, p2]);
                        assert_eq!(pk.is_some(), partition, "user {u} step {j}");
                        if let Some(pk) = pk {
                            let mut pks = pks.lock().expect("pks");
                            let seen = pks.entry(format!("h{u}")).or_insert_with(|| pk.clone());
                            assert_eq!(*seen, pk, "user {u} step {j}: another pk");
                        }
                    }
                    wrong
                })
            })
            .collect();
        for handle in handles {
            let wrong = handle.await.expect("no panic");
            assert!(wrong.is_empty(), "{wrong:#?}");
        }
        // In process, every response kept until the end.
        let clock = ManualClock::new(BASE);
        let inner = tower::service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        let service = build(&clock).layer(inner);
        let handles: Vec<_> = (0..96_u64)
            .map(|u| {
                let service = service.clone();
                tokio::spawn(async move {
                    let c = 1 + u % 37;
                    let mut kept = Vec::new();
                    for j in 1..=STEPS {
                        let response = service
                            .clone()
                            .oneshot(request(&format!("k{u}"), c))
                            .await
                            .expect("a response");
                        kept.push((u, c, j, response));
                        tokio::task::yield_now().await;
                    }
                    kept
                })
            })
            .collect();
        let mut all = Vec::new();
        for handle in handles {
            all.extend(handle.await.expect("no panic"));
        }
        for (u, c, j, response) in all {
            let (policy, limit) = expected(n, c, j);
            let h = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    .unwrap_or_default()
            };
            assert_eq!(response.status(), StatusCode::OK, "user {u} step {j}");
            let (got_policy, p1) = strip_pk(&h("ratelimit-policy"));
            let (got_limit, p2) = strip_pk(&h("ratelimit"));
            assert_eq!(got_policy, policy, "user {u} step {j}");
            assert_eq!(got_limit, limit, "user {u} step {j}");
            if let Some(pk) = one_pk(&[p1, p2]) {
                let mut pks = pks.lock().expect("pks");
                let seen = pks.entry(format!("k{u}")).or_insert_with(|| pk.clone());
                assert_eq!(*seen, pk, "user {u} step {j}: another pk");
            }
        }
        let pks = pks.lock().expect("pks");
        let distinct: std::collections::HashSet<&String> = pks.values().collect();
        assert_eq!(distinct.len(), pks.len(), "two callers share a pk");
        if partition {
            assert_eq!(pks.len(), 2 * 96);
        }
    }

    /// Rejections with every body style the crate writes from the buffer, many at once
    /// on many threads: the text body and `Retry-After` of each are exactly its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn rejections_at_once_on_many_threads_carry_their_own_retry_after_and_body() {
        rejections_at_once(false).await;
    }

    /// The same as gRPC calls: each trailers-only `RESOURCE_EXHAUSTED` carries its own
    /// `grpc-retry-pushback-ms`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn grpc_rejections_at_once_on_many_threads_carry_their_own_pushback() {
        rejections_at_once(true).await;
    }

    async fn rejections_at_once(grpc: bool) {
        let clock = ManualClock::new(BASE);
        // Windows of 1 per 7 s … per 300 s: each caller's Retry-After is its own.
        let periods: Vec<u64> = (0..16).map(|i| 7 + 19 * i).collect();
        let policies: Vec<Policy> = periods
            .clone()
            .into_iter()
            .map(|p| {
                Policy::new(
                    format!("p{p}"),
                    Quota::new(1, Duration::from_secs(p)).expect("quota"),
                )
                .expect("a policy")
                .algorithm(Algorithm::FixedWindow)
                .key(key::header("x-user").expect("a header name"))
                .costs(move |parts: &http::request::Parts| {
                    u32::from(
                        parts.headers.get("x-period").and_then(|v| v.to_str().ok())
                            == Some(&p.to_string()),
                    )
                })
            })
            .collect();
        let layer = RateLimitLayer::builder()
            .policies(policies)
            .store(MemoryStore::with_clock(clock.clone()))
            .build()
            .expect("a layer");
        let inner = tower::service_fn(|_req: Request<Full<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
        });
        let service = layer.layer(inner);
        let handles: Vec<_> = (0..64_u64)
            .map(|u| {
                let service = service.clone();
                let period = periods[(u % 16) as usize];
                tokio::spawn(async move {
                    let mut kept = Vec::new();
                    for _ in 0..20 {
                        let mut req = Request::get("/");
                        if grpc {
                            req = Request::post("/pkg.Service/Method")
                                .header("content-type", "application/grpc");
                        }
                        let req = req
                            .header("x-user", format!("u{u}"))
                            .header("x-period", period.to_string())
                            .body(Full::default())
                            .expect("a request");
                        kept.push(service.clone().oneshot(req).await.expect("a response"));
                    }
                    (period, kept)
                })
            })
            .collect();
        let mut rejected = 0;
        for handle in handles {
            let (period, kept) = handle.await.expect("no panic");
            for (i, response) in kept.into_iter().enumerate() {
                let (parts, body) = response.into_parts();
                let body = body.collect().await.expect("a body").to_bytes();
                if i == 0 {
                    assert_eq!(parts.status, StatusCode::OK, "p{period}");
                    continue;
                }
                rejected += 1;
                // Windows are aligned to the epoch: the first ends at the next
                // multiple of the period.
                let wait = period - BASE.as_secs() % period;
                if grpc {
                    let h = |name: &str| {
                        parts
                            .headers
                            .get(name)
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                    };
                    assert_eq!(parts.status, StatusCode::OK, "p{period}");
                    assert_eq!(h("grpc-status").as_deref(), Some("8"), "p{period}");
                    assert_eq!(
                        h("grpc-retry-pushback-ms"),
                        Some((wait * 1_000).to_string()),
                        "p{period}"
                    );
                    continue;
                }
                assert_eq!(parts.status, StatusCode::TOO_MANY_REQUESTS, "p{period}");
                assert_eq!(
                    parts
                        .headers
                        .get("retry-after")
                        .map(|v| v.as_bytes().to_vec()),
                    Some(wait.to_string().into_bytes()),
                    "p{period}"
                );
                assert_eq!(
                    String::from_utf8_lossy(&body),
                    format!("rate limit exceeded: retry after {wait} s\n"),
                    "p{period}"
                );
            }
        }
        assert_eq!(rejected, 64 * 19);
    }
}
