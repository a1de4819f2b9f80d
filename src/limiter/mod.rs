//! [`Limiter`]: named policies over one store, with all-or-nothing multi-policy checks.

mod builder;
mod check;
#[cfg(feature = "layer")]
mod layer_api;

pub use builder::LimiterBuilder;
#[cfg(feature = "layer")]
pub(crate) use layer_api::{Entering, Entry, Pending};

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use self::check::{Check, CheckState};
#[cfg(feature = "layer")]
use crate::Policy;
use crate::store::{Charge, Store};
use crate::{Decision, Key, Limit, MemoryStore, StoreError, StoreErrorKind};

/// Decides whether keys may spend cost under named policies.
///
/// HTTP-free: use it in handlers, jobs, queue consumers or tonic interceptors; the
/// Tower layer is built on it. Cheap to clone; clones share policies and state.
///
/// ```
/// use tollgate::{Algorithm, Key, Limiter, Limit, Quota};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let limiter = Limiter::builder()
///     .limit(Limit::new("per-user", Quota::per_minute(2))?.algorithm(Algorithm::FixedWindow))
///     .limit(Limit::new("global", Quota::per_second(1000))?)
///     .build()?;
/// let alice = Key::from("alice");
/// let all = Key::from("");
/// for expected in [true, true, false] {
///     let decisions = limiter.check_all(&[("per-user", &alice, 1), ("global", &all, 1)]).await?;
///     assert_eq!(decisions.iter().all(|d| d.allowed), expected);
/// }
/// // The third request was denied by "per-user", so "global" was not charged for it.
/// assert_eq!(limiter.check("global", &all, 0).await?.remaining, 998);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Limiter {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) limits: Vec<Limit>,
    /// The layer's request rules, one per limit (a limit added on its own has the
    /// default rules).
    #[cfg(feature = "layer")]
    pub(super) policies: Vec<Policy>,
    pub(super) backend: Backend,
}

/// The memory store is called directly (no boxed future); any other store through
/// the [`Store`] trait.
pub(super) enum Backend {
    Memory(MemoryStore),
    Other(Arc<dyn Store>),
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Memory(store) => store.fmt(f),
            Self::Other(store) => store.fmt(f),
        }
    }
}

impl Limiter {
    /// Starts building a limiter.
    ///
    /// ```
    /// let builder = tollgate::Limiter::builder();
    /// assert!(builder.build().is_err()); // no policy yet
    /// ```
    pub fn builder() -> LimiterBuilder {
        LimiterBuilder::default()
    }

    /// The limiter's policies, in the order they were added.
    ///
    /// ```
    /// use tollgate::{Limiter, Policy, Quota};
    /// let limiter = Limiter::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.policies()[0].name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[cfg(feature = "layer")]
    pub fn policies(&self) -> &[Policy] {
        &self.inner.policies
    }

    /// The limiter's limits, in the order they were added.
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.limits()[0].name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limits(&self) -> &[Limit] {
        &self.inner.limits
    }

