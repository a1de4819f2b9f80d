//! Where state lives, and the plumbing for writing or wrapping a store.
//!
//! - The stores: [`MemoryStore`] (in this process, the default) and `RedisStore`
//!   (feature `redis`; Redis or Redis Cluster).
//! - The [`Store`] trait a store implements, the [`Charge`] it is asked to count, the
//!   [`Receipt`] of what it charged, [`StoreCall`] and [`StoreFuture`] (its answers), and
//!   [`InFlightSlot`] (a held place under an in-flight limit).
//! - Decorators over any store: [`Fallback`] (a second store while the first fails) and
//!   [`LeasedStore`] (quota leased in slices, built by a [`LeaseBuilder`] and sized by
//!   [`SliceSizing`]).

mod call;
mod denial;
#[cfg(feature = "redis")]
mod denial_cache;
mod fallback;
mod in_flight;
pub(crate) mod known;
mod lease;
pub(crate) mod memory;
#[cfg(feature = "redis")]
mod redis;
pub(crate) mod settle;

use std::fmt;
use std::time::Duration;

#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub use call::{StoreCall, StoreFuture};
pub use fallback::Fallback;
pub use in_flight::InFlightSlot;
pub use lease::{LeaseBuilder, LeasedStore, SliceSizing};
pub use memory::MemoryStore;

use crate::algorithm::Verdict;
pub use crate::decision::Receipt;
use crate::{ConfigError, Decision, Key, Limit, StoreError, StoreErrorKind};

/// One limit's share of a request: charge `cost` to `key` under `limit`.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    /// The limit (quota and algorithm) to count under.
    pub limit: &'a Limit,
    /// Whose state to charge.
    pub key: &'a Key,
    /// How much; 0 peeks without charging.
    pub cost: u64,
}

