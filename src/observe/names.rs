//! Which names tollgate emits its metrics under ([`set_metric_names`]), and handles
//! registered under them: the layer registers a policy's handles once and increments
//! them on every request, with no label built per request.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Label, Level, Metadata, Unit};

use super::catalogue::{METRICS, Metric, MetricKind};

/// The names tollgate's metrics are emitted under (see
/// [`METRICS`](crate::observe::METRICS) for both names of each).
///
/// ```
/// use tollgate::observe::{MetricNames, metric_names, set_metric_names};
/// set_metric_names(MetricNames::Both);
/// assert_eq!(metric_names(), MetricNames::Both);
/// set_metric_names(MetricNames::default());
/// assert_eq!(metric_names(), MetricNames::Prometheus);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MetricNames {
    /// `tollgate_requests_total`, `tollgate_store_duration_seconds`, …: the default.
    #[default]
    Prometheus,
    /// `rate_limit.requests`, `rate_limit.store.duration`, …: OpenTelemetry's style,
    /// for an OpenTelemetry exporter.
    OpenTelemetry,
    /// Each metric under both names (while dashboards move from one to the other).
    Both,
}

impl MetricNames {
    pub(crate) fn prometheus(self) -> bool {
        matches!(self, Self::Prometheus | Self::Both)
    }

    pub(crate) fn open_telemetry(self) -> bool {
        matches!(self, Self::OpenTelemetry | Self::Both)
    }
}

static NAMES: AtomicU8 = AtomicU8::new(0);

/// Emits tollgate's metrics under `names` from now on, in the whole process. Call it
/// at startup, before the first request: a layer registers its policies' metrics
/// under the names in force at its first request after a build or reload.
///
/// ```
/// use tollgate::observe::{MetricNames, set_metric_names};
/// set_metric_names(MetricNames::OpenTelemetry);
/// # set_metric_names(MetricNames::Prometheus);
/// ```
pub fn set_metric_names(names: MetricNames) {
    NAMES.store(names as u8, Relaxed);
}

/// The names tollgate's metrics are emitted under (default
/// [`MetricNames::Prometheus`]).
///
/// ```
/// # use tollgate::observe::{MetricNames, metric_names};
/// assert_eq!(metric_names(), MetricNames::Prometheus);
/// ```
pub fn metric_names() -> MetricNames {
    match NAMES.load(Relaxed) {
        1 => MetricNames::OpenTelemetry,
        2 => MetricNames::Both,
        _ => MetricNames::Prometheus,
    }
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
static METADATA: Metadata<'static> = Metadata::new("tollgate", Level::INFO, Some("tollgate"));

/// Whether a recorder is installed (for this thread, or globally). `metrics` offers no
/// way to ask; what it falls back to is its no-op recorder, which has no fields, and
/// every recorder that keeps values has some. Used to skip reading the clock for
/// latency histograms that nobody records.
#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) fn recording() -> bool {
    metrics::with_recorder(|recorder| size_of_val(recorder) != 0)
}

/// A handle under each name in use; the other is a no-op.
#[derive(Clone)]
#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) struct Dual<T> {
    prometheus: T,
    open_telemetry: T,
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
impl Dual<Counter> {
    #[inline]
    pub(crate) fn increment(&self, n: u64) {
        self.prometheus.increment(n);
        self.open_telemetry.increment(n);
    }
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
impl Dual<Gauge> {
    #[inline]
    pub(crate) fn increment(&self, n: f64) {
        self.prometheus.increment(n);
        self.open_telemetry.increment(n);
    }

    #[inline]
    pub(crate) fn decrement(&self, n: f64) {
        self.prometheus.decrement(n);
        self.open_telemetry.decrement(n);
    }
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
impl Dual<Histogram> {
    #[inline]
    pub(crate) fn record(&self, value: f64) {
        self.prometheus.record(value);
        self.open_telemetry.record(value);
    }
}

/// Static label pairs, e.g. `[("policy", "api"), ("outcome", "allowed")]`.
#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) type Labels<'a> = &'a [(&'static str, &'static str)];

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
fn key(name: &'static str, labels: Labels<'_>) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|&(key, value)| Label::from_static_parts(key, value))
        .collect();
    Key::from_parts(name, labels)
}

/// Registers `metric` with `labels` under the names in force, with the recorder in
/// use now; `register` is the recorder's method for the metric's kind.
#[cfg_attr(not(feature = "layer"), allow(dead_code))]
fn register<T>(
    metric: &Metric,
    labels: Labels<'_>,
    register: impl Fn(&dyn metrics::Recorder, &Key) -> T,
    noop: impl Fn() -> T,
) -> Dual<T> {
    let names = metric_names();
    let one = |wanted: bool, name: &'static str| {
        if wanted {
            metrics::with_recorder(|recorder| register(recorder, &key(name, labels)))
        } else {
            noop()
        }
    };
    Dual {
        prometheus: one(names.prometheus(), metric.name),
        open_telemetry: one(names.open_telemetry(), metric.open_telemetry_name),
    }
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) fn counter(metric: &Metric, labels: Labels<'_>) -> Dual<Counter> {
    register(
        metric,
        labels,
        |r, key| r.register_counter(key, &METADATA),
        Counter::noop,
    )
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) fn gauge(metric: &Metric, labels: Labels<'_>) -> Dual<Gauge> {
    register(
        metric,
        labels,
        |r, key| r.register_gauge(key, &METADATA),
        Gauge::noop,
    )
}

#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) fn histogram(metric: &Metric, labels: Labels<'_>) -> Dual<Histogram> {
    register(
        metric,
        labels,
        |r, key| r.register_histogram(key, &METADATA),
        Histogram::noop,
    )
}

/// Gives the recorder in use every metric's meaning (Prometheus' `# HELP` lines),
/// under the names in force.
#[cfg_attr(not(feature = "layer"), allow(dead_code))]
pub(crate) fn describe_all() {
    let names = metric_names();
    metrics::with_recorder(|recorder| {
        for metric in METRICS {
            let unit = (metric.kind == MetricKind::Histogram).then_some(Unit::Seconds);
            for (wanted, name) in [
                (names.prometheus(), metric.name),
                (names.open_telemetry(), metric.open_telemetry_name),
            ] {
                if !wanted {
                    continue;
                }
                let name = KeyName::from_const_str(name);
                let meaning = metric.meaning.into();
                match metric.kind {
                    MetricKind::Counter => recorder.describe_counter(name, unit, meaning),
                    MetricKind::Gauge => recorder.describe_gauge(name, unit, meaning),
                    MetricKind::Histogram => recorder.describe_histogram(name, unit, meaning),
                }
            }
        }
    });
}

/// Emits one update of a metric with literal names and labels (no allocation: the
/// key is a static) under the names in force. The names must be the catalogue's; the
/// recorder test holds them to it.
macro_rules! emit {
    ($kind:ident, $prometheus:literal, $open_telemetry:literal $(, $k:literal => $v:literal)*; $method:ident($value:expr)) => {{
        let names = $crate::observe::metric_names();
        if names.prometheus() {
            metrics::$kind!($prometheus $(, $k => $v)*).$method($value);
        }
        if names.open_telemetry() {
            metrics::$kind!($open_telemetry $(, $k => $v)*).$method($value);
        }
    }};
}
pub(crate) use emit;
