//! What tollgate tells an operator: `metrics` counters, gauges and histograms
//! (feature `metrics`) and `tracing` spans and events under the target `tollgate`
//! (feature `tracing`). Without those features every call here compiles to nothing.
//! Keys are never recorded, neither as labels nor in logs: they are API tokens and
//! client addresses (a span may carry a key's fingerprint, which reveals nothing).
//!
//! Every metric, its type, labels and meaning, is listed once in [`METRICS`] (and in
//! the README's "Operating limits" table, which a test holds equal to it). Labels are
//! low-cardinality: policy names, outcomes, store types, operations and reasons.
//!
//! Names follow Prometheus' conventions (`tollgate_requests_total`) unless
//! [`set_metric_names`] picks OpenTelemetry's (`rate_limit.requests`), or both.
//!
//! See [`METRICS`] and [`set_metric_names`] (feature `metrics`) for examples.
//!
//! The files, one job each: `catalogue.rs` (the list), `names.rs` (which names are
//! emitted, and registering handles under them), `policy.rs` (a policy's handles in the
//! layer: decisions, near-limit, held and running requests), `decisions.rs` (what
//! became of a request: metrics, the decision's span and its log lines), `store.rs`
//! (store-call latency, failures), `memory.rs` (the memory store's size and evictions),
//! `lease.rs` (leases and the denial cache), `fallback.rs` (which store of a
//! `Fallback` serves, its primary's errors), `logs.rs` (penalties, refunds, slot
//! records, oversized headers, installed policies), `unapplied.rs` (policies that
//! apply to no request).

#[cfg(feature = "metrics")]
mod catalogue;
#[cfg(feature = "layer")]
mod decisions;
mod fallback;
mod lease;
mod logs;
mod memory;
#[cfg(feature = "metrics")]
mod names;
#[cfg(feature = "layer")]
mod policy;
#[cfg(feature = "layer")]
mod store;
#[cfg(feature = "layer")]
mod unapplied;

#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use catalogue::{METRICS, Metric, MetricKind};
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub use names::{MetricNames, metric_names, set_metric_names};

#[cfg(feature = "layer")]
pub(crate) use decisions::{Outcome, decided, refused};
pub(crate) use fallback::{
    fallback_built, fallback_dropped, primary_error, recovery_failed, switched_to_insurance,
    switched_to_primary, unreachable_at_startup,
};
pub(crate) use lease::{denial_cache_hit, lease_hit, lease_slice, lease_units_returned};
#[cfg(feature = "layer")]
pub(crate) use logs::headers_too_long;
#[cfg(feature = "layer")]
pub(crate) use logs::policies_installed;
#[cfg(feature = "redis")]
pub(crate) use logs::slot_record_failed;
#[cfg(feature = "layer")]
pub(crate) use logs::{bytes_not_metered, settle_failed, store_error};
pub(crate) use logs::{penalty_tripped, refund_failed};
pub(crate) use memory::{Eviction, memory_changed, memory_evicted};
#[cfg(feature = "layer")]
pub(crate) use policy::{Held, PolicyMetrics};
#[cfg(feature = "layer")]
pub(crate) use store::{Operation, StoreMetrics, StoreTimer};
#[cfg(feature = "layer")]
pub(crate) use unapplied::Miss;
