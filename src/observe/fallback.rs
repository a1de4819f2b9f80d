//! A `Fallback`'s switches between its stores: the gauge of which store serves
//! (`tollgate_fallback_serving`, by `store` = `primary` or `insurance`: how many
//! `Fallback`s of the process that store serves now), the primary's errors counted
//! even when the insurance store covered them, and a log line at each switch.

use crate::StoreError;

/// A `Fallback` was built: its primary serves.
pub(crate) fn fallback_built() {
    #[cfg(feature = "metrics")]
    {
        use super::names::emit;
        emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "primary"; increment(1.0));
    }
}

/// A `Fallback` is gone: it no longer counts for the store that served it.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn fallback_dropped(insurance: bool) {
    #[cfg(feature = "metrics")]
    {
        use super::names::emit;
        if insurance {
            emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "insurance"; decrement(1.0));
        } else {
            emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "primary"; decrement(1.0));
        }
    }
}

/// A call to a `Fallback`'s primary failed; the insurance store answers it. Counted in
/// `tollgate_store_errors_total` like any store error, since no `FailMode` sees it.
pub(crate) fn primary_error(error: &StoreError) {
    super::logs::store_error(error);
}

/// The insurance store serves from now on (`at_startup`: the primary never answered).
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn switched_to_insurance(
    error: &StoreError,
    at_startup: bool,
    hold: std::time::Duration,
) {
    #[cfg(feature = "metrics")]
    {
        use super::names::emit;
        emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "primary"; decrement(1.0));
        emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "insurance"; increment(1.0));
    }
    #[cfg(feature = "tracing")]
    if at_startup {
        tracing::warn!(target: "tollgate", %error, ?hold, "primary store unreachable since startup; serving from the insurance store");
    } else {
        tracing::warn!(target: "tollgate", %error, ?hold, "primary store failed; serving from the insurance store");
    }
}

/// The primary serves again (what it missed replayed, its charges carried back).
pub(crate) fn switched_to_primary() {
    #[cfg(feature = "metrics")]
    {
        use super::names::emit;
        emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "insurance"; decrement(1.0));
        emit!(gauge, "tollgate_fallback_serving", "rate_limit.fallback.serving", "store" => "primary"; increment(1.0));
    }
    #[cfg(feature = "tracing")]
    tracing::info!(target: "tollgate", "primary store answers again; back to it");
}

/// The primary answered probes but failed its recovery (a replay, a re-asserted block
/// or a carried charge): the insurance store keeps serving.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn recovery_failed(error: &StoreError) {
    primary_error(error);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "primary store failed during its recovery; still serving from the insurance store");
}

/// The primary did not answer the probe made after its `Fallback` was built, before
/// any call reached it.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn unreachable_at_startup(error: &StoreError) {
    primary_error(error);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "primary store unreachable at startup; the insurance store will serve while it fails");
}
