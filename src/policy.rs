//! [`Policy`]: a named quota, counted by one algorithm.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use http::StatusCode;

use crate::algorithm::Params;
use crate::key::{self, Extractor};
use crate::{Algorithm, ConfigError, Costs, Quota};

/// What a policy does with a request its key extractor finds no key for.
///
/// ```
/// use tollgate::{MissingKey, Policy, Quota};
/// let strict = Policy::new("api", Quota::per_second(5))?.on_missing_key(MissingKey::Reject);
/// assert_eq!(strict.missing_key(), MissingKey::Reject);
/// assert_eq!(MissingKey::default(), MissingKey::Skip);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// The policy does not apply to the request (the default).
    #[default]
    Skip,
    /// The request is rejected as if the policy had denied it.
    Reject,
}

type CountWhen = dyn Fn(StatusCode) -> bool + Send + Sync;

/// The longest policy name accepted (it appears in headers and Redis keys).
const MAX_NAME_LEN: usize = 64;

/// A named limit: a [`Quota`] counted by an [`Algorithm`] (default [`Algorithm::Gcra`]),
/// and, for the Tower layer, how a request's key and cost are found.
///
/// The name identifies the policy in `check` calls, response headers, logs and Redis
/// keys: 1 to 64 printable ASCII characters. State is kept per (policy, key), and two
/// limiters with an identical policy (same name, quota and algorithm) on one store
/// share that state, just as two processes on one Redis do.
///
/// In the layer, a policy without [`key`](Policy::key) limits all requests together
/// ([`key::global`]), every request costs 1 unless [`costs`](Policy::costs) says
/// otherwise, and every response counts unless [`count_when`](Policy::count_when)
/// says otherwise.
///
/// ```
/// use tollgate::{Algorithm, Policy, Quota};
///
/// let policy = Policy::new("api", Quota::per_minute(100).with_burst(20)?)?
///     .algorithm(Algorithm::TokenBucket);
/// assert_eq!(policy.name(), "api");
/// assert_eq!(policy.quota().burst(), 20);
///
/// assert!(Policy::new("", Quota::per_second(1)).is_err());
/// assert!(Policy::new("tab\there", Quota::per_second(1)).is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Policy {
    name: &'static str,
    quota: Quota,
    algorithm: Algorithm,
    /// Derived from quota and algorithm; always usable.
    params: Params,
    /// Why the quota does not suit the algorithm, reported when the limiter is built
    /// so that the `algorithm` setter can stay infallible.
    problem: Option<String>,
    /// Identifies (name, params) process-wide: the memory store finds a policy's
    /// table by this number instead of comparing names and parameters.
    table: u32,
    key: Extractor,
    costs: Costs,
    missing_key: MissingKey,
    count_when: Option<Arc<CountWhen>>,
    /// Set by [`max_delay`](Policy::max_delay); `None`: the default.
    max_delay: Option<Duration>,
}

