//! Time sources: the [`Clock`] trait a store reads "now" from, [`SystemClock`] for
//! production and [`ManualClock`] for tests and simulations.

use std::fmt;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of "now", as time since the Unix epoch.
///
/// Windows are aligned to the Unix epoch so that every process agrees on them; a clock
/// therefore reports epoch time, not an arbitrary instant. The stores read it once per
/// decision (once per `check_all`, so every limit sees the same instant).
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// assert_eq!(clock.now(), Duration::from_secs(1_700_000_000));
/// ```
///
/// Readings later than 10^16 µs (in the year 2286) are read as that instant by the stores,
/// so a clock gone wild saturates instead of overflowing their arithmetic.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time since the Unix epoch.
    fn now(&self) -> Duration;

    /// The current time in whole microseconds since the Unix epoch, the unit every
    /// algorithm uses. Override it when the clock can answer without building a
    /// `Duration` (it is read on every decision).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new(Duration::from_millis(1500)).now_micros(), 1_500_000);
    /// ```
    fn now_micros(&self) -> u64 {
        crate::time::micros(self.now())
    }
}

/// The real clock: monotonic, anchored once to the Unix epoch.
///
/// The first reading pairs a monotonic instant with the wall clock; every later
/// reading adds the monotonic time elapsed since. Wall-clock steps (NTP, an operator)
/// therefore never move it backwards, while processes started on machines with
/// synchronised clocks still agree on window edges. The monotonic source is the CPU's
/// invariant time-stamp counter where available (a few nanoseconds per reading, via
/// `quanta`), the OS monotonic clock otherwise.
///
/// ```
/// use tollgate::clock::{Clock, SystemClock};
/// let a = SystemClock.now();
/// let b = SystemClock.now();
/// assert!(b >= a);
/// assert!(a.as_secs() > 1_600_000_000);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// The monotonic source and the epoch time of its first reading.
struct Anchor {
    source: quanta::Clock,
    /// The source's raw reading (TSC ticks where available) at the anchor.
    start_raw: u64,
    start_since_epoch_us: u64,
}

fn anchor() -> &'static Anchor {
    static ANCHOR: OnceLock<Anchor> = OnceLock::new();
    ANCHOR.get_or_init(|| {
        let source = quanta::Clock::new();
        let start_raw = source.raw();
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Anchor {
            source,
            start_raw,
            start_since_epoch_us: crate::time::micros(since_epoch),
        }
    })
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    #[inline]
    fn now_micros(&self) -> u64 {
        // Raw ticks scaled once to nanoseconds: cheaper than building an `Instant`
        // and a `Duration` on every decision (the clock showed up in profiles).
        let anchor = anchor();
        let elapsed_ns = anchor
            .source
            .delta_as_nanos(anchor.start_raw, anchor.source.raw());
        anchor.start_since_epoch_us + elapsed_ns / 1_000
    }
}

/// A clock that moves only when told to. Clones share one time.
///
/// ```
/// use std::time::Duration;
/// use tollgate::clock::{Clock, ManualClock};
///
/// let clock = ManualClock::new(Duration::from_secs(100));
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(1500));
/// assert_eq!(shared.now(), Duration::from_micros(101_500_000));
/// shared.set(Duration::from_secs(50)); // going backwards is allowed: tests need it
/// assert_eq!(clock.now(), Duration::from_secs(50));
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `since_epoch` (microsecond resolution).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new(Duration::from_secs(7)).now(), Duration::from_secs(7));
    /// ```
    pub fn new(since_epoch: Duration) -> Self {
        Self {
            micros: Arc::new(AtomicU64::new(crate::time::micros(since_epoch))),
        }
    }

    /// Moves the clock to `since_epoch`, forwards or backwards.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::{Clock, ManualClock};
    /// let clock = ManualClock::default();
    /// clock.set(Duration::from_secs(3));
    /// assert_eq!(clock.now(), Duration::from_secs(3));
    /// ```
    pub fn set(&self, since_epoch: Duration) {
        self.micros
            .store(crate::time::micros(since_epoch), Ordering::SeqCst);
    }

    /// Moves the clock forward by `by`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::clock::{Clock, ManualClock};
    /// let clock = ManualClock::default();
    /// clock.advance(Duration::from_micros(10));
    /// assert_eq!(clock.now(), Duration::from_micros(10));
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = crate::time::micros(by);
        // Saturates: a clock advanced past `u64::MAX` µs must not wrap to the past.
        let _ = self
            .micros
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| {
                Some(now.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.now_micros())
    }

    fn now_micros(&self) -> u64 {
        self.micros.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ManualClock").field(&self.now()).finish()
    }
}

/// The latest instant the stores compute at, in microseconds since the epoch (late
/// in the year 2286): far beyond any real clock, and early enough that every
/// algorithm's arithmetic (GCRA's nanoseconds plus a century of tolerance) stays
/// inside `u64`.
pub(crate) const MAX_NOW_MICROS: u64 = 10_000_000_000_000_000;

/// Reads a clock as whole microseconds since the epoch, the unit every algorithm uses.
/// A reading past [`MAX_NOW_MICROS`] (a broken clock, a test's `Duration::MAX`) is read
/// as that instant: time saturates there rather than overflowing.
pub(crate) fn now_micros(clock: &dyn Clock) -> u64 {
    clock.now_micros().min(MAX_NOW_MICROS)
}
