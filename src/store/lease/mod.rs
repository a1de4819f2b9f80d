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
//! one Redis server's `TIME` does seen from the monotonic
//! [`SystemClock`](crate::clock::SystemClock). A store clock that steps *forward* by
//! `Δ` during a lease (an NTP step on the Redis host; skewed injected clocks) is
//! invisible here: the units parked at that moment may then be spent up to `Δ` (never
//! more than `max_lease`) later than their rule allows, so one forward step can admit
//! at most the parked units beyond the bound.
//!
//! # Returning units
//!
//! A lease ends when a request finds it expired, when its key is evicted, or on
//! [`release_expired`](LeasedStore::release_expired) /
//! [`release_all`](LeasedStore::release_all). For the window algorithms its unused
//! units go back by [`refund_charge`](crate::store::Store::refund_charge) with the slice's
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
//! to the store after: each unit returns once. Each receipt moves its charge once: the
//! lease table remembers the receipts moved in a lease (`moved.rs`), so a decision
//! settled or refunded again, during its lease or after it, moves nothing more; one
//! moved by the store is in the store's own record.
//!
//! # Where things are
//!
//! `builder.rs` holds the settings; `table.rs` the lease table (shards, entries, what
//! makes room, what an operator's call drops); `decide.rs` one request's way through
//! it; `pass.rs` the plain calls of keys a lease would not help, and when leasing
//! resumes; `sizing.rs` how big the next slice is; `charge.rs` the slice charges;
//! `returns.rs` units given back; `moved.rs` the receipts moved in leases; `slice.rs`
//! one lease's rule per algorithm; `delegate.rs` the [`Store`] methods. Denials are
//! repeated locally by the one denial rule the Redis denial cache and `Fallback`'s
//! carried blocks use too (`store/denial.rs`): never a rejection a penalty box must
//! count.

mod builder;
mod charge;
mod decide;
mod delegate;
mod moved;
mod pass;
mod returns;
mod sizing;
mod slice;
mod table;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use foldhash::fast::RandomState;

pub use self::builder::LeaseBuilder;
use self::slice::Lease;
use self::table::{Shard, lock};
use super::Store;
use crate::StoreError;
use crate::clock::Clock;

/// How big a slice a key's next lease charges.
///
/// ```
/// use tollgate::MemoryStore;
/// use tollgate::store::{LeasedStore, SliceSizing};
/// let store = LeasedStore::builder(MemoryStore::new())
///     .sizing(SliceSizing::Fixed(8))?
///     .build();
/// # let _ = store;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SliceSizing {
    /// Follows the key's observed rate (the default). A key starts passing: each
    /// request is the backing store's own call, answered as without leases, until a
    /// larger slice of the previous call's charge would have served a request; that
    /// request charges a slice of 2 (see [`LeasedStore`]). Window algorithms: the slice
    /// doubles each time a request finds the lease used up before it expired, and
    /// falls to what a lease served when it expires first. Token bucket, GCRA, leaky
    /// bucket, whose unused units are not returned (see the module docs): the slice
    /// grows by one when a lease is used up within a quarter of the longest lease, and
    /// falls back to 1 (passing) when one expires with units unused. Either way it doubles when
    /// requests find another slice being charged with no units to spare for them
    /// (concurrent demand). Capped by
    /// [`max_slice`](LeaseBuilder::max_slice) and by the key's capacity over
    /// `4 × processes` ([`processes`](LeaseBuilder::processes)).
    #[default]
    Adaptive,
    /// Always this many units (within the same caps as `Adaptive`).
    Fixed(u64),
}

