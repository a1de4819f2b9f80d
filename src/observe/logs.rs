//! Rare events, logged and counted: store errors, penalty boxes tripped, refunds and
//! in-flight slot records that failed, rate-limit headers over their bound, policies
//! installed (their routes) and policies that applied to nothing.

use crate::StoreError;

/// Counts a failed store call by its kind (`tollgate_store_errors_total`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn store_error(error: &StoreError) {
    #[cfg(feature = "metrics")]
    {
        // The kind's name, a handful of values: registered per error, which is rare.
        let kind = error.kind().to_string();
        let names = super::metric_names();
        let key = |name: &'static str| {
            metrics::counter!(name, "kind" => kind.clone()).increment(1);
        };
        if names.prometheus() {
            key(super::catalogue::STORE_ERRORS.name);
        }
        if names.open_telemetry() {
            key(super::catalogue::STORE_ERRORS.open_telemetry_name);
        }
    }
}

/// Records a refund that could not be applied.
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
pub(crate) fn refund_failed(error: &crate::StoreError) {
    store_error(error);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "rate-limit refund failed");
}

/// Records a settle (a metered request's charge moved to its actual) that could not
/// be applied: the estimate stands. The response it belonged to is untouched.
#[cfg(feature = "layer")]
#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
pub(crate) fn settle_failed(error: &crate::StoreError) {
    store_error(error);
    #[cfg(feature = "tracing")]
    tracing::warn!(target: "tollgate", %error, "rate-limit settle failed: the estimate stands");
}

/// Records, once per process, a request of a byte-metered policy that no
/// `MeterBytes` layer counted: its bodies went through uncounted.
#[cfg(feature = "layer")]
pub(crate) fn bytes_not_metered() {
    #[cfg(feature = "tracing")]
    {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(
                target: "tollgate",
                "a policy meters body bytes, and no MeterBytes layer inside the RateLimitLayer counts them: bodies go through uncounted"
            );
        }
    }
}

#[cfg_attr(
    not(any(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]
/// Records an in-flight slot record that could not be given back or renewed on a remote
/// store: it expires by itself within its TTL.
#[cfg(feature = "redis")]
pub(crate) fn slot_record_failed(error: &StoreError) {
    store_error(error);
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

/// Records that `policy` applied to none of the first requests the layer saw (see
/// `unapplied.rs`): once per policy and installed set, a warning, and the
/// `tollgate_policy_unapplied` gauge up. `keyless` of them were on its routes without
/// a key; the others were outside its routes.
#[cfg(all(feature = "layer", any(feature = "metrics", feature = "tracing")))]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn policy_unapplied(policy: &crate::Policy, keyless: u32) {
    // The layer may never have described its metrics: no policy of it applied yet.
    #[cfg(feature = "metrics")]
    super::names::describe_all();
    #[cfg(feature = "metrics")]
    super::names::gauge(
        &super::catalogue::POLICY_UNAPPLIED,
        &[("policy", policy.name())],
    )
    .increment(1.0);
    #[cfg(feature = "tracing")]
    {
        let watched = super::unapplied::WATCHED;
        let why = if keyless == 0 {
            "its routes matched none of them"
        } else if keyless >= watched {
            "its key extractor found no key in any of them"
        } else {
            "some were outside its routes, and its key extractor found no key in the others"
        };
        tracing::warn!(
            target: "tollgate",
            policy = policy.name(),
            routes = %policy.describe_scope(),
            key = %policy.describe_key(),
            requests = watched,
            outside_routes = watched.saturating_sub(keyless),
            without_key = keyless,
            "rate-limit policy applied to none of its first {watched} requests ({why}): it limits nothing; check its routes and its key"
        );
    }
}

/// Records that a policy reported as applying to nothing applied to a request after
/// all: the gauge goes back down.
#[cfg(all(feature = "layer", any(feature = "metrics", feature = "tracing")))]
pub(crate) fn policy_applies_after_all(policy: &'static str) {
    unapplied_report_ended(policy);
    #[cfg(feature = "tracing")]
    tracing::info!(target: "tollgate", policy, "rate-limit policy reported as applying to nothing applied to a request");
}

/// Ends a report of a policy that applied to nothing (it applied after all, or its
/// set of policies was replaced): the gauge goes back down.
#[cfg(all(feature = "layer", any(feature = "metrics", feature = "tracing")))]
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn unapplied_report_ended(policy: &'static str) {
    #[cfg(feature = "metrics")]
    super::names::gauge(&super::catalogue::POLICY_UNAPPLIED, &[("policy", policy)]).decrement(1.0);
}

/// Records each policy of a set the layer installs (built or reloaded): its routes,
/// its key and, for a fallback, the policy it stands in for, so that an operator can
/// see what each policy applies to.
#[cfg(feature = "layer")]
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn policies_installed(policies: &[crate::Policy]) {
    #[cfg(feature = "tracing")]
    for policy in policies {
        tracing::info!(
            target: "tollgate",
            policy = policy.name(),
            routes = %policy.describe_scope(),
            key = %policy.describe_key(),
            fallback_for = policy.stands_in_for(),
            "rate-limit policy installed"
        );
    }
}

/// Records a penalty box that a rejection of `policy` tripped: the key is blocked for
/// `block_for`. The log names the key by its fingerprint (`Key::to_hex`, what an
/// operator passes to `reset`), never the raw key.
#[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
pub(crate) fn penalty_tripped(
    policy: &'static str,
    key: Option<&crate::Key>,
    block_for: std::time::Duration,
) {
    #[cfg(feature = "metrics")]
    super::names::counter(&super::catalogue::PENALTIES, &[("policy", policy)]).increment(1);
    #[cfg(feature = "tracing")]
    tracing::info!(target: "tollgate", policy, key.fingerprint = key.map(crate::Key::to_hex), block_for_ms = u64::try_from(block_for.as_millis()).unwrap_or(u64::MAX), "penalty box tripped: key blocked");
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
