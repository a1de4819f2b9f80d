//! Random policy sets: what a case limits, as data (printed on failure), and the
//! `Policy` objects built from it.
//!
//! Small numbers on purpose: a limit of 2 to 6 is spent in a few requests, so that
//! every stream reaches denials, blocks, holds and refunds.

use std::time::Duration;

use http::StatusCode;
use support::rng::Rng;
use tollgate::{Algorithm, Penalty, Policy, Quota, key, layer::Costs};

use crate::known::{self, Case};

/// How many callers a case has (`x-user: u0`, `u1`, …); `u1` is on the pro plan.
pub(crate) const USERS: u64 = 3;

/// What a policy counts under and how.
#[derive(Debug, Clone)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "a spec's switches, printed on failure"
)]
pub(crate) struct PolicySpec {
    pub(crate) name: &'static str,
    pub(crate) algorithm: Algorithm,
    pub(crate) limit: u64,
    pub(crate) period: Duration,
    /// A burst other than `limit` (token bucket, GCRA, leaky bucket only).
    pub(crate) burst: Option<u64>,
    /// Every request's cost (the estimate of a metered one; the byte advance).
    pub(crate) cost: u32,
    /// Keyed by `x-user`, or one key for everyone.
    pub(crate) per_user: bool,
    /// `quota_from`: the pro plan (`x-plan: pro`) doubles the limit and burst.
    pub(crate) plans: bool,
    /// `count_when`: only responses of 400 and above count.
    pub(crate) count_failures: bool,
    pub(crate) penalty: Option<PenaltySpec>,
    pub(crate) rollout: RolloutSpec,
    /// `Policy::wait`: hold a request that would be admitted within this long.
    pub(crate) wait: Option<Duration>,
    pub(crate) in_flight: Option<u32>,
    pub(crate) meter: MeterSpec,
}

/// A penalty box: the `after`-th rejection within an hour blocks for `block_for`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PenaltySpec {
    pub(crate) after: u32,
    pub(crate) block_for: Duration,
    /// Escalates: the next trip within an hour blocks twice as long.
    pub(crate) escalate: bool,
}

/// Who the policy is enforced for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RolloutSpec {
    Enforce,
    Shadow,
    /// `enforce(share)`: a stable share of keys.
    Share(f64),
}

/// What a request is charged in the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MeterSpec {
    /// Its cost.
    Plain,
    /// `metered()`: what the handler reports (at most `max_actual`), else the cost.
    Metered { max_actual: u64 },
    /// `meter_request_bytes()`: the request body's bytes.
    RequestBytes,
}

/// Where the state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreSpec {
    Memory,
    Redis,
}

#[allow(
    clippy::struct_excessive_bools,
    reason = "a case's switches, printed on failure"
)]
/// One case: the policy sets (the first in force at the start, the others reached by
/// reloads), the store and the layer's options.
#[derive(Debug, Clone)]
pub(crate) struct CaseSpec {
    pub(crate) sets: Vec<Vec<PolicySpec>>,
    pub(crate) store: StoreSpec,
    /// `LeasedStore` over the store.
    pub(crate) leased: bool,
    /// `Fallback` over a primary that fails while the stream says so.
    pub(crate) fallback: bool,
    pub(crate) max_held: usize,
    pub(crate) max_held_per_key: usize,
    /// Over real TCP (an axum server and a hyper client) instead of `oneshot`.
    pub(crate) tcp: bool,
    /// Only what answers alike on every store (no concurrency, no client leaving
    /// early, no leases, no fallback, no byte limits): the memory ≡ Redis comparison.
    pub(crate) deterministic: bool,
}

impl CaseSpec {
    pub(crate) fn has(&self, what: impl Fn(&PolicySpec) -> bool) -> bool {
        self.sets.iter().flatten().any(what)
    }

    /// Whether a hold cap can be reached: some policy holds requests.
    pub(crate) fn holds(&self) -> bool {
        self.has(|p| {
            p.wait.is_some() || p.algorithm == Algorithm::LeakyBucket || p.in_flight.is_some()
        })
    }
}

const NAMES: [&str; 3] = ["p0", "p1", "p2"];

fn pick<T: Copy>(rng: &mut Rng, from: &[T]) -> T {
    from[rng.below(from.len() as u64) as usize]
}

fn chance(rng: &mut Rng, percent: u64) -> bool {
    rng.below(100) < percent
}

