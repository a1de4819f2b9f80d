//! The limiter: [`Limiter`] (named limits over one store, with all-or-nothing checks
//! across several limits), its [`LimiterBuilder`], and [`CheckEntry`], one line of a
//! [`check_all`](Limiter::check_all).

mod builder;
mod check;
mod entry;
pub(crate) mod give_back;
mod set;
mod wait;

pub use builder::LimiterBuilder;
pub use entry::CheckEntry;
pub(crate) use give_back::{Taken, Taking};
pub(crate) use set::Set;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

use self::check::{Check, CheckState};
use crate::store::{Charge, Store};
use crate::{ConfigError, Decision, Key, Limit, MemoryStore, Quota, StoreError, StoreErrorKind};

/// Decides whether keys may spend cost under named limits.
///
/// HTTP-free: use it in handlers, jobs, queue consumers or tonic interceptors; the
/// Tower layer is built on it. Cheap to clone; clones share limits and state.
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
    /// The set the limiter was built with, used as it is until the first reload: a
    /// check then costs one load more than with no reload support at all.
    pub(super) initial: Arc<Set>,
    /// The current set once a reload happened, replaced whole by each one.
    pub(super) set: ArcSwap<Set>,
    /// Whether a reload happened (then `set` is the one to read).
    pub(super) reloaded: AtomicBool,
    /// Limits derived for callers' own quotas, checked for this limiter's store: a
    /// plan's requests find theirs here instead of deriving it (parameters, divisors,
    /// checks) on every call. Replaced whole on a miss, never locked; at most
    /// [`MAX_CALLER_LIMITS`] entries, past which a quota is derived per call.
    pub(super) callers: ArcSwap<CallerLimits>,
    /// Where state lives. Called through the trait whatever the store: one that
    /// decides in memory answers ready (see [`StoreCall`](crate::store::StoreCall)),
    /// and a check then returns at its first poll.
    pub(super) store: Arc<dyn Store>,
    /// The same store when it is a [`MemoryStore`]: a check's first poll calls it
    /// directly (see `Limiter::decide_now`).
    pub(super) memory: Option<MemoryStore>,
}

/// A store as the limiter keeps it: through the [`Store`] trait, and, when it is the
/// memory store, as itself for the check's hot path.
pub(super) struct KeptStore {
    pub(super) store: Arc<dyn Store>,
    pub(super) memory: Option<MemoryStore>,
}

impl KeptStore {
    pub(super) fn new<S: Store>(store: S) -> Self {
        let memory = (&store as &dyn std::any::Any)
            .downcast_ref::<MemoryStore>()
            .cloned();
        Self {
            store: Arc::new(store),
            memory,
        }
    }
}

impl fmt::Debug for KeptStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.store.fmt(f)
    }
}

/// A derived limit's identity: the base limit's table (its name, algorithm and
/// period), delay setting and penalty box (all a derived limit takes from it), and the
/// caller's quota. Numbers only: hashed and compared without touching the name's
/// bytes. The penalty is part of it so that a reload that adds, changes or removes a
/// box reaches plan callers at once (their next check derives the limit anew).
type CallerKey = (u32, Option<Duration>, Option<crate::Penalty>, Quota);
type CallerLimits = HashMap<CallerKey, Arc<Limit>, foldhash::fast::RandomState>;

/// The most derived limits a limiter keeps (plans are few; a quota computed per
/// caller would otherwise grow the cache without bound).
const MAX_CALLER_LIMITS: usize = 1024;

/// A limit as a check sees it: the limit itself, or the limit under a caller's quota.
pub(crate) enum Resolved<'s> {
    Own(&'s Limit),
    Caller(Arc<Limit>),
}

impl std::ops::Deref for Resolved<'_> {
    type Target = Limit;

    #[inline]
    fn deref(&self) -> &Limit {
        match self {
            Self::Own(limit) => limit,
            Self::Caller(limit) => limit,
        }
    }
}

