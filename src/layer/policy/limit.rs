//! The limit a policy counts: its algorithm, leaky-bucket delay, penalty box and
//! figures (name, quota, capacity).

use std::time::Duration;

use crate::layer::Policy;
use crate::{Algorithm, Quota};

impl Policy {
    /// Counts this policy with `algorithm`. Invalid combinations (a custom burst on a
    /// window algorithm, buckets that do not divide the period) are reported by
    /// [`LimiterBuilder::build`](crate::LimiterBuilder::build), naming the policy.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// let policy = Policy::new("search", Quota::per_minute(60))?.algorithm(Algorithm::SlidingWindowLog);
    /// assert_eq!(policy.get_algorithm(), Algorithm::SlidingWindowLog);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.limit = self.limit.algorithm(algorithm);
        self
    }

    /// The longest a [`LeakyBucket`](Algorithm::LeakyBucket) request of this policy
    /// may be held for its turn: see [`Limit::max_delay`](crate::Limit::max_delay).
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate::Policy::new("queue", tollgate::Quota::per_second(1))?
    ///     .algorithm(tollgate::Algorithm::LeakyBucket)
    ///     .max_delay(Duration::from_secs(2));
    /// assert_eq!(policy.get_max_delay(), Duration::from_secs(2));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.limit = self.limit.max_delay(max_delay);
        self
    }

    /// Puts this policy's keys in a penalty box: see [`Limit::penalty`](crate::Limit::penalty) and
    /// [`Penalty`](crate::Penalty).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Penalty, Policy, Quota};
    /// let penalty = Penalty::after(5).within(Duration::from_secs(60)).block_for(Duration::from_secs(900));
    /// let policy = Policy::new("login", Quota::per_minute(10))?.penalty(penalty);
    /// assert_eq!(policy.limit().get_penalty(), Some(penalty));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn penalty(mut self, penalty: crate::Penalty) -> Self {
        self.limit = self.limit.penalty(penalty);
        self
    }

    /// The longest a leaky-bucket request of this policy may be held (see
    /// [`Limit::max_delay`](crate::Limit::max_delay)).
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_minute(10))?;
    /// assert_eq!(policy.get_max_delay(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_max_delay(&self) -> Duration {
        self.limit.get_max_delay()
    }

    /// The policy's name.
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn name(&self) -> &'static str {
        self.limit.name()
    }

    /// The policy's quota.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// assert_eq!(Policy::new("api", Quota::per_second(3))?.quota(), Quota::per_second(3));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.limit.quota()
    }

    /// The algorithm counting this policy.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// assert_eq!(Policy::new("api", Quota::per_second(3))?.get_algorithm(), Algorithm::Gcra);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_algorithm(&self) -> Algorithm {
        self.limit.get_algorithm()
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
        self.limit.capacity()
    }
}
