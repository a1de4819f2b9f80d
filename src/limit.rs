//! [`Limit`]: a named quota counted by one algorithm — what the [`Limiter`](crate::Limiter)
//! and every store see. HTTP-free: the Tower layer's [`Policy`](crate::Policy) is a
//! `Limit` plus the rules that find a request's key and cost.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::algorithm::Params;
use crate::{Algorithm, ConfigError, Key, Penalty, Quota};

/// The longest limit name accepted (it appears in headers and Redis keys).
const MAX_NAME_LEN: usize = 64;

/// A named limit: a [`Quota`] counted by an [`Algorithm`] (default [`Algorithm::Gcra`]).
///
/// The name identifies the limit in `check` calls, response headers, logs and Redis
/// keys: 1 to 64 printable ASCII characters. State is kept per (name, algorithm,
/// period, key): two limiters with a limit of the same name, algorithm and period on
/// one store share that state, just as two processes on one Redis do, even when their
/// counts or bursts differ, since a quota whose count or burst changes keeps each key's
/// usage (see [`Limiter::check_with`](crate::Limiter::check_with)).
///
/// ```
/// use tollgate::{Algorithm, Key, Limit, Limiter, Quota};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let limit = Limit::new("api", Quota::per_minute(100).with_burst(20)?)?
///     .algorithm(Algorithm::TokenBucket);
/// assert_eq!(limit.name(), "api");
/// assert_eq!(limit.quota().burst(), 20);
/// assert!(Limit::new("", Quota::per_second(1)).is_err());
/// assert!(Limit::new("tab\there", Quota::per_second(1)).is_err());
///
/// let limiter = Limiter::builder().limit(limit).build()?;
/// assert_eq!(limiter.check("api", &Key::from("alice"), 1).await?.remaining, 19);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Limit {
    name: &'static str,
    quota: Quota,
    algorithm: Algorithm,
    /// Set by [`max_delay`](Limit::max_delay); `None`: the default.
    max_delay: Option<Duration>,
    /// Set by [`penalty`](Limit::penalty); `None`: no penalty box.
    penalty: Option<Penalty>,
    /// The penalty's fingerprint ([`Penalty::fingerprint`]): what caches key on.
    penalty_print: Option<Key>,
    /// Derived from quota, algorithm and delay bound; always usable.
    params: Params,
    /// Why the quota does not suit the algorithm, reported when the limiter is built
    /// so that the `algorithm` setter can stay infallible.
    problem: Option<String>,
    /// Identifies (name, algorithm, period) process-wide: the memory store finds a
    /// limit's table by this number instead of comparing names and parameters.
    table: u32,
    /// Identifies the name alone process-wide: a caller's record (block, penalty
    /// count, reservations) belongs to (name, key), whatever quota, period or
    /// algorithm it is decided under.
    record: u32,
    /// The period of the limit this one was derived from ([`Limit::with_quota`]); its
    /// own period otherwise. A charge under another period counts in state of its
    /// own, which the stores treat apart (it may not see a record's mark).
    base_period_us: u64,
}