impl Inner {
    pub(super) fn new(set: Set, KeptStore { store, memory }: KeptStore) -> Self {
        let initial = Arc::new(set);
        Self {
            set: ArcSwap::new(Arc::clone(&initial)),
            initial,
            reloaded: AtomicBool::new(false),
            callers: ArcSwap::default(),
            store,
            memory,
        }
    }
}

/// The current set, borrowed for one synchronous decision.
pub(crate) enum Current<'a> {
    Initial(&'a Set),
    Reloaded(arc_swap::Guard<Arc<Set>>),
}

impl std::ops::Deref for Current<'_> {
    type Target = Set;

    #[inline]
    fn deref(&self) -> &Set {
        match self {
            Self::Initial(set) => set,
            Self::Reloaded(guard) => guard,
        }
    }
}

impl Limiter {
    /// Starts building a limiter.
    ///
    /// ```
    /// let builder = tollgate::Limiter::builder();
    /// assert!(builder.build().is_err()); // no limit yet
    /// ```
    pub fn builder() -> LimiterBuilder {
        LimiterBuilder::default()
    }

    /// The limiter's limits, in the order they were added (after a
    /// [`reload`](Limiter::reload), the new set's).
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.limits()[0].name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limits(&self) -> Vec<Limit> {
        self.current().limits.clone()
    }

