//! The store calls behind a request's give-backs, by receipt: a settle (a metered
//! request's actual, a byte advance's unused part) and a refund (a `count_when`
//! refund, a hold-cap rejection, a client gone before its turn). At once on a store
//! that answers at once (the memory store: the response headers can then show it),
//! else in the background, where no client that goes away can cancel it.
//!
//! Only [`Account`](crate::layer::account::Account) calls these, with the standing it
//! takes out of a charge: one charge, one give-back.

use crate::decision::Receipt;
use crate::layer::shared::{Shared, View};
use crate::limiter::give_back::{Settling, spawn_refund, spawn_settle};
use crate::{Decision, Key, Quota, observe};

/// When a settle may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum When {
    /// Now, or not at all: a provisional figure, which a later one may replace.
    NowOnly,
    /// Now, or else in the background: the last figure.
    NowOrLater,
}

/// Where a charge was made: the policy's index in the request's view, and the key.
pub(crate) type Target = (usize, Key);

/// What a settle by receipt came to.
pub(crate) enum Settled {
    /// The store answered at once: the charge now stands as the decision says (its
    /// receipt names what stands; none once settled to 0).
    Now(Decision),
    /// Sent in the background: its receipt comes back to nobody.
    Sent,
    /// Not sent (a provisional figure on a remote store): the charge stands as it was.
    NotSent,
    /// The store failed (logged and counted): the charge stands as it was, unnamed.
    Failed,
}

/// Settles the charge of `receipt` (decided under `quota`) at `target` to `actual`.
pub(crate) fn settle(
    shared: &Shared,
    view: &View,
    (index, key): Target,
    (receipt, quota): (Receipt, Quota),
    actual: u64,
    when: When,
) -> Settled {
    match shared
        .limiter
        .settle_charge_later(&view.set, (index, key), receipt, quota, actual)
    {
        Settling::Done(Ok(decision)) => Settled::Now(decision),
        Settling::Done(Err(error)) => {
            observe::settle_failed(&error);
            Settled::Failed
        }
        Settling::Later(call) if when == When::NowOrLater => {
            spawn_settle(call);
            Settled::Sent
        }
        // Dropped unpolled: nothing was sent.
        Settling::Later(_unsent) => Settled::NotSent,
    }
}

/// Takes back the whole charge of `receipt` (decided under `quota`) at `target`, as
/// [`Limiter::refund_charge`](crate::Limiter::refund_charge) does: at once on a store
/// that answers at once, else in the background.
pub(crate) fn refund(
    shared: &Shared,
    view: &View,
    (index, key): Target,
    (receipt, quota): (Receipt, Quota),
) {
    if let Some(refund) = shared
        .limiter
        .refund_charge_later(&view.set, index, key, receipt, quota)
    {
        // Pending for the caller's `count_when` waiters until it lands.
        let target = (view.policies()[index].name(), key);
        let cost = receipt.cost();
        spawn_refund(shared.pending_outcomes.landing(target, cost, refund));
    }
}

/// [`refund`], for a response whose headers show it: on a store that answers at once
/// (the memory store) a settle to 0, whose answer says where the caller stands after
/// it; elsewhere the refund by receipt runs in the background, and `None` says the
/// headers show the charge.
pub(crate) fn refund_shown(
    shared: &Shared,
    view: &View,
    (index, key): Target,
    (receipt, quota): (Receipt, Quota),
) -> Option<Decision> {
    match shared
        .limiter
        .settle_charge_later(&view.set, (index, key), receipt, quota, 0)
    {
        Settling::Done(Ok(after)) => Some(after),
        Settling::Done(Err(error)) => {
            observe::refund_failed(&error);
            None
        }
        // Not sent: the refund by receipt runs in the background instead.
        Settling::Later(_unsent) => {
            refund(shared, view, (index, key), (receipt, quota));
            None
        }
    }
}