/// A random case on `store`.
pub(crate) fn case(rng: &mut Rng, store: StoreSpec, deterministic: bool) -> CaseSpec {
    if !deterministic
        && rng.below(100) < 30
        && let Some(case) = seam(rng, store)
    {
        return case;
    }
    let count = 1 + rng.below(3) as usize;
    let first: Vec<PolicySpec> = (0..count)
        .map(|i| policy(rng, NAMES[i], deterministic))
        .collect();
    let mut sets = vec![first.clone()];
    if chance(rng, 50) {
        sets.push(variant(rng, &first));
    }
    let mut case = CaseSpec {
        sets,
        store,
        leased: !deterministic && chance(rng, 20),
        fallback: !deterministic && chance(rng, 15),
        max_held: pick(rng, &[1, 2, 4, 1024]),
        max_held_per_key: pick(rng, &[1, 2, 128]),
        tcp: chance(rng, 15),
        deterministic,
    };
    gate_known(&mut case);
    case
}

/// A plain enforced per-user policy: the base the seams below change.
fn plain(name: &'static str, algorithm: Algorithm, limit: u64, period: Duration) -> PolicySpec {
    PolicySpec {
        name,
        algorithm,
        limit,
        period,
        burst: None,
        cost: 1,
        per_user: true,
        plans: false,
        count_failures: false,
        penalty: None,
        rollout: RolloutSpec::Enforce,
        wait: None,
        in_flight: None,
        meter: MeterSpec::Plain,
    }
}

/// A case shaped to reach one of issue 35's seams, once its fix is merged (or forced:
/// see `known.rs`); `None` when none is. Random streams find these seams too, but
/// rarely: a shape makes them one case in a few.
fn seam(rng: &mut Rng, store: StoreSpec) -> Option<CaseSpec> {
    let seams: Vec<Case> = [
        Case::ShadowHoldCap,
        Case::MeterAfterRefund,
        Case::SettleAfterReload,
        Case::LeasesPenalty,
    ]
    .into_iter()
    .filter(|c| known::fixed(*c))
    .collect();
    if seams.is_empty() {
        return None;
    }
    let minute = Duration::from_secs(60);
    let queue = |shadow: bool| PolicySpec {
        per_user: false,
        rollout: if shadow {
            RolloutSpec::Shadow
        } else {
            RolloutSpec::Enforce
        },
        ..plain("p1", Algorithm::LeakyBucket, 5, Duration::from_millis(100))
    };
    let mut case = CaseSpec {
        sets: Vec::new(),
        store,
        leased: false,
        fallback: false,
        max_held: 1 + rng.below(2) as usize,
        max_held_per_key: 128,
        tcp: false,
        deterministic: false,
    };
    match pick(rng, &seams) {
        // An enforced per-key limit beside a shadowed queue, past the hold cap.
        Case::ShadowHoldCap => {
            case.sets = vec![vec![
                plain("p0", Algorithm::FixedWindow, 3, minute),
                queue(true),
            ]];
        }
        // A metered request refunded at the hold cap, settled when its body ends.
        Case::MeterAfterRefund => {
            let metered = PolicySpec {
                meter: MeterSpec::Metered { max_actual: 12 },
                ..plain("p0", Algorithm::FixedWindow, 6, minute)
            };
            case.sets = vec![vec![metered, queue(false)]];
        }
        // A metered charge of 5 settled after a reload to another algorithm.
        Case::SettleAfterReload => {
            let metered = PolicySpec {
                cost: 5,
                meter: MeterSpec::Metered { max_actual: 12 },
                ..plain("p0", Algorithm::FixedWindow, 10, minute)
            };
            let reloaded = PolicySpec {
                algorithm: Algorithm::Gcra,
                ..metered.clone()
            };
            case.sets = vec![vec![metered], vec![reloaded]];
            case.max_held = 1024;
        }
        // Rejections answered from a lease, beside a penalty box.
        _ => {
            let boxed = PolicySpec {
                penalty: Some(PenaltySpec {
                    after: 3,
                    block_for: Duration::from_secs(600),
                    escalate: false,
                }),
                ..plain("p0", Algorithm::FixedWindow, 3, minute)
            };
            case.sets = vec![vec![boxed]];
            case.leased = true;
            case.max_held = 1024;
        }
    }
    Some(case)
}

