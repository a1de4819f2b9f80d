//! [`LeasedStore`]: charges a backing store (Redis) for slices of quota ahead of use and
//! admits from them locally, without a round trip, while they last.
//!
//! # What a lease may admit
//!
//! A slice of `n` units is one charge of cost `n`, decided by the backing store like
//! any other, all-or-nothing. Its units stand for requests that the store admitted *at
//! the instant of the slice charge*; spending one later is exact only while the store
//! still counts it in full at that later instant, and while spending it then cannot
//! break the algorithm's bound on admission times. Per algorithm:
//!
//! | algorithm | a slice charged at `t₀` may be spent until | why |
//! |---|---|---|
//! | `FixedWindow` | the end of `t₀`'s window | the window's count includes it; admissions in a window ≤ its count ≤ `L` |
//! | `SlidingWindow` | the end of `t₀`'s window | in the next window the charge counts only weighted; within its window, the rule `floor(p·(P−e)/P) + k ≤ L` that held at `t₀` holds at every later `e` (the weight only falls) |
//! | `SlidingWindowCounters` | the end of `t₀`'s *sub-window* | spent in a later sub-window `j`, the unit would count in `N` sub-windows ending after `t₀`'s had left (e.g. `t₀`'s sub-window + 1 ..= + `N`), which hold `L` without it |
//! | `SlidingWindowLog` | never: not leased | the log frees a charge `P` after `t₀`, not `P` after it was spent: any later use can put `L + 1` in some interval of length `P` |
//! | `TokenBucket`, `Gcra` | `now + unused·T ≤` the slice's reset instant | while the debt the slice left covers every unused unit; after that the bucket has refilled over them (capped at `B`), and spending them on top of a full bucket would exceed `B + L·t/P` |
//! | `LeakyBucket` | as GCRA, each unit served at its own place in the queue (`delay`), never beyond `max_delay` | the slice's units are consecutive places; the store checked only the first's delay |
//!
//! In every case a lease also ends after [`max_lease`](LeaseBuilder::max_lease) (default
//! 250 ms). Spending earlier-charged units later is *not* always stricter for the fluid
//! algorithms: a bucket that refills to `B` while a lease still holds units would let
//! `B` plus those units through at one instant, hence their rule.
//!
//! Times on the store's clock (Redis: its `TIME`) are mapped to this process's clock
//! without comparing the two: the store decided between the local instants the call was
//! sent and answered, so "`d` of store time after the charge" is never later than
//! `d` after sending. A deadline is measured from the send, a delay from the answer.
//! This is exact while the store's clock advances no faster than the local one, as
//! one Redis server's `TIME` does seen from the monotonic [`SystemClock`]. A store
//! clock that steps *forward* by `Δ` during a lease (an NTP step on the Redis host;
//! skewed injected clocks) is invisible here: the units parked at that moment may then
//! be spent up to `Δ` (never more than `max_lease`) later than their rule allows, so
//! one forward step can admit at most the parked units beyond the bound.
//!
//! # Returning units
//!
//! A lease ends when a request finds it expired, when its key is evicted, or on
//! [`release_expired`](LeasedStore::release_expired) /
//! [`release_all`](LeasedStore::release_all). For the window algorithms its unused
//! units go back by [`refund_charge`](crate::Store::refund_charge) with the slice's
//! receipt, so the store takes back only what of that charge it still counts.
//!
//! For the token bucket, GCRA and the leaky bucket they are *not* returned: time repays
//! them (within `unused·T`). Their state is one number (tokens, TAT), so returning
//! units of one charge moves every later charge's debt earlier, including slices other
//! processes lease, whose rule would then let them spend units the store no longer
//! counts: up to the returned units beyond the bound. (A refund does the same to them,
//! as it does without leases: a refund of `r` lets `r` more through.)
//!
//! A refund of a request admitted from a lease goes back into the lease while it lasts,
//! to the store after: each unit returns once.

mod slice;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::sync::Notify;

use self::slice::{Kind, Lease, Spent, leasable};
use super::{Charge, InFlightSlot, Store, StoreCall};
use crate::algorithm::Params;
use crate::{Clock, ConfigError, Decision, Key, Limit, Receipt, StoreError, SystemClock};

/// The longest lease [`LeaseBuilder::max_lease`] accepts.
const LONGEST_LEASE: Duration = Duration::from_secs(10);

/// Shards of the lease table: tasks on different keys rarely share a lock.
const SHARDS: usize = 32;

/// How big a slice a key's next lease charges.
///
/// ```
/// use tollgate::{LeasedStore, MemoryStore, SliceSizing};
/// let store = LeasedStore::builder(MemoryStore::new())
///     .sizing(SliceSizing::Fixed(8))?
///     .build();
/// # let _ = store;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SliceSizing {
    /// Follows the key's observed rate (the default). A key starts at 1 (one round
    /// trip per request, exactly as without leases). Window algorithms: the slice
    /// doubles each time a request finds the lease used up before it expired, and
    /// falls to what a lease served when it expires first. Token bucket, GCRA, leaky
    /// bucket, whose unused units are not returned (see the module docs): the slice
    /// grows by one when a lease is used up within a quarter of the longest lease, and
    /// falls back to 1 when one expires with units unused. Either way it doubles when
    /// requests find another slice being charged with no units to spare for them
    /// (concurrent demand). Capped by
    /// [`max_slice`](LeaseBuilder::max_slice) and by the key's capacity over
    /// `4 × processes` ([`processes`](LeaseBuilder::processes)).
    #[default]
    Adaptive,
    /// Always this many units (within the same caps as `Adaptive`).
    Fixed(u64),
}

