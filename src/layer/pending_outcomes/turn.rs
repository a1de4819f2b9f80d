//! Waiting for a turn: a request whose caller has charges awaiting their outcome
//! looks at the store before it is charged, and waits (bounded) while only those
//! charges stand in the way.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, timeout_at};

use super::table::{Events, TakeTurn, Target, Turn};
use super::{OutcomeHold, Parked};
use crate::layer::few::{Checks, Decided};
use crate::layer::shared::{HeldSlot, Shared, View};
use crate::{Decision, StoreError};

/// What becomes of a request once it is its turn, or its wait ran out.
pub(crate) enum Verdict {
    /// Decide it as usual: a denial now is a real one.
    Decide,
    /// Refused without a charge and without an offence: only charges awaiting their
    /// outcome stood in the way, and the wait for them ran out (or the layer could
    /// hold no more requests). One decision per check, in order.
    Refuse(Decided),
}

/// A waiting request's turn: its hold (when it decides holding its turn), the
/// verdict, and what it is decided with.
pub(crate) type AwaitingTurn =
    Pin<Box<dyn Future<Output = (Option<Box<OutcomeHold>>, Verdict, Parked)> + Send>>;

/// How a look at the store judges a request.
enum Judged {
    /// It fits, or a refusal now would be real (a block, another policy, more than the
    /// pending charges could free): decide.
    Decide,
    /// Only the pending charges of target `i` stand in the way.
    Wait(usize),
}

/// Waits for the turn of `parked`'s request, which charges `targets`, starting from
/// what it found first (`first`), and returns what becomes of it.
pub(crate) fn await_turn(
    first: TakeTurn,
    targets: Vec<(Target, u64)>,
    parked: Parked,
) -> AwaitingTurn {
    Box::pin(async move {
        let deadline = Instant::now() + outcome_wait(&parked.shared, &parked.view, &parked.checks);
        let (hold, verdict) = wait_for_turn(first, &targets, &parked, deadline).await;
        (hold, verdict, parked)
    })
}

/// The shortest outcome wait of the enforced `count_when` policies of `checks`.
fn outcome_wait(shared: &Shared, view: &View, checks: &Checks) -> Duration {
    let policies = view.policies();
    checks
        .iter()
        .filter(|check| check.enforced)
        .map(|check| &policies[check.index])
        .filter(|policy| policy.refunds_some_responses() && shared.wait_of(policy).is_none())
        .map(|policy| policy.outcome_wait)
        .min()
        .unwrap_or_default()
}

/// The loop of [`await_turn`]: take the turn, look, wait for an outcome, again.
async fn wait_for_turn(
    first: TakeTurn,
    targets: &[(Target, u64)],
    parked: &Parked,
    deadline: Instant,
) -> (Option<Box<OutcomeHold>>, Verdict) {
    let Parked {
        shared,
        view,
        checks,
        ..
    } = parked;
    // While it waits, the request is one the layer holds (`max_held`): a place taken
    // at its first wait and kept until its turn.
    let mut place: Option<HeldSlot> = None;
    let mut next = Some(first);
    loop {
        let taken = next
            .take()
            .unwrap_or_else(|| shared.pending_outcomes.take_turn(targets.to_vec()));
        match taken {
            TakeTurn::Untracked => return (None, Verdict::Decide),
            TakeTurn::Busy(mut events) => {
                if !hold_place(&mut place, shared, view, checks, targets)
                    || timeout_at(deadline, events.changed()).await.is_err()
                {
                    // No turn in time: judged on a look of its own.
                    return judge_now(shared, view, checks, targets, None).await;
                }
            }
            TakeTurn::Mine(turn) => {
                if !turn.awaits_outcomes() {
                    return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                }
                let Ok(looked) = look(shared, view, checks).await else {
                    // The store answers the charge as it can (its fail mode).
                    return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                };
                let i = match judge(checks, targets, &looked, Some(&turn)) {
                    Judged::Decide => {
                        return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                    }
                    Judged::Wait(i) => i,
                };
                let Some((seen, events)) = turn.end_watching(i) else {
                    return (None, Verdict::Decide);
                };
                if !hold_place(&mut place, shared, view, checks, targets)
                    || !outcome_known(events, seen, deadline).await
                {
                    return judge_now(shared, view, checks, targets, Some(looked)).await;
                }
            }
        }
    }
}

