//! The accuracy lab: replay traffic through every algorithm of tollgate and measure
//! what each one lets through.
//!
//! A [`Lab`] replays each [`Pattern`] (seeded, reproducible arrivals) through each
//! [`Algorithm`] on a store whose time is a [`ManualClock`] set to every arrival's
//! instant, records every decision, and compares them with the *ideal* limiter (see
//! [`ideal`]): the exact sliding log with the same quota replaying the same arrivals.
//! [`Measures`] says how far each algorithm strays; [`plot`] draws it; the crate's
//! binary (`cargo run --release -p tollgate-lab`) prints the table and writes the
//! charts, and `docs/choosing-an-algorithm.md` discusses the results.
//! [`Lab::run_leases`] replays the same patterns through several processes with
//! [`LeasedStore`](tollgate::store::LeasedStore)s over one store: what leases cost, and that
//! they keep every bound.
//!
//! The lab uses only tollgate's public API: every decision goes through
//! [`Limiter::check`](tollgate::Limiter::check), as a service's would.
//!
//! ```
//! use tollgate::{Algorithm, Quota};
//! use tollgate_lab::{Lab, Pattern};
//!
//! let lab = Lab::new(Quota::per_minute(100)).periods(4);
//! let attack = Pattern::boundary_attack(&lab.quota(), 4);
//! let fixed = lab.trace(&attack, Algorithm::FixedWindow)?;
//! let m = lab.measure(&attack, &fixed.admitted);
//! assert_eq!(m.max_ratio, 2.0); // two full quotas within one minute
//! let log = lab.trace(&attack, Algorithm::SlidingWindowLog)?;
//! assert_eq!(lab.measure(&attack, &log.admitted).max_ratio, 1.0);
//! # Ok::<(), tollgate_lab::LabError>(())
//! ```

pub mod dashboard;
#[cfg(test)]
mod figures;
mod leases;
mod measures;
mod patterns;
pub mod plot;
mod table;

use std::error::Error as StdError;
use std::fmt;
use std::time::{Duration, Instant};

pub use leases::{LeaseReport, LeaseRow, LeaseSummary};
pub use measures::{
    Measures, admitted_times, ideal, judge_locally, largest_burst, max_in_window,
    respects_fluid_bound, time_over_quota, window_count,
};
pub use patterns::{Arrival, Pattern};

use tollgate::clock::ManualClock;
use tollgate::store::Store;
use tollgate::{Algorithm, ConfigError, Key, Limit, Limiter, MemoryStore, Quota, StoreError};

/// Sub-windows the lab gives [`Algorithm::SlidingWindowCounters`] by default.
pub const DEFAULT_BUCKETS: u32 = 10;

/// The seven algorithms, in the order the lab reports them.
///
/// ```
/// assert_eq!(tollgate_lab::algorithms().len(), 7);
/// ```
pub fn algorithms() -> Vec<Algorithm> {
    vec![
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingWindowCounters {
            buckets: DEFAULT_BUCKETS,
        },
        Algorithm::SlidingWindowLog,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
    ]
}

/// Why a lab run failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum LabError {
    /// The quota does not suit an algorithm.
    Config(ConfigError),
    /// The store failed (Redis).
    Store(StoreError),
    /// Writing a chart failed.
    Plot(String),
    /// Starting the runtime or creating a directory failed.
    Io(std::io::Error),
}

impl fmt::Display for LabError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Config(e) => write!(f, "lab configuration: {e}"),
            Self::Store(e) => write!(f, "lab store: {e}"),
            Self::Plot(e) => write!(f, "lab plot: {e}"),
            Self::Io(e) => write!(f, "lab i/o: {e}"),
        }
    }
}

impl StdError for LabError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Self::Config(e) => Some(e),
            Self::Store(e) => Some(e),
            Self::Io(e) => Some(e),
            Self::Plot(_) => None,
        }
    }
}

impl From<ConfigError> for LabError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl From<StoreError> for LabError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

impl From<std::io::Error> for LabError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// One algorithm's decisions on one pattern.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The algorithm that decided.
    pub algorithm: Algorithm,
    /// One decision per arrival, in the pattern's order.
    pub admitted: Vec<bool>,
    /// Wall-clock time the replay took (decisions only).
    pub elapsed: Duration,
}

