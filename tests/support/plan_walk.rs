//! Random walks of operators' calls under plans, on two stores at once: checks under
//! two or three callers' quotas (`check_with`; one of them over another period), the
//! limit's own checks and peeks, `penalize`, `reset`, `block` (and lifting it), a
//! penalty box on some walks, and a clock that steps (a little, past a window, past
//! the memory store's sweep of idle state). Every answer of the second store must be
//! the first's: allowed, remaining, retry and reset times, block, trips.
//!
//! The seed of a walk that differs is in the failure's message; run one walk again with
//! [`walk`].

use std::time::Duration;

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, Decision, Key, Limit, Limiter, Penalty, Quota, StoreError};

use crate::rng::Rng;

/// Every walk starts here: 2023-11-14T00:00:00Z.
const BASE: Duration = Duration::from_secs(1_699_920_000);

/// The algorithms a walk picks from (the counters with 4 buckets: every quota's
/// period below divides by 4).
const ALGORITHMS: [Algorithm; 7] = [
    Algorithm::FixedWindow,
    Algorithm::SlidingWindow,
    Algorithm::SlidingWindowCounters { buckets: 4 },
    Algorithm::SlidingWindowLog,
    Algorithm::TokenBucket,
    Algorithm::Gcra,
    Algorithm::LeakyBucket,
];

/// How alike two answers must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// Equal decisions.
    Exact,
    /// The same admission, block, capacity and quota, and `remaining` within 1: a
    /// denial answered without the state leaves it as it was, where a store that
    /// decides re-counts it under the denied request's quota, rounding up (a plan's
    /// fluid usage is counted in whole requests when the quota changes).
    Admission,
}

/// Whether `a` and `b` are alike under `compare`.
fn alike(a: &Decision, b: &Decision, compare: Compare) -> bool {
    match compare {
        Compare::Exact => a == b,
        Compare::Admission => {
            (a.allowed, a.blocked_for, a.capacity, a.quota)
                == (b.allowed, b.blocked_for, b.capacity, b.quota)
                && a.remaining.abs_diff(b.remaining) <= 1
        }
    }
}

/// What one step did, for the failure's message.
#[derive(Debug, Clone)]
enum Step {
    CheckWith { plan: usize, cost: u32 },
    Check { cost: u32 },
    Peek,
    Penalize { cost: u32 },
    Reset,
    Block { ms: u64 },
    Advance { us: u64 },
}

/// A walk's limit (its algorithm, and a penalty box or none) and its plans.
fn setup(rng: &mut Rng) -> (Limit, Vec<Quota>) {
    let algorithm = ALGORITHMS[rng.below(ALGORITHMS.len() as u64) as usize];
    let fluid = matches!(
        algorithm,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
    );
    let second = Duration::from_secs(1);
    let own = Quota::new(10, second).expect("a quota");
    let mut plans = vec![
        Quota::new(20, second).expect("a quota"),
        Quota::new(12, Duration::from_secs(4)).expect("a quota"),
    ];
    if fluid {
        plans.push(
            Quota::new(6, second)
                .and_then(|q| q.with_burst(3))
                .expect("a quota"),
        );
    } else if rng.below(2) == 0 {
        plans.push(Quota::new(4, second).expect("a quota"));
    }
    let mut limit = Limit::new("api", own)
        .expect("a limit")
        .algorithm(algorithm);
    if rng.below(2) == 0 {
        limit = limit.penalty(
            Penalty::after(3)
                .within(Duration::from_secs(2))
                .block_for(Duration::from_millis(1_500)),
        );
    }
    (limit, plans)
}

/// The next step of a walk.
fn next_step(rng: &mut Rng, plans: usize) -> Step {
    match rng.below(20) {
        0..=6 => Step::CheckWith {
            plan: rng.below(plans as u64) as usize,
            cost: rng.below(4) as u32,
        },
        7 | 8 => Step::Check {
            cost: rng.below(4) as u32,
        },
        9 => Step::Peek,
        10 | 11 => Step::Penalize {
            cost: rng.below(8) as u32,
        },
        12 => Step::Reset,
        13 => Step::Block {
            ms: [0, 300, 2_000][rng.below(3) as usize],
        },
        14..=16 => Step::Advance {
            us: rng.below(200_000),
        },
        17 | 18 => Step::Advance {
            us: rng.below(2_500_000),
        },
        _ => Step::Advance {
            // Past the memory store's sweep (a second) and most states' idle time.
            us: 1_000_000 + rng.below(6_000_000),
        },
    }
}

