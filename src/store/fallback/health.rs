//! Which of a `Fallback`'s stores serves, and when the primary may be tried again.
//!
//! The switch has hysteresis: a primary that failed is *down* for at least the
//! minimum time, doubled for each outage that begins soon after the last recovery (a
//! flapping primary is left alone longer, up to 64 ×), and comes back only after two
//! probes in a row answered. So a primary that misses its deadline now and then
//! switches a bounded number of times, and one request pays at most one deadline.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The largest doubling of the minimum down time (2^6 = 64 ×).
const MAX_STREAK: u32 = 6;

/// Probes in a row that must answer before the primary serves again.
pub(super) const PROBES_TO_RECOVER: u32 = 2;

/// The state of a `Fallback`'s switch, shared by its clones and its prober.
#[derive(Debug)]
pub(super) struct Health {
    /// Whether the insurance store serves: read by every call, set under `state`.
    /// Shared with the layer's metrics, which label a decision with the store that
    /// answered it.
    insurance: Arc<AtomicBool>,
    state: Mutex<State>,
    probe_interval_us: AtomicU64,
    min_down_us: AtomicU64,
    /// Times the serving store changed, both ways.
    switches: AtomicU64,
    /// Outages begun: the insurance store is seeded once per key per outage.
    outage: AtomicU64,
    /// Whether the primary has ever answered: a first failure before it did is a
    /// primary unreachable since startup.
    ever_answered: AtomicBool,
}

#[derive(Debug)]
struct State {
    /// The earliest instant the primary is probed (or, inline, tried) again.
    hold_until: Instant,
    /// Outages in a row that began soon after a recovery.
    streak: u32,
    recovered_at: Option<Instant>,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            insurance: Arc::default(),
            state: Mutex::new(State {
                hold_until: Instant::now(),
                streak: 0,
                recovered_at: None,
            }),
            probe_interval_us: AtomicU64::new(micros(super::DEFAULT_PROBE_INTERVAL)),
            min_down_us: AtomicU64::new(micros(super::DEFAULT_MIN_DOWN)),
            switches: AtomicU64::new(0),
            outage: AtomicU64::new(0),
            ever_answered: AtomicBool::new(false),
        }
    }
}

/// What a failure of the primary changed.
pub(super) struct Failed {
    /// The outage it began, if it began one (the primary served until now).
    pub(super) began: Option<u64>,
    /// Whether the primary never answered before.
    pub(super) never_answered: bool,
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether calls go to the primary now.
    pub(super) fn serves_primary(&self) -> bool {
        !self.insurance.load(Ordering::Acquire)
    }

    /// The flag "the insurance store serves", for the layer's metrics.
    pub(super) fn flag(&self) -> Arc<AtomicBool> {
        self.insurance.clone()
    }

    pub(super) fn switches(&self) -> u64 {
        self.switches.load(Ordering::Relaxed)
    }

    pub(super) fn set_probe_interval(&self, interval: Duration) {
        self.probe_interval_us
            .store(micros(interval), Ordering::Relaxed);
    }

    pub(super) fn set_min_down(&self, min: Duration) {
        self.min_down_us.store(micros(min), Ordering::Relaxed);
    }

    pub(super) fn probe_interval(&self) -> Duration {
        Duration::from_micros(self.probe_interval_us.load(Ordering::Relaxed))
    }

    pub(super) fn min_down(&self) -> Duration {
        Duration::from_micros(self.min_down_us.load(Ordering::Relaxed))
    }

    /// Whether every call tries a down primary itself (a zero probe interval): no
    /// hysteresis, no prober.
    pub(super) fn every_call_tries(&self) -> bool {
        self.probe_interval_us.load(Ordering::Relaxed) == 0
    }

    /// The current outage's number (0 before the first).
    pub(super) fn outage(&self) -> u64 {
        self.outage.load(Ordering::Acquire)
    }

    /// Whether no call has reached the primary yet: it never answered, never failed.
    pub(super) fn untouched(&self) -> bool {
        !self.ever_answered.load(Ordering::Relaxed) && self.outage() == 0
    }

    /// The primary failed: the insurance store serves from now on, for at least the
    /// minimum down time (longer while it flaps).
    pub(super) fn failed(&self) -> Failed {
        let mut state = self.lock();
        let never_answered = !self.ever_answered.load(Ordering::Relaxed);
        if !self.serves_primary() {
            return Failed {
                began: None,
                never_answered,
            };
        }
        let now = Instant::now();
        let min = self.min_down();
        // Soon after a recovery (within 4 × the last hold): a flap, held longer.
        let last_hold = min.saturating_mul(1 << state.streak);
        let flapping = state
            .recovered_at
            .is_some_and(|at| now.saturating_duration_since(at) < last_hold.saturating_mul(4));
        state.streak = if flapping {
            (state.streak + 1).min(MAX_STREAK)
        } else {
            0
        };
        // Every call tries the primary (a zero probe interval): no hold.
        let hold = if self.every_call_tries() {
            Duration::ZERO
        } else {
            min.saturating_mul(1 << state.streak)
        };
        state.hold_until = now.checked_add(hold).unwrap_or(now);
        let outage = self.outage.fetch_add(1, Ordering::AcqRel) + 1;
        self.insurance.store(true, Ordering::Release);
        self.switches.fetch_add(1, Ordering::Relaxed);
        Failed {
            began: Some(outage),
            never_answered,
        }
    }

    /// The primary answered a call while serving.
    pub(super) fn answered(&self) {
        if !self.ever_answered.load(Ordering::Relaxed) {
            self.ever_answered.store(true, Ordering::Relaxed);
        }
    }

    /// The primary is back (probed, and what it missed replayed): it serves again.
    /// Returns whether this changed the serving store.
    pub(super) fn recovered(&self) -> bool {
        let mut state = self.lock();
        self.answered();
        if self.serves_primary() {
            return false;
        }
        state.recovered_at = Some(Instant::now());
        self.insurance.store(false, Ordering::Release);
        self.switches.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// How long until the primary may be probed.
    pub(super) fn until_probe(&self) -> Duration {
        self.lock()
            .hold_until
            .saturating_duration_since(Instant::now())
    }

    /// For a call made while the primary is down, without a prober: whether this call
    /// tries the primary itself (one per probe interval after the hold).
    pub(super) fn claim_inline_try(&self) -> bool {
        let mut state = self.lock();
        let now = Instant::now();
        if now < state.hold_until {
            return false;
        }
        state.hold_until = now.checked_add(self.probe_interval()).unwrap_or(now);
        true
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
