//! Every metric tollgate emits, listed once: its names, type, labels and meaning. The
//! emitting code names its metric by one of these constants, and a test reads the
//! list back from a recorder, so nothing is emitted that is not here, and nothing here
//! goes unemitted.

/// What kind of value a metric is.
///
/// ```
/// use tollgate::observe::{METRICS, MetricKind};
/// assert!(METRICS.iter().any(|m| m.kind == MetricKind::Histogram));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKind {
    /// Only goes up; rate it (`rate(…[1m])`).
    Counter,
    /// Goes up and down: a number of things now.
    Gauge,
    /// A distribution of values, in seconds (with `_bucket`, `_sum` and `_count` series
    /// once the exporter is given buckets).
    Histogram,
}

/// One metric tollgate emits (see [`METRICS`]).
///
/// ```
/// use tollgate::observe::METRICS;
/// for metric in METRICS {
///     assert!(metric.name.starts_with("tollgate_"));
///     assert!(metric.open_telemetry_name.starts_with("rate_limit."));
///     assert!(!metric.labels.contains(&"key"), "never a key");
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metric {
    /// The Prometheus-style name (the default).
    pub name: &'static str,
    /// The OpenTelemetry-style name ([`MetricNames::OpenTelemetry`](crate::observe::MetricNames)).
    pub open_telemetry_name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its labels (attributes), each of few values.
    pub labels: &'static [&'static str],
    /// What it counts, for an operator.
    pub meaning: &'static str,
}

pub(crate) const REQUESTS: Metric = Metric {
    name: "tollgate_requests_total",
    open_telemetry_name: "rate_limit.requests",
    kind: MetricKind::Counter,
    labels: &["policy", "outcome"],
    meaning: "Decisions of the layer, by policy and outcome: `allowed` (within the policy's \
              limit), `waited` (admitted after being held for a leaky-bucket turn or a wait), \
              `rejected`, `blocked` (an operator's or a penalty's block, and the rejection that \
              trips a penalty), `shadow_rejected` \
              (over the limit, served because the policy is in shadow for this caller), \
              `queue_full` (admitted with a delay the layer had no place to hold), \
              `fail_open` and `fail_closed` (the store failed).",
};

pub(crate) const NEAR_LIMIT: Metric = Metric {
    name: "tollgate_near_limit_total",
    open_telemetry_name: "rate_limit.near_limit",
    kind: MetricKind::Counter,
    labels: &["policy"],
    meaning: "Admitted requests that left their caller less than the near-limit share of \
              its capacity (`RateLimitLayer::near_limit`, default 10 %).",
};

pub(crate) const STORE_DURATION: Metric = Metric {
    name: "tollgate_store_duration_seconds",
    open_telemetry_name: "rate_limit.store.duration",
    kind: MetricKind::Histogram,
    labels: &["store", "operation"],
    meaning: "Time the layer waited for its store, by store type (`MemoryStore`, \
              `RedisStore`, `LeasedStore`, …; for a `Fallback`, the store that answered: \
              `primary` or `insurance`) and operation (`decide`, `reserve`, `in_flight`). \
              Timed only while a recorder is installed.",
};

pub(crate) const STORE_ERRORS: Metric = Metric {
    name: "tollgate_store_errors_total",
    open_telemetry_name: "rate_limit.store.errors",
    kind: MetricKind::Counter,
    labels: &["kind"],
    meaning: "Failed store calls (decisions, refunds, in-flight slot records; a \
              `Fallback`'s primary's too, when its insurance store answered), by \
              `StoreErrorKind` (`timeout`, `connection`, …).",
};

pub(crate) const FAIL_OPEN: Metric = Metric {
    name: "tollgate_fail_open_total",
    open_telemetry_name: "rate_limit.fail_open",
    kind: MetricKind::Counter,
    labels: &["store"],
    meaning: "Requests admitted unchecked because the store failed (`FailMode::Open`).",
};

pub(crate) const HELD: Metric = Metric {
    name: "tollgate_held",
    open_telemetry_name: "rate_limit.held",
    kind: MetricKind::Gauge,
    labels: &["policy"],
    meaning: "Requests held now for their turn (leaky-bucket delay or wait mode), by the \
              policy that holds them; at most `max_held` in all.",
};

pub(crate) const HELD_DURATION: Metric = Metric {
    name: "tollgate_held_seconds",
    open_telemetry_name: "rate_limit.held.duration",
    kind: MetricKind::Histogram,
    labels: &["policy"],
    meaning: "How long held requests were held, served or given up by their caller.",
};