/// A place where limiter state lives.
///
/// **A minimal store implements two methods:** [`decide`](Store::decide) (charge a
/// batch all-or-nothing) and [`refund`](Store::refund) (give back a key's newest
/// charges). Every other method has a default: `decide_one`, `peek` and `reserve` go
/// through `decide`; `refund_charge` through `refund`; `settle` through
/// `refund_charge` and `penalize`; `reset`, `block`, `penalize`
/// and in-flight slots answer [`StoreErrorKind::Unsupported`] (and
/// [`supports_in_flight`](Store::supports_in_flight) says `false`, so a limiter that
/// needs slots is refused at build time). A store that wraps another passes each
/// method on.
///
/// Each method returns a [`StoreCall`]: [`StoreCall::ready`] for an answer made at
/// once (no I/O), [`StoreCall::future`] for one that awaits. A future must do nothing
/// until polled (the limiter may drop a call it never polled and make it again).
///
/// Implemented by [`MemoryStore`], [`LeasedStore`], [`Fallback`] and (feature `redis`)
/// `RedisStore`. A store owns its notion of time: it reads its clock once per call, so
/// every charge of one [`decide`](Store::decide) is decided at the same instant.
///
/// ```
/// use tollgate::{Key, Limit, MemoryStore, Quota};
/// use tollgate::store::{Charge, Store};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let store = MemoryStore::new();
/// let limit = Limit::new("api", Quota::per_second(1))?;
/// let key = Key::from("alice");
/// let charge = Charge { limit: &limit, key: &key, cost: 1 };
/// assert!(store.decide(&[charge]).await?[0].allowed);
/// assert!(!store.decide_one(charge).await?.allowed);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Decides every charge at one instant, all-or-nothing: if any is denied, none is
    /// charged. Returns one decision per charge, in order.
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>>;

    /// Decides one charge: [`decide`](Store::decide) of one, which is the default; a
    /// store overrides it to skip the vector (the memory store's hot path).
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::{Charge, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_second(1))?;
    /// let key = Key::from("alice");
    /// assert!(store.decide_one(Charge { limit: &limit, key: &key, cost: 1 }).await?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::future(async move { only(self.decide(std::slice::from_ref(&charge)).await?) })
    }

    /// Returns up to `charge.cost` of the key's newest charges (never leaving it better
    /// than idle): an operator's refund, which knows no particular charge.
    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()>;

    /// Takes back up to `charge.cost` (at most the receipt's cost) of the one charge
    /// `receipt` names, on the store that took it, and only what of it the key still
    /// counts: nothing once the charge's window has passed or time has repaid it. Never
    /// leaves the key better than idle. `receipt` comes from the charge's
    /// [`Decision::receipt`]; see [`Limiter::refund_charge`](crate::Limiter::refund_charge).
    ///
    /// The memory store and the Redis store give back once per receipt: a second call
    /// with the same receipt (or one a settle used) gives nothing, and a charge made
    /// under another algorithm or period than `charge.limit`'s gives nothing.
    ///
    /// The default returns the key's newest charges, as [`refund`](Store::refund) does:
    /// a store that wraps another should pass the receipt on to it instead, so the
    /// refund takes back that charge and no other.
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::{Charge, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_minute(2))?;
    /// let key = Key::from("alice");
    /// let charge = Charge { limit: &limit, key: &key, cost: 1 };
    /// let first = store.decide(&[charge]).await?.remove(0);
    /// store.decide(&[charge]).await?;
    /// store.refund_charge(charge, first.receipt().expect("charged")).await?;
    /// assert_eq!(store.decide(&[Charge { cost: 0, ..charge }]).await?[0].remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        let _ = receipt;
        self.refund(charge)
    }

    /// Settles the one charge `receipt` names to `charge.cost`, its actual cost, on the
    /// store that took it: less than the receipt's cost gives back the difference, as
    /// [`refund_charge`](Store::refund_charge) does (only what of that charge the key
    /// still counts); more charges the difference on top whether or not it fits, as
    /// [`penalize`](Store::penalize) does (a debt), but only under `charge.limit` (the
    /// quota the charge was made with). A blocked key is settled too (it is
    /// accounting, not admission). Returns the settled request's decision: allowed,
    /// the key's `remaining` and `reset_after` as a [`peek`](Store::peek) reports them
    /// (a block included), and a receipt of the charge now standing, of cost
    /// `charge.cost` (`None` for 0). See [`Limiter::settle`](crate::Limiter::settle).
    ///
    /// The memory store and the Redis store settle atomically (Redis: one script call),
    /// and once per receipt: a second settle of it gives nothing back and charges
    /// nothing, and answers without a receipt.
    /// The default, for other stores, is not atomic: a
    /// [`refund_charge`](Store::refund_charge) of the difference, then a
    /// [`penalize`](Store::penalize) of the extra (which may reach the key under every
    /// quota of the limit, and fails where the store has no `penalize`) or a
    /// [`peek`](Store::peek); its receipt never gives the extra back. A store that
    /// wraps another should pass the call on, with the receipt its inner store gave.
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::{Charge, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("tokens", Quota::per_minute(100))?;
    /// let key = Key::from("alice");
    /// let estimate = Charge { limit: &limit, key: &key, cost: 30 };
    /// let decided = store.decide_one(estimate).await?;
    /// let receipt = decided.receipt().expect("charged");
    /// // The work used 12: 18 come back.
    /// let settled = store.settle(Charge { cost: 12, ..estimate }, receipt).await?;
    /// assert_eq!((settled.allowed, settled.remaining), (true, 88));
    /// assert_eq!(settled.receipt().map(|r| r.cost()), Some(12));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        StoreCall::future(settle::by_refund_and_penalty(self, charge, receipt))
    }

    /// The key's state under `limit`, charging nothing: a cost-0
    /// [`decide`](Store::decide), which is the default. A blocked key reports its
    /// block (`allowed: false`, [`Decision::blocked_for`]).
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::Store;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_minute(5))?;
    /// assert_eq!(store.peek(&limit, &Key::from("alice")).await?.remaining, 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.decide_one(Charge {
            limit,
            key,
            cost: 0,
        })
    }

    /// Makes `key` idle again under `limit`: its usage, its block and its penalty
    /// count are gone. The default fails with [`StoreErrorKind::Unsupported`].
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::{Charge, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_minute(5))?;
    /// let key = Key::from("alice");
    /// store.decide(&[Charge { limit: &limit, key: &key, cost: 5 }]).await?;
    /// store.reset(&limit, &key).await?;
    /// assert_eq!(store.peek(&limit, &key).await?.remaining, 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        let _ = (limit, key);
        StoreCall::ready(Err(unsupported("reset")))
    }

    /// Denies every request of `key` under `limit` for `duration` from now, replacing
    /// any block it had (a zero `duration` lifts it); returns the key's decision
    /// afterwards. The default fails with [`StoreErrorKind::Unsupported`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::Store;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_minute(5))?;
    /// let d = store.block(&limit, &Key::from("mallory"), Duration::from_secs(60)).await?;
    /// assert_eq!((d.allowed, d.blocked_for), (false, Some(Duration::from_secs(60))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        let _ = (limit, key, duration);
        StoreCall::ready(Err(unsupported("block")))
    }

    /// Charges `charge.cost` whether or not it fits: usage may exceed the capacity (a
    /// debt time repays). Returns the key's decision afterwards, as a peek reports
    /// it. The default fails with [`StoreErrorKind::Unsupported`].
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::{Charge, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", Quota::per_minute(5))?;
    /// let key = Key::from("alice");
    /// let d = store.penalize(Charge { limit: &limit, key: &key, cost: 8 }).await?;
    /// assert_eq!(d.remaining, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        let _ = charge;
        StoreCall::ready(Err(unsupported("penalize")))
    }

    /// Reserves `charge.cost` for its key: the request's place is the earliest
    /// instant, behind the key's earlier reservations, at which the rule admits it. If
    /// that is at most `max_wait` away, it is charged at once and the decision is
    /// allowed, its [`delay`](Decision::delay) the wait; otherwise nothing is charged
    /// and the denial's `retry_after` says when it could be. See
    /// [`Limiter::reserve`](crate::Limiter::reserve).
    ///
    /// The default reserves nothing ahead: it decides the charge now, as
    /// [`decide`](Store::decide) does.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// use tollgate::store::{Charge, Store};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::with_clock(ManualClock::new(Duration::from_secs(1_700_000_000)));
    /// let limit = Limit::new("api", Quota::per_second(1))?;
    /// let key = Key::from("alice");
    /// let charge = Charge { limit: &limit, key: &key, cost: 1 };
    /// assert_eq!(store.reserve(charge, Duration::from_secs(5)).await?.delay, Duration::ZERO);
    /// assert_eq!(store.reserve(charge, Duration::from_secs(5)).await?.delay, Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        let _ = max_wait;
        self.decide_one(charge)
    }

    /// Says whether this store can serve `limit` exactly; called for every limit by
    /// [`LimiterBuilder::build`](crate::LimiterBuilder::build). The default accepts
    /// every limit.
    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        let _ = limit;
        Ok(())
    }

    /// Says whether this store can serve `limit` under a caller's own quota
    /// ([`Limiter::check_with`](crate::Limiter::check_with)); called at request time,
    /// for a quota other than the limit's own, so it must be cheap and must not
    /// register anything. The default is [`validate`](Store::validate).
    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.validate(limit)
    }

    /// Takes one of the `max` slots that `key` has under `limit` for requests running
    /// at once (the layer's [`Policy::in_flight`](crate::Policy::in_flight)), or
    /// answers `None` when all `max` are taken. The slot is given back when the
    /// returned [`InFlightSlot`] is dropped. Slots are counted per (limit name, key),
    /// apart from the limit's rate state.
    ///
    /// **Cancel-safe:** a call dropped on its way (its caller gave up) must leave
    /// no slot taken, promptly, not at a slot record's expiry: the layer drops it when a
    /// client leaves. The memory store decides at once; Redis removes the slot record it
    /// named before sending right after the dropped call.
    ///
    /// The default keeps no slots: it fails every call, and
    /// [`supports_in_flight`](Store::supports_in_flight) says so, so that a limiter
    /// with an in-flight policy is refused at build time rather than failing open at
    /// run time. A store that wraps another should pass the call on.
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::Store;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("reports", Quota::per_minute(10))?;
    /// let key = Key::from("alice");
    /// let first = store.acquire_in_flight(&limit, &key, 2).await?;
    /// let second = store.acquire_in_flight(&limit, &key, 2).await?;
    /// assert!(first.is_some() && second.is_some());
    /// assert!(store.acquire_in_flight(&limit, &key, 2).await?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        let _ = (key, max);
        StoreCall::ready(Err(StoreError::new(
            StoreErrorKind::Unavailable,
            format!(
                "limit \"{}\": this store keeps no in-flight slots",
                limit.name()
            ),
        )))
    }

    /// Whether [`acquire_in_flight`](Store::acquire_in_flight) is implemented; the
    /// default is `false`. [`LimiterBuilder::build`](crate::LimiterBuilder::build)
    /// refuses an in-flight policy on a store that answers `false`.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Store;
    /// assert!(MemoryStore::new().supports_in_flight());
    /// ```
    fn supports_in_flight(&self) -> bool {
        false
    }

    /// For a store that switches between two stores (a [`Fallback`]): a flag that
    /// reads `true` while its insurance store serves, so that the layer's metrics
    /// label each call with the store that answered it. The default, `None`: a store
    /// that does not switch. A store that wraps another may pass the call on.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::{Fallback, Store};
    /// assert!(MemoryStore::new().insurance_serving().is_none());
    /// let fallback = Fallback::new(MemoryStore::new(), MemoryStore::new());
    /// let flag = fallback.insurance_serving().expect("a switch");
    /// assert!(!flag.load(std::sync::atomic::Ordering::Relaxed));
    /// ```
    fn insurance_serving(&self) -> Option<std::sync::Arc<std::sync::atomic::AtomicBool>> {
        None
    }
}