    /// The limit named `name`.
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(limiter.limit("api").map(|l| l.capacity()), Some(5));
    /// assert!(limiter.limit("other").is_none());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limit(&self, name: &str) -> Option<Limit> {
        self.current().find(name).cloned()
    }

    /// Replaces the limiter's limits with `limits`, atomically: checks that started
    /// under the old set finish under it, every later one sees only the new set.
    ///
    /// - **Usage carries over.** A limit whose count or burst changed keeps each key's
    ///   usage (used 80 of 100/min, raised to 1000/min: 920 left; used 800 of
    ///   1000/min, lowered to 100/min: none left until it refills). A limit whose period
    ///   or algorithm changed starts from fresh state.
    /// - A limit left out stops deciding: checks naming it fail as for any unknown
    ///   limit, and its state expires (Redis TTLs; the memory store's sweeps).
    /// - With the layer, a limit keeps the request rules (key, costs, …) of the
    ///   layer's policy of the same name; a new name gets the default rules. To replace
    ///   the rules too, use the layer's `reload`.
    /// - An invalid set is refused whole, with the same errors as
    ///   [`LimiterBuilder::build`], and the old set stays.
    ///
    /// No lock is taken on the request path: a check loads the current set from an
    /// atomic pointer.
    ///
    /// ```
    /// use tollgate::{Key, Limit, Limiter, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(100))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("api", &key, 80).await?;
    /// limiter.reload([Limit::new("api", Quota::per_minute(1000))?])?;
    /// assert_eq!(limiter.check("api", &key, 0).await?.remaining, 920);
    /// // A bad set is refused whole; the old one stays.
    /// assert!(limiter.reload(Vec::<Limit>::new()).is_err());
    /// assert_eq!(limiter.limit("api").map(|l| l.quota()), Some(Quota::per_minute(1000)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reload(&self, limits: impl IntoIterator<Item = Limit>) -> Result<(), ConfigError> {
        self.replace(limits.into_iter().collect())?;
        Ok(())
    }

    /// Validates `limits` as a set and makes it the current one; returns it (the
    /// layer pairs it with its request rules).
    pub(crate) fn replace(&self, limits: Vec<Limit>) -> Result<Arc<Set>, ConfigError> {
        let set = self.prepare(limits)?;
        self.install(&set);
        Ok(set)
    }

    /// Validates `limits` as a set for this limiter's store, without installing it.
    pub(crate) fn prepare(&self, limits: Vec<Limit>) -> Result<Arc<Set>, ConfigError> {
        Ok(Arc::new(Set::new(limits, &**self.store())?))
    }

    /// The store, when it is the memory store: the hot paths call it directly.
    #[inline]
    pub(crate) fn memory(&self) -> Option<&MemoryStore> {
        self.inner.memory.as_ref()
    }

    /// The store the limiter decides with.
    #[inline]
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Makes `set` the current one: stored first, then the flag raised, so a thread
    /// that sees the flag loads the new set (or a newer one).
    ///
    /// Reloads racing each other end with the set prepared last, whatever order they
    /// install in: a set older than the current one is not installed.
    pub(crate) fn install(&self, set: &Arc<Set>) {
        let mut current = self.inner.set.load_full();
        loop {
            if current.generation >= set.generation {
                return;
            }
            let before = self.inner.set.compare_and_swap(&current, Arc::clone(set));
            if Arc::ptr_eq(&before, &current) {
                break;
            }
            current = arc_swap::Guard::into_inner(before);
        }
        self.inner.reloaded.store(true, Ordering::Release);
        // Limits derived from the replaced set would stay cached beside the new ones
        // (their key names what they were derived from, so none is used wrongly):
        // dropped, so the cache holds what the current plans need.
        self.inner.callers.store(Arc::default());
    }

    /// The current set for one synchronous decision: the initial set until the first
    /// reload (one load of a flag), then a lock-free load of the current one.
    #[inline]
    pub(crate) fn current(&self) -> Current<'_> {
        if self.inner.reloaded.load(Ordering::Acquire) {
            Current::Reloaded(self.inner.set.load())
        } else {
            Current::Initial(&self.inner.initial)
        }
    }

    /// The current set, shared: what a check that awaits a store holds on to.
    #[inline]
    pub(crate) fn snapshot(&self) -> Arc<Set> {
        if self.inner.reloaded.load(Ordering::Acquire) {
            self.inner.set.load_full()
        } else {
            Arc::clone(&self.inner.initial)
        }
    }

    /// The limit `name` of `set` under `quota` when one is given: the limit itself when
    /// the quota is its own, else the limit under the caller's quota, checked as the
    /// builder checks limits (a quota the algorithm or the store cannot count exactly
    /// is refused, naming it).
    pub(crate) fn resolve<'s>(
        &self,
        set: &'s Set,
        name: &str,
        quota: Option<Quota>,
    ) -> Result<Resolved<'s>, StoreError> {
        let limit = set.find(name).ok_or_else(|| unknown_limit(name))?;
        self.with_quota(limit, quota)
    }

    /// `limit` under `quota` (see [`resolve`](Limiter::resolve)).
    #[inline]
    pub(crate) fn with_quota<'s>(
        &self,
        limit: &'s Limit,
        quota: Option<Quota>,
    ) -> Result<Resolved<'s>, StoreError> {
        match quota {
            Some(quota) if quota != limit.quota() => {
                self.caller_limit(limit, quota).map(Resolved::Caller)
            }
            _ => Ok(Resolved::Own(limit)),
        }
    }

    /// `limit` under a caller's own `quota`, checked as the builder checks limits:
    /// from the cache of derived limits, or derived and remembered.
    pub(crate) fn caller_limit(
        &self,
        limit: &Limit,
        quota: Quota,
    ) -> Result<Arc<Limit>, StoreError> {
        let key = (
            limit.table(),
            limit.max_delay_setting(),
            limit.get_penalty(),
            quota,
        );
        if let Some(known) = self.inner.callers.load().get(&key) {
            return Ok(Arc::clone(known));
        }
        let own = Arc::new(self.derive_caller_limit(limit, quota)?);
        let known = self.inner.callers.load();
        if known.len() < MAX_CALLER_LIMITS {
            // Copied and replaced whole: misses are rare once a plan has been seen, and
            // readers never wait. Two threads missing at once may lose one insert; it is
            // derived again on its next miss.
            let mut next = CallerLimits::clone(&known);
            next.insert(key, Arc::clone(&own));
            self.inner.callers.store(Arc::new(next));
        }
        Ok(own)
    }

    /// Derives `limit` under `quota` and checks it.
    #[cold]
    fn derive_caller_limit(&self, limit: &Limit, quota: Quota) -> Result<Limit, StoreError> {
        let own = limit.with_quota(quota);
        let checked = own
            .validate()
            .and_then(|()| self.inner.store.validate_quota(&own));
        match checked {
            Ok(()) => Ok(own),
            Err(error) => Err(StoreError::new(
                StoreErrorKind::InvalidQuota,
                format!("caller's quota \"{quota}\" refused: {error}"),
            )),
        }
    }

    /// Charges `cost` to `key` under `limit` if it fits. Cost 0 peeks: it reports the
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
        limit: &'a str,
        key: &'a Key,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send + 'a {
        // A hand-written future rather than an `async fn`: on the memory store the
        // decision is made and returned by the first poll with nothing in between,
        // where the generated state machine copied the result through its own frame
        // (measured: a quarter of a hot-key check).
        Check {
            limiter: self,
            limit,
            key,
            cost,
            quota: None,
            state: CheckState::Start,
        }
    }

    /// Charges `cost` to `key` under `limit`, counted with this caller's `quota`
    /// instead of the limit's own: plans, where free callers get 100/min and paying
    /// ones 10,000/min. Everything else about the limit (name, algorithm, delay bound)
    /// stays; decisions and response headers state `quota`.
    ///
    /// **Usage carries over** between quotas of the same period: a key's state records
    /// what it has spent, and a new count or burst applies to that usage (used 80 of
    /// 100/min, upgraded to 1000/min: 920 left; used 800 of 1000/min, downgraded to
    /// 100/min: none left until it refills). For the token bucket, GCRA and the leaky
    /// bucket, usage is counted in whole requests when the quota changes, rounded up (in
    /// the limiter's favour). A quota over another period counts in state of its own.
    ///
    /// A quota the limit's algorithm or the store cannot count exactly (a burst on a
    /// window algorithm; a log too large for the memory store's bounds) is an error of
    /// kind [`InvalidQuota`](crate::StoreErrorKind::InvalidQuota), naming it; the
    /// layer treats it as a store failure (its fail mode).
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(100))?).build()?;
    /// let (free, pro) = (Quota::per_minute(100), Quota::per_minute(1000));
    /// let key = Key::from("alice");
    /// assert_eq!(limiter.check_with("api", &key, 80, free).await?.remaining, 20);
    /// // Upgraded: the 80 already used count against the new quota.
    /// let d = limiter.check_with("api", &key, 1, pro).await?;
    /// assert_eq!((d.remaining, d.quota), (919, pro));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_with<'a>(
        &'a self,
        limit: &'a str,
        key: &'a Key,
        cost: u32,
        quota: Quota,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send + 'a {
        Check {
            limiter: self,
            limit,
            key,
            cost,
            quota: Some(quota),
            state: CheckState::Start,
        }
    }

    /// Checks several (limit, key, cost) at one instant, all-or-nothing: if any limit
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
    pub async fn check_all<E: CheckEntry>(
        &self,
        checks: &[E],
    ) -> Result<Vec<Decision>, StoreError> {
        let set = self.snapshot();
        let limits = checks
            .iter()
            .map(|entry| {
                let (name, _, _, quota) = entry.parts();
                self.resolve(&set, name, quota)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let charges: Vec<Charge<'_>> = checks
            .iter()
            .zip(&limits)
            .map(|(entry, limit)| {
                let (_, key, cost, _) = entry.parts();
                Charge {
                    limit,
                    key,
                    cost: u64::from(cost),
                }
            })
            .collect();
        // A store that decides in memory answers at once; else the call is made again
        // from owned arguments (as `check`'s): dropped on the wire, it runs on and
        // gives back what it charged when its reply arrives.
        if let Ok(answer) = self.inner.store.decide(&charges).into_ready() {
            return answer.and_then(|decisions| complete(decisions, charges.len()));
        }
        {
            {
                let mut targets = Vec::with_capacity(checks.len());
                let mut owned = Vec::with_capacity(checks.len());
                for (entry, limit) in checks.iter().zip(&limits) {
                    let (name, key, cost, _) = entry.parts();
                    let index = set.index_of(name).ok_or_else(|| unknown_limit(name))?;
                    targets.push((index, *key));
                    owned.push((Limit::clone(limit), *key, u64::from(cost)));
                }
                let store = self.inner.store.clone();
                let call: crate::store::StoreFuture<'static, Vec<Decision>> =
                    Box::pin(async move {
                        let charges: Vec<Charge<'_>> = owned
                            .iter()
                            .map(|(limit, key, cost)| Charge {
                                limit,
                                key,
                                cost: *cost,
                            })
                            .collect();
                        let decisions = store.decide(&charges).await?;
                        complete(decisions, charges.len())
                    });
                Ok(Taking::new(self.clone(), set.clone(), targets, call)
                    .await?
                    .keep())
            }
        }
    }

    /// Returns up to `cost` of `key`'s newest charges under `limit`: an operator's
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
    pub async fn refund(&self, limit: &str, key: &Key, cost: u32) -> Result<(), StoreError> {
        let set = self.snapshot();
        let charge = Charge {
            limit: set.find(limit).ok_or_else(|| unknown_limit(limit))?,
            key,
            cost: u64::from(cost),
        };
        self.inner.store.refund(charge).await
    }

    /// Takes back up to `amount` of what `decision` charged to `key`, for a request
    /// that should not count after all (e.g. only failed logins count): the
    /// [`Receipt`](crate::decision::Receipt) in the decision names the charge, so only what of *that* charge
    /// the key still counts comes back, from the store that took it.
    ///
    /// - Nothing comes back for a decision that charged nothing (denied, a peek, or
    ///   admitted by a [`check_all`](Limiter::check_all) that another limit denied),
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
    /// [`Fallback`](crate::store::Fallback), a refund whose store is down is dropped (an
    /// error), never sent to the other store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Key, Limiter, MemoryStore, Limit, Quota};
    /// use tollgate::clock::ManualClock;
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
        // Under the quota the charge was made with: a caller's own, if it had one.
        let set = self.snapshot();
        let limit = self.resolve(&set, decision.limit, Some(decision.quota))?;
        let charge = Charge {
            limit: &limit,
            key,
            cost: u64::from(amount).min(receipt.cost()),
        };
        if charge.cost == 0 {
            return Ok(());
        }
        self.inner.store.refund_charge(charge, receipt).await
    }
}