/// Builds a [`LeasedStore`]; from [`LeasedStore::builder`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::{LeasedStore, MemoryStore};
/// let store = LeasedStore::builder(MemoryStore::new())
///     .max_lease(Duration::from_millis(100))?
///     .max_slice(32)?
///     .processes(8)?
///     .max_leases(1_000)?
///     .build();
/// assert_eq!(store.leases(), 0);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct LeaseBuilder<S> {
    store: S,
    clock: Arc<dyn Clock>,
    max_lease: Duration,
    max_slice: u64,
    processes: u64,
    max_leases: usize,
    sizing: SliceSizing,
}

impl<S: Store> LeaseBuilder<S> {
    /// The longest a lease lasts (default 250 ms; 1 ms to 10 s). Bounds how long a
    /// slice's unused units sit here, so how long other processes may be denied the
    /// units this one holds, and how late this process sees a block set elsewhere.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert!(LeasedStore::builder(MemoryStore::new()).max_lease(Duration::from_secs(60)).is_err());
    /// ```
    pub fn max_lease(mut self, max_lease: Duration) -> Result<Self, ConfigError> {
        if max_lease < Duration::from_millis(1) || max_lease > LONGEST_LEASE {
            return Err(ConfigError::new(format!(
                "invalid lease duration \"{max_lease:?}\": expected 1 ms to {LONGEST_LEASE:?}"
            )));
        }
        self.max_lease = max_lease;
        Ok(self)
    }

    /// The most units one slice charges (default 64, at least 1).
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert!(LeasedStore::builder(MemoryStore::new()).max_slice(0).is_err());
    /// ```
    pub fn max_slice(mut self, max_slice: u64) -> Result<Self, ConfigError> {
        if max_slice == 0 {
            return Err(ConfigError::new(
                "invalid max slice \"0\": expected at least 1",
            ));
        }
        self.max_slice = max_slice;
        Ok(self)
    }

    /// How many processes are expected to share each quota (default 4, at least 1). A
    /// slice never exceeds `capacity / (4 × processes)` (at least 1), so that every
    /// process's unused units together hold back at most about a quarter of a key's
    /// capacity.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert!(LeasedStore::builder(MemoryStore::new()).processes(0).is_err());
    /// ```
    pub fn processes(mut self, processes: u64) -> Result<Self, ConfigError> {
        if processes == 0 {
            return Err(ConfigError::new(
                "invalid process count \"0\": expected at least 1",
            ));
        }
        self.processes = processes;
        Ok(self)
    }

    /// The most keys this store keeps lease state for (default 10 000, at least 1).
    /// A new key beyond it evicts the oldest-refilled one, whose unused units go back.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert!(LeasedStore::builder(MemoryStore::new()).max_leases(0).is_err());
    /// ```
    pub fn max_leases(mut self, max_leases: usize) -> Result<Self, ConfigError> {
        if max_leases == 0 {
            return Err(ConfigError::new(
                "invalid lease table size \"0\": expected at least 1",
            ));
        }
        self.max_leases = max_leases;
        Ok(self)
    }

    /// How slices are sized (default [`SliceSizing::Adaptive`]). A fixed size of 0 is
    /// an error.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore, SliceSizing};
    /// assert!(LeasedStore::builder(MemoryStore::new()).sizing(SliceSizing::Fixed(0)).is_err());
    /// ```
    pub fn sizing(mut self, sizing: SliceSizing) -> Result<Self, ConfigError> {
        if sizing == SliceSizing::Fixed(0) {
            return Err(ConfigError::new(
                "invalid fixed slice \"0\": expected at least 1",
            ));
        }
        self.sizing = sizing;
        Ok(self)
    }

    /// The clock leases are timed on (default [`SystemClock`]). Tests and simulations
    /// give it the backing store's [`ManualClock`](crate::ManualClock).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{LeasedStore, ManualClock, MemoryStore};
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let store = LeasedStore::builder(MemoryStore::with_clock(clock.clone())).clock(clock).build();
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The store.
    pub fn build(self) -> LeasedStore<S> {
        let per_shard = self.max_leases.div_ceil(SHARDS).max(1);
        LeasedStore {
            inner: Arc::new(Inner {
                store: self.store,
                clock: self.clock,
                max_lease_us: u64::try_from(self.max_lease.as_micros()).unwrap_or(u64::MAX),
                max_slice: self.max_slice,
                processes: self.processes,
                sizing: self.sizing,
                shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
                per_shard,
                hasher: RandomState::default(),
                calls: AtomicU64::new(0),
                latest: AtomicU64::new(0),
            }),
        }
    }
}

