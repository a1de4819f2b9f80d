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
use crate::layer::limiter_calls::{LayerCheck, targets as targets_of};
use crate::layer::shared::{HeldSlot, Shared, View};
use crate::limiter::{Taken, Taking, complete};
use crate::store::{Charge, StoreFuture};
use crate::{Decision, StoreError};

/// What becomes of a request once it is its turn, or its wait ran out.
pub(crate) enum Verdict {
    /// Decide it as usual: a denial now is a real one.
    Decide,
    /// Refused without a charge and without an offence: only charges awaiting their
    /// outcome stood in the way, and the wait for them ran out (or the layer could
    /// hold no more requests). One decision per check, in order.
    Refuse(Decided),
    /// Decided already, by a trial charge (other processes' outcomes awaited): what
    /// it took, kept once the request goes on.
    Tried(Taken),
}

/// A waiting request's turn: its hold (when it decides holding its turn), the
/// verdict, and what it is decided with.
pub(crate) type AwaitingTurn =
    Pin<Box<dyn Future<Output = (Option<Box<OutcomeHold>>, Verdict, Parked)> + Send>>;

/// How a look at the store judges a request.
enum Judged {
    /// A refusal now would be real (a block, another policy): decide.
    Decide,
    /// It fits.
    Fits,
    /// Only the pending charges of target `i` stand in the way.
    Wait(usize),
    /// A target does not fit, and what is pending here could not free enough: a real
    /// refusal, unless charges pending in other processes are refunded.
    Elsewhere,
    /// Another policy refuses it for real, while a target does not fit only for its
    /// pending charges: that refusal is the other policy's, no offence of the target.
    Refused,
}

/// Waits for the turn of `parked`'s request, which charges `targets`, starting from
/// what it found first (`first`), and returns what becomes of it.
pub(crate) fn await_turn(
    first: TakeTurn,
    targets: Vec<(Target, u64)>,
    parked: Parked,
) -> AwaitingTurn {
    Box::pin(async move {
        let (wait, poll) = super::rules(&parked.shared, &parked.view, &parked.checks);
        // Any wait is accepted: one past what the clock can say is as good as forever.
        let now = Instant::now();
        let deadline = now
            .checked_add(wait)
            .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
            .unwrap_or(now);
        let (hold, verdict) = wait_for_turn(first, &targets, &parked, (deadline, poll)).await;
        (hold, verdict, parked)
    })
}

