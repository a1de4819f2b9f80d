//! [`LimiterBuilder`]: limits, a store, and the checks that refuse a bad set at
//! build time.

use std::sync::Arc;

use super::set::Set;
use super::{Inner, KeptStore, Limiter};
use crate::store::Store;
use crate::{ConfigError, Limit, MemoryStore};

/// Builds a [`Limiter`]; see [`Limiter::builder`].
#[derive(Debug, Default)]
#[must_use]
pub struct LimiterBuilder {
    limits: Vec<Limit>,
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
        self.limits.push(limit);
        self
    }

    /// Adds every limit of `limits`, in order.
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// let limiter = Limiter::builder()
    ///     .limits([Limit::new("a", Quota::per_second(5))?, Limit::new("b", Quota::per_day(500))?])
    ///     .build()?;
    /// assert_eq!(limiter.limits().len(), 2);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limits(mut self, limits: impl IntoIterator<Item = Limit>) -> Self {
        self.limits.extend(limits);
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

    /// Validates every limit and builds the limiter.
    ///
    /// Fails when there is no limit, two limits share a name, or a limit's quota does
    /// not suit its algorithm or the store (the message names the limit).
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
        let set = Set::new(self.limits, &*store.store)?;
        Ok(Limiter {
            inner: Arc::new(Inner::new(set, store)),
        })
    }
}
