//! The limiter: [`Limiter`] (named limits over one store, with all-or-nothing checks
//! across several limits), its [`LimiterBuilder`], [`CheckEntry`], one line of a
//! [`check_all`](Limiter::check_all), and [`Offences`], where a key stands with a
//! penalty ([`Limiter::offences`]).
//!
//! The files: `mod.rs` (the type, its current set and reloads), `check.rs` (`check`,
//! `check_with`, `check_all` and the check future), `wait.rs` (reservations and
//! waiting), `operations.rs` (refunds, `peek`, `offences`, `reset`, `block`,
//! `penalize`),
//! `settle.rs` (a charge moved from its estimate to its actual cost),
//! `caller_limits.rs` (limits derived for callers' quotas), `give_back.rs` (what a
//! call took, given back when its caller leaves), `set.rs`, `builder.rs`, `entry.rs`.

mod builder;
pub(crate) mod caller_limits;
mod check;
mod entry;
pub(crate) mod give_back;
mod operations;
mod set;
mod settle;
mod wait;

pub use crate::penalty::Offences;
pub(crate) use crate::store::complete;
pub use builder::LimiterBuilder;
use caller_limits::CallerLimits;
pub use entry::CheckEntry;
pub(crate) use give_back::{Taken, Taking};
pub(crate) use set::Set;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use crate::store::Store;
use crate::{ConfigError, Limit, MemoryStore, StoreError, StoreErrorKind};

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
///     .limit(Limit::new("global", Quota::per_hour(1000))?)
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
}

pub(super) fn unknown_limit(name: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::UnknownLimit,
        format!("no limit named \"{}\" in this limiter", name.escape_debug()),
    )
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
