//! Where state lives: the [`Store`] trait and [`MemoryStore`].

#[cfg(feature = "redis")]
mod block_cache;
mod fallback;
mod lease;
pub(crate) mod memory;
#[cfg(feature = "redis")]
mod redis;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use fallback::Fallback;
pub use lease::{LeaseBuilder, LeasedStore, SliceSizing};
pub use memory::MemoryStore;

use crate::algorithm::Verdict;
use crate::{ConfigError, Decision, Key, Limit, Receipt, StoreError};

/// The future a [`Store`] returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// One policy's share of a request: charge `cost` to `key` under `policy`.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    /// The policy (quota and algorithm) to count under.
    pub limit: &'a Limit,
    /// Whose state to charge.
    pub key: &'a Key,
    /// How much; 0 peeks without charging.
    pub cost: u64,
}

/// A place where limiter state lives.
///
/// Implemented by [`MemoryStore`] (and, with their features, the Redis stores). A store
/// owns its notion of time: it reads its clock once per call, so every charge of one
/// [`acquire`](Store::acquire) is decided at the same instant.
///
/// ```
/// use tollgate::{Charge, Key, Limit, MemoryStore, Quota, Store};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let store = MemoryStore::new();
/// let limit = Limit::new("api", Quota::per_second(1))?;
/// let key = Key::from("alice");
/// let charge = Charge { limit: &limit, key: &key, cost: 1 };
/// assert!(store.acquire(&[charge]).await?[0].allowed);
/// assert!(!store.acquire(&[charge]).await?[0].allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Decides every charge at one instant, all-or-nothing: if any is denied, none is
    /// charged. Returns one decision per charge, in order.
    fn acquire<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreFuture<'a, Vec<Decision>>;

    /// Returns up to `charge.cost` of the key's newest charges (never leaving it better
    /// than idle): an operator's refund, which knows no particular charge.
    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreFuture<'a, ()>;

    /// Takes back up to `charge.cost` (at most the receipt's cost) of the one charge
    /// `receipt` names, on the store that took it, and only what of it the key still
    /// counts: nothing once the charge's window has passed or time has repaid it. Never
    /// leaves the key better than idle. `receipt` comes from the charge's
    /// [`Decision::receipt`]; see [`Limiter::refund_charge`](crate::Limiter::refund_charge).
    ///
    /// The default returns the key's newest charges, as [`refund`](Store::refund) does:
    /// a store that wraps another should pass the receipt on to it instead, so the
    /// refund takes back that charge and no other.
    ///
    /// ```
    /// use tollgate::{Charge, Key, Limit, MemoryStore, Quota, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_minute(2))?;
    /// let key = Key::from("alice");
    /// let charge = Charge { limit: &limit, key: &key, cost: 1 };
    /// let first = store.acquire(&[charge]).await?.remove(0);
    /// store.acquire(&[charge]).await?;
    /// store.refund_charge(charge, first.receipt().expect("charged")).await?;
    /// assert_eq!(store.acquire(&[Charge { cost: 0, ..charge }]).await?[0].remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreFuture<'a, ()> {
        let _ = receipt;
        self.refund(charge)
    }

    /// Says whether this store can serve `policy` exactly; called for every policy by
    /// [`LimiterBuilder::build`](crate::LimiterBuilder::build). The default accepts
    /// every policy.
    fn validate(&self, policy: &Limit) -> Result<(), ConfigError> {
        let _ = policy;
        Ok(())
    }

    /// Says whether this store can serve `policy` under a caller's own quota
    /// ([`Limiter::check_with`](crate::Limiter::check_with)); called at request time,
    /// for a quota other than the limit's own, so it must be cheap and must not
    /// register anything. The default is [`validate`](Store::validate).
    fn validate_quota(&self, policy: &Limit) -> Result<(), ConfigError> {
        self.validate(policy)
    }
}

/// Builds the public decision from an algorithm's verdict.
pub(crate) fn decision(policy: &Limit, verdict: Verdict) -> Decision {
    Decision {
        allowed: verdict.allowed,
        limit: policy.params().capacity,
        remaining: verdict.remaining,
        reset_after: Duration::from_micros(verdict.reset_after_us),
        retry_after: verdict.retry_after_us.map(Duration::from_micros),
        delay: Duration::from_micros(verdict.delay_us),
        policy: policy.name(),
        quota: policy.quota(),
        receipt: verdict.receipt,
    }
}

/// Why a refund was dropped rather than sent to a store that never took its charge.
pub(crate) fn refund_dropped(why: &str) -> StoreError {
    StoreError::new(
        crate::StoreErrorKind::Unavailable,
        format!("refund dropped: {why}"),
    )
}