fn policy(rng: &mut Rng, name: &'static str, deterministic: bool) -> PolicySpec {
    let buckets = pick(rng, &[2, 4]);
    let algorithm = pick(rng, &support::every_algorithm(buckets));
    let meter = match rng.below(10) {
        0 | 1 => MeterSpec::Metered {
            max_actual: pick(rng, &[4, 12]),
        },
        2 if !deterministic => MeterSpec::RequestBytes,
        _ => MeterSpec::Plain,
    };
    let limit = if meter == MeterSpec::RequestBytes {
        pick(rng, &[40, 100])
    } else {
        2 + rng.below(5)
    };
    // The leaky bucket holds for real time: its turns are kept short.
    let period = if algorithm == Algorithm::LeakyBucket {
        Duration::from_millis(pick(rng, &[100, 200]))
    } else {
        Duration::from_millis(pick(rng, &[100, 1_000, 10_000, 60_000]))
    };
    let fluid = matches!(
        algorithm,
        Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
    );
    let burst = (fluid && chance(rng, 40)).then(|| 1 + rng.below(limit + 2));
    let capacity = burst.unwrap_or(limit);
    let cost = if chance(rng, 20) && capacity >= 2 {
        2
    } else {
        1
    };
    let rollout = match rng.below(10) {
        0 => RolloutSpec::Shadow,
        1 => RolloutSpec::Share(0.5),
        _ => RolloutSpec::Enforce,
    };
    PolicySpec {
        name,
        algorithm,
        limit,
        period,
        burst,
        cost,
        per_user: chance(rng, 80),
        plans: chance(rng, 25),
        count_failures: chance(rng, 25),
        penalty: chance(rng, 30).then(|| PenaltySpec {
            after: 1 + rng.below(3) as u32,
            block_for: Duration::from_millis(pick(rng, &[300, 2_000, 30_000])),
            escalate: chance(rng, 30),
        }),
        rollout,
        // A byte limit holds each frame for its place within the policy's wait: kept to
        // 1 ms, so that the bytes count at the instant the model books them (± 1 ms).
        wait: if meter == MeterSpec::RequestBytes {
            Some(Duration::from_millis(1))
        } else {
            (!deterministic && chance(rng, 20)).then(|| Duration::from_millis(pick(rng, &[20, 60])))
        },
        in_flight: (!deterministic && chance(rng, 15)).then(|| 1 + rng.below(2) as u32),
        meter,
    }
}

/// The same set with one policy changed as a reload would: its algorithm, its limit,
/// its rollout or what counts.
fn variant(rng: &mut Rng, set: &[PolicySpec]) -> Vec<PolicySpec> {
    let mut set = set.to_vec();
    let i = rng.below(set.len() as u64) as usize;
    let p = &mut set[i];
    match rng.below(4) {
        0 if p.algorithm != Algorithm::LeakyBucket && p.burst.is_none() => {
            p.algorithm = pick(
                rng,
                &[
                    Algorithm::FixedWindow,
                    Algorithm::Gcra,
                    Algorithm::SlidingWindowLog,
                ],
            );
        }
        1 if p.meter != MeterSpec::RequestBytes => p.limit = 2 + rng.below(5),
        2 => {
            p.rollout = if p.rollout == RolloutSpec::Enforce {
                RolloutSpec::Shadow
            } else {
                RolloutSpec::Enforce
            };
        }
        _ => p.count_failures = !p.count_failures,
    }
    let capacity = p.burst.unwrap_or(p.limit);
    p.cost = p.cost.min(capacity as u32);
    set
}

