//! Settling a charge ([`Store::settle`]): the plan every store
//! follows, the decision it answers, and the default for stores that implement no
//! settle of their own (a refund by receipt, then a penalty or a peek: not atomic).

use std::time::Duration;

use super::{Charge, Store};
use crate::algorithm::{Params, Verdict, max_settle_extra};
use crate::decision::{ExtraAt, Receipt, Settlement};
use crate::{Algorithm, Decision, Limit, StoreError, StoreErrorKind};

/// What settling `receipt`'s charge to `actual` under `limit` gives back and charges.
pub(crate) fn plan(limit: &Limit, receipt: Receipt, actual: u64) -> Settlement {
    receipt.settlement(actual, max_settle_extra(limit.params()))
}

/// The receipt of the charge standing after `receipt`'s was settled to `actual` by
/// `plan` under `limit`, its extra charged at `extra_at` (see [`Receipt::settled`]).
pub(crate) fn after(
    limit: &Limit,
    receipt: Receipt,
    actual: u64,
    plan: Settlement,
    extra_at: ExtraAt,
) -> Option<Receipt> {
    receipt.settled(
        actual,
        plan,
        extra_at,
        freed_us(limit.params(), plan.give_back),
    )
}

/// How much earlier (µs, rounded up: the receipt then errs in the limiter's favour) a
/// debt ends once `given` units of it are given back: their refill time on the token
/// bucket, GCRA and the leaky bucket; 0 on the window algorithms.
fn freed_us(p: &Params, given: u64) -> u64 {
    let (units, per_us) = match p.algorithm {
        Algorithm::TokenBucket => (p.units_per_token, p.units_per_us),
        Algorithm::Gcra | Algorithm::LeakyBucket => (p.emission_ns, 1_000),
        Algorithm::FixedWindow
        | Algorithm::SlidingWindow
        | Algorithm::SlidingWindowCounters { .. }
        | Algorithm::SlidingWindowLog => return 0,
    };
    let freed = (u128::from(given) * u128::from(units)).div_ceil(u128::from(per_us.max(1)));
    u64::try_from(freed).unwrap_or(u64::MAX)
}

/// The decision a settle answers: the settled request stays admitted (`allowed`, no
/// `retry_after`, no delay), with the key's standing as a peek reports it — the
/// rate state's `state` verdict, or a block's `blocked_us` (remaining 0, reset at the
/// block's end) — and the `receipt` of the charge now standing.
pub(crate) fn standing(
    limit: &Limit,
    state: Verdict,
    blocked_us: Option<u64>,
    receipt: Option<Receipt>,
) -> Decision {
    let (remaining, reset_after_us) = match blocked_us {
        Some(left) => (0, left),
        None => (state.remaining, state.reset_after_us),
    };
    let verdict = Verdict {
        allowed: true,
        remaining,
        reset_after_us,
        retry_after_us: None,
        delay_us: 0,
        receipt,
        blocked_us,
        tripped: false,
        trips: state.trips,
    };
    super::decision(limit, verdict)
}

/// [`standing`] from a peek's (or a penalty's) decision instead of a verdict.
pub(crate) fn standing_from(peeked: &Decision, receipt: Option<Receipt>) -> Decision {
    Decision {
        allowed: true,
        retry_after: None,
        delay: Duration::ZERO,
        receipt,
        ..*peeked
    }
}

/// The default [`Store::settle`]: [`refund_charge`](Store::refund_charge) of the
/// difference, then [`penalize`](Store::penalize) of the extra or a
/// [`peek`](Store::peek). Two calls, so not atomic; the extra's place is unknown, so
/// the receipt it returns never gives the extra back.
pub(crate) async fn by_refund_and_penalty<S: Store + ?Sized>(
    store: &S,
    charge: Charge<'_>,
    receipt: Receipt,
) -> Result<Decision, StoreError> {
    let plan = plan(charge.limit, receipt, charge.cost);
    if plan.give_back > 0 {
        let back = Charge {
            cost: plan.give_back,
            ..charge
        };
        store.refund_charge(back, receipt).await?;
    }
    let peeked = if plan.extra > 0 {
        let extra = Charge {
            cost: plan.extra,
            ..charge
        };
        store.penalize(extra).await?
    } else {
        store.peek(charge.limit, charge.key).await?
    };
    let settled = after(charge.limit, receipt, charge.cost, plan, ExtraAt::Unknown);
    Ok(standing_from(&peeked, settled))
}

/// Why a settle was dropped rather than sent to a store that never took its charge.
pub(crate) fn settle_dropped(why: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!("settle dropped: {why}"),
    )
}