impl Limiter {
    /// The limit named `name` in the current set.
    fn find(set: &Set, name: &str) -> Result<Limit, StoreError> {
        set.find(name).cloned().ok_or_else(|| unknown_limit(name))
    }

    /// `key`'s decision under `limit` now, charging nothing: what a cost-0
    /// [`check`](Limiter::check) returns. A blocked key says so (`allowed: false`,
    /// [`blocked_for`](Decision::blocked_for)). On Redis it always asks Redis (one
    /// round trip), never the denial cache.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(10))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("api", &key, 3).await?;
    /// let d = limiter.peek("api", &key).await?;
    /// assert_eq!((d.allowed, d.remaining, d.blocked_for), (true, 7, None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn peek(&self, limit: &str, key: &Key) -> Result<Decision, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        self.inner.store.peek(&limit, key).await
    }

    /// Makes `key` idle again under `limit`: its usage is forgotten, its block lifted
    /// and its penalty count cleared. On Redis, one round trip that every process
    /// sees at once; a process that cached the key as blocked sees it within its
    /// [`denial_cache_max_age`](crate::RedisStore::denial_cache_max_age) (this one at
    /// once).
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(2))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("api", &key, 2).await?;
    /// assert!(!limiter.check("api", &key, 1).await?.allowed);
    /// limiter.reset("api", &key).await?;
    /// assert!(limiter.check("api", &key, 1).await?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn reset(&self, limit: &str, key: &Key) -> Result<(), StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        self.inner.store.reset(&limit, key).await
    }

    /// Denies every request of `key` under `limit` until `duration` from now
    /// (`allowed: false`, `remaining: 0`, `retry_after = reset_after =` the time
    /// left, [`blocked_for`](Decision::blocked_for) too), whatever its quota says; a
    /// later block replaces this one, a zero `duration` lifts it, and
    /// [`reset`](Limiter::reset) lifts it too. Returns the key's decision afterwards.
    /// A duration longer than [`Penalty::MAX_DENIAL`](crate::Penalty::MAX_DENIAL) (a century; up to
    /// `Duration::MAX`) blocks for exactly that long.
    /// On Redis the block is state like any other: one round trip, and every process
    /// denies the key from its next call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(100))?).build()?;
    /// let key = Key::from("mallory");
    /// limiter.block("api", &key, Duration::from_secs(3600)).await?;
    /// let d = limiter.check("api", &key, 1).await?;
    /// assert!(!d.allowed);
    /// assert_eq!(d.remaining, 0);
    /// assert!(d.blocked_for.is_some_and(|left| left <= Duration::from_secs(3600)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn block(
        &self,
        limit: &str,
        key: &Key,
        duration: Duration,
    ) -> Result<Decision, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        // Longer than a century is a century, on every store (see `Penalty::MAX_DENIAL`).
        let duration = duration.min(crate::Penalty::MAX_DENIAL);
        self.inner.store.block(&limit, key, duration).await
    }

    /// Charges `cost` to `key` under `limit` whether or not it fits: usage may
    /// exceed the capacity (a debt), and `remaining` stays 0 until time repays it
    /// (token bucket, GCRA and leaky bucket: until the refill covers it; the window
    /// algorithms count it in the window it is charged in, so it ends with that
    /// window — the sliding window's weighs on the next one too, the log's lasts one
    /// period: for a longer denial, [`block`](Limiter::block)). Returns the key's decision
    /// afterwards, as [`peek`](Limiter::peek) would. Not a rejection: it never counts
    /// toward a [`Penalty`](crate::Penalty). Any `cost` is safe: one penalty charges
    /// at most a century of debt ([`Penalty::MAX_DENIAL`](crate::Penalty::MAX_DENIAL)).
    ///
    /// It reaches the key under the limit's own quota and under every period the
    /// limit has been decided under (plans: the memory store's tables in the key's
    /// shard, the Redis store's periods seen by this process); a plan caller under a
    /// period never decided under starts without the debt. A
    /// [`block`](Limiter::block) reaches every caller, whatever its plan.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limiter, Limit, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_second(10))?) // GCRA, T = 100 ms
    ///     .store(MemoryStore::with_clock(clock.clone()))
    ///     .build()?;
    /// let key = Key::from("alice");
    /// let d = limiter.penalize("api", &key, 15).await?; // 5 beyond the burst
    /// assert_eq!((d.remaining, d.reset_after), (0, Duration::from_millis(1500)));
    /// clock.advance(Duration::from_millis(600)); // 6 repaid: 1 free
    /// assert_eq!(limiter.peek("api", &key).await?.remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn penalize(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        // At most the capacity plus a century of refill, on every store (see
        // `Penalty::MAX_DENIAL`): more would deny no longer, and overflow the fluid algorithms.
        let charge = Charge {
            limit: &limit,
            key,
            cost: u64::from(cost).min(crate::algorithm::max_penalty(limit.params())),
        };
        self.inner.store.penalize(charge).await
    }
}

pub(super) fn unknown_limit(name: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::UnknownLimit,
        format!("no limit named \"{}\" in this limiter", name.escape_debug()),
    )
}

/// `decisions`, if the store returned one per charge (`expected`).
pub(super) fn complete(
    decisions: Vec<Decision>,
    expected: usize,
) -> Result<Vec<Decision>, StoreError> {
    if decisions.len() == expected {
        Ok(decisions)
    } else {
        Err(StoreError::new(
            StoreErrorKind::Protocol,
            format!(
                "store returned {} decisions for {expected} charges",
                decisions.len()
            ),
        ))
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("limits", &self.current().limits)
            .field("store", &self.inner.store)
            .finish()
    }
}

/// Whether a limit's name is `name`. A caller usually passes the very string the
/// limit was named with (one literal, one address): that case skips the byte compare,
/// a call into libc's `memcmp` that showed up in profiles of `check`.
#[inline]
pub(super) fn names_match(limit: &str, name: &str) -> bool {
    std::ptr::eq(limit, name) || (limit.len() == name.len() && limit == name)
}