impl Trace {
    /// Decisions per second of wall-clock time.
    pub fn decisions_per_second(&self) -> f64 {
        self.admitted.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Every algorithm's results on one pattern.
#[derive(Debug, Clone)]
pub struct PatternReport {
    /// The pattern replayed.
    pub pattern: Pattern,
    /// The ideal limiter's decisions.
    pub ideal: Vec<bool>,
    /// One trace and its measures per algorithm, in the lab's order.
    pub results: Vec<(Trace, Measures)>,
}

/// One algorithm across every pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct AlgorithmSummary {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Requests admitted when `3 × capacity` arrive at one instant at an idle key.
    pub burst_from_idle: u64,
    /// State size per key as documented on [`Algorithm`]. (The lab reads tollgate
    /// through its public API only, so it cannot take the size of the state types.)
    pub documented_bytes: String,
    /// The largest `max_ratio` over all patterns.
    pub worst_ratio: f64,
    /// The largest burst over all patterns (see [`largest_burst`]).
    pub worst_burst: f64,
    /// Wrongly admitted share, averaged over patterns (each pattern weighs the same).
    pub wrongly_admitted: f64,
    /// Wrongly rejected share, averaged over patterns.
    pub wrongly_rejected: f64,
    /// Share of decisions the exact rule, applied to the algorithm's own history, would
    /// have taken the other way (see [`judge_locally`]), averaged over patterns.
    pub locally_wrong: f64,
    /// Decisions per second over every replay.
    pub decisions_per_second: f64,
}

/// A complete lab run: every pattern and a summary per algorithm.
#[derive(Debug, Clone)]
pub struct Report {
    /// The quota every algorithm ran at.
    pub quota: Quota,
    /// Per pattern, in the lab's order.
    pub patterns: Vec<PatternReport>,
    /// Per algorithm, in the lab's order.
    pub summary: Vec<AlgorithmSummary>,
}

/// A simulation: a quota, the algorithms to compare, how long to run and a seed.
///
/// Time starts at an instant aligned to the quota's period (windows are aligned to the
/// Unix epoch), so pattern offsets that are multiples of `P` are window edges.
///
/// ```
/// use tollgate_lab::Lab;
/// let lab = Lab::default();
/// assert_eq!(lab.quota().to_string(), "100/min");
/// assert_eq!(lab.start().as_micros() % 60_000_000, 0);
/// ```
#[derive(Debug, Clone)]
pub struct Lab {
    quota: Quota,
    algorithms: Vec<Algorithm>,
    periods: u32,
    seed: u64,
    clock: ManualClock,
}

impl Default for Lab {
    /// 100 per minute, the seven algorithms, ten periods, seed 42.
    fn default() -> Self {
        Self::new(Quota::per_minute(100))
    }
}

impl Lab {
    /// A lab at `quota` with the seven [`algorithms`], ten periods and seed 42.
    pub fn new(quota: Quota) -> Self {
        let lab = Self {
            quota,
            algorithms: algorithms(),
            periods: 10,
            seed: 42,
            clock: ManualClock::default(),
        };
        lab.clock.set(lab.start());
        lab
    }

    /// How many periods each pattern lasts (default 10, at least 1).
    #[must_use]
    pub fn periods(mut self, periods: u32) -> Self {
        self.periods = periods.max(1);
        self
    }

