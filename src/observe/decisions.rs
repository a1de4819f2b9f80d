//! What became of a request under each of its policies: the decision's outcome
//! counted under the policy, a `tracing` span per decision (policy, outcome,
//! remaining, the rejecting policy, the key's fingerprint: never the key), and the
//! log lines of rejections.

use super::policy::PolicyMetrics;
use crate::{Decision, Key};

/// What became of a request under one policy (the `outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Within the policy's limit, served at once (another policy may still have
    /// rejected the request: see its own outcome).
    Allowed,
    /// Within the limit, served after being held for its turn.
    Waited,
    /// Over the limit, or refused an in-flight slot or a key: rejected.
    Rejected,
    /// Denied by an operator's or a penalty's block: rejected.
    Blocked,
    /// Over the limit (or blocked, refused a slot, without a key), and served: the
    /// policy is in shadow mode for this caller.
    ShadowRejected,
    /// Admitted with a delay the layer had no place to hold: rejected.
    QueueFull,
    /// The store failed and the request was served unchecked.
    FailOpen,
    /// The store failed and the request was answered 503.
    FailClosed,
}

impl Outcome {
    /// Every outcome, in the order of their discriminants.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) const ALL: [Self; 8] = [
        Self::Allowed,
        Self::Waited,
        Self::Rejected,
        Self::Blocked,
        Self::ShadowRejected,
        Self::QueueFull,
        Self::FailOpen,
        Self::FailClosed,
    ];

    #[cfg_attr(not(any(feature = "metrics", feature = "tracing")), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Waited => "waited",
            Self::Rejected => "rejected",
            Self::Blocked => "blocked",
            Self::ShadowRejected => "shadow_rejected",
            Self::QueueFull => "queue_full",
            Self::FailOpen => "fail_open",
            Self::FailClosed => "fail_closed",
        }
    }

    /// The outcome of a denial under a policy that enforces (`enforced`) or only
    /// watches this caller.
    pub(crate) fn denied(decision: &Decision, enforced: bool) -> Self {
        match (enforced, decision.blocked_for.is_some()) {
            (false, _) => Self::ShadowRejected,
            (true, true) => Self::Blocked,
            (true, false) => Self::Rejected,
        }
    }
}

/// Records `decision`, whose outcome under its policy is `outcome`, for the caller
/// `key`; `rejected_by` names the policy that rejected the request (this one or
/// another), if one did. `near_limit` is the share of capacity below which an
/// admitted caller counts as near its limit.
// Each feature reads some of the arguments.
#[cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
#[inline]
pub(crate) fn decided(
    metrics: &PolicyMetrics,
    decision: &Decision,
    outcome: Outcome,
    rejected_by: Option<&'static str>,
    key: &Key,
    near_limit: f64,
) {
    #[cfg(feature = "metrics")]
    {
        let near = matches!(outcome, Outcome::Allowed | Outcome::Waited)
            && (decision.remaining as f64) < near_limit * decision.capacity as f64;
        metrics.count(outcome, near);
    }
    #[cfg(feature = "tracing")]
    {
        let span = decision_span(
            decision.limit,
            outcome,
            Some(decision.remaining),
            rejected_by,
            Some(key),
        );
        let _entered = span.enter();
        log(decision.limit, outcome, decision.retry_after);
    }
}

/// Records an outcome of `policy` that no decision of its quota stands for: a refused
/// in-flight slot, a missing key, a failed store.
// Each feature reads some of the arguments.
#[cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
pub(crate) fn refused(
    metrics: &PolicyMetrics,
    policy: &'static str,
    outcome: Outcome,
    key: Option<&Key>,
) {
    metrics.count(outcome, false);
    #[cfg(feature = "tracing")]
    {
        let rejected_by = matches!(
            outcome,
            Outcome::Rejected | Outcome::ShadowRejected | Outcome::FailClosed
        )
        .then_some(policy);
        let span = decision_span(policy, outcome, None, rejected_by, key);
        let _entered = span.enter();
        log(policy, outcome, None);
    }
}

/// The span of one decision: at `debug` for a request served within its limit (the
/// common case), at `info` for everything an operator may want to find.
#[cfg(feature = "tracing")]
fn decision_span(
    policy: &'static str,
    outcome: Outcome,
    remaining: Option<u64>,
    rejected_by: Option<&'static str>,
    key: Option<&Key>,
) -> tracing::Span {
    // The full fingerprint, as Redis keys carry it: it identifies a caller across
    // logs and stores without revealing the key.
    let fingerprint = key.map(|key| tracing::field::display(Fingerprint(*key)));
    if matches!(outcome, Outcome::Allowed | Outcome::Waited) {
        tracing::debug_span!(target: "tollgate", "rate_limit.decision", policy, outcome = outcome.label(), remaining, rejected_by, key.fingerprint = fingerprint)
    } else {
        tracing::info_span!(target: "tollgate", "rate_limit.decision", policy, outcome = outcome.label(), remaining, rejected_by, key.fingerprint = fingerprint)
    }
}

/// A key shown as its fingerprint's 32 hex digits.
#[cfg(feature = "tracing")]
struct Fingerprint(Key);

#[cfg(feature = "tracing")]
impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// The log line of an outcome worth one, inside its decision's span.
#[cfg(feature = "tracing")]
fn log(policy: &'static str, outcome: Outcome, retry_after: Option<std::time::Duration>) {
    let retry_after_ms = retry_after.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX));
    match outcome {
        Outcome::Allowed | Outcome::Waited | Outcome::FailOpen | Outcome::FailClosed => {}
        Outcome::Rejected | Outcome::Blocked => {
            tracing::debug!(target: "tollgate", policy, retry_after_ms, "request rejected");
        }
        Outcome::ShadowRejected => {
            tracing::info!(target: "tollgate", policy, "request would have been rejected (shadow mode)");
        }
        Outcome::QueueFull => {
            tracing::debug!(target: "tollgate", policy, "request rejected: the layer holds as many delayed requests as it may");
        }
    }
}