/// One step on one limiter: its answer (`None` for a reset, or a clock step).
async fn run(
    limiter: &Limiter,
    plans: &[Quota],
    key: &Key,
    step: &Step,
) -> Result<Option<Decision>, StoreError> {
    Ok(match *step {
        Step::CheckWith { plan, cost } => {
            Some(limiter.check_with("api", key, cost, plans[plan]).await?)
        }
        Step::Check { cost } => Some(limiter.check("api", key, cost).await?),
        Step::Peek => Some(limiter.peek("api", key).await?),
        Step::Penalize { cost } => Some(limiter.penalize("api", key, cost).await?),
        Step::Reset => {
            limiter.reset("api", key).await?;
            None
        }
        Step::Block { ms } => Some(limiter.block("api", key, Duration::from_millis(ms)).await?),
        Step::Advance { .. } => None,
    })
}

/// Walk `seed` of `steps` steps on a store made by `first` and one by `second` (each
/// given the walk's clock): `Err` with the seed, the steps so far and both answers at
/// the first difference.
pub async fn walk<A: Store, B: Store>(
    (seed, compare): (u64, Compare),
    steps: usize,
    first: impl Fn(ManualClock) -> A,
    second: impl Fn(ManualClock) -> B,
) -> Result<(), String> {
    let mut rng = Rng(seed);
    let (limit, plans) = setup(&mut rng);
    let clock = ManualClock::new(BASE + Duration::from_micros(rng.below(1_000_000)));
    let limiter = |store| {
        Limiter::builder()
            .limit(limit.clone())
            .store(store)
            .build()
            .expect("a limiter")
    };
    let one = limiter(first(clock.clone()));
    let two = Limiter::builder()
        .limit(limit.clone())
        .store(second(clock.clone()))
        .build()
        .expect("a limiter");
    let key = Key::from(format!("walker-{seed}"));
    let mut done: Vec<Step> = Vec::new();
    for _ in 0..steps {
        let step = next_step(&mut rng, plans.len());
        if let Step::Advance { us } = step {
            clock.advance(Duration::from_micros(us));
        }
        let a = run(&one, &plans, &key, &step).await;
        let b = run(&two, &plans, &key, &step).await;
        if std::env::var_os("PLAN_WALK_TRACE").is_some() {
            eprintln!(
                "{step:?} at {:?}\n  {a:?}\n  {b:?}",
                tollgate::clock::Clock::now(&clock)
            );
        }
        done.push(step);
        let same = match (&a, &b) {
            (Ok(Some(a)), Ok(Some(b))) => alike(a, b, compare),
            (Ok(a), Ok(b)) => a.is_none() && b.is_none(),
            (Err(a), Err(b)) => a.kind() == b.kind(),
            _ => false,
        };
        if !same {
            let shown: Vec<String> = done
                .iter()
                .skip(done.len().saturating_sub(12))
                .map(|s| format!("{s:?}"))
                .collect();
            return Err(format!(
                "walk seed {seed:#x} ({:?}, penalty {}, plans {plans:?}) differs at step {}:\n\
                 last steps: {}\nfirst:  {a:?}\nsecond: {b:?}",
                limit.get_algorithm(),
                limit.get_penalty().is_some(),
                done.len(),
                shown.join(", "),
            ));
        }
    }
    Ok(())
}

/// `walks` walks of `steps` steps from seeds derived from `seed`: the differences
/// found, each with its seed (empty when the stores agree throughout).
pub async fn walks<A: Store, B: Store>(
    (seed, compare): (u64, Compare),
    walks: u64,
    steps: usize,
    first: impl Fn(ManualClock) -> A,
    second: impl Fn(ManualClock) -> B,
) -> Vec<String> {
    let mut differences = Vec::new();
    let mut seeds = Rng(seed);
    for _ in 0..walks {
        let seed = seeds.next() | 1;
        if let Err(difference) = walk((seed, compare), steps, &first, &second).await {
            differences.push(difference);
        }
    }
    differences
}

/// A penalty reaches a plan caller under another period even after the store swept
/// that caller's idle state (and, on the memory store, its table): 10/s, a plan of
/// 12 per 4 s decided once, idle for ten seconds; a penalty of 4 through the limit,
/// then a check of 3 under the plan leaves 12 − 4 − 3 = 5, on every store alike.
pub async fn a_penalty_reaches_a_plan_caller_whose_state_was_swept<S: Store>(
    make_store: impl Fn(ManualClock) -> S,
) -> Result<(), Box<dyn std::error::Error>> {
    let clock = ManualClock::new(BASE);
    let limiter = Limiter::builder()
        .limit(Limit::new("api", Quota::per_second(10))?)
        .store(make_store(clock.clone()))
        .build()?;
    let plan = Quota::new(12, Duration::from_secs(4))?;
    let key = Key::from("planned");
    assert!(limiter.check_with("api", &key, 2, plan).await?.allowed);
    // Idle, and swept: the key's own checks under the limit drive the memory store's
    // sweeps of its shard.
    for _ in 0..4 {
        clock.advance(Duration::from_secs(3));
        limiter.check("api", &key, 1).await?;
    }
    limiter.penalize("api", &key, 4).await?;
    let planned = limiter.check_with("api", &key, 3, plan).await?;
    assert_eq!((planned.allowed, planned.remaining), (true, 5));
    Ok(())
}