    /// The seed of every random pattern (default 42).
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The algorithms to compare (default: [`algorithms`]).
    #[must_use]
    pub fn algorithms(mut self, algorithms: Vec<Algorithm>) -> Self {
        self.algorithms = algorithms;
        self
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The clock every replay sets; give it to a store built for [`Lab::run_on`].
    pub fn clock(&self) -> ManualClock {
        self.clock.clone()
    }

    fn period_us(&self) -> u64 {
        u64::try_from(self.quota.period().as_micros()).unwrap_or(u64::MAX)
    }

    /// The instant (since the epoch) the patterns start at: the first window edge
    /// after 1 700 000 000 s.
    pub fn start(&self) -> Duration {
        let period = self.period_us().max(1);
        let base: u64 = 1_700_000_000_000_000;
        Duration::from_micros(base.div_ceil(period).saturating_mul(period))
    }

    /// The standard patterns at this lab's quota, length and seed.
    pub fn patterns(&self) -> Vec<Pattern> {
        Pattern::standard(&self.quota, self.periods, self.seed)
    }

    /// The quota an algorithm runs at: window algorithms have no burst of their own.
    fn quota_for(&self, algorithm: Algorithm) -> Result<Quota, ConfigError> {
        if matches!(
            algorithm,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
        ) {
            Ok(self.quota)
        } else {
            Quota::new(self.quota.limit(), self.quota.period())
        }
    }

    /// Measures decisions on `pattern` against the ideal limiter.
    pub fn measure(&self, pattern: &Pattern, admitted: &[bool]) -> Measures {
        let (limit, period) = (self.quota.limit(), self.period_us());
        Measures::of(
            pattern,
            limit,
            period,
            admitted,
            &ideal(pattern, limit, period),
        )
    }

    /// Replays `pattern` through `algorithm` on a fresh [`MemoryStore`] on the lab's
    /// clock.
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_lab::{Lab, Pattern};
    /// let lab = Lab::new(Quota::per_minute(100));
    /// let steady = Pattern::steady(&lab.quota(), 10, 0.5, 1);
    /// let trace = lab.trace(&steady, Algorithm::Gcra)?;
    /// assert!(trace.admitted.iter().all(|&a| a)); // half the limit always passes
    /// # Ok::<(), tollgate_lab::LabError>(())
    /// ```
    pub fn trace(&self, pattern: &Pattern, algorithm: Algorithm) -> Result<Trace, LabError> {
        self.trace_on(
            MemoryStore::with_clock(self.clock.clone()),
            pattern,
            algorithm,
        )
    }

    /// Replays `pattern` through `algorithm` on `store`, which must read the lab's
    /// [`clock`](Lab::clock) and hold no state for the policy `lab` yet.
    pub fn trace_on<S: Store>(
        &self,
        store: S,
        pattern: &Pattern,
        algorithm: Algorithm,
    ) -> Result<Trace, LabError> {
        self.trace_in(&runtime()?, store, pattern, algorithm)
    }

    /// One replay on `runtime`: a whole lab run shares one, because a store's
    /// connections (Redis) belong to the runtime that opened them.
    fn trace_in<S: Store>(
        &self,
        runtime: &tokio::runtime::Runtime,
        store: S,
        pattern: &Pattern,
        algorithm: Algorithm,
    ) -> Result<Trace, LabError> {
        let limiter = Limiter::builder()
            .limit(Limit::new("lab", self.quota_for(algorithm)?)?.algorithm(algorithm))
            .store(store)
            .build()?;
        let started = Instant::now();
        let admitted = runtime.block_on(replay(&limiter, &self.clock, self.start(), pattern))?;
        Ok(Trace {
            algorithm,
            admitted,
            elapsed: started.elapsed(),
        })
    }

    /// How many of `3 × capacity` requests arriving at one instant at an idle key
    /// `algorithm` admits, on `store`.
    pub fn burst_from_idle_on<S: Store>(
        &self,
        store: S,
        algorithm: Algorithm,
    ) -> Result<u64, LabError> {
        self.burst_in(&runtime()?, store, algorithm)
    }

    fn burst_in<S: Store>(
        &self,
        runtime: &tokio::runtime::Runtime,
        store: S,
        algorithm: Algorithm,
    ) -> Result<u64, LabError> {
        let quota = self.quota_for(algorithm)?;
        let capacity = if quota.has_custom_burst() {
            quota.burst()
        } else {
            quota.limit()
        };
        let burst = Pattern::custom(
            "burst",
            "3 × capacity at one instant",
            self.period_us(),
            1,
            (0..capacity * 3)
                .map(|_| Arrival { at_us: 0, key: 0 })
                .collect(),
        );
        let trace = self.trace_in(runtime, store, &burst, algorithm)?;
        Ok(trace.admitted.iter().filter(|&&a| a).count() as u64)
    }

    /// Runs every pattern through every algorithm on fresh memory stores.
    ///
    /// ```
    /// use tollgate::{Algorithm, Quota};
    /// use tollgate_lab::Lab;
    /// let report = Lab::new(Quota::per_second(10)).periods(3).run()?;
    /// let log = report.summary.iter().find(|s| s.algorithm == Algorithm::SlidingWindowLog).unwrap();
    /// assert_eq!((log.worst_ratio, log.wrongly_admitted, log.wrongly_rejected), (1.0, 0.0, 0.0));
    /// # Ok::<(), tollgate_lab::LabError>(())
    /// ```
    pub fn run(&self) -> Result<Report, LabError> {
        self.run_on(|_| MemoryStore::with_clock(self.clock.clone()))
    }

    /// Runs every pattern through every algorithm, each replay on `store_for(i)` (`i`
    /// counts replays from 0). Each store must read the lab's [`clock`](Lab::clock) and
    /// start empty, e.g. a Redis store with a key prefix unique to `i`.
    pub fn run_on<S: Store>(
        &self,
        mut store_for: impl FnMut(usize) -> S,
    ) -> Result<Report, LabError> {
        let (limit, period) = (self.quota.limit(), self.period_us());
        let runtime = runtime()?;
        let mut run = 0;
        let mut reports = Vec::new();
        for pattern in self.patterns() {
            let ideal = ideal(&pattern, limit, period);
            let mut results = Vec::new();
            for &algorithm in &self.algorithms {
                let trace = self.trace_in(&runtime, store_for(run), &pattern, algorithm)?;
                run += 1;
                let measures = Measures::of(&pattern, limit, period, &trace.admitted, &ideal);
                results.push((trace, measures));
            }
            reports.push(PatternReport {
                pattern,
                ideal,
                results,
            });
        }
        let mut summary = Vec::new();
        for (i, &algorithm) in self.algorithms.iter().enumerate() {
            let burst_from_idle = self.burst_in(&runtime, store_for(run), algorithm)?;
            run += 1;
            summary.push(summarize(&reports, i, algorithm, burst_from_idle));
        }
        Ok(Report {
            quota: self.quota,
            patterns: reports,
            summary,
        })
    }
}

/// A single-threaded runtime: replays are sequential, like the clock they set.
fn runtime() -> Result<tokio::runtime::Runtime, LabError> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// One algorithm's row of the summary, from its results on every pattern.
fn summarize(
    reports: &[PatternReport],
    index: usize,
    algorithm: Algorithm,
    burst_from_idle: u64,
) -> AlgorithmSummary {
    let results: Vec<&(Trace, Measures)> = reports.iter().map(|r| &r.results[index]).collect();
    let n = results.len().max(1) as f64;
    let decisions: usize = results.iter().map(|(t, _)| t.admitted.len()).sum();
    let elapsed: f64 = results.iter().map(|(t, _)| t.elapsed.as_secs_f64()).sum();
    AlgorithmSummary {
        algorithm,
        burst_from_idle,
        documented_bytes: documented_bytes(algorithm),
        worst_ratio: results.iter().map(|(_, m)| m.max_ratio).fold(0.0, f64::max),
        worst_burst: results
            .iter()
            .map(|(_, m)| m.largest_burst)
            .fold(0.0, f64::max),
        wrongly_admitted: results
            .iter()
            .map(|(_, m)| m.wrongly_admitted_share())
            .sum::<f64>()
            / n,
        wrongly_rejected: results
            .iter()
            .map(|(_, m)| m.wrongly_rejected_share())
            .sum::<f64>()
            / n,
        locally_wrong: results
            .iter()
            .map(|(_, m)| m.locally_wrong_share())
            .sum::<f64>()
            / n,
        decisions_per_second: decisions as f64 / elapsed.max(1e-9),
    }
}

/// Replays `pattern` through the policy `lab` of `limiter`, setting `clock` to
/// `start + arrival` before each decision; returns one decision per arrival.
///
/// Use it directly to drive a limiter you built yourself on your own runtime.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Limit, Limiter, MemoryStore, Quota};
/// use tollgate::clock::ManualClock;
/// use tollgate_lab::{Pattern, replay};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let clock = ManualClock::default();
/// let limiter = Limiter::builder()
///     .limit(Limit::new("lab", Quota::per_second(5))?)
///     .store(MemoryStore::with_clock(clock.clone()))
///     .build()?;
/// let pattern = Pattern::steady(&Quota::per_second(5), 2, 2.0, 0);
/// let admitted = replay(&limiter, &clock, Duration::from_secs(1_700_000_000), &pattern).await?;
/// assert_eq!(admitted.len(), 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub async fn replay(
    limiter: &Limiter,
    clock: &ManualClock,
    start: Duration,
    pattern: &Pattern,
) -> Result<Vec<bool>, StoreError> {
    let keys: Vec<Key> = (0..u64::from(pattern.keys())).map(Key::from).collect();
    let mut admitted = Vec::with_capacity(pattern.arrivals().len());
    for arrival in pattern.arrivals() {
        clock.set(start + Duration::from_micros(arrival.at_us));
        let decision = limiter.check("lab", &keys[arrival.key as usize], 1).await?;
        admitted.push(decision.allowed);
    }
    Ok(admitted)
}

/// The per-key state size stated on each [`Algorithm`] variant.
fn documented_bytes(algorithm: Algorithm) -> String {
    match algorithm {
        Algorithm::FixedWindow | Algorithm::TokenBucket => "16".to_owned(),
        Algorithm::SlidingWindow => "24".to_owned(),
        Algorithm::SlidingWindowCounters { buckets } => {
            format!("8·{buckets} + 32 = {}", 8 * u64::from(buckets) + 32)
        }
        Algorithm::SlidingWindowLog => "16 per instant (≤ 16·L)".to_owned(),
        _ => "8".to_owned(),
    }
}