pub(crate) const IN_FLIGHT: Metric = Metric {
    name: "tollgate_in_flight",
    open_telemetry_name: "rate_limit.in_flight",
    kind: MetricKind::Gauge,
    labels: &["policy"],
    meaning: "Requests the policy admitted whose inner service has not answered yet (held \
              ones included).",
};

pub(crate) const PENALTIES: Metric = Metric {
    name: "tollgate_penalties_total",
    open_telemetry_name: "rate_limit.penalties",
    kind: MetricKind::Counter,
    labels: &["policy"],
    meaning: "Penalty boxes tripped: a key blocked for its repeated rejections.",
};

pub(crate) const POLICY_UNAPPLIED: Metric = Metric {
    name: "tollgate_policy_unapplied",
    open_telemetry_name: "rate_limit.policy.unapplied",
    kind: MetricKind::Gauge,
    labels: &["policy"],
    meaning: "1 while a policy has applied to none of the first 1,000 requests the layer \
              saw since its set was installed (its routes match none of them, or its key \
              extractor finds no key): it limits nothing. Back to 0 when it applies, or \
              when a reload replaces the set.",
};

pub(crate) const MEMORY_KEYS: Metric = Metric {
    name: "tollgate_memory_keys",
    open_telemetry_name: "rate_limit.memory.keys",
    kind: MetricKind::Gauge,
    labels: &[],
    meaning: "Rate states the process's memory stores hold (`MemoryStore::len`, summed).",
};

pub(crate) const MEMORY_BYTES: Metric = Metric {
    name: "tollgate_memory_bytes",
    open_telemetry_name: "rate_limit.memory.bytes",
    kind: MetricKind::Gauge,
    labels: &[],
    meaning: "Bytes those states take, as `MemoryStore::max_bytes` counts them.",
};

pub(crate) const MEMORY_EVICTIONS: Metric = Metric {
    name: "tollgate_memory_evictions_total",
    open_telemetry_name: "rate_limit.memory.evictions",
    kind: MetricKind::Counter,
    labels: &["reason"],
    meaning: "States a memory store evicted to make room, by bound reached: `keys` \
              (`max_keys`) or `bytes` (`max_bytes`). Idle states swept away are not counted.",
};

pub(crate) const LEASE_HITS: Metric = Metric {
    name: "tollgate_lease_hits_total",
    open_telemetry_name: "rate_limit.lease.hits",
    kind: MetricKind::Counter,
    labels: &[],
    meaning: "Requests a `LeasedStore` admitted from a lease, without a store call.",
};

pub(crate) const LEASE_SLICES: Metric = Metric {
    name: "tollgate_lease_slices_total",
    open_telemetry_name: "rate_limit.lease.slices",
    kind: MetricKind::Counter,
    labels: &[],
    meaning: "Slices of quota a `LeasedStore` charged to its store and installed as leases.",
};

pub(crate) const LEASE_UNITS_RETURNED: Metric = Metric {
    name: "tollgate_lease_units_returned_total",
    open_telemetry_name: "rate_limit.lease.units_returned",
    kind: MetricKind::Counter,
    labels: &[],
    meaning: "Unused lease units given back to the store (window algorithms).",
};

pub(crate) const DENIAL_CACHE_HITS: Metric = Metric {
    name: "tollgate_denial_cache_hits_total",
    open_telemetry_name: "rate_limit.denial_cache.hits",
    kind: MetricKind::Counter,
    labels: &[],
    meaning: "Requests the Redis store's denial cache denied without a round trip.",
};

pub(crate) const FALLBACK_SERVING: Metric = Metric {
    name: "tollgate_fallback_serving",
    open_telemetry_name: "rate_limit.fallback.serving",
    kind: MetricKind::Gauge,
    labels: &["store"],
    meaning: "`Fallback`s served now by their `primary` or their `insurance` store (a \
              switch moves one from one series to the other).",
};

/// Every metric tollgate emits, in the order of the README's table.
///
/// ```
/// let names: Vec<&str> = tollgate::observe::METRICS.iter().map(|m| m.name).collect();
/// assert!(names.contains(&"tollgate_store_duration_seconds"));
/// ```
pub const METRICS: &[Metric] = &[
    REQUESTS,
    NEAR_LIMIT,
    STORE_DURATION,
    STORE_ERRORS,
    FAIL_OPEN,
    HELD,
    HELD_DURATION,
    IN_FLIGHT,
    PENALTIES,
    POLICY_UNAPPLIED,
    MEMORY_KEYS,
    MEMORY_BYTES,
    MEMORY_EVICTIONS,
    LEASE_HITS,
    LEASE_SLICES,
    LEASE_UNITS_RETURNED,
    DENIAL_CACHE_HITS,
    FALLBACK_SERVING,
];