/// A store that charges `S` for slices of quota ahead of use and admits from them
/// locally while they last (opt-in; see the module docs for the rule per algorithm).
///
/// A decision for a key with a live lease takes no round trip. Otherwise it charges `S`
/// for a slice of `n ≥ cost` units in one call; if the slice does not fit, for the
/// request's cost alone, so a key near its limit is decided exactly as without leases.
/// **It never admits a request the quota charged in advance did not cover**: every
/// admission is a unit of a charge `S` admitted, spent while that charge still counts
/// it (per algorithm, in the module docs), so each algorithm keeps its documented bound
/// across any number of processes.
///
/// What it costs is *under*-admission: units charged to one process's lease are not
/// available to others until they are spent or returned. A slice is at most
/// `min(max_slice, capacity / (4 × processes))` and at most half of what the store last
/// said was left, so with `processes` set to at least the real number of processes the
/// unused units held back at any instant are fewer than a quarter of the capacity.
/// Window algorithms hold each for at most [`max_lease`](LeaseBuilder::max_lease) (or to
/// the end of its window, when it stops counting anyway); the fluid algorithms, whose
/// units are not returned, until time repays them (at most `slice × T`). A quiet key
/// (at most one request per lease) charges slices of 1: one round trip per request, as
/// without leases.
///
/// Tasks of one process share one lease per key through a table of 32 shards, each
/// behind its own short lock (never held across an await); while one task charges a
/// key's next slice, the tasks it will have units for wait for it, the others charge
/// their own cost alongside it.
///
/// A decision from a lease is complete: `remaining` is the store's `remaining` at the
/// slice charge plus the units still leased here (what this process knows is left);
/// `reset_after` the store's reset instant as of the slice charge; `delay` the unit's
/// place in the queue (leaky bucket); its receipt refunds into the lease while it lasts.
///
/// After a denial with a `retry_after`, the same or a larger cost for that key is
/// denied here, without a round trip, until then (at most `max_lease`): stricter, never
/// looser, than asking. A `check_all` of several policies, a cost-0 peek, and the
/// sliding log go to `S` as they would without leases.
///
/// An operator's [`block`](crate::Limiter::block), [`reset`](crate::Limiter::reset)
/// or [`penalize`](crate::Limiter::penalize) through this store drops the key's
/// leases here (under every quota of the limit, plan callers' too) before it
/// returns: after a block this process admits nothing more for the key, after a
/// reset at most a fresh quota. The dropped units are not returned (they are blocked,
/// forgotten by the store, or owed). Other processes see the call when their leases
/// end, within their `max_lease`: until then each may still spend the units it held
/// when the call was made, so right after a reset the key may admit a fresh quota
/// plus the units other processes had parked (each slice at most
/// `capacity / (4 × processes)`, together under a quarter of the capacity with
/// [`processes`](LeaseBuilder::processes) set right). Blocks set by another process
/// (or an operator's refund there) likewise reach this one within `max_lease`.
/// Nothing is returned on drop (a return is a store call): call
/// [`release_all`](LeasedStore::release_all) at shutdown.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Key, LeasedStore, Limit, Limiter, ManualClock, MemoryStore, Quota, Algorithm};
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// // In production the backing store is a `RedisStore`.
/// let store = LeasedStore::builder(MemoryStore::with_clock(clock.clone())).clock(clock).build();
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_minute(1_000))?.algorithm(Algorithm::FixedWindow))
///     .store(store.clone())
///     .build()?;
/// let key = Key::from("hot");
/// for _ in 0..100 {
///     assert!(limiter.check("api", &key, 1).await?.allowed);
/// }
/// // Slices grew with the key's rate: far fewer store calls than decisions.
/// assert!(store.store_calls() < 20);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct LeasedStore<S> {
    inner: Arc<Inner<S>>,
}

impl<S> Clone for LeasedStore<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct Inner<S> {
    store: S,
    clock: Arc<dyn Clock>,
    max_lease_us: u64,
    max_slice: u64,
    processes: u64,
    sizing: SliceSizing,
    shards: Box<[Mutex<Shard>]>,
    per_shard: usize,
    hasher: RandomState,
    calls: AtomicU64,
    latest: AtomicU64,
}

/// What one shard of the table holds.
#[derive(Debug, Default)]
struct Shard {
    entries: HashMap<Slot, Entry, RandomState>,
    /// Stamps entries as they are created or refilled: the smallest is the oldest.
    tick: u64,
    /// When each lease an operator's call dropped was charged and until when it
    /// counted (its receipt but the cost; at most [`MAX_FORGOTTEN`]): a later lease of
    /// the same key charged in the same microsecond carries the same instants, and a
    /// refund by them could be one of the forgotten lease's decisions. Such a refund
    /// goes to the store, which knows the reset, and is never taken from the new lease.
    forgotten: std::collections::HashSet<(u64, u64)>,
}