/// A store that charges `S` for slices of quota ahead of use and admits from them
/// locally while they last (opt-in; see the module docs for the rule per algorithm).
///
/// A decision for a key with a live lease takes no round trip. Otherwise it charges `S`
/// for a slice of `n ≥ cost` units in one call; if the slice does not fit, for the
/// request's cost alone, so a key near its limit is decided exactly as without leases.
///
/// **Where a lease cannot help, it costs nothing.** A key whose lease would serve no
/// request but the one that charges it passes through: each request is `S`'s own call
/// (`decide`), its answer returned as `S` made it, receipt included, so it costs
/// what `S` alone costs plus a lookup before (and a note after, when a later request
/// could use it). That is a quiet key
/// (at most one request per lease), a token bucket, GCRA or leaky bucket key below
/// its rate (a fluid slice stops counting as time repays its debt, so it lasts only
/// while its holder spends at least the rate), a key near its limit (slices shrink to
/// the cost), or a key whose last two leases served nothing. A passing key leases again
/// from the request that a slice one cost larger, charged by the previous call, would
/// have served; after a resume whose leases served nothing it takes 2, then 4, … up to
/// 64 such requests in a row, so a key on the edge does not flap. With
/// [`SliceSizing::Fixed`] a key starts leasing; with the default it starts passing.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Algorithm, Key, Limit, Limiter, MemoryStore, Quota};
/// use tollgate::clock::ManualClock;
/// use tollgate::store::LeasedStore;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// let store = LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
///     .clock(clock.clone())
///     .build();
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_second(100))?.algorithm(Algorithm::Gcra))
///     .store(store.clone())
///     .build()?;
/// // Ten requests a second on 100/s: below the rate, no GCRA slice would last.
/// for _ in 0..10 {
///     clock.advance(Duration::from_millis(100));
///     assert!(limiter.check("api", &Key::from("quiet"), 1).await?.allowed);
/// }
/// // One plain call per request, nothing parked.
/// assert_eq!((store.store_calls(), store.held()), (10, 0));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
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
/// (at most one request per lease) passes through: one round trip per request, the
/// backing store's own.
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
/// After a denial with a `retry_after`, the same or a larger cost for that key (a
/// blocked key: every cost) is denied here, without a round trip, until then (at most
/// `max_lease`), by the one denial rule the Redis denial cache follows too: stricter,
/// never looser, than asking; passing keys too. Units of a live lease still serve
/// first (they were charged before the denial, so spending them is exact), except for
/// a blocked key. A limit with a [`Penalty`](crate::Penalty) box sees every rejection
/// it would see without leases, at the same instant: its rejections are never
/// repeated here (only its blocks, whose rejections count for nothing), and a slice
/// is charged under the limit without its box, so a slice that does not fit is no
/// rejection (a decision admitted from a slice reports no
/// [`trips`](crate::Decision::trips), as one admitted from a lease). A `check_all` of
/// several limits, a cost-0 peek, and the sliding log go to `S` as they would without
/// leases.
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
/// use tollgate::{Key, Limit, Limiter, MemoryStore, Quota, Algorithm};
/// use tollgate::clock::ManualClock;
/// use tollgate::store::LeasedStore;
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

/// What every clone of a [`LeasedStore`] shares: the backing store, the settings,
/// the lease table and the call counter.
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

impl<S: Store> LeasedStore<S> {
    /// Leases on `store` with the defaults (see [`LeaseBuilder`]).
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
    /// let store = LeasedStore::builder(MemoryStore::new()).max_slice(16)?.build();
    /// # let _ = store;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn builder(store: S) -> LeaseBuilder<S> {
        LeaseBuilder::new(store)
    }

    /// The backing store.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).store_calls(), 0);
    /// ```
    pub fn store_calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Keys with lease state in the table (at most [`max_leases`](LeaseBuilder::max_leases),
    /// rounded up to a multiple of the table's 32 shards).
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// assert_eq!(LeasedStore::new(MemoryStore::new()).release_all().await?, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn release_all(&self) -> Result<u64, StoreError> {
        self.release(true).await
    }
}

impl<S> LeasedStore<S> {
    /// The local clock, never earlier than it has read before: a clock that steps
    /// back stands still, so a lease never seems younger than it is.
    fn now(&self) -> u64 {
        self.floor(self.inner.clock.now_micros())
    }

    /// `now`, a reading of the clock, never earlier than the clock has read before.
    fn floor(&self, now: u64) -> u64 {
        self.inner.latest.fetch_max(now, Ordering::Relaxed).max(now)
    }
}
