//! A policy that applies to none of the requests the layer sees limits nothing, and
//! says nothing: routes that match no request (`POST /logni` for `/login`), or a key
//! no request has (`peer_ip` on a server that does not record peer addresses). Each
//! policy's first [`WATCHED`] requests are watched; if it applied to none of them, a
//! warning is logged once and the `tollgate_policy_unapplied` gauge goes to 1 (back
//! to 0 if the policy applies later, or when its set is replaced).
//!
//! The cost on the hot path: per policy, one relaxed atomic add for each of the first
//! requests it passes over, one swap the first time it applies, and one relaxed load
//! on every later request.

#[cfg(any(feature = "metrics", feature = "tracing"))]
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

/// How many requests a policy may pass over before it is reported.
#[cfg(any(feature = "metrics", feature = "tracing"))]
pub(crate) const WATCHED: u32 = 1_000;

/// Why a policy did not apply to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Outside the policy's routes.
    OffRoute,
    /// In scope, and its key extractor found no key.
    NoKey,
    /// The request has the key of the policy this one stands in for: that policy's
    /// business, not a sign that this one is mis-configured, so it is not counted.
    OtherKey,
}

/// The state of the watch: below [`WATCHED`], the requests passed over so far; from
/// [`WATCHED`] to [`APPLIED`], reported; from [`APPLIED`] on, the policy applied (a
/// few late adds of requests that read the state before may carry it past).
#[cfg(any(feature = "metrics", feature = "tracing"))]
const APPLIED: u32 = 1 << 31;

/// One policy's watch, in one installed set of policies.
pub(crate) struct Unapplied {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    policy: &'static str,
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    state: AtomicU32,
    /// Of the requests passed over, how many were in scope without a key.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    keyless: AtomicU32,
}

#[cfg_attr(
    not(any(feature = "metrics", feature = "tracing")),
    allow(clippy::unused_self, unused_variables)
)]
impl Unapplied {
    pub(crate) fn new(policy: &'static str) -> Self {
        Self {
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            policy,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            state: AtomicU32::new(0),
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            keyless: AtomicU32::new(0),
        }
    }

    /// The policy applied to a request.
    #[inline]
    pub(crate) fn applied(&self) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if self.state.load(Relaxed) < APPLIED {
            self.first_applied();
        }
    }

    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cold]
    fn first_applied(&self) {
        let before = self.state.swap(APPLIED, Relaxed);
        if (WATCHED..APPLIED).contains(&before) {
            super::logs::policy_applies_after_all(self.policy);
        }
    }

    /// The policy passed over a request, for the reason `why` gives (asked only while
    /// the policy is watched).
    #[inline]
    pub(crate) fn passed_over(&self, policy: &crate::Policy, why: impl FnOnce() -> Miss) {
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if self.state.load(Relaxed) < WATCHED {
            self.count(policy, why());
        }
    }

    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cold]
    fn count(&self, policy: &crate::Policy, why: Miss) {
        match why {
            Miss::OtherKey => return,
            Miss::NoKey => {
                self.keyless.fetch_add(1, Relaxed);
            }
            Miss::OffRoute => {}
        }
        // Exactly one request is the last one watched.
        if self.state.fetch_add(1, Relaxed) == WATCHED - 1 {
            super::logs::policy_unapplied(policy, self.keyless.load(Relaxed));
        }
    }
}

impl Drop for Unapplied {
    fn drop(&mut self) {
        // A reported policy's set was replaced: the report ends with it.
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        if (WATCHED..APPLIED).contains(&self.state.load(Relaxed)) {
            super::logs::unapplied_report_ended(self.policy);
        }
    }
}