/// The most dropped leases a shard remembers (cleared past it: a collision needs a new
/// lease charged in the very microsecond of the old one, so only the latest matter).
const MAX_FORGOTTEN: usize = 1024;

/// A lease's identity: the policy exactly as charged (name and every parameter, so a
/// caller's own quota never spends a lease charged under another) and the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Slot {
    name: &'static str,
    params: Params,
    key: Key,
}

/// One key's lease state.
#[derive(Debug)]
struct Entry {
    /// To return unused units when the entry is evicted or released.
    limit: Limit,
    lease: Option<Lease>,
    /// The next slice's size (adaptive sizing).
    slice: u64,
    /// The store's `remaining` at its last answer: a slice takes at most half of it.
    left: Option<u64>,
    denied: Option<Denial>,
    /// Set while one task charges the next slice; the others wait for it.
    refill: Option<Arc<Notify>>,
    /// Units that slice will leave over, less those promised to waiting tasks.
    spare: u64,
    stamp: u64,
}

/// A denial to repeat without a round trip until `until` (local).
#[derive(Debug)]
struct Denial {
    until: u64,
    /// The cost denied: as much or more is denied too.
    cost: u64,
    /// Local instant the denied call was sent (durations count from there).
    sent: u64,
    decision: Decision,
}

/// What a request does next.
enum Step {
    /// Decided here: from a lease, or a denial repeated.
    Done(Decision),
    /// Wait for the task charging the next slice.
    Wait(Arc<Notify>),
    /// Charge a slice of this many units, as the key's one refilling task.
    Charge(u64, Arc<Notify>),
    /// Charge the request's own cost, leaving the lease to the refilling task.
    Direct,
}

/// A lease taken out of the table, to return.
struct Release {
    limit: Limit,
    key: Key,
    lease: Lease,
}

impl<S: Store> LeasedStore<S> {
    /// Leases on `store` with the defaults (see [`LeaseBuilder`]).
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// let store = LeasedStore::new(MemoryStore::new());
    /// assert_eq!(store.store_calls(), 0);
    /// ```
    pub fn new(store: S) -> Self {
        Self::builder(store).build()
    }