    /// The limit named `name`.
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.limit("api").map(Limit::capacity), Some(5));
    /// assert!(limiter.limit("other").is_none());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limit(&self, name: &str) -> Option<&Limit> {
        self.inner
            .limits
            .iter()
            .find(|l| names_match(l.name(), name))
    }

    /// The policy named `name`.
    ///
    /// ```
    /// use tollgate::{Limiter, Policy, Quota};
    /// let limiter = Limiter::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert!(limiter.policy("api").is_some());
    /// assert!(limiter.policy("other").is_none());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[cfg(feature = "layer")]
    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.inner
            .policies
            .iter()
            .find(|p| names_match(p.name(), name))
    }

    pub(super) fn find(&self, name: &str) -> Result<&Limit, StoreError> {
        self.limit(name).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::UnknownPolicy,
                format!(
                    "no policy named \"{}\" in this limiter",
                    name.escape_debug()
                ),
            )
        })
    }

    /// Charges `cost` to `key` under `policy` if it fits. Cost 0 peeks: it reports the
    /// key's state and charges nothing.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(3))?).build()?;
    /// let key = Key::from("alice");
    /// assert_eq!(limiter.check("api", &key, 2).await?.remaining, 1);
    /// assert!(!limiter.check("api", &key, 2).await?.allowed);
    /// assert_eq!(limiter.check("api", &key, 0).await?.remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check<'a>(
        &'a self,
        policy: &'a str,
        key: &'a Key,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send + 'a {
        // A hand-written future rather than an `async fn`: on the memory store the
        // decision is made and returned by the first poll with nothing in between,
        // where the generated state machine copied the result through its own frame
        // (measured: a quarter of a hot-key check).
        Check {
            limiter: self,
            policy,
            key,
            cost,
            state: CheckState::Start,
        }
    }

    /// Checks several (policy, key, cost) at one instant, all-or-nothing: if any policy
    /// denies, none is charged. Returns one decision per entry, in order; the request
    /// passes when every decision is allowed.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("burst", Quota::per_second(1))?)
    ///     .limit(Limit::new("daily", Quota::per_day(100))?)
    ///     .build()?;
    /// let key = Key::from("alice");
    /// let both = [("burst", &key, 1), ("daily", &key, 1)];
    /// assert!(limiter.check_all(&both).await?.iter().all(|d| d.allowed));
    /// let second = limiter.check_all(&both).await?;
    /// assert!(!second[0].allowed && second[1].allowed);
    /// assert_eq!(limiter.check("daily", &key, 0).await?.remaining, 99); // not charged twice
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn check_all(
        &self,
        checks: &[(&str, &Key, u32)],
    ) -> Result<Vec<Decision>, StoreError> {
        let charges = checks
            .iter()
            .map(|&(name, key, cost)| {
                Ok(Charge {
                    limit: self.find(name)?,
                    key,
                    cost: u64::from(cost),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        match &self.inner.backend {
            Backend::Memory(store) => Ok(store.acquire_all(&charges)),
            Backend::Other(store) => {
                let decisions = store.acquire(&charges).await?;
                if decisions.len() == charges.len() {
                    Ok(decisions)
                } else {
                    Err(missing_decision(charges.len(), decisions.len()))
                }
            }
        }
    }

    /// Returns up to `cost` of `key`'s newest charges under `policy`: an operator's
    /// refund, which knows no particular charge. Never leaves the key better than idle.
    ///
    /// To take back one request's charge (e.g. only failed logins count), use
    /// [`refund_charge`](Limiter::refund_charge) with its decision instead: a refund of
    /// the newest charges that arrives after that request's window rolled over takes
    /// back a charge of the new window.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("login", Quota::per_minute(5))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("login", &key, 1).await?;
    /// limiter.refund("login", &key, 1).await?;
    /// assert_eq!(limiter.check("login", &key, 0).await?.remaining, 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn refund(&self, policy: &str, key: &Key, cost: u32) -> Result<(), StoreError> {
        let charge = Charge {
            limit: self.find(policy)?,
            key,
            cost: u64::from(cost),
        };
        match &self.inner.backend {
            Backend::Memory(store) => {
                store.refund_now(&charge);
                Ok(())
            }
            Backend::Other(store) => store.refund(charge).await,
        }
    }

    /// Takes back up to `amount` of what `decision` charged to `key`, for a request
    /// that should not count after all (e.g. only failed logins count): the
    /// [`Receipt`](crate::Receipt) in the decision names the charge, so only what of *that* charge
    /// the key still counts comes back, from the store that took it.
    ///
    /// - Nothing comes back for a decision that charged nothing (denied, a peek, or
    ///   admitted by a [`check_all`](Limiter::check_all) that another policy denied),
    ///   nor more than it charged.
    /// - Fixed window: only within the charge's window. Sliding window: within its
    ///   window, then from the previous-window count during the next. Sliding window
    ///   counters and log: from the charge's own sub-window or log entry while it is in
    ///   the window. Token bucket, GCRA and leaky bucket: the part of the charge that
    ///   time has not repaid yet (in full at the instant it was made; otherwise rounded
    ///   to the µs in the limiter's favour).
    /// - Never leaves the key better than idle.
    ///
    /// Refund each decision once: each call may return up to its cost again. On a
    /// [`Fallback`](crate::Fallback), a refund whose store is down is dropped (an
    /// error), never sent to the other store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Key, Limiter, ManualClock, MemoryStore, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_020)); // 40 s into a minute
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("login", Quota::per_minute(2))?.algorithm(Algorithm::FixedWindow))
    ///     .store(MemoryStore::with_clock(clock.clone()))
    ///     .build()?;
    /// let key = Key::from("alice");
    /// let quick = limiter.check("login", &key, 1).await?;
    /// let slow = limiter.check("login", &key, 1).await?;
    /// limiter.refund_charge(&quick, &key, 1).await?; // same window: given back
    /// assert_eq!(limiter.check("login", &key, 0).await?.remaining, 1);
    ///
    /// clock.advance(Duration::from_secs(30)); // the next window: 2 left
    /// limiter.check("login", &key, 2).await?; // spent
    /// limiter.refund_charge(&slow, &key, 1).await?; // its window is gone: nothing back
    /// assert_eq!(limiter.check("login", &key, 0).await?.remaining, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn refund_charge(
        &self,
        decision: &Decision,
        key: &Key,
        amount: u32,
    ) -> Result<(), StoreError> {
        let Some(receipt) = decision.receipt else {
            return Ok(());
        };
        let charge = Charge {
            limit: self.find(decision.policy)?,
            key,
            cost: u64::from(amount).min(receipt.cost()),
        };
        if charge.cost == 0 {
            return Ok(());
        }
        match &self.inner.backend {
            Backend::Memory(store) => {
                store.refund_charge_now(&charge, receipt);
                Ok(())
            }
            Backend::Other(store) => store.refund_charge(charge, receipt).await,
        }
    }
}

pub(super) fn missing_decision(expected: usize, got: usize) -> StoreError {
    StoreError::new(
        StoreErrorKind::Protocol,
        format!("store returned {got} decisions for {expected} charges"),
    )
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("limits", &self.inner.limits)
            .field("store", &self.inner.backend)
            .finish()
    }
}

/// Whether a policy's name is `name`. A caller usually passes the very string the
/// policy was named with (one literal, one address): that case skips the byte compare,
/// a call into libc's `memcmp` that showed up in profiles of `check`.
#[inline]
pub(super) fn names_match(policy: &str, name: &str) -> bool {
    std::ptr::eq(policy, name) || (policy.len() == name.len() && policy == name)
}
