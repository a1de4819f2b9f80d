//! [`Fallback`]: a primary store with an insurance store for when it fails.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{Charge, Store, StoreFuture};
use crate::{ConfigError, Decision, Policy, StoreError};

/// Serves from `primary`, and from `insurance` while the primary fails.
///
/// When a primary call fails (a [`StoreError`](crate::StoreError) of any kind: timeout,
/// lost connection, Redis loading or failing over), that call is answered by the
/// insurance store and the primary is left alone for the
/// [`probe interval`](Fallback::probe_interval) (default 200 ms). After it, the next
/// call tries the primary again; the first success returns all traffic to it.
///
/// The insurance store keeps its own counts: while it serves, each process limits on
/// its own (typically a [`MemoryStore`](crate::MemoryStore) per process), which is
/// looser than a shared Redis limit by the number of processes, and stricter than
/// failing open. Charges made on one store are not carried over to the other.
///
/// ```
/// use tollgate::{Fallback, Key, Limiter, MemoryStore, Policy, Quota};
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// // Any two stores: in production the primary is usually a `RedisStore`.
/// let store = Fallback::new(MemoryStore::new(), MemoryStore::new());
/// let limiter = Limiter::builder()
///     .policy(Policy::new("api", Quota::per_second(1))?)
///     .store(store.clone())
///     .build()?;
/// assert!(limiter.check("api", &Key::from("alice"), 1).await?.allowed);
/// assert!(store.serving_primary());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Fallback<P, I> {
    primary: P,
    insurance: I,
    probe_interval: Duration,
    /// When the primary is down: the instant it may be tried again.
    down_until: std::sync::Arc<Mutex<Option<Instant>>>,
}

impl<P: Store, I: Store> Fallback<P, I> {
    /// Serves from `primary`, falling back to `insurance` while `primary` fails.
    ///
    /// ```
    /// use tollgate::{Fallback, MemoryStore};
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new());
    /// assert!(store.serving_primary());
    /// ```
    pub fn new(primary: P, insurance: I) -> Self {
        Self {
            primary,
            insurance,
            probe_interval: Duration::from_millis(200),
            down_until: std::sync::Arc::default(),
        }
    }

    /// How long to leave a failed primary alone before trying it again (default
    /// 200 ms). Zero tries it on every call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Fallback, MemoryStore};
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new())
    ///     .probe_interval(Duration::from_millis(500));
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// Whether calls currently go to the primary store.
    ///
    /// ```
    /// use tollgate::{Fallback, MemoryStore};
    /// assert!(Fallback::new(MemoryStore::new(), MemoryStore::new()).serving_primary());
    /// ```
    pub fn serving_primary(&self) -> bool {
        self.lock().is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this call should try the primary. While it is down, one call per
    /// interval does (the probe); the others go straight to the insurance store.
    fn try_primary(&self) -> bool {
        let mut down_until = self.lock();
        match *down_until {
            None => true,
            Some(until) if Instant::now() >= until => {
                *down_until = Some(Instant::now() + self.probe_interval);
                true
            }
            Some(_) => false,
        }
    }

    fn primary_failed(&self, error: &StoreError) {
        let was_up = self
            .lock()
            .replace(Instant::now() + self.probe_interval)
            .is_none();
        #[cfg(feature = "tracing")]
        if was_up {
            tracing::warn!(target: "tollgate", %error, "primary store failed; serving from the insurance store");
        }
        let _ = (was_up, error);
    }

    fn primary_answered(&self) {
        let was_down = self.lock().take().is_some();
        #[cfg(feature = "tracing")]
        if was_down {
            tracing::info!(target: "tollgate", "primary store answers again; back to it");
        }
        let _ = was_down;
    }
}

impl<P: Store, I: Store> Store for Fallback<P, I> {
    fn acquire<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreFuture<'a, Vec<Decision>> {
        Box::pin(async move {
            if self.try_primary() {
                match self.primary.acquire(charges).await {
                    Ok(decisions) => {
                        self.primary_answered();
                        return Ok(decisions);
                    }
                    Err(error) => self.primary_failed(&error),
                }
            }
            self.insurance.acquire(charges).await
        })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            // The refund goes where the charge most likely went.
            if self.serving_primary() {
                match self.primary.refund(charge).await {
                    Ok(()) => return Ok(()),
                    Err(error) => self.primary_failed(&error),
                }
            }
            self.insurance.refund(charge).await
        })
    }

    fn validate(&self, policy: &Policy) -> Result<(), ConfigError> {
        self.primary.validate(policy)?;
        self.insurance.validate(policy)
    }
}