    /// A builder with the defaults: leases of at most 250 ms, slices of at most 64
    /// units sized to each key's rate, 4 processes expected, 10 000 keys.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// let store = LeasedStore::builder(MemoryStore::new()).max_slice(16)?.build();
    /// # let _ = store;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn builder(store: S) -> LeaseBuilder<S> {
        LeaseBuilder {
            store,
            clock: Arc::new(SystemClock),
            max_lease: Duration::from_millis(250),
            max_slice: 64,
            processes: 4,
            max_leases: 10_000,
            sizing: SliceSizing::Adaptive,
        }
    }

    /// The backing store.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// let store = LeasedStore::new(MemoryStore::new());
    /// let _memory: &MemoryStore = store.get_ref();
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner.store
    }

    /// Calls made to the backing store so far (charges and returns), by this store and
    /// its clones.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).store_calls(), 0);
    /// ```
    pub fn store_calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Keys with lease state in the table (at most [`max_leases`](LeaseBuilder::max_leases),
    /// rounded up to a multiple of the table's 32 shards).
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).leases(), 0);
    /// ```
    pub fn leases(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|shard| lock(shard).entries.len())
            .sum()
    }

    /// Unused units in this store's leases: charged to the backing store, not yet spent
    /// here, nor returned.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).held(), 0);
    /// ```
    pub fn held(&self) -> u64 {
        self.inner
            .shards
            .iter()
            .map(|shard| {
                lock(shard)
                    .entries
                    .values()
                    .filter_map(|entry| entry.lease.as_ref())
                    .map(Lease::unused)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Ends every lease that has expired and returns its unused units to the backing
    /// store (window algorithms; see the module docs); returns how many units were
    /// handed back. Expired leases are also ended
    /// when their key is next asked about; call this periodically (e.g. every
    /// `max_lease`) to return the units of keys that went quiet sooner.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).release_expired().await?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn release_expired(&self) -> Result<u64, StoreError> {
        self.release(false).await
    }

    /// Ends every lease and returns its unused units (at shutdown; window algorithms,
    /// see the module docs); returns how many units were handed back.
    ///
    /// ```
    /// use tollgate::{LeasedStore, MemoryStore};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).release_all().await?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn release_all(&self) -> Result<u64, StoreError> {
        self.release(true).await
    }

    async fn release(&self, all: bool) -> Result<u64, StoreError> {
        let now = self.now();
        let mut out = Vec::new();
        for shard in &*self.inner.shards {
            let mut shard = lock(shard);
            for (slot, entry) in &mut shard.entries {
                let over = entry
                    .lease
                    .as_ref()
                    .is_some_and(|lease| all || lease.clone().spend(now, 0).is_err());
                if over && let Some(lease) = entry.lease.take() {
                    out.push(Release {
                        limit: entry.limit.clone(),
                        key: slot.key,
                        lease,
                    });
                }
            }
        }
        let mut returned = 0;
        let mut failure = None;
        for release in out {
            match self.give_back(release, now).await {
                Ok(units) => returned += units,
                Err(error) => failure = Some(error),
            }
        }
        failure.map_or(Ok(returned), Err)
    }

    /// The local clock, never earlier than it has read before: a clock that steps
    /// back stands still, so a lease never seems younger than it is.
    fn now(&self) -> u64 {
        let now = self.inner.clock.now_micros();
        self.inner.latest.fetch_max(now, Ordering::Relaxed).max(now)
    }

    /// The shard of `slot`: chosen by its name and key only, so that every lease of
    /// one (limit name, key), whatever quota it was charged under (a plan caller's
    /// own), lives in one shard, where an operator's call finds them all.
    fn shard(&self, slot: &Slot) -> &Mutex<Shard> {
        self.shard_of(slot.name, &slot.key)
    }

    fn shard_of(&self, name: &str, key: &Key) -> &Mutex<Shard> {
        let hash = self.inner.hasher.hash_one((name, key));
        &self.inner.shards[(hash >> 32) as usize % SHARDS]
    }

    /// Drops every local lease, cached denial and slice on its way for `key` under the
    /// limit named `name` (any quota it was charged under), without returning their
    /// units: an operator's block, reset or penalty makes them wrong to spend (blocked,
    /// forgotten by the store, or owed), and returning units by a receipt from before a
    /// reset could take back charges made after it. A slice still on its way finds its
    /// entry gone and installs nothing (see [`install`](Self::install)).
    fn forget(&self, name: &str, key: &Key) {
        let mut shard = lock(self.shard_of(name, key));
        let Shard {
            entries, forgotten, ..
        } = &mut *shard;
        entries.retain(|slot, entry| {
            let dropped = slot.key == *key && slot.name == name;
            if dropped && let Some(lease) = &entry.lease {
                if forgotten.len() >= MAX_FORGOTTEN {
                    forgotten.clear();
                }
                forgotten.insert((lease.receipt.at_us(), lease.receipt.until_us()));
            }
            !dropped
        });
    }

    /// Returns a window lease's unused units to the backing store; how many it sent
    /// back. A fluid lease's are left for time to repay (see the module docs).
    async fn give_back(&self, release: Release, now: u64) -> Result<u64, StoreError> {
        if matches!(release.lease.kind, Kind::Fluid { .. }) {
            return Ok(0);
        }
        let unused = release.lease.unused();
        let (Some(receipt), true) = (
            release.lease.receipt.with_cost(unused),
            release.lease.counts_any(now),
        ) else {
            return Ok(0);
        };
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let charge = Charge {
            limit: &release.limit,
            key: &release.key,
            cost: unused,
        };
        self.inner.store.refund_charge(charge, receipt).await?;
        Ok(unused)
    }

    /// The largest slice for `limit` under the configured caps.
    fn cap(&self, capacity: u64) -> u64 {
        let share = capacity / (4 * self.inner.processes).max(1);
        let own = match self.inner.sizing {
            SliceSizing::Adaptive => self.inner.max_slice,
            SliceSizing::Fixed(n) => n.min(self.inner.max_slice),
        };
        own.min(share).max(1)
    }

    /// One charge of cost ≥ 1 on a leasable policy.
    async fn decide(&self, charge: &Charge<'_>) -> Result<Decision, StoreError> {
        let slot = Slot {
            name: charge.limit.name(),
            params: *charge.limit.params(),
            key: *charge.key,
        };
        loop {
            let now = self.now();
            let (step, expired, evicted) = self.step(charge, &slot, now);
            if let Some(lease) = expired {
                let release = Release {
                    limit: charge.limit.clone(),
                    key: *charge.key,
                    lease,
                };
                let _ = self.give_back(release, now).await;
            }
            if let Some(release) = evicted {
                let _ = self.give_back(release, now).await;
            }
            match step {
                Step::Done(decision) => return Ok(decision),
                Step::Wait(refill) => {
                    let mut notified = pin!(refill.notified());
                    // Registered before looking: the refill notifies under the shard's
                    // lock, after clearing itself, so no wake-up is missed.
                    notified.as_mut().enable();
                    if self.refilling(&slot, &refill) {
                        notified.await;
                    }
                }
                Step::Direct => {
                    let sent = self.now();
                    let decision = self.acquire_one(charge, charge.cost).await?;
                    self.note(&decision, charge.cost, sent, &slot);
                    return Ok(decision);
                }
                Step::Charge(slice, notify) => {
                    let mut refill = Refill {
                        owner: self,
                        slot: &slot,
                        notify,
                        done: false,
                    };
                    let decision = self
                        .charge_slice(charge, slice, &slot, &refill.notify)
                        .await;
                    refill.done = true;
                    refill.finish();
                    return decision;
                }
            }
        }
    }

    /// What a request of `charge` does at local `now`, decided under the key's shard
    /// lock; with the expired lease and the evicted entry to return, outside it.
    fn step(
        &self,
        charge: &Charge<'_>,
        slot: &Slot,
        now: u64,
    ) -> (Step, Option<Lease>, Option<Release>) {
        let cost = charge.cost;
        let cap = self.cap(charge.limit.params().capacity);
        let mut guard = lock(self.shard(slot));
        let mut evicted = None;
        if !guard.entries.contains_key(slot) {
            evicted = self.make_room(&mut guard);
            guard.tick += 1;
            let stamp = guard.tick;
            guard.entries.insert(
                slot.clone(),
                Entry {
                    limit: charge.limit.clone(),
                    lease: None,
                    slice: 1,
                    left: None,
                    denied: None,
                    refill: None,
                    spare: 0,
                    stamp,
                },
            );
        }
        let Shard { entries, tick, .. } = &mut *guard;
        let Some(entry) = entries.get_mut(slot) else {
            unreachable!("inserted above, under the same lock");
        };
        if let Some(denied) = &entry.denied {
            if now < denied.until && cost >= denied.cost {
                return (Step::Done(denied.repeat(now, charge.limit)), None, evicted);
            }
            if now >= denied.until {
                entry.denied = None;
            }
        }
        let mut expired = None;
        if let Some(lease) = &mut entry.lease {
            match lease.spend(now, cost) {
                Ok(delay) => {
                    let decision = lease_decision(lease, now, cost, delay, charge.limit);
                    return (Step::Done(decision), None, evicted);
                }
                Err(Spent::Exhausted) => {
                    // Used up before it expired: the key is hotter than its slice.
                    // Unused fluid units are lost when the lease ends (not returned),
                    // so their slices grow by one unless used up within a quarter of
                    // the longest lease.
                    let quick = now.saturating_sub(lease.sent) * 4 < self.inner.max_lease_us;
                    let size = entry.slice.max(lease.slice);
                    let grown = match lease.kind {
                        Kind::Window { .. } => size * 2,
                        Kind::Fluid { .. } if quick => size + 1,
                        Kind::Fluid { .. } => size,
                    };
                    entry.slice = grown.min(cap);
                }
                Err(Spent::Expired) => {
                    // Over before it was used up: the key's demand per lease is what
                    // this one served. (Unused fluid units are not returned: an
                    // oversized slice costs quota, so the size falls at once.)
                    entry.slice = match lease.kind {
                        Kind::Window { .. } => lease.used.clamp(1, entry.slice.max(1)),
                        Kind::Fluid { .. } if lease.unused() > 0 => 1,
                        Kind::Fluid { .. } => entry.slice,
                    };
                    expired = entry.lease.take();
                }
            }
        }
        if let Some(refill) = &entry.refill {
            // Another task is charging the next slice: wait for it if it will leave
            // enough over, then look again; else charge alongside it, as without
            // leases (waiting would queue every request behind one round trip).
            let step = if entry.spare >= cost {
                // As many wait as the slice will leave units for.
                entry.spare -= cost;
                Step::Wait(refill.clone())
            } else {
                // Demand while a slice is in flight: the next one can be larger.
                entry.slice = (entry.slice.max(entry.spare + 1) * 2).min(cap);
                Step::Direct
            };
            return (step, expired, evicted);
        }
        let mut slice = match self.inner.sizing {
            SliceSizing::Adaptive => entry.slice.clamp(1, cap),
            SliceSizing::Fixed(_) => cap,
        };
        if let Some(left) = entry.left {
            // Never park more than half of what the store last said was left: near
            // the limit slices shrink to the request's cost.
            slice = slice.min(left / 2);
        }
        let slice = slice.max(cost);
        let notify = Arc::new(Notify::new());
        entry.refill = Some(notify.clone());
        entry.spare = slice - cost;
        entry.lease = None;
        *tick += 1;
        entry.stamp = *tick;
        (Step::Charge(slice, notify), expired, evicted)
    }

    /// Whether `refill` is still charging the slot's next slice.
    fn refilling(&self, slot: &Slot, refill: &Arc<Notify>) -> bool {
        lock(self.shard(slot))
            .entries
            .get(slot)
            .and_then(|entry| entry.refill.as_ref())
            .is_some_and(|r| Arc::ptr_eq(r, refill))
    }

    /// Charges a slice (or, if it does not fit, the cost alone) and installs the lease.
    async fn charge_slice(
        &self,
        charge: &Charge<'_>,
        slice: u64,
        slot: &Slot,
        refill: &Arc<Notify>,
    ) -> Result<Decision, StoreError> {
        let cost = charge.cost;
        let sent = self.now();
        let mut charged = slice;
        let mut decision = self.acquire_one(charge, slice).await?;
        if !decision.allowed && slice > cost {
            charged = cost;
            decision = self.acquire_one(charge, cost).await?;
        }
        let answered = self.now();
        if self.install(
            &mut decision,
            charge,
            charged,
            (sent, answered),
            (slot, refill),
        ) {
            Ok(decision)
        } else {
            // Forgotten meanwhile by an operator's call (block, reset, penalize): the
            // request keeps its cost, decided before the call reached the store; the
            // rest of the slice is neither installed nor returned (see `forget`).
            if let Some(receipt) = decision.receipt {
                decision.receipt = receipt.with_cost(charge.cost);
            }
            Ok(decision)
        }
    }

    /// Records what a charge of the request's own cost, made alongside a refill, says
    /// about the key: what is left, and a denial to repeat.
    fn note(&self, decision: &Decision, cost: u64, sent: u64, slot: &Slot) {
        let mut shard = lock(self.shard(slot));
        if let Some(entry) = shard.entries.get_mut(slot) {
            entry.left = Some(decision.remaining);
            if let Some(denial) = self.denial(decision, cost, sent) {
                entry.denied = Some(denial);
            }
        }
    }

    /// The denial to repeat after `decision`, if it is one that can pass later.
    fn denial(&self, decision: &Decision, cost: u64, sent: u64) -> Option<Denial> {
        let retry = decision.retry_after.filter(|_| !decision.allowed)?;
        let retry = u64::try_from(retry.as_micros()).unwrap_or(u64::MAX);
        Some(Denial {
            until: sent.saturating_add(retry.min(self.inner.max_lease_us)),
            cost,
            sent,
            decision: decision.clone(),
        })
    }

    /// Installs the lease (or the denial) a charge of `charged` units answered, and
    /// turns the store's decision into the request's; `false` if the key's entry this
    /// charge refills has left the table meanwhile (an operator's call forgot it; a
    /// new entry for the key is not this charge's to fill).
    fn install(
        &self,
        decision: &mut Decision,
        charge: &Charge<'_>,
        charged: u64,
        (sent, answered): (u64, u64),
        (slot, refill): (&Slot, &Arc<Notify>),
    ) -> bool {
        let cost = charge.cost;
        let mut shard = lock(self.shard(slot));
        let Some(entry) = shard.entries.get_mut(slot).filter(|entry| {
            entry
                .refill
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(r, refill))
        }) else {
            return false;
        };
        entry.left = Some(decision.remaining);
        if decision.allowed {
            if let Some(receipt) = decision.receipt
                && let Some(kind) = Kind::of(charge.limit.params(), receipt.at_us())
            {
                entry.lease = Some(Lease::new(
                    kind,
                    receipt,
                    cost,
                    (sent, answered),
                    decision.remaining,
                    self.inner.max_lease_us,
                ));
                decision.remaining = (decision.remaining + (charged - cost)).min(decision.limit);
                decision.receipt = receipt.with_cost(cost);
            }
        } else if let Some(denial) = self.denial(decision, cost, sent) {
            entry.denied = Some(denial);
        }
        true
    }

    async fn acquire_one(&self, charge: &Charge<'_>, cost: u64) -> Result<Decision, StoreError> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let charges = [Charge { cost, ..*charge }];
        let mut decisions = self.inner.store.decide(&charges).await?;
        if decisions.is_empty() {
            return Err(crate::store::refund_dropped(
                "the store answered no decision",
            ));
        }
        Ok(decisions.swap_remove(0))
    }

    /// Makes room for one more entry in a full shard: takes out the oldest entry not
    /// being refilled, and its lease to return.
    fn make_room(&self, shard: &mut Shard) -> Option<Release> {
        if shard.entries.len() < self.inner.per_shard {
            return None;
        }
        let oldest = shard
            .entries
            .iter()
            .filter(|(_, e)| e.refill.is_none())
            .min_by_key(|(_, e)| e.stamp)
            .map(|(slot, _)| slot.clone())?;
        let entry = shard.entries.remove(&oldest)?;
        Some(Release {
            limit: entry.limit,
            key: oldest.key,
            lease: entry.lease?,
        })
    }

    /// Takes the key's expired lease out of the table, if it has one.
    fn take_expired(&self, charge: &Charge<'_>, now: u64) -> Option<Release> {
        let slot = Slot {
            name: charge.limit.name(),
            params: *charge.limit.params(),
            key: *charge.key,
        };
        let mut shard = lock(self.shard(&slot));
        let entry = shard.entries.get_mut(&slot)?;
        if entry.lease.clone()?.spend(now, 0).is_ok() {
            return None;
        }
        Some(Release {
            limit: charge.limit.clone(),
            key: *charge.key,
            lease: entry.lease.take()?,
        })
    }

    /// Takes a refund of a request admitted from this key's live lease back into it.
    fn refund_locally(&self, charge: &Charge<'_>, receipt: Receipt) -> bool {
        let slot = Slot {
            name: charge.limit.name(),
            params: *charge.limit.params(),
            key: *charge.key,
        };
        let mut shard = lock(self.shard(&slot));
        let Shard {
            entries, forgotten, ..
        } = &mut *shard;
        if forgotten.contains(&(receipt.at_us(), receipt.until_us())) {
            // Maybe a forgotten lease's decision: the store decides (see `forgotten`).
            return false;
        }
        let Some(lease) = entries
            .get_mut(&slot)
            .and_then(|entry| entry.lease.as_mut())
            .filter(|lease| lease.issued(receipt))
        else {
            return false;
        };
        lease.used -= charge.cost.min(receipt.cost()).min(lease.used);
        true
    }
}