/// Leaves out the combinations that reach a known defect whose fix is not merged yet
/// (see `known.rs`).
fn gate_known(case: &mut CaseSpec) {
    let holds = case.holds() && case.max_held < 1024;
    let shadowed = case.has(|p| p.rollout != RolloutSpec::Enforce);
    if holds && shadowed && !known::fixed(Case::ShadowHoldCap) {
        for p in case.sets.iter_mut().flatten() {
            p.rollout = RolloutSpec::Enforce;
        }
    }
    for p in case.sets.iter_mut().flatten() {
        if p.meter == MeterSpec::RequestBytes
            && p.count_failures
            && !known::fixed(Case::BytesCountWhen)
        {
            p.count_failures = false;
        }
    }
    if case.has(|p| matches!(p.meter, MeterSpec::Metered { .. }))
        && case.holds()
        && !known::fixed(Case::MeterAfterRefund)
    {
        case.max_held = 1024;
        case.max_held_per_key = 128;
    }
    if case.leased && case.has(|p| p.penalty.is_some()) && !known::fixed(Case::LeasesPenalty) {
        case.leased = false;
    }
    if case.fallback && !known::fixed(Case::FallbackFlapping) {
        case.fallback = false;
    }
    let deterministic = case.deterministic;
    if deterministic && case.sets[0].len() > 1 && !known::fixed(Case::DenialCacheHidesOtherBoxes) {
        for p in case.sets.iter_mut().flatten() {
            p.penalty = None;
        }
    }
    for p in case.sets.iter_mut().flatten() {
        if deterministic && p.plans && !p.per_user && !known::fixed(Case::PlansOneKeyOnRedis) {
            p.plans = false;
        }
        // The leaky bucket shares GCRA's arithmetic, and its denial of a cost of 2
        // reports `remaining` 1 in memory, 0 on Redis alike (seed 394940202).
        if deterministic
            && matches!(p.algorithm, Algorithm::Gcra | Algorithm::LeakyBucket)
            && p.cost > 1
            && !known::fixed(Case::GcraCostTwoOnRedis)
        {
            p.cost = 1;
        }
        if deterministic
            && matches!(p.meter, MeterSpec::Metered { .. })
            && matches!(
                p.algorithm,
                Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
            )
            && !known::fixed(Case::MeteredFluidOnRedis)
        {
            p.meter = MeterSpec::Plain;
        }
        if p.plans
            && !p.per_user
            && matches!(p.meter, MeterSpec::Metered { .. })
            && !known::fixed(Case::SettleAcrossPlans)
        {
            p.per_user = true;
        }
        if p.wait.is_some() && p.penalty.is_some() && !known::fixed(Case::WaitPenalty) {
            p.penalty = None;
        }
    }
    if case.max_held < 1024
        && case.has(|p| p.in_flight.is_some())
        && !known::fixed(Case::HeldBudget)
    {
        case.max_held = 1024;
    }
}

impl PolicySpec {
    /// The quota a caller on `pro` (or not) is decided under.
    pub(crate) fn quota(&self, pro: bool) -> Quota {
        let factor = if pro && self.plans { 2 } else { 1 };
        let quota = Quota::new(self.limit * factor, self.period).expect("a valid quota");
        match self.burst {
            Some(burst) => quota.with_burst(burst * factor).expect("a valid burst"),
            None => quota,
        }
    }

    /// The `Policy` this spec describes.
    pub(crate) fn build(&self) -> Policy {
        let mut policy = Policy::new(self.name, self.quota(false))
            .expect("a policy")
            .algorithm(self.algorithm)
            .costs(Costs::new().default(self.cost));
        policy = if self.per_user {
            policy.key(key::header("x-user").expect("a header name"))
        } else {
            policy.key(key::global())
        };
        if self.plans {
            let pro = self.quota(true);
            policy = policy.quota_from(move |parts| {
                (parts
                    .headers
                    .get("x-plan")
                    .is_some_and(|plan| plan == "pro"))
                .then_some(pro)
            });
        }
        if self.count_failures {
            policy = policy.count_when(|status: StatusCode| status.as_u16() >= 400);
        }
        if let Some(penalty) = self.penalty {
            let hour = Duration::from_secs(3_600);
            let mut rule = Penalty::after(penalty.after)
                .within(hour)
                .block_for(penalty.block_for);
            if penalty.escalate {
                rule = rule
                    .escalate(&[penalty.block_for * 2])
                    .remember(Duration::from_secs(7_200));
            }
            policy = policy.penalty(rule);
        }
        policy = match self.rollout {
            RolloutSpec::Enforce => policy,
            RolloutSpec::Shadow => policy.shadow(true),
            RolloutSpec::Share(share) => policy.enforce(share).expect("a share"),
        };
        if let Some(wait) = self.wait {
            policy = policy.wait(wait);
        }
        if let Some(max) = self.in_flight {
            policy = policy.in_flight(max).expect("an in-flight bound");
        }
        match self.meter {
            MeterSpec::Plain => policy,
            MeterSpec::Metered { max_actual } => policy.metered().max_actual(max_actual),
            MeterSpec::RequestBytes => policy.meter_request_bytes(),
        }
    }
}