/// The loop of [`await_turn`]: take the turn, look, wait for an outcome, again.
async fn wait_for_turn(
    first: TakeTurn,
    targets: &[(Target, u64)],
    parked: &Parked,
    (deadline, poll): (Instant, Option<Duration>),
) -> (Option<Box<OutcomeHold>>, Verdict) {
    let Parked {
        shared,
        view,
        checks,
        claims,
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
                    return judge_now(parked, targets, None).await;
                }
            }
            TakeTurn::Mine(turn) => {
                if !turn.awaits_outcomes() && poll.is_none() {
                    return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                }
                let Ok(looked) = look(shared, view, checks).await else {
                    // The store answers the charge as it can (its fail mode).
                    return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                };
                let judged = judge(checks, targets, &looked, Some(&turn));
                // A request that also needs in-flight slots takes them before its
                // charge, as usual: no trial for it.
                if let (Judged::Fits, Some(poll), true) = (&judged, poll, claims.is_empty()) {
                    // Another process may charge between the look and the charge: the
                    // charge is a trial, which no denial makes an offence.
                    match trial(shared, view, checks, targets).await {
                        Ok(Tried::Admitted(taken)) => {
                            return (
                                Some(Box::new(OutcomeHold::Deciding(turn))),
                                Verdict::Tried(taken),
                            );
                        }
                        Ok(Tried::Refused(taken)) => return (None, Verdict::Tried(taken)),
                        Ok(Tried::Raced(refused)) if before(deadline, poll) => {
                            drop(turn);
                            if !hold_place(&mut place, shared, view, checks, targets) {
                                // Not held: the trial's refusal, which is no offence.
                                return (None, Verdict::Tried(refused));
                            }
                            tokio::time::sleep(poll).await;
                            continue;
                        }
                        Ok(Tried::Raced(_)) | Err(_) => {}
                    }
                    return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                }
                let i = match (judged, poll) {
                    (Judged::Wait(i), _) => i,
                    (Judged::Refused, _) => {
                        return refused_elsewhere(parked, targets, Some(turn)).await;
                    }
                    // Nothing here could free enough: another process's charges may.
                    (Judged::Elsewhere, Some(poll)) if before(deadline, poll) => {
                        drop(turn);
                        if !hold_place(&mut place, shared, view, checks, targets) {
                            // Not held: refused as the look found it, without an offence.
                            let refused = refusal(checks, targets, looked);
                            return (None, Verdict::Refuse(refused));
                        }
                        tokio::time::sleep(poll).await;
                        continue;
                    }
                    (Judged::Decide | Judged::Fits | Judged::Elsewhere, _) => {
                        return (Some(Box::new(OutcomeHold::Deciding(turn))), Verdict::Decide);
                    }
                };
                let Some((seen, events)) = turn.end_watching(i) else {
                    return (None, Verdict::Decide);
                };
                if !hold_place(&mut place, shared, view, checks, targets)
                    || !outcome_known(events, seen, deadline).await
                {
                    return judge_now(parked, targets, Some(looked)).await;
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
    parked: &Parked,
    targets: &[(Target, u64)],
    looked: Option<Decided>,
) -> (Option<Box<OutcomeHold>>, Verdict) {
    let Parked {
        shared,
        view,
        checks,
        ..
    } = parked;
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
        Judged::Decide | Judged::Fits | Judged::Elsewhere => (
            turn.map(|turn| Box::new(OutcomeHold::Deciding(turn))),
            Verdict::Decide,
        ),
        Judged::Wait(_) => (None, Verdict::Refuse(refusal(checks, targets, looked))),
        Judged::Refused => refused_elsewhere(parked, targets, turn).await,
    }
}