impl Limit {
    /// A limit named `name` allowing `quota`, counted with GCRA until
    /// [`algorithm`](Limit::algorithm) says otherwise.
    ///
    /// ```
    /// let limit = tollgate::Limit::new("login", "5/min".parse()?)?;
    /// assert_eq!(limit.quota().limit(), 5);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(name: impl AsRef<str>, quota: Quota) -> Result<Self, ConfigError> {
        let name = name.as_ref();
        if name.is_empty()
            || name.len() > MAX_NAME_LEN
            || !name.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(ConfigError::new(format!(
                "invalid limit name \"{}\": expected 1 to {MAX_NAME_LEN} printable ASCII characters",
                name.escape_debug()
            )));
        }
        let algorithm = Algorithm::default();
        let (params, problem) = Params::new(&quota, algorithm, default_max_delay(&quota));
        let (name, record) = intern(name);
        Ok(Self {
            name,
            quota,
            algorithm,
            max_delay: None,
            penalty: None,
            penalty_print: None,
            table: table_id(name, algorithm, quota.period_micros()),
            record,
            base_period_us: quota.period_micros(),
            params,
            problem,
        })
    }

    /// Counts this limit with `algorithm`. Invalid combinations (a custom burst on a
    /// window algorithm, buckets that do not divide the period) are reported by
    /// [`LimiterBuilder::build`](crate::LimiterBuilder::build), naming the limit.
    ///
    /// ```
    /// use tollgate::{Algorithm, Limit, Quota};
    /// let limit = Limit::new("search", Quota::per_minute(60))?.algorithm(Algorithm::SlidingWindowLog);
    /// assert_eq!(limit.get_algorithm(), Algorithm::SlidingWindowLog);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self.derive();
        self
    }

    /// The longest a [`LeakyBucket`](Algorithm::LeakyBucket) request may be held for
    /// its turn (default: one period of the quota, or the `L`-th place's wait,
    /// `(L − 1)·T`, when rounding `T` up makes that longer). A request whose delay
    /// would be longer is denied at once and charges nothing; its `retry_after` is the
    /// earliest time it would be admitted within the bound. The other algorithms never
    /// delay a request and ignore it.
    ///
    /// Why one period by default: a request that waits longer than a period waits
    /// behind more than a period's worth of quota, which only a burst above the limit
    /// can queue. With the default burst (`B = L`) the queue's longest wait,
    /// `(B − 1)·T`, is within the default, so the default never shortens it; with a
    /// larger burst (1/h with burst 1000 would hold its last place 41 days) it holds
    /// no request longer than the period the quota is stated over. A held request keeps
    /// its connection and its unread body, and clients give up: behind HTTP clients
    /// with a timeout, set it below that timeout (e.g. 30 s). The layer also caps how
    /// many requests it holds at once
    /// ([`RateLimitLayer::max_held`](crate::RateLimitLayer::max_held)).
    ///
    /// `remaining` still counts every free place of the queue, as for GCRA: a place the
    /// bound refuses now comes with the `retry_after` at which it is within it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let queue = Limit::new("queue", Quota::per_second(1).with_burst(100)?)?
    ///     .algorithm(Algorithm::LeakyBucket)
    ///     .max_delay(Duration::from_secs(2));
    /// assert_eq!(queue.get_max_delay(), Duration::from_secs(2));
    /// // A clock that stands still, so the delays are exact.
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder().limit(queue).store(MemoryStore::with_clock(clock)).build()?;
    /// let key = Key::from("alice");
    /// for wait in [0, 1, 2] {
    ///     let d = limiter.check("queue", &key, 1).await?;
    ///     assert_eq!(d.delay, Duration::from_secs(wait));
    /// }
    /// // The fourth would wait 3 s: denied, and told to come back in 1 s.
    /// let d = limiter.check("queue", &key, 1).await?;
    /// assert!(!d.allowed);
    /// assert_eq!(d.retry_after, Some(Duration::from_secs(1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = Some(max_delay);
        self.derive();
        self
    }

    /// The longest a leaky-bucket request of this limit may be held (see
    /// [`max_delay`](Limit::max_delay)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let limit = tollgate::Limit::new("api", tollgate::Quota::per_minute(10))?;
    /// assert_eq!(limit.get_max_delay(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_max_delay(&self) -> Duration {
        self.max_delay
            .unwrap_or_else(|| default_max_delay(&self.quota))
    }

    /// Puts the limit's keys in a penalty box: the `n`-th rejection of a key within a
    /// window blocks it for a while (see [`Penalty`]). A [`Penalty`] with a zero in
    /// it is reported by [`LimiterBuilder::build`](crate::LimiterBuilder::build).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Limit, Limiter, Penalty, Quota};
    /// let penalty = Penalty::after(3).within(Duration::from_secs(60)).block_for(Duration::from_secs(600));
    /// let limit = Limit::new("login", Quota::per_minute(5))?.penalty(penalty);
    /// assert_eq!(limit.get_penalty(), Some(penalty));
    /// let zero = Limit::new("login", Quota::per_minute(5))?.penalty(Penalty::after(0));
    /// assert!(Limiter::builder().limit(zero).build().is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn penalty(mut self, penalty: Penalty) -> Self {
        self.penalty = Some(penalty);
        self.penalty_print = Some(penalty.fingerprint());
        self
    }

    /// The limit's penalty box, if it has one.
    ///
    /// ```
    /// assert_eq!(tollgate::Limit::new("api", tollgate::Quota::per_second(1))?.get_penalty(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_penalty(&self) -> Option<Penalty> {
        self.penalty
    }

    /// The limit's penalty box, if it has one, without copying it.
    #[inline]
    pub(crate) fn penalty_box(&self) -> Option<&Penalty> {
        self.penalty.as_ref()
    }

    /// This limit without its penalty box: what a lease's slice is charged under (a
    /// slice that does not fit is no request's rejection; see `store/lease/charge.rs`),
    /// and the layer's trial charges (`pending_outcomes`): a denial under it is no offence.
    pub(crate) fn without_penalty(&self) -> Self {
        Self {
            penalty: None,
            penalty_print: None,
            ..self.clone()
        }
    }

    /// The fingerprint of the limit's penalty box, if it has one: 16 bytes to key a
    /// cache on where the penalty itself is about 150.
    #[inline]
    pub(crate) fn penalty_print(&self) -> Option<Key> {
        self.penalty_print
    }

    /// Derives the parameters (and the table they key) from quota, algorithm and
    /// delay bound.
    fn derive(&mut self) {
        (self.params, self.problem) =
            Params::new(&self.quota, self.algorithm, self.get_max_delay());
        self.table = table_id(self.name, self.algorithm, self.quota.period_micros());
        self.base_period_us = self.quota.period_micros();
    }

    /// This limit under another quota: the same name, algorithm and delay bound, and
    /// the same state for each key as long as the period is the same (usage carries
    /// over, see [`Limiter::check_with`](crate::Limiter::check_with)); a quota over
    /// another period counts in state of its own.
    ///
    /// ```
    /// use tollgate::{Limit, Quota};
    /// let free = Limit::new("api", Quota::per_minute(100))?;
    /// let pro = free.with_quota(Quota::per_minute(10_000));
    /// assert_eq!((pro.name(), pro.quota()), ("api", Quota::per_minute(10_000)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn with_quota(&self, quota: Quota) -> Limit {
        let mut limit = self.clone();
        limit.quota = quota;
        let period = self.quota.period_micros();
        (limit.params, limit.problem) = Params::new(&quota, limit.algorithm, limit.get_max_delay());
        if quota.period_micros() != period {
            limit.table = table_id(limit.name, limit.algorithm, quota.period_micros());
        }
        limit
    }

    /// The limit's name.
    ///
    /// ```
    /// assert_eq!(tollgate::Limit::new("api", tollgate::Quota::per_second(1))?.name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The limit's quota.
    ///
    /// ```
    /// use tollgate::{Limit, Quota};
    /// assert_eq!(Limit::new("api", Quota::per_second(3))?.quota(), Quota::per_second(3));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The algorithm counting this limit.
    ///
    /// ```
    /// use tollgate::{Algorithm, Limit, Quota};
    /// assert_eq!(Limit::new("api", Quota::per_second(3))?.get_algorithm(), Algorithm::Gcra);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The most cost one request can ever be admitted with: the burst for the token
    /// bucket, GCRA and leaky bucket, the limit otherwise.
    ///
    /// ```
    /// use tollgate::{Limit, Quota};
    /// let limit = Limit::new("api", Quota::per_second(10).with_burst(3)?)?;
    /// assert_eq!(limit.capacity(), 3);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        if self.algorithm.takes_burst() {
            self.quota.burst()
        } else {
            self.quota.limit()
        }
    }

    /// The delay bound as set, `None` for the default (what a limit derived for a
    /// caller's quota inherits).
    pub(crate) fn max_delay_setting(&self) -> Option<Duration> {
        self.max_delay
    }

    /// The derived parameters (usable even when the limiter builder would refuse the
    /// limit).
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    /// The process-wide number of this limit's (name, parameters).
    pub(crate) fn table(&self) -> u32 {
        self.table
    }

    /// The number of this limit's name: what a caller's record (block, penalty
    /// count, reservations) is kept under, whatever the quota, period or algorithm.
    #[inline]
    pub(crate) fn record(&self) -> u32 {
        self.record
    }

    /// The period of the limit this one was derived from by
    /// [`with_quota`](Limit::with_quota) (its own period when it was not).
    #[inline]
    pub(crate) fn base_period_us(&self) -> u64 {
        self.base_period_us
    }

    /// Whether the quota suits the algorithm; the message names the limit.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(penalty) = &self.penalty {
            penalty.validate(self.name)?;
        }
        match &self.problem {
            Some(why) => Err(ConfigError::new(format!(
                "invalid limit \"{}\": {why}",
                self.name
            ))),
            None => Ok(()),
        }
    }
}