/// Whether the request has one of the layer's places for held requests, taking one
/// (for its first target) if it has none yet.
fn hold_place(
    place: &mut Option<HeldSlot>,
    shared: &Shared,
    view: &View,
    checks: &Checks,
    targets: &[(Target, u64)],
) -> bool {
    if place.is_none()
        && let Some(((name, key), _)) = targets.first()
        && let Some(check) = checks
            .iter()
            .find(|check| check.key == *key && view.policies()[check.index].name() == *name)
    {
        *place = HeldSlot::take(shared, (name, *key), &view.metrics[check.index]);
    }
    place.is_some()
}

/// Waits until an outcome of the caller is known after `seen` of them were (or its
/// entry is gone: none pending), before `deadline`; `false` when the time ran out.
async fn outcome_known(mut events: watch::Receiver<Events>, seen: u64, deadline: Instant) -> bool {
    timeout_at(deadline, events.wait_for(|events| events.resolved != seen))
        .await
        .is_ok()
}

/// The verdict without a turn or without more waiting: a look at the store (`looked`,
/// if one was just made, else a new one) and what nothing pending would change. A
/// request to be decided takes its turn along when it is free.
async fn judge_now(
    shared: &Shared,
    view: &View,
    checks: &Checks,
    targets: &[(Target, u64)],
    looked: Option<Decided>,
) -> (Option<Box<OutcomeHold>>, Verdict) {
    let looked = match looked {
        Some(looked) => looked,
        None => match look(shared, view, checks).await {
            Ok(looked) => looked,
            Err(_) => return (None, Verdict::Decide),
        },
    };
    let (turn, judged) = match shared.pending_outcomes.take_turn(targets.to_vec()) {
        TakeTurn::Mine(turn) => {
            let judged = judge(checks, targets, &looked, Some(&turn));
            (Some(turn), judged)
        }
        // Another request is being decided: what is pending is not known, so the
        // refusal, if it comes to one, is not counted as an offence.
        TakeTurn::Busy(_) => (None, judge(checks, targets, &looked, None)),
        TakeTurn::Untracked => (None, Judged::Decide),
    };
    match judged {
        Judged::Decide => (
            turn.map(|turn| Box::new(OutcomeHold::Deciding(turn))),
            Verdict::Decide,
        ),
        Judged::Wait(_) => (None, Verdict::Refuse(refusal(checks, targets, looked))),
    }
}

/// The request's checks looked at in the store: no charge, no offence.
async fn look(shared: &Shared, view: &View, checks: &Checks) -> Result<Decided, StoreError> {
    let limiter = &shared.limiter;
    let mut looked = Decided::new();
    for check in checks.iter() {
        let limit = limiter.with_quota(&view.set.limits[check.index], check.quota)?;
        let decision = limiter.store().peek(&limit, &check.key).await?;
        looked.push(decision);
    }
    Ok(looked)
}

/// How `looked` (one decision per check) judges the request; `turn` tells what of
/// each target is pending (without one: a target may still wait, on the assumption
/// that whatever stands in its way beyond its capacity is pending).
fn judge(
    checks: &Checks,
    targets: &[(Target, u64)],
    looked: &[Decision],
    turn: Option<&Turn>,
) -> Judged {
    let mut wait = None;
    let mut t = 0;
    for (check, decision) in checks.iter().zip(looked) {
        // A block refuses it whatever is pending.
        if decision.blocked_for.is_some() {
            return Judged::Decide;
        }
        let fits = decision.remaining >= check.cost;
        let target = check.enforced
            && targets
                .get(t)
                .is_some_and(|((name, key), _)| *name == decision.limit && *key == check.key);
        if !target {
            if !fits {
                // Refused by a policy whose charges are not in question.
                return Judged::Decide;
            }
            continue;
        }
        let pending = turn.map_or(u64::MAX, |turn| turn.pending(t));
        if !fits {
            if decision.remaining.saturating_add(pending) < check.cost {
                // More than its pending charges could free: a real refusal.
                return Judged::Decide;
            }
            wait.get_or_insert(t);
        }
        t += 1;
    }
    wait.map_or(Judged::Decide, Judged::Wait)
}

/// The refusal of a request that only pending charges kept out: its looks, each
/// target that does not fit denied, with a retry in a second.
fn refusal(checks: &Checks, targets: &[(Target, u64)], looked: Decided) -> Decided {
    looked
        .into_iter()
        .zip(checks.iter())
        .map(|(decision, check)| {
            let target = targets
                .iter()
                .any(|((name, key), _)| *name == decision.limit && *key == check.key);
            if target && check.enforced && decision.remaining < check.cost {
                Decision {
                    allowed: false,
                    retry_after: Some(Duration::from_secs(1)),
                    ..decision
                }
            } else {
                decision
            }
        })
        .collect()
}
