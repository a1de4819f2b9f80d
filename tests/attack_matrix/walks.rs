//! Memory ≡ Redis for operators' calls under plans: seeded random walks of checks
//! under several callers' quotas, `penalize`, `block`, `reset` and clock steps, on
//! every algorithm, compared answer by answer (the first difference fails, with its
//! seed and step).

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, MemoryStore, Penalty, Quota};

use crate::common::{BASE, redis};

struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Check(u32),
    CheckWith(u32, usize),
    Penalize(u32),
    Block(u64),
    Reset,
    Advance(u64),
}

const PLANS: [(u64, u64); 3] = [(10, 60), (100, 60), (3, 60)];

fn plan(i: usize) -> Quota {
    let (n, secs) = PLANS[i];
    Quota::new(n, Duration::from_secs(secs)).expect("quota")
}

fn walk(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Lcg(seed);
    (0..len)
        .map(|_| match rng.next(12) {
            0..=2 => Step::Check(rng.next(4) as u32),
            3..=6 => Step::CheckWith(rng.next(4) as u32, rng.next(3) as usize),
            7 => Step::Penalize(rng.next(20) as u32),
            8 => Step::Block(rng.next(30)),
            9 => Step::Reset,
            _ => Step::Advance(rng.next(20_000)),
        })
        .collect()
}

fn seen(d: &Decision) -> (bool, u64, Option<Duration>, Option<Duration>) {
    (d.allowed, d.remaining, d.retry_after, d.blocked_for)
}

type Seen = Option<(bool, u64, Option<Duration>, Option<Duration>)>;

async fn run(
    store: impl Store,
    clock: &ManualClock,
    algorithm: Algorithm,
    steps: &[Step],
) -> Vec<Seen> {
    let limit = Limit::new("api", Quota::per_minute(20))
        .expect("limit")
        .algorithm(algorithm)
        .penalty(
            Penalty::after(2)
                .within(Duration::from_secs(5))
                .block_for(Duration::from_secs(30)),
        );
    let limiter = Limiter::builder()
        .limit(limit)
        .store(store)
        .build()
        .expect("limiter");
    let key = Key::from("walker");
    let mut out = Vec::new();
    for step in steps {
        let answer = match *step {
            Step::Check(cost) => limiter
                .check("api", &key, cost)
                .await
                .ok()
                .map(|d| seen(&d)),
            Step::CheckWith(cost, p) => limiter
                .check_with("api", &key, cost, plan(p))
                .await
                .ok()
                .map(|d| seen(&d)),
            Step::Penalize(cost) => limiter
                .penalize("api", &key, cost)
                .await
                .ok()
                .map(|d| seen(&d)),
            Step::Block(secs) => limiter
                .block("api", &key, Duration::from_secs(secs))
                .await
                .ok()
                .map(|d| seen(&d)),
            Step::Reset => limiter
                .reset("api", &key)
                .await
                .ok()
                .map(|()| (true, 0, None, None)),
            Step::Advance(ms) => {
                clock.advance(Duration::from_millis(ms));
                None
            }
        };
        out.push(answer);
    }
    // Where each plan stands at the end.
    for p in 0..PLANS.len() {
        out.push(
            limiter
                .check_with("api", &key, 0, plan(p))
                .await
                .ok()
                .map(|d| seen(&d)),
        );
    }
    out
}

#[tokio::test]
async fn operators_calls_under_plans_answer_alike_on_memory_and_redis() {
    let mut differences = Vec::new();
    for algorithm in Algorithm::ALL {
        if matches!(algorithm, Algorithm::LeakyBucket) {
            continue; // a queue: its delays are another test's subject
        }
        for seed in 1..=25u64 {
            let steps = walk(seed * 7919 + 13, 120);
            let mc = ManualClock::new(BASE);
            let memory = run(MemoryStore::with_clock(mc.clone()), &mc, algorithm, &steps).await;
            let rc = ManualClock::new(BASE);
            let on_redis = run(
                redis(&format!("walk-{seed}"), rc.clone()),
                &rc,
                algorithm,
                &steps,
            )
            .await;
            if let Some(i) = (0..memory.len()).find(|&i| memory[i] != on_redis[i]) {
                let step = steps
                    .get(i)
                    .map_or("final peek".to_string(), |s| format!("{s:?}"));
                differences.push(format!(
                    "{algorithm} seed {seed} step {i} ({step}): memory {:?}, redis {:?}",
                    memory[i], on_redis[i]
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} walks differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
}