/// The decision for `cost` spent from `lease` at local `now`.
fn lease_decision(lease: &Lease, now: u64, cost: u64, delay: u64, limit: &Limit) -> Decision {
    let capacity = limit.params().capacity;
    Decision {
        allowed: true,
        limit: capacity,
        remaining: lease.remaining.saturating_add(lease.unused()).min(capacity),
        reset_after: Duration::from_micros(lease.reset_after(now)),
        retry_after: None,
        delay: Duration::from_micros(delay),
        policy: limit.name(),
        quota: limit.quota(),
        blocked_for: None,
        receipt: lease.receipt.with_cost(cost),
    }
}

impl Denial {
    /// The denial again at local `now`, its waits shortened by the time since.
    fn repeat(&self, now: u64, limit: &Limit) -> Decision {
        let since = Duration::from_micros(now.saturating_sub(self.sent));
        Decision {
            reset_after: self.decision.reset_after.saturating_sub(since),
            retry_after: self
                .decision
                .retry_after
                .map(|retry| retry.saturating_sub(since).max(Duration::from_micros(1))),
            policy: limit.name(),
            quota: limit.quota(),
            ..self.decision.clone()
        }
    }
}

/// The task charging a key's next slice: whatever happens to it (an answer, an error,
/// being cancelled), the key stops waiting on it.
struct Refill<'a, S: Store> {
    owner: &'a LeasedStore<S>,
    slot: &'a Slot,
    notify: Arc<Notify>,
    done: bool,
}

