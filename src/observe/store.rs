//! The layer's store calls: how long each took (`tollgate_store_duration_seconds`,
//! timed only while a recorder is installed), and what the layer did when one failed.
//! A `Fallback`'s calls are labelled with the store that answered them: `primary` or
//! `insurance` (read from its switch when the answer comes).

#[cfg(feature = "metrics")]
use std::sync::atomic::{AtomicBool, Ordering};
#[cfg(feature = "metrics")]
use std::sync::{Arc, OnceLock};

#[cfg(feature = "metrics")]
use metrics::{Counter, Histogram};

#[cfg(feature = "metrics")]
use super::names::{Dual, counter, histogram, recording};
use crate::StoreError;
use crate::store::Store;

/// Which store call was timed (the `operation` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    /// A rate decision (one policy, or several all-or-nothing).
    Decide,
    /// A place reserved in wait mode.
    Reserve,
    /// In-flight slots taken.
    InFlight,
}

impl Operation {
    #[cfg(feature = "metrics")]
    const ALL: [Self; 3] = [Self::Decide, Self::Reserve, Self::InFlight];

    #[cfg(feature = "metrics")]
    fn label(self) -> &'static str {
        match self {
            Self::Decide => "decide",
            Self::Reserve => "reserve",
            Self::InFlight => "in_flight",
        }
    }
}

/// A layer's store handles: latency per operation and requests let through when the
/// store failed, labelled with the store's type. Clones share them.
#[derive(Clone)]
pub(crate) struct StoreMetrics {
    #[cfg(feature = "metrics")]
    inner: Arc<Inner>,
}

#[cfg(feature = "metrics")]
struct Inner {
    store: &'static str,
    /// A `Fallback`'s flag "the insurance store serves": its calls are labelled with
    /// the store that answered (`primary`, `insurance`), not with `Fallback`.
    switch: Option<Arc<AtomicBool>>,
    handles: OnceLock<Handles>,
}

#[cfg(feature = "metrics")]
struct Handles {
    /// Whether a recorder was installed when these were registered: if not, nobody
    /// records the latencies, and the clock is not read for them.
    timing: bool,
    /// By serving store (`[primary, insurance]`: the same for a store that does not
    /// switch), then by operation.
    durations: [[Dual<Histogram>; Operation::ALL.len()]; 2],
    fail_open: [Dual<Counter>; 2],
}

#[cfg_attr(not(feature = "metrics"), allow(clippy::unused_self))]
impl StoreMetrics {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(store: &dyn Store) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            inner: Arc::new(Inner {
                store: store_label(store),
                switch: store.insurance_serving(),
                handles: OnceLock::new(),
            }),
        }
    }

    #[cfg(feature = "metrics")]
    #[inline]
    fn handles(&self) -> &Handles {
        self.inner.handles.get_or_init(|| {
            use super::catalogue::{FAIL_OPEN, STORE_DURATION};
            let labels = [false, true].map(|insurance| self.label(insurance));
            Handles {
                timing: recording(),
                durations: labels.map(|store| {
                    Operation::ALL.map(|operation| {
                        histogram(
                            &STORE_DURATION,
                            &[("store", store), ("operation", operation.label())],
                        )
                    })
                }),
                fail_open: labels.map(|store| counter(&FAIL_OPEN, &[("store", store)])),
            }
        })
    }

    /// The `store` label: the store's type, or for a `Fallback` the store serving.
    #[cfg(feature = "metrics")]
    fn label(&self, insurance: bool) -> &'static str {
        match (&self.inner.switch, insurance) {
            (None, _) => self.inner.store,
            (Some(_), false) => "primary",
            (Some(_), true) => "insurance",
        }
    }

    /// Which of the handles to use now: 1 while a `Fallback`'s insurance store serves.
    #[cfg(feature = "metrics")]
    #[inline]
    fn serving(&self) -> usize {
        self.inner
            .switch
            .as_ref()
            .map_or(0, |flag| usize::from(flag.load(Ordering::Relaxed)))
    }

    /// Starts timing a store call of `operation`: the clock is read only while a
    /// recorder is installed.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(crate) fn start(&self, operation: Operation) -> StoreTimer {
        StoreTimer {
            #[cfg(feature = "metrics")]
            started: self.handles().timing.then(|| (operation, Instant::now())),
        }
    }

    /// Records the end of the call `timer` timed.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    #[inline]
    pub(crate) fn stop(&self, timer: StoreTimer) {
        #[cfg(feature = "metrics")]
        if let Some((operation, since)) = timer.started {
            self.handles().durations[self.serving()][operation as usize]
                .record(elapsed_seconds(since));
        }
    }

    /// Records a failed store call of a request, and what the layer did about it.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn failed(&self, error: &StoreError, failing_open: bool) {
        super::logs::store_error(error);
        #[cfg(feature = "metrics")]
        if failing_open {
            self.handles().fail_open[self.serving()].increment(1);
        }
        #[cfg(feature = "tracing")]
        tracing::warn!(target: "tollgate", %error, fail_open = failing_open, "rate-limit store failed");
    }
}

/// A store call being timed (nothing when no recorder listens).
#[must_use]
#[derive(Clone, Copy)]
pub(crate) struct StoreTimer {
    #[cfg(feature = "metrics")]
    started: Option<(Operation, Instant)>,
}

/// The label of a store: its type's name, as its `Debug` output starts with it
/// (`MemoryStore`, `RedisStore`, `LeasedStore`, `Fallback`, or a store of your own),
/// read once per layer. Bounded, so that no store can make a label of any length.
#[cfg(feature = "metrics")]
fn store_label(store: &dyn Store) -> &'static str {
    const KNOWN: [&str; 4] = ["MemoryStore", "RedisStore", "LeasedStore", "Fallback"];
    // Other stores' names are kept once each, for the process's life: a few bytes per
    // store type, however many layers are built.
    static OTHERS: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let debug = format!("{store:?}");
    let name: String = debug
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(48)
        .collect();
    if let Some(known) = KNOWN.iter().find(|known| **known == name) {
        return known;
    }
    if name.is_empty() {
        return "custom";
    }
    let mut others = OTHERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(known) = others.iter().find(|other| **other == name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    others.push(leaked);
    leaked
}

/// A cheap monotonic instant: the CPU's time-stamp counter where there is one (a few
/// nanoseconds per reading, as `SystemClock` reads it).
#[cfg(feature = "metrics")]
#[derive(Clone, Copy)]
pub(crate) struct Instant(u64);

#[cfg(feature = "metrics")]
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

#[cfg(feature = "metrics")]
impl Instant {
    #[inline]
    pub(crate) fn now() -> Self {
        Self(clock().raw())
    }
}

/// Seconds since `since`.
#[cfg(feature = "metrics")]
#[inline]
pub(crate) fn elapsed_seconds(since: Instant) -> f64 {
    let clock = clock();
    clock.delta_as_nanos(since.0, clock.raw()) as f64 / 1e9
}