/// Builds the public decision from an algorithm's verdict.
#[inline]
pub(crate) fn decision(limit: &Limit, verdict: Verdict) -> Decision {
    decided(limit, None, verdict)
}

/// Builds the public decision of `charge` from its verdict: a penalty trip is logged
/// with the key's fingerprint, for an operator to act on.
#[inline]
pub(crate) fn charged(charge: &Charge<'_>, verdict: Verdict) -> Decision {
    decided(charge.limit, Some(charge.key), verdict)
}

#[inline]
fn decided(limit: &Limit, key: Option<&Key>, verdict: Verdict) -> Decision {
    let blocked_for = verdict.blocked_us.map(Duration::from_micros);
    if verdict.tripped {
        // Every store's verdicts become decisions here, once: the one place that
        // sees each penalty trip exactly once.
        crate::observe::penalty_tripped(limit.name(), key, blocked_for.unwrap_or_default());
    }
    Decision {
        allowed: verdict.allowed,
        capacity: limit.params().capacity,
        remaining: verdict.remaining,
        reset_after: Duration::from_micros(verdict.reset_after_us),
        retry_after: verdict.retry_after_us.map(Duration::from_micros),
        delay: Duration::from_micros(verdict.delay_us),
        limit: limit.name(),
        quota: limit.quota(),
        // Every store's charges become decisions here: each receipt names its limit.
        receipt: verdict.receipt.map(|r| r.under(limit.table())),
        blocked_for,
        trips: verdict.trips,
    }
}

/// `decisions`, if the store returned one per charge (`expected`).
pub(crate) fn complete(
    decisions: Vec<Decision>,
    expected: usize,
) -> Result<Vec<Decision>, StoreError> {
    if decisions.len() == expected {
        return Ok(decisions);
    }
    let charges = if expected == 1 { "charge" } else { "charges" };
    Err(StoreError::new(
        StoreErrorKind::Protocol,
        format!(
            "store returned {} decisions for {expected} {charges}",
            decisions.len()
        ),
    ))
}

/// The one decision of a one-charge call.
pub(crate) fn only(decisions: Vec<Decision>) -> Result<Decision, StoreError> {
    let mut one = complete(decisions, 1)?;
    one.pop()
        .ok_or_else(|| StoreError::new(StoreErrorKind::Protocol, "store returned no decision"))
}

/// The error of an operation a store does not implement.
fn unsupported(operation: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unsupported,
        format!("this store does not support {operation}"),
    )
}

/// Why a refund was dropped rather than sent to a store that never took its charge.
pub(crate) fn refund_dropped(why: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Unavailable,
        format!("refund dropped: {why}"),
    )
}