/// A request another policy refuses for real while a target is kept out only by its
/// pending charges: charged as a trial (the targets without their penalty boxes), so
/// that the other policy's refusal counts as usual and the targets' is no offence. A
/// request that also needs in-flight slots is decided as usual. Without its turn (the
/// layer holds no more requests, another of its caller's is being decided) an
/// admission is not tracked as pending: its charge counts as spent for the others,
/// which is stricter, never looser.
async fn refused_elsewhere(
    parked: &Parked,
    targets: &[(Target, u64)],
    turn: Option<Turn>,
) -> (Option<Box<OutcomeHold>>, Verdict) {
    let Parked {
        shared,
        view,
        checks,
        claims,
        ..
    } = parked;
    let hold = |turn: Option<Turn>| turn.map(|turn| Box::new(OutcomeHold::Deciding(turn)));
    if !claims.is_empty() {
        return (hold(turn), Verdict::Decide);
    }
    match trial(shared, view, checks, targets).await {
        Ok(Tried::Admitted(taken)) => (hold(turn), Verdict::Tried(taken)),
        // Refused by the other policy (its refusal counted), or, should it have found
        // room since the look, by a target only: no offence either way.
        Ok(Tried::Refused(taken) | Tried::Raced(taken)) => (None, Verdict::Tried(taken)),
        Err(_) => (hold(turn), Verdict::Decide),
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

/// Whether a wait of `poll` from now ends before `deadline`.
fn before(deadline: Instant, poll: Duration) -> bool {
    Instant::now()
        .checked_add(poll)
        .is_some_and(|at| at < deadline)
}

/// What a trial charge did.
enum Tried {
    /// Admitted: what it took.
    Admitted(Taken),
    /// Refused for good: blocked, or by a policy whose charges are not in question
    /// (whose refusal counted as it would have); nothing taken.
    Refused(Taken),
    /// A target did not fit after all: another process charged since the look. The
    /// trial's refusal (no offence), nothing taken.
    Raced(Taken),
}

/// Whether `check` (decided as `decision`) is one of `targets`.
fn targets_it(targets: &[(Target, u64)], check: &LayerCheck, name: &str) -> bool {
    check.enforced
        && targets
            .iter()
            .any(|((target, key), _)| *target == name && *key == check.key)
}

/// A charge of `checks` in which the targets' limits have no penalty box: admitted as
/// the real charge would be, but a target's refusal is no offence. What it takes is
/// owned from before it is sent (cancel-safe).
async fn trial(
    shared: &Shared,
    view: &View,
    checks: &Checks,
    targets: &[(Target, u64)],
) -> Result<Tried, StoreError> {
    let limits: Vec<crate::Limit> = checks
        .iter()
        .map(|check| {
            let limit = &view.set.limits[check.index];
            if targets_it(targets, check, limit.name()) {
                limit.without_penalty()
            } else {
                limit.clone()
            }
        })
        .collect();
    let owned: Vec<LayerCheck> = checks.to_vec();
    let (limiter, store) = (shared.limiter.clone(), shared.limiter.store().clone());
    let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
        let resolved = owned
            .iter()
            .zip(&limits)
            .map(|(check, limit)| limiter.with_quota(limit, check.quota))
            .collect::<Result<Vec<_>, _>>()?;
        let charges: Vec<Charge<'_>> = owned
            .iter()
            .zip(&resolved)
            .map(|(check, limit)| Charge {
                limit,
                key: &check.key,
                cost: check.cost,
            })
            .collect();
        let decisions = store.decide(&charges).await?;
        complete(decisions, charges.len())
    });
    let taken = Taking::new(
        shared.limiter.clone(),
        view.set.clone(),
        targets_of(checks),
        call,
    )
    .await?;
    let decisions = taken.decisions();
    if decisions.iter().all(|d| d.allowed) {
        return Ok(Tried::Admitted(taken));
    }
    let real = checks.iter().zip(decisions).any(|(check, d)| {
        !d.allowed && (d.blocked_for.is_some() || !targets_it(targets, check, d.limit))
    });
    Ok(if real {
        Tried::Refused(taken)
    } else {
        Tried::Raced(taken)
    })
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
    let is_target = |t: usize, check: &LayerCheck, decision: &Decision| {
        check.enforced
            && targets
                .get(t)
                .is_some_and(|((name, key), _)| *name == decision.limit && *key == check.key)
    };
    // A block refuses it whatever is pending: a real refusal. So does a policy whose
    // charges are not in question, but not as an offence of a target kept out only by
    // what is pending.
    let (mut t, mut refused) = (0, false);
    for (check, decision) in checks.iter().zip(looked) {
        let target = is_target(t, check, decision);
        if decision.blocked_for.is_some() {
            return Judged::Decide;
        }
        refused |= !target && decision.remaining < check.cost;
        t += usize::from(target);
    }
    let (mut wait, mut t) = (None, 0);
    for (check, decision) in checks.iter().zip(looked) {
        if !is_target(t, check, decision) {
            continue;
        }
        if decision.remaining < check.cost {
            let pending = turn.map_or(u64::MAX, |turn| turn.pending(t));
            if decision.remaining.saturating_add(pending) < check.cost {
                // More than what is pending here could free.
                return if refused {
                    Judged::Decide
                } else {
                    Judged::Elsewhere
                };
            }
            wait.get_or_insert(t);
        }
        t += 1;
    }
    match (refused, wait) {
        (true, Some(_)) => Judged::Refused,
        (true, None) => Judged::Decide,
        (false, wait) => wait.map_or(Judged::Fits, Judged::Wait),
    }
}

/// The refusal of a request that only pending charges kept out: its looks, each
/// target that does not fit denied, with a retry in a second.
fn refusal(checks: &Checks, targets: &[(Target, u64)], looked: Decided) -> Decided {
    let short = |check: &LayerCheck, decision: &Decision| {
        targets_it(targets, check, decision.limit) && decision.remaining < check.cost
    };
    // A refusal refuses: should the look have found room after all, every target
    // refuses it (an admission here would be one nobody charged).
    let any_short = checks.iter().zip(looked.iter()).any(|(c, d)| short(c, d));
    looked
        .into_iter()
        .zip(checks.iter())
        .map(|(decision, check)| {
            let refuses = if any_short {
                short(check, &decision)
            } else {
                targets_it(targets, check, decision.limit)
            };
            if refuses {
                Decision {
                    allowed: false,
                    retry_after: Some(Duration::from_secs(1)),
                    receipt: None,
                    ..decision
                }
            } else {
                decision
            }
        })
        .collect()
}
