//! Exactness under concurrency: many tasks, threads and limiter instances on one key
//! admit exactly the capacity, never more.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::immediate::immediate;
use tokio::sync::Barrier;
use tollgate::clock::ManualClock;
use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};

const BASE: Duration = Duration::from_secs(1_699_920_000);

const ALGORITHMS: [Algorithm; 7] = support::every_algorithm(10);

fn limiter(algorithm: Algorithm, quota: Quota, store: &MemoryStore) -> Limiter {
    Limiter::builder()
        .limit(
            Limit::new("hot", quota)
                .expect("policy")
                .algorithm(algorithm),
        )
        .store(store.clone())
        .build()
        .expect("limiter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundred_tasks_on_a_fresh_key_admit_exactly_the_limit() {
    for algorithm in ALGORITHMS {
        let store = MemoryStore::with_clock(ManualClock::new(BASE));
        let limiter = limiter(algorithm, Quota::per_minute(5), &store);
        let barrier = Arc::new(Barrier::new(100));
        let tasks: Vec<_> = (0..100)
            .map(|_| {
                let (limiter, barrier) = (limiter.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    limiter
                        .check("hot", &Key::from("fresh"), 1)
                        .await
                        .expect("memory store")
                        .allowed
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += usize::from(task.await.expect("task"));
        }
        assert_eq!(admitted, 5, "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_limiter_instances_on_one_store_share_the_quota() {
    for algorithm in ALGORITHMS {
        let store = MemoryStore::with_clock(ManualClock::new(BASE));
        let instances: Vec<Limiter> = (0..4)
            .map(|_| limiter(algorithm, Quota::per_hour(37), &store))
            .collect();
        let admitted = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let limiter = instances[i % 4].clone();
                let admitted = admitted.clone();
                tokio::spawn(async move {
                    for _ in 0..10 {
                        let d = limiter
                            .check("hot", &Key::from("shared"), 1)
                            .await
                            .expect("store");
                        admitted.fetch_add(u64::from(d.allowed), Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        assert_eq!(admitted.load(Ordering::Relaxed), 37, "{algorithm}");
    }
}

/// 8 threads × 100k checks on one hot key with the clock frozen: exactly the capacity.
#[test]
fn eight_threads_hammering_one_key_admit_exactly_the_capacity() {
    for algorithm in ALGORITHMS {
        let store = MemoryStore::with_clock(ManualClock::new(BASE));
        let limiter = limiter(algorithm, Quota::per_second(1_000), &store);
        let admitted = hammer(&limiter, 8, 100_000);
        assert_eq!(admitted, 1_000, "{algorithm}");
    }
}

/// The same with the clock moving: admissions never exceed what the elapsed time
/// allows.
#[test]
fn eight_threads_with_a_moving_clock_never_over_admit() {
    for algorithm in ALGORITHMS {
        let clock = ManualClock::new(BASE);
        let store = MemoryStore::with_clock(clock.clone());
        let quota = Quota::per_second(1_000);
        let limiter = limiter(algorithm, quota, &store);
        let ticker = Ticker::start(&clock, Duration::from_micros(997));
        let admitted = hammer(&limiter, 8, 20_000);
        ticker.stop();
        let elapsed_us = tollgate::clock::Clock::now(&clock)
            .saturating_sub(BASE)
            .as_micros() as u64;
        // Every algorithm admits at most L per aligned period it touches; the fluid
        // ones at most B + L·t/P. Both are ≤ L · (periods touched + 1).
        let periods = elapsed_us / 1_000_000 + 2;
        assert!(
            admitted <= 1_000 * periods,
            "{algorithm}: {admitted} admitted in {elapsed_us} µs"
        );
        assert!(
            admitted >= 1_000,
            "{algorithm}: the initial capacity was not admitted"
        );
    }
}

fn hammer(limiter: &Limiter, threads: usize, per_thread: usize) -> u64 {
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                let key = Key::from("hot");
                let mut mine = 0;
                for _ in 0..per_thread {
                    let d = immediate(limiter.check("hot", &key, 1)).expect("store");
                    mine += u64::from(d.allowed);
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    admitted.into_inner()
}

/// GCRA and the leaky bucket decide for a stored key under the shard's read lock with a
/// compare-and-swap: with the clock moving under 8 threads, they admit no more than the
/// burst plus one emission interval's worth per elapsed `T`, the fluid bound itself.
#[test]
fn atomic_states_under_a_moving_clock_keep_the_fluid_bound() {
    for algorithm in [Algorithm::Gcra, Algorithm::LeakyBucket] {
        let clock = ManualClock::new(BASE);
        let store = MemoryStore::with_clock(clock.clone());
        // T = 1 ms, burst 1 000; costs of 1 and 3 mixed so that CAS retries see
        // different steps.
        let limiter = limiter(algorithm, Quota::per_second(1_000), &store);
        let ticker = Ticker::start(&clock, Duration::from_micros(113));
        let admitted_cost = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for thread in 0..8_u64 {
                let (limiter, admitted_cost) = (&limiter, &admitted_cost);
                scope.spawn(move || {
                    let key = Key::from("hot");
                    let cost = if thread % 2 == 0 { 1 } else { 3 };
                    let mut mine = 0_u64;
                    for _ in 0..20_000 {
                        let d = immediate(limiter.check("hot", &key, cost)).expect("store");
                        mine += if d.allowed { u64::from(cost) } else { 0 };
                    }
                    admitted_cost.fetch_add(mine, Ordering::Relaxed);
                });
            }
        });
        ticker.stop();
        let elapsed_us = tollgate::clock::Clock::now(&clock)
            .saturating_sub(BASE)
            .as_micros() as u64;
        let admitted = admitted_cost.into_inner();
        let bound = 1_000 + elapsed_us / 1_000;
        assert!(
            admitted <= bound,
            "{algorithm}: {admitted} tokens admitted in {elapsed_us} µs, bound {bound}"
        );
        assert!(admitted >= 1_000, "{algorithm}: the burst was not admitted");
    }
}

/// A thread advancing a manual clock by `step` as fast as it can, until stopped.
struct Ticker {
    ticking: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Ticker {
    fn start(clock: &ManualClock, step: Duration) -> Self {
        let ticking = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let thread = {
            let (clock, ticking) = (clock.clone(), ticking.clone());
            std::thread::spawn(move || {
                while ticking.load(Ordering::Relaxed) {
                    clock.advance(step);
                    std::thread::yield_now();
                }
            })
        };
        Self { ticking, thread }
    }

    fn stop(self) {
        self.ticking.store(false, Ordering::Relaxed);
        self.thread.join().expect("ticker");
    }
}