impl AsRef<Limit> for Limit {
    fn as_ref(&self) -> &Limit {
        self
    }
}

/// The default bound on a leaky bucket's delays: one period, or the wait of the
/// `L`-th place of a queue at the default burst, `(L − 1)·T`, when `T = P/L` rounded up
/// to the nanosecond makes that longer (at high rates, 3000 per ms: 1001.666 µs), so
/// that the default never refuses a place of a queue whose burst is at most its limit.
fn default_max_delay(quota: &Quota) -> Duration {
    let limit = u128::from(quota.limit());
    let emission_ns = (u128::from(quota.period_micros()) * 1_000).div_ceil(limit);
    let last_place_ns = u64::try_from((limit - 1) * emission_ns).unwrap_or(u64::MAX);
    quota.period().max(Duration::from_nanos(last_place_ns))
}

/// Numbers each distinct (name, algorithm, period) once per process; limits equal in
/// those share state in one store, as they share Redis keys: the count and the burst
/// are left out so that a key keeps its usage when its quota changes (a plan, a
/// reload).
fn table_id(name: &'static str, algorithm: Algorithm, period_us: u64) -> u32 {
    type Identity = (&'static str, Algorithm, u64);
    static TABLES: OnceLock<Mutex<HashMap<Identity, u32>>> = OnceLock::new();
    let mut tables = TABLES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let next = u32::try_from(tables.len()).unwrap_or(u32::MAX);
    *tables.entry((name, algorithm, period_us)).or_insert(next)
}

/// Policy names live for the whole program: decisions carry them as `&'static str`,
/// which costs nothing to copy on the hot path. Each distinct name is stored once, so
/// memory is bounded by the number of distinct names, not by how often limits are
/// built.
/// Each name is also numbered once ([`Limit::record`]).
fn intern(name: &str) -> (&'static str, u32) {
    static NAMES: OnceLock<Mutex<HashMap<&'static str, u32>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some((existing, id)) = names.get_key_value(name) {
        return (existing, *id);
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let id = u32::try_from(names.len()).unwrap_or(u32::MAX);
    names.insert(leaked, id);
    (leaked, id)
}
