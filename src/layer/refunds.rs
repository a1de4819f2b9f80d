//! `count_when` refunds: each policy that does not count the response's status gives
//! its charge back through the request's [`Account`], by receipt, once.

use http::StatusCode;

use crate::Decision;
use crate::layer::Unit;
use crate::layer::account::Account;
use crate::layer::shared::{Shared, View};

/// Gives back, for each checked policy whose `count_when` does not count `status`,
/// what stands of the request's charge, by its receipt: a refund that arrives after
/// the charge's window rolled over (a slow response) takes nothing from the new
/// window, and a charge already given back (at the hold cap) or never made (the
/// store failed open, shadow mode let a denial through) gives nothing.
///
/// A byte-metered policy is left out: the bytes that went through count whatever
/// the status (else a caller whose requests fail moves bytes for free), and what of
/// its advance no byte used comes back once, when the bodies end.
///
/// On a store that answers at once (the memory store) the refund is a settle to 0,
/// whose answer replaces the decision in `decisions`: the response's headers then
/// show where the caller stands after it. Elsewhere it runs in the background, and
/// `decisions` keep what the request was charged.
pub(super) fn refund_uncounted(
    shared: &Shared,
    view: &View,
    account: &mut Account,
    decisions: &mut [(usize, Decision)],
    status: StatusCode,
) {
    let policies = view.policies();
    for charge in account.charges() {
        let policy = &policies[charge.index()];
        if !policy.refunds_some_responses()
            || policy.counts(status)
            || policy.get_unit() == Unit::ContentBytes
        {
            continue;
        }
        if let Some(after) = charge.give_back_shown(shared, view)
            && let Some((_, shown)) = decisions
                .iter_mut()
                .find(|(index, _)| *index == charge.index())
        {
            *shown = after;
        }
    }
}
