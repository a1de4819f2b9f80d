//! Settling what a metered request was charged, from the layer: at once on a store
//! that answers at once (the memory store: the response headers can then show the
//! settle), else in the background, where no client that goes away can cancel it.

use crate::layer::shared::{Shared, View};
use crate::limiter::give_back::{Settling, spawn_settle};
use crate::{Decision, Key, observe};

/// One policy's charge for a request, as it stands.
#[derive(Debug, Clone)]
pub(crate) struct Standing {
    /// The policy's index in the request's view.
    pub(crate) index: usize,
    pub(crate) key: Key,
    /// The decision whose receipt names the charge now standing: the admission's,
    /// then each settle's.
    pub(crate) decision: Decision,
    /// What the charge stands at: the estimate, then each settle's actual.
    pub(crate) cost: u64,
    /// Settled for good: by a figure from the response head, by a settle sent to a
    /// remote store (whose answer nobody waits for), or by a `count_when` refund.
    pub(crate) done: bool,
}

impl Standing {
    /// The charge `decision` made for the policy at `index`, of `cost`.
    pub(crate) fn new(index: usize, key: Key, decision: Decision, cost: u64) -> Self {
        Self {
            index,
            key,
            decision,
            cost,
            done: false,
        }
    }
}

/// When a settle may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    /// Now, or not at all: a provisional figure, which a later one may replace.
    NowOnly,
    /// Now, or else in the background: the last figure.
    NowOrLater,
}

/// Settles `standing` to `actual`. Returns the settled decision when the store
/// answered at once. A store failure is logged and counted, never returned: the
/// charge then stands as it was. A charge that charged nothing settles nothing.
pub(crate) fn settle(
    shared: &Shared,
    view: &View,
    standing: &mut Standing,
    actual: u64,
    when: When,
) -> Option<Decision> {
    if standing.done || actual == standing.cost {
        return None;
    }
    // Nothing was charged (the store failed open, shadow mode passed a denial, or a
    // settle ended the charge): nothing to move.
    let receipt = standing.decision.receipt?;
    match shared.limiter.settle_charge_later(
        &view.set,
        (standing.index, standing.key),
        receipt,
        standing.decision.quota,
        actual,
    ) {
        Settling::Done(Ok(decision)) => {
            standing.decision = decision.clone();
            standing.cost = actual;
            Some(decision)
        }
        Settling::Done(Err(error)) => {
            observe::settle_failed(&error);
            standing.done = true;
            None
        }
        Settling::Later(call) => {
            if when == When::NowOrLater {
                spawn_settle(call);
                standing.cost = actual;
                // Its receipt comes back to nobody: nothing more can follow it.
                standing.done = true;
            }
            None
        }
    }
}
