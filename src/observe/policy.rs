//! A policy's metric handles in the layer, registered on the first request that needs
//! them (after the recorder is installed, in the usual order of a program's start) and
//! kept for every later one: a request increments them without building a label.

#[cfg(feature = "metrics")]
use std::sync::OnceLock;

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Histogram};

use super::decisions::Outcome;
#[cfg(feature = "metrics")]
use super::names::{Dual, counter, describe_all, gauge, histogram};
#[cfg(feature = "metrics")]
use super::store::{Instant, elapsed_seconds};
use super::unapplied::Unapplied;

/// One policy's handles, registered at first use, and the watch of whether it
/// applies to any request. Without the `metrics` and `tracing` features it is empty
/// and every method does nothing.
pub(crate) struct PolicyMetrics {
    #[cfg(feature = "metrics")]
    policy: &'static str,
    #[cfg(feature = "metrics")]
    handles: OnceLock<Handles>,
    /// Whether the policy applied to any of the first requests (see `unapplied.rs`).
    pub(crate) unapplied: Unapplied,
}

#[cfg(feature = "metrics")]
struct Handles {
    /// `tollgate_requests_total{policy, outcome}`, by `Outcome as usize`.
    outcomes: [Dual<Counter>; Outcome::ALL.len()],
    near_limit: Dual<Counter>,
    in_flight: Dual<Gauge>,
    held: Dual<Gauge>,
    held_seconds: Dual<Histogram>,
}

#[cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]
impl PolicyMetrics {
    pub(crate) fn new(policy: &'static str) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            policy,
            #[cfg(feature = "metrics")]
            handles: OnceLock::new(),
            unapplied: Unapplied::new(policy),
        }
    }

    #[cfg(feature = "metrics")]
    #[inline]
    fn handles(&self) -> &Handles {
        self.handles.get_or_init(|| {
            use super::catalogue::{HELD, HELD_DURATION, IN_FLIGHT, NEAR_LIMIT, REQUESTS};
            describe_all();
            let policy = [("policy", self.policy)];
            Handles {
                outcomes: Outcome::ALL.map(|outcome| {
                    counter(
                        &REQUESTS,
                        &[("policy", self.policy), ("outcome", outcome.label())],
                    )
                }),
                near_limit: counter(&NEAR_LIMIT, &policy),
                in_flight: gauge(&IN_FLIGHT, &policy),
                held: gauge(&HELD, &policy),
                held_seconds: histogram(&HELD_DURATION, &policy),
            }
        })
    }

    /// Counts a decision of this policy: its outcome, and whether it left its caller
    /// near the limit.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(crate) fn count(&self, outcome: Outcome, near_limit: bool) {
        #[cfg(feature = "metrics")]
        {
            let handles = self.handles();
            handles.outcomes[outcome as usize].increment(1);
            if near_limit {
                handles.near_limit.increment(1);
            }
        }
    }

    /// One more request of this policy is running, until [`ended`](Self::ended).
    #[inline]
    pub(crate) fn started(&self) {
        #[cfg(feature = "metrics")]
        self.handles().in_flight.increment(1.0);
    }

    /// A request [`started`](Self::started) was answered, or given up.
    #[inline]
    pub(crate) fn ended(&self) {
        #[cfg(feature = "metrics")]
        self.handles().in_flight.decrement(1.0);
    }

    /// A request of this policy is held for its turn until the [`Held`] is dropped.
    pub(crate) fn held(&self) -> Held {
        #[cfg(feature = "metrics")]
        {
            let handles = self.handles();
            handles.held.increment(1.0);
            Held {
                gauge: handles.held.clone(),
                seconds: handles.held_seconds.clone(),
                since: Instant::now(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Held {}
    }
}

/// A held request, counted in `tollgate_held` while it lives; its time held goes to
/// `tollgate_held_seconds` when it is dropped (served, or given up by its caller).
pub(crate) struct Held {
    #[cfg(feature = "metrics")]
    gauge: Dual<Gauge>,
    #[cfg(feature = "metrics")]
    seconds: Dual<Histogram>,
    #[cfg(feature = "metrics")]
    since: Instant,
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(feature = "metrics")]
        {
            self.gauge.decrement(1.0);
            self.seconds.record(elapsed_seconds(self.since));
        }
    }
}