impl<S: Store> Refill<'_, S> {
    fn finish(&mut self) {
        let mut shard = lock(self.owner.shard(self.slot));
        if let Some(entry) = shard.entries.get_mut(self.slot)
            && entry
                .refill
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(r, &self.notify))
        {
            entry.refill = None;
        }
        // Under the lock: a waiter registers under it too, so none misses this.
        self.notify.notify_waiters();
    }
}

impl<S: Store> Drop for Refill<'_, S> {
    fn drop(&mut self) {
        if !self.done {
            self.finish();
        }
    }
}

fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S: Store> Store for LeasedStore<S> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        StoreCall::future(async move {
            match charges {
                [charge] if charge.cost > 0 && leasable(charge.limit.get_algorithm()) => {
                    Ok(vec![self.decide(charge).await?])
                }
                _ => {
                    // A peek sees what the store counts: an expired lease's units go
                    // back first, so it sees them returned.
                    if let [charge] = charges
                        && charge.cost == 0
                        && let Some(release) = self.take_expired(charge, self.now())
                    {
                        let _ = self.give_back(release, self.now()).await;
                    }
                    self.inner.calls.fetch_add(1, Ordering::Relaxed);
                    self.inner.store.decide(charges).await
                }
            }
        })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            // An operator's refund returns the key's newest charges, which may be this
            // process's parked units: return them first, so the refund cannot free
            // units this process would still spend.
            let slot_release = {
                let slot = Slot {
                    name: charge.limit.name(),
                    params: *charge.limit.params(),
                    key: *charge.key,
                };
                let mut shard = lock(self.shard(&slot));
                shard
                    .entries
                    .get_mut(&slot)
                    .and_then(|entry| entry.lease.take())
                    .map(|lease| Release {
                        limit: charge.limit.clone(),
                        key: *charge.key,
                        lease,
                    })
            };
            if let Some(release) = slot_release {
                self.give_back(release, self.now()).await?;
            }
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.store.refund(charge).await
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            if self.refund_locally(&charge, receipt) {
                return Ok(());
            }
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.store.refund_charge(charge, receipt).await
        })
    }

    fn validate(&self, policy: &Limit) -> Result<(), ConfigError> {
        self.inner.store.validate(policy)
    }

    fn validate_quota(&self, policy: &Limit) -> Result<(), ConfigError> {
        self.inner.store.validate_quota(policy)
    }

    // Operators' calls, reservations and in-flight slots go to the store itself: they
    // are not spent from leases. A block, reset or penalty made through this store
    // drops the key's leases here before it returns (`forget`): before the call, so
    // that nothing more is spent from them, and after it, for a slice charged while
    // the call was on its way. Other processes' leases see it when they end, within
    // their `max_lease`.

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.inner.store.peek(limit, key)
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            self.forget(limit.name(), key);
            let result = self.inner.store.reset(limit, key).await;
            self.forget(limit.name(), key);
            result
        })
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            self.forget(limit.name(), key);
            let result = self.inner.store.block(limit, key, duration).await;
            self.forget(limit.name(), key);
            result
        })
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            let (name, key) = (charge.limit.name(), *charge.key);
            self.forget(name, &key);
            let result = self.inner.store.penalize(charge).await;
            self.forget(name, &key);
            result
        })
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        self.inner.store.reserve(charge, max_wait)
    }

    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        self.inner.store.acquire_in_flight(limit, key, max)
    }

    fn supports_in_flight(&self) -> bool {
        self.inner.store.supports_in_flight()
    }
}
