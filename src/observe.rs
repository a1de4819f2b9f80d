//! Logs and metrics of the layer's decisions and of penalties, in one place. Compiled to nothing
//! without the `tracing` and `metrics` features. Never records keys: they are API
//! tokens and client addresses.

#[cfg(feature = "layer")]
use crate::Decision;
#[cfg(any(feature = "layer", feature = "redis"))]
use crate::StoreError;

/// What became of a request the policies were checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg(feature = "layer")]
pub(crate) enum Outcome {
    Allowed,
    Rejected,
    ShadowRejected,
    /// Admitted with a delay, rejected: the layer held as many as it may.
    QueueFull,
    /// As `QueueFull`, in shadow mode: passed on at once instead.
    ShadowQueueFull,
}

#[cfg(feature = "layer")]
impl Outcome {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Rejected => "rejected",
            Self::ShadowRejected => "shadow_rejected",
            Self::QueueFull => "queue_full",
            Self::ShadowQueueFull => "shadow_queue_full",
        }
    }
}

/// Records the outcome of one request under each of its decisions' policies.
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
#[cfg(feature = "layer")]
pub(crate) fn decided(decisions: &[Decision], outcome: Outcome) {
    #[cfg(feature = "metrics")]
    for d in decisions {
        metrics::counter!("tollgate_requests_total", "policy" => d.limit, "outcome" => outcome.label())
            .increment(1);
    }
    #[cfg(feature = "tracing")]
    match outcome {
        Outcome::Allowed => {}
        Outcome::Rejected => {
            for d in decisions.iter().filter(|d| !d.allowed) {
                tracing::debug!(target: "tollgate", policy = d.limit, retry_after_ms = d.retry_after.map(|r| r.as_millis() as u64), "request rejected");
            }
        }
        Outcome::ShadowRejected => {
            for d in decisions.iter().filter(|d| !d.allowed) {
                tracing::info!(target: "tollgate", policy = d.limit, "request would have been rejected (shadow mode)");
            }
        }
        Outcome::QueueFull => {
            tracing::debug!(target: "tollgate", "request rejected: the layer holds as many delayed requests as it may");
        }
        Outcome::ShadowQueueFull => {
            tracing::info!(target: "tollgate", "request would have been rejected: the layer holds as many delayed requests as it may (shadow mode)");
        }
    }
}

/// Records a store failure and what the layer did about it.
// `failing_open` only goes into the `tracing` event: `metrics` alone counts the kind.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
#[cfg(feature = "layer")]
pub(crate) fn store_failed(error: &StoreError, failing_open: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().to_string())
        .increment(1);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, fail_open = failing_open, "rate-limit store failed");
}

/// Records a refund that could not be applied.
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
pub(crate) fn refund_failed(error: &crate::StoreError) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().to_string())
        .increment(1);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "rate-limit refund failed");
}

#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
/// Records an in-flight slot record that could not be given back or renewed on a remote
/// store: it expires by itself within its TTL.
#[cfg(feature = "redis")]
pub(crate) fn slot_record_failed(error: &StoreError) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_store_errors_total", "kind" => error.kind().to_string())
        .increment(1);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "in-flight slot record release or renewal failed");
}

/// Records a layer whose policies' rate-limit headers could outgrow a proxy's buffer:
/// refused by the layer's builder and reload, only reported for a set reloaded
/// through the limiter alone.
#[cfg(feature = "layer")]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn headers_too_long(error: &crate::ConfigError) {
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "rate-limit headers over the size bound");
}

/// Records a penalty box that a rejection of `policy` tripped: the key is blocked for
/// `block_for`. The key itself is not recorded.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn penalty_tripped(policy: &'static str, block_for: std::time::Duration) {
    #[cfg(feature = "metrics")]
    metrics::counter!("tollgate_penalties_total", "policy" => policy).increment(1);
    #[cfg(feature = "tracing")]
    tracing::info!(target: "tollgate", policy, block_for_ms = u64::try_from(block_for.as_millis()).unwrap_or(u64::MAX), "penalty box tripped: key blocked");
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::time::Duration;

    use metrics::{
        Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
    };

    use crate::clock::ManualClock;
    use crate::{Limit, Limiter, MemoryStore, Penalty, Quota};

    /// Counts `tollgate_penalties_total{policy="login"}`; every other metric is dropped.
    struct Penalties(Arc<AtomicU64>);

    impl Recorder for Penalties {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let login = key
                .labels()
                .any(|l| l.key() == "policy" && l.value() == "login");
            if key.name() == "tollgate_penalties_total" && login {
                Counter::from_arc(Arc::clone(&self.0))
            } else {
                Counter::noop()
            }
        }

        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }

        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    #[test]
    fn a_tripped_penalty_box_is_counted_once() {
        let count = Arc::new(AtomicU64::new(0));
        let recorder = Penalties(Arc::clone(&count));
        let penalty = Penalty::after(1)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(60));
        let limiter = Limiter::builder()
            .limit(
                Limit::new("login", Quota::per_minute(1))
                    .expect("a limit")
                    .penalty(penalty),
            )
            .store(MemoryStore::with_clock(ManualClock::new(
                Duration::from_secs(1_700_000_000),
            )))
            .build()
            .expect("a limiter");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let key = crate::Key::from("mallory");
        metrics::with_local_recorder(&recorder, || {
            runtime.block_on(async {
                // Admitted, tripped, then blocked: only the trip counts.
                for _ in 0..3 {
                    limiter.check("login", &key, 1).await.expect("a decision");
                }
            });
        });
        assert_eq!(count.load(Relaxed), 1);
    }
}
