//! [`Policy`]: a named quota, counted by one algorithm.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::algorithm::Params;
use crate::{Algorithm, ConfigError, Quota};

/// The longest policy name accepted (it appears in headers and Redis keys).
const MAX_NAME_LEN: usize = 64;

/// A named limit: a [`Quota`] counted by an [`Algorithm`] (default [`Algorithm::Gcra`]).
///
/// The name identifies the policy in `check` calls, response headers, logs and Redis
/// keys: 1 to 64 printable ASCII characters. State is kept per (policy, key), and two
/// limiters with an identical policy (same name, quota and algorithm) on one store
/// share that state, just as two processes on one Redis do.
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
    /// Derived from quota and algorithm; `Err` is reported when the limiter is built,
    /// so that the `algorithm` setter can stay infallible.
    params: Result<Params, String>,
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
        Ok(Self {
            name: intern(name),
            quota,
            algorithm,
            params: Params::new(&quota, algorithm),
        })
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
        self.params = Params::new(&self.quota, algorithm);
        self
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

    /// Validated parameters; the limiter builder rejects policies whose are invalid.
    pub(crate) fn params(&self) -> &Params {
        match &self.params {
            Ok(params) => params,
            Err(_) => unreachable!("policies are validated by LimiterBuilder::build"),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.params
            .as_ref()
            .map(|_| ())
            .map_err(|why| ConfigError::new(format!("invalid policy \"{}\": {why}", self.name)))
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
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
