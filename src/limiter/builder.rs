//! [`LimiterBuilder`]: limits (or the layer's policies), a store, and the checks that
//! refuse a bad set at build time.

use std::sync::Arc;

use super::set::Set;
use super::{Inner, KeptStore, Limiter};
#[cfg(feature = "layer")]
use crate::Policy;
use crate::store::Store;
use crate::{ConfigError, Limit, MemoryStore};

/// Builds a [`Limiter`]; see [`Limiter::builder`].
#[derive(Debug, Default)]
#[must_use]
pub struct LimiterBuilder {
    limits: Vec<Limit>,
    #[cfg(feature = "layer")]
    policies: Vec<Policy>,
    store: Option<KeptStore>,
}

impl LimiterBuilder {
    /// Adds a limit. Names must be unique within a limiter.
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.limits().len(), 1);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limit(mut self, limit: Limit) -> Self {
        #[cfg(feature = "layer")]
        self.policies.push(Policy::from(limit.clone()));
        self.limits.push(limit);
        self
    }

    /// Adds a policy: its [`Limit`], and the rules by which the Tower layer finds a
    /// request's key and cost under it. Names must be unique within a limiter.
    ///
    /// ```
    /// use tollgate::{Limiter, Policy, Quota};
    /// let limiter = Limiter::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.policies().len(), 1);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[cfg(feature = "layer")]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.limits.push(policy.limit().clone());
        self.policies.push(policy);
        self
    }

    /// Keeps state in `store` (default: a new [`MemoryStore`]).
    ///
    /// ```
    /// use tollgate::{Limiter, MemoryStore, Limit, Quota};
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_second(5))?)
    ///     .store(MemoryStore::new().max_keys(1_000)?)
    ///     .build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn store<S: Store>(mut self, store: S) -> Self {
        self.store = Some(KeptStore::new(store));
        self
    }

    /// Validates every policy and builds the limiter.
    ///
    /// Fails when there is no policy, two policies share a name, a policy's quota
    /// does not suit its algorithm (the message names the policy), or the policies'
    /// rate-limit headers could outgrow a proxy's buffer
    /// ([`MAX_HEADERS_LEN`](crate::layer::headers::MAX_HEADERS_LEN); the message names them).
    ///
    /// ```
    /// use tollgate::{Algorithm, Limiter, Limit, Quota};
    /// let err = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_second(5).with_burst(10)?)?.algorithm(Algorithm::FixedWindow))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(err.to_string().contains("\"api\""));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<Limiter, ConfigError> {
        let store = self
            .store
            .unwrap_or_else(|| KeptStore::new(MemoryStore::new()));
        let set = Set::new(
            self.limits,
            #[cfg(feature = "layer")]
            self.policies,
            &*store.store,
        )?;
        Ok(Limiter {
            inner: Arc::new(Inner::new(set, store)),
        })
    }
}
