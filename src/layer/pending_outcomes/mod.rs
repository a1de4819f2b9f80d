//! `count_when` counts only what it says, under concurrency: a request refused only
//! because of charges still awaiting their outcome is not refused as an offence.
//!
//! A `count_when` policy charges every admitted request, and refunds the ones whose
//! response does not count once the response is known. Until then the charge stands:
//! thirty right-password logins at once from one office (one address) on "5 failed
//! logins a minute" would find the quota spent by the first five, still in the
//! handler, and be refused, each refusal an offence that trips the penalty box.
//!
//! Here, per (`count_when` policy, key), this process tracks its charges whose outcome
//! is pending ([`table`]). A request that finds its caller with pending charges first
//! looks at the store (a peek: no charge, no offence) and is charged only if it fits;
//! if only the pending charges stand in the way, it waits for their outcomes, bounded
//! by [`Policy::wait_for_outcomes`](crate::Policy::wait_for_outcomes), then is
//! decided again ([`turn`]). A refunded outcome frees quota for it; a counted one
//! does not, and once nothing is pending a request that does not fit is charged as
//! usual: a real rejection, which the penalty counts. Past the wait it is refused
//! without a charge and without an offence. Guesses reach the handler at most the
//! quota's number of times: every admission is still a charge the store makes.
//!
//! Only this process's pending charges are visible: another process's in its
//! handler still count as spent here, as before, unless the policy polls for them
//! ([`Policy::poll_other_processes`](crate::Policy::poll_other_processes)). Then a
//! request that does not fit looks again within its wait, and its charge is a trial:
//! made under the limit without its penalty box (same state, same receipts), so that a
//! charge another process raced to the last unit is refused without an offence. Only
//! at the end of the wait is a refusal charged as an offence.

mod policy_option;
mod table;
mod turn;

use std::sync::Arc;
use std::time::Duration;

use crate::layer::body::OnGrpcStatus;
use crate::layer::few::{Checks, Claims};
use crate::layer::grpc::GrpcContentType;
use crate::layer::shared::{Shared, View};

pub(crate) use table::{PendingOutcomes, TakeTurn, Target};
pub(crate) use turn::{AwaitingTurn, Verdict, await_turn};

use table::{Charges, Turn};

/// The default of [`Policy::wait_for_outcomes`](crate::Policy::wait_for_outcomes):
/// a few handler round trips.
pub(crate) const DEFAULT_OUTCOME_WAIT: Duration = Duration::from_secs(5);

/// What a request holds in the table, from its turn to its outcome.
pub(crate) enum OutcomeHold {
    /// Its turn to be decided: no other request of its callers is decided here.
    Deciding(Turn),
    /// It was admitted: its charges are pending until its response is classified
    /// (held for its drop, which tells the caller's waiters).
    Pending { _charges: Charges },
}

/// What the service finds for a request before deciding it.
pub(crate) enum FirstTurn {
    /// Decide it now, holding this turn.
    Now(Box<OutcomeHold>),
    /// It must look at the store, or wait: [`await_turn`] from here.
    Later(TakeTurn, Vec<(Target, u64)>),
}

/// Everything a waiting request is decided with once its turn comes.
pub(crate) struct Parked {
    pub(crate) shared: Arc<Shared>,
    pub(crate) view: Arc<View>,
    pub(crate) checks: Checks,
    pub(crate) claims: Claims,
    pub(crate) grpc: Option<GrpcContentType>,
}

/// The enforced `count_when` policies among `checks` (those not in wait mode, whose
/// own queue already keeps a waiting request from being refused), each with the cost
/// the request charges it.
fn targets(shared: &Shared, view: &View, checks: &Checks) -> Vec<(Target, u64)> {
    let policies = view.policies();
    checks
        .iter()
        .filter(|check| check.enforced)
        .filter_map(|check| {
            let policy = &policies[check.index];
            (policy.refunds_some_responses() && shared.wait_of(policy).is_none())
                .then_some(((policy.name(), check.key), check.cost))
        })
        .collect()
}

/// How long the request waits at most (the shortest wait of its enforced
/// `count_when` policies), and how often it looks again for other processes'
/// outcomes, if one of them asks (the shortest such period).
pub(crate) fn rules(shared: &Shared, view: &View, checks: &Checks) -> (Duration, Option<Duration>) {
    let policies = view.policies();
    checks
        .iter()
        .filter(|check| check.enforced)
        .map(|check| &policies[check.index])
        .filter(|policy| policy.refunds_some_responses() && shared.wait_of(policy).is_none())
        .fold((Duration::MAX, None), |(wait, poll), policy| {
            let poll = match (poll, policy.outcome_poll) {
                (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                (a, b) => a.or(b),
            };
            (wait.min(policy.outcome_wait), poll)
        })
}

/// The turn of a request with `checks`: `None` when no enforced `count_when` policy
/// checks it (or the table is full): decided as usual.
#[inline]
pub(crate) fn first_turn(shared: &Shared, view: &View, checks: &Checks) -> Option<FirstTurn> {
    let policies = view.policies();
    if !checks
        .iter()
        .any(|check| policies[check.index].refunds_some_responses())
    {
        return None;
    }
    let targets = targets(shared, view, checks);
    if targets.is_empty() {
        return None;
    }
    match shared.pending_outcomes.take_turn(targets.clone()) {
        TakeTurn::Untracked => None,
        // Nothing pending here, and no other process to wait for: decided at once.
        TakeTurn::Mine(turn)
            if !turn.awaits_outcomes() && rules(shared, view, checks).1.is_none() =>
        {
            Some(FirstTurn::Now(Box::new(OutcomeHold::Deciding(turn))))
        }
        first => Some(FirstTurn::Later(first, targets)),
    }
}

/// The request was admitted (called, or held for its turn): its turn becomes charges
/// that await their outcome.
pub(crate) fn admitted(hold: &mut Option<Box<OutcomeHold>>) {
    if let Some(held) = hold.take() {
        *hold = Some(match *held {
            OutcomeHold::Deciding(turn) => Box::new(OutcomeHold::Pending {
                _charges: turn.admitted(),
            }),
            pending @ OutcomeHold::Pending { .. } => Box::new(pending),
        });
    }
}

/// The response's head is in and its refunds are made (or, on a remote store, on
/// their way and counted as pending until they land): the charges' outcome is known,
/// now or, when the response body holds a hook (a gRPC status in the trailers), when
/// the hook runs or the body is dropped.
pub(crate) fn known_after(
    hold: Option<Box<OutcomeHold>>,
    on_status: Option<OnGrpcStatus>,
) -> Option<OnGrpcStatus> {
    match (hold, on_status) {
        (Some(hold), Some(on_status)) => Some(Box::new(move |status| {
            on_status(status);
            drop(hold);
        })),
        (_, on_status) => on_status,
    }
}