impl Policy {
    /// A policy named `name` allowing `quota`, counted with GCRA until
    /// [`algorithm`](Policy::algorithm) says otherwise.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("login", "5/min".parse()?)?;
    /// assert_eq!(policy.quota().limit(), 5);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(name: impl AsRef<str>, quota: Quota) -> Result<Self, ConfigError> {
        let name = name.as_ref();
        if name.is_empty()
            || name.len() > MAX_NAME_LEN
            || !name.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(ConfigError::new(format!(
                "invalid policy name \"{}\": expected 1 to {MAX_NAME_LEN} printable ASCII characters",
                name.escape_debug()
            )));
        }
        let algorithm = Algorithm::default();
        let (params, problem) = Params::new(&quota, algorithm, default_max_delay(&quota));
        let name = intern(name);
        Ok(Self {
            name,
            quota,
            algorithm,
            table: table_id(name, &params),
            params,
            problem,
            key: key::global(),
            costs: Costs::new(),
            missing_key: MissingKey::Skip,
            count_when: None,
            max_delay: None,
        })
    }

    /// Finds each request's key with `extractor` (default: [`key::global`], one key
    /// for all requests).
    ///
    /// ```
    /// use tollgate::{Key, Policy, Quota};
    /// let per_user = Policy::new("per-user", Quota::per_minute(60))?
    ///     .key(|parts: &http::request::Parts| parts.headers.get("x-user").map(|v| Key::from(v.as_bytes())));
    /// let (parts, _) = http::Request::get("/").header("x-user", "42").body(())?.into_parts();
    /// assert_eq!(per_user.key_of(&parts), Some(Key::from("42")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn key(mut self, extractor: impl Into<Extractor>) -> Self {
        self.key = extractor.into();
        self
    }

    /// Prices requests with `costs` (default: 1 each). A cost above the policy's
    /// capacity is reported by [`LimiterBuilder::build`](crate::LimiterBuilder::build).
    ///
    /// ```
    /// use tollgate::{Costs, Policy, Quota};
    /// let policy = Policy::new("api", Quota::per_minute(60))?
    ///     .costs(|parts: &http::request::Parts| if parts.method == http::Method::GET { 1 } else { 2 });
    /// let (post, _) = http::Request::post("/").body(())?.into_parts();
    /// assert_eq!(policy.cost_of(&post), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn costs(mut self, costs: impl Into<Costs>) -> Self {
        self.costs = costs.into();
        self
    }

    /// What to do with requests that have no key for this policy (default: skip).
    ///
    /// ```
    /// use tollgate::{MissingKey, Policy, Quota};
    /// let p = Policy::new("api", Quota::per_second(1))?.on_missing_key(MissingKey::Reject);
    /// assert_eq!(p.missing_key(), MissingKey::Reject);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn on_missing_key(mut self, missing_key: MissingKey) -> Self {
        self.missing_key = missing_key;
        self
    }

    /// Counts only responses whose status satisfies `predicate`; the cost of the
    /// others is refunded (e.g. count only failed logins).
    ///
    /// For gRPC, whose responses are all HTTP 200, the predicate sees the HTTP status
    /// conventionally paired with the call's `grpc-status` (`UNAUTHENTICATED` → 401,
    /// `PERMISSION_DENIED` → 403, `NOT_FOUND` → 404, `RESOURCE_EXHAUSTED` → 429, `OK` →
    /// 200, …), read from the headers or, at the end of the body, from the trailers.
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::{Policy, Quota};
    /// let failed_logins = Policy::new("login", Quota::per_hour(5))?
    ///     .count_when(|status| status == StatusCode::UNAUTHORIZED);
    /// assert!(failed_logins.counts(StatusCode::UNAUTHORIZED));
    /// assert!(!failed_logins.counts(StatusCode::OK));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn count_when<F>(mut self, predicate: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.count_when = Some(Arc::new(predicate));
        self
    }

    /// The key of a request under this policy, if it has one.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(policy.key_of(&parts), tollgate::key::global().extract(&parts));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_of(&self, parts: &http::request::Parts) -> Option<crate::Key> {
        self.key.extract(parts)
    }

    /// What a request costs under this policy.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(policy.cost_of(&parts), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost_of(&self, parts: &http::request::Parts) -> u32 {
        self.costs.cost(parts)
    }

    /// What this policy does with requests that have no key.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// assert_eq!(policy.missing_key(), tollgate::MissingKey::Skip);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn missing_key(&self) -> MissingKey {
        self.missing_key
    }

    /// Whether a response with `status` counts against this policy (always, unless
    /// [`count_when`](Policy::count_when) was set).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// assert!(policy.counts(http::StatusCode::INTERNAL_SERVER_ERROR));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn counts(&self, status: StatusCode) -> bool {
        self.count_when.as_ref().is_none_or(|counts| counts(status))
    }

    /// Whether some responses may be refunded (a `count_when` predicate is set).
    pub(crate) fn refunds_some_responses(&self) -> bool {
        self.count_when.is_some()
    }

    /// Counts this policy with `algorithm`. Invalid combinations (a custom burst on a
    /// window algorithm, buckets that do not divide the period) are reported by
    /// [`LimiterBuilder::build`](crate::LimiterBuilder::build), naming the policy.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// let policy = Policy::new("search", Quota::per_minute(60))?.algorithm(Algorithm::SlidingWindowLog);
    /// assert_eq!(policy.algorithm_kind(), Algorithm::SlidingWindowLog);
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
    /// use tollgate::{Algorithm, Key, Limiter, ManualClock, MemoryStore, Policy, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let queue = Policy::new("queue", Quota::per_second(1).with_burst(100)?)?
    ///     .algorithm(Algorithm::LeakyBucket)
    ///     .max_delay(Duration::from_secs(2));
    /// assert_eq!(queue.longest_delay(), Duration::from_secs(2));
    /// // A clock that stands still, so the delays are exact.
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder().policy(queue).store(MemoryStore::with_clock(clock)).build()?;
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

    /// The longest a leaky-bucket request of this policy may be held (see
    /// [`max_delay`](Policy::max_delay)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_minute(10))?;
    /// assert_eq!(policy.longest_delay(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn longest_delay(&self) -> Duration {
        self.max_delay
            .unwrap_or_else(|| default_max_delay(&self.quota))
    }

    /// Derives the parameters (and the table they key) from quota, algorithm and
    /// delay bound.
    fn derive(&mut self) {
        (self.params, self.problem) =
            Params::new(&self.quota, self.algorithm, self.longest_delay());
        self.table = table_id(self.name, &self.params);
    }

    /// The policy's name.
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The policy's quota.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// assert_eq!(Policy::new("api", Quota::per_second(3))?.quota(), Quota::per_second(3));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// The algorithm counting this policy.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// assert_eq!(Policy::new("api", Quota::per_second(3))?.algorithm_kind(), Algorithm::Gcra);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn algorithm_kind(&self) -> Algorithm {
        self.algorithm
    }

    /// The most cost one request can ever be admitted with: the burst for the token
    /// bucket, GCRA and leaky bucket, the limit otherwise.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// let p = Policy::new("api", Quota::per_second(10).with_burst(3)?)?;
    /// assert_eq!(p.capacity(), 3);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        if self.algorithm.takes_burst() {
            self.quota.burst()
        } else {
            self.quota.limit()
        }
    }

    /// The derived parameters (usable even when the limiter builder would refuse the
    /// policy).
    pub(crate) fn params(&self) -> &Params {
        &self.params
    }

    /// The process-wide number of this policy's (name, parameters).
    pub(crate) fn table(&self) -> u32 {
        self.table
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if let Some(why) = &self.problem {
            return Err(ConfigError::new(format!(
                "invalid policy \"{}\": {why}",
                self.name
            )));
        }
        self.costs.validate(self.name, self.capacity())
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .field("algorithm", &self.algorithm)
            .field("key", &self.key)
            .field("costs", &self.costs)
            .field("missing_key", &self.missing_key)
            .field("count_when", &self.count_when.is_some())
            .field("max_delay", &self.longest_delay())
            .finish_non_exhaustive()
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

/// Numbers each distinct (name, parameters) once per process; equal policies built
/// by different limiters get the same number, so they share state in one store.
fn table_id(name: &'static str, params: &Params) -> u32 {
    static TABLES: OnceLock<Mutex<HashMap<(&'static str, Params), u32>>> = OnceLock::new();
    let mut tables = TABLES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let next = u32::try_from(tables.len()).unwrap_or(u32::MAX);
    *tables.entry((name, *params)).or_insert(next)
}

/// Policy names live for the whole program: decisions carry them as `&'static str`,
/// which costs nothing to copy on the hot path. Each distinct name is stored once, so
/// memory is bounded by the number of distinct names, not by how often policies are
/// built.
fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(existing) = names.get(name) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
