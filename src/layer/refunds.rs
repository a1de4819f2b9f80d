//! `count_when` and held-cap refunds: each by the receipt of what its decision charged,
//! run in the background on a remote store.

use http::StatusCode;

use crate::Decision;
use crate::layer::few::Checks;
use crate::layer::limiter_calls::targets;
use crate::layer::shared::{Shared, View};
use crate::limiter::Taken;
use crate::limiter::give_back::{Settling, spawn_refund};

/// Takes back, for each checked policy whose `count_when` does not count `status`,
/// what the request's decision charged, by its receipt: a refund that arrives after
/// the charge's window rolled over (a slow response) takes nothing from the new
/// window, and a request that charged nothing (its store failed open, or shadow mode
/// let a denial through) gets nothing back.
///
/// On a store that answers at once (the memory store) the refund is a settle to 0,
/// whose answer replaces the decision in `decisions`: the response's headers then
/// show where the caller stands after it. Elsewhere it runs in the background, and
/// `decisions` keep what the request was charged.
pub(super) fn refund_uncounted(
    shared: &Shared,
    view: &View,
    checks: &Checks,
    decisions: &mut [(usize, Decision)],
    status: StatusCode,
) {
    let policies = view.policies();
    // `decisions` pairs with `checks` in order; it is empty when the store failed.
    for (check, (_, decision)) in checks.iter().zip(decisions) {
        let policy = &policies[check.index];
        if !policy.refunds_some_responses() || policy.counts(status) {
            continue;
        }
        let Some(receipt) = decision.receipt else {
            continue;
        };
        match shared.limiter.settle_charge_later(
            &view.set,
            (check.index, check.key),
            receipt,
            decision.quota,
            0,
        ) {
            Settling::Done(Ok(after)) => *decision = after,
            Settling::Done(Err(error)) => crate::observe::refund_failed(&error),
            // Not sent: the refund by receipt runs in the background instead.
            Settling::Later(_unsent) => {
                if let Some(refund) = shared.limiter.refund_charge_later(
                    &view.set,
                    check.index,
                    check.key,
                    receipt,
                    decision.quota,
                ) {
                    // Pending for the caller's waiters until it lands.
                    let target = (policy.name(), check.key);
                    spawn_refund(
                        shared
                            .pending_outcomes
                            .landing(target, receipt.cost(), refund),
                    );
                }
            }
        }
    }
}

/// Refunds, by their receipts, what every checked policy charged: the request was
/// charged, then not held.
pub(super) fn refund_charges(
    shared: &Shared,
    view: &View,
    checks: &Checks,
    decisions: &[Decision],
) {
    // Dropped unkept: what the decisions took goes back, by their receipts.
    drop(Taken::new(
        shared.limiter.clone(),
        view.set.clone(),
        targets(checks),
        decisions.to_vec(),
    ));
}
