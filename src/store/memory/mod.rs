//! [`MemoryStore`]: limiter state in this process, sharded and bounded.

mod blocks;
mod cells;
mod decide;
mod evaluate;
mod eviction;
mod footprint;
mod given_back;
mod in_flight;
mod names;
mod operations;
mod reservations;
mod settle;
mod shard;
mod tables;

use crate::store::known::Known;

use std::any::Any;
use std::fmt;
use std::hash::BuildHasher;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use foldhash::fast::RandomState;

use self::footprint::worst_case_bytes;
use self::in_flight::InFlightTable;
use self::shard::{Hashed, Shard};
use crate::clock::now_micros;
use crate::clock::{Clock, SystemClock};
use crate::{ConfigError, Key, Limit};

/// Upper bound on the number of shards (independent locks).
const MAX_SHARDS: usize = 64;
/// Lower bound on a shard's share of `max_keys` (unless the store is smaller).
const MIN_KEYS_PER_SHARD: usize = 256;

/// Limiter state in this process: the default store.
///
/// - **Concurrent:** keys are spread over up to 64 shards (at least 256 keys of the
///   bound each), each behind its own read-write lock; there is no global lock. A
///   [`Gcra`](crate::Algorithm::Gcra) or
///   [`LeakyBucket`](crate::Algorithm::LeakyBucket) decision for a key already stored
///   takes only the read lock and updates the key's one-word state by
///   compare-and-swap, so threads never wait for each other there, even on one hot
///   key. The other algorithms, and a key's first charge, hold the write lock for a
///   few dozen nanoseconds.
/// - **Bounded in keys and bytes:** at most [`max_keys`](MemoryStore::max_keys) keys
///   (default [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS), one million) and
///   [`max_bytes`](MemoryStore::max_bytes) bytes of state (default
///   [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES), 256 MiB) across all limits, split evenly over the
///   shards, and within a shard evenly over the limit *names* in use there, whatever
///   quotas, periods or algorithms each is decided under: a flood of new keys through
///   one limit makes room among that limit's own states, never another's, and a
///   caller who makes many periods under one name (plans, reloads) competes only
///   within that name. A name has at most 16 tables (one per algorithm and period)
///   in a shard, counted in the bytes; a table left empty, with nothing stored in it
///   for a second, is dropped at a sweep. Past 16 with none empty, a charge under a plan's period that needs a new
///   table is denied, never decided in another period's state nor made room for by
///   dropping live states ([`tables`](MemoryStore::tables)).
/// - **Eviction an attacker cannot use:** a new key in a full share evicts, from a
///   random sample of 16 of that limit's states (in its largest table), the one
///   whose loss forgives the
///   least: an idle state first, then the one with the most capacity left, then (as
///   much left) the one that resets last. A key that has spent its quota is evicted
///   only when every state sampled has spent as much and earlier, so a flood must
///   spend the quota of each key it mints before it can reach one. Only a request
///   that is admitted and stores a new key evicts: denials and peeks never do. A
///   flood costs each request the same constant work: nothing scans a whole shard,
///   nor a limit's tables, per request.
/// - **One caller, one record.** A key's block ([`Limiter::block`](crate::Limiter::block),
///   a tripped [`Penalty`](crate::Penalty)), penalty count and queue of reservations
///   are one record per (limit name, key): they hold under every quota, period and
///   algorithm the key is decided under (plans included), and a reload that keeps the
///   name keeps them; [`Limiter::reset`](crate::Limiter::reset) clears the record
///   and the key's state under every period.
/// - **Records a flood cannot evict:** each limit name holds at most its share of
///   the shard's keys in records ([`block_records`](MemoryStore::block_records)). A
///   new record makes room only from records that lift nothing (ended, or a mere
///   count): a block that has not ended and a reservation still pending are never
///   evicted. When a limit's share holds only those, a new offender's trip is
///   refused ([`refused_trips`](MemoryStore::refused_trips)): it gets its plain
///   rejection, and every block stays. An operator's block is always stored, past the
///   share if need be.
/// - **Self-cleaning:** each shard drops idle state (state that equals a fresh key's)
///   at most once a second as it is used. No background thread, nothing to spawn.
/// - **Shared:** clones share all state; one entry per (limit, key).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Key, Limiter, MemoryStore, Limit, Quota};
/// use tollgate::clock::ManualClock;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// // One key at most (one shard): a tiny bound makes the behaviour visible.
/// let store = MemoryStore::with_clock(clock.clone()).max_keys(1)?;
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_second(1))?)
///     .store(store.clone())
///     .build()?;
/// for caller in ["alice", "bob", "carol"] {
///     assert!(limiter.check("api", &Key::from(caller), 1).await?.allowed);
///     assert_eq!(store.len(), 1); // the bound holds even when every key is active
/// }
/// clock.advance(Duration::from_secs(5)); // carol is idle again
/// limiter.check("api", &Key::from("dave"), 0).await?; // any call sweeps its shard
/// assert_eq!(store.len(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    clock: TimeSource,
    shards: Box<[Padded<RwLock<Shard>>]>,
    max_keys: usize,
    max_bytes: usize,
    hasher: RandomState,
    /// In-flight slots: apart from the rate states and their bounds, as an entry
    /// lives only while its key has a request running.
    in_flight: Arc<InFlightTable>,
}

/// A shard lock on a cache line (pair) of its own: two threads deciding for keys in
/// neighbouring shards must not slow each other down by sharing a line.
#[repr(align(128))]
struct Padded<T>(T);

/// Where the store reads time. The system clock is called directly (inlined): it is
/// read on every decision, and a call through `dyn Clock` showed up in profiles.
#[derive(Clone)]
enum TimeSource {
    System,
    Custom(Arc<dyn Clock>),
}

impl TimeSource {
    fn of(clock: impl Clock) -> Self {
        if (&clock as &dyn Any).is::<SystemClock>() {
            Self::System
        } else {
            Self::Custom(Arc::new(clock))
        }
    }

    #[inline]
    fn now_micros(&self) -> u64 {
        match self {
            Self::System => now_micros(&SystemClock),
            Self::Custom(clock) => now_micros(&**clock),
        }
    }
}

impl fmt::Debug for TimeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => SystemClock.fmt(f),
            Self::Custom(clock) => clock.fmt(f),
        }
    }
}

impl MemoryStore {
    /// The default bound on stored keys: one million.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    ///
    /// assert_eq!(MemoryStore::DEFAULT_MAX_KEYS, 1_000_000);
    /// assert_eq!(MemoryStore::new().get_max_keys(), MemoryStore::DEFAULT_MAX_KEYS);
    /// ```
    pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

    /// The default bound on the bytes stored states take: 256 MiB.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    ///
    /// assert_eq!(MemoryStore::DEFAULT_MAX_BYTES, 256 << 20);
    /// assert_eq!(MemoryStore::new().get_max_bytes(), MemoryStore::DEFAULT_MAX_BYTES);
    /// ```
    pub const DEFAULT_MAX_BYTES: usize = 256 << 20;

    /// A store on the system clock with room for [`DEFAULT_MAX_KEYS`](Self::DEFAULT_MAX_KEYS) keys.
    ///
    /// ```
    /// assert!(tollgate::MemoryStore::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::build(
            TimeSource::System,
            Self::DEFAULT_MAX_KEYS,
            Self::DEFAULT_MAX_BYTES,
        )
    }

    /// A store reading time from `clock` (tests, simulations).
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = tollgate::MemoryStore::with_clock(tollgate::clock::ManualClock::new(Duration::from_secs(1)));
    /// assert_eq!(store.get_max_keys(), tollgate::MemoryStore::DEFAULT_MAX_KEYS);
    /// ```
    pub fn with_clock(clock: impl Clock) -> Self {
        Self::build(
            TimeSource::of(clock),
            Self::DEFAULT_MAX_KEYS,
            Self::DEFAULT_MAX_BYTES,
        )
    }

    /// The same store bounded to `max_keys` keys (at least 1). Call it before use:
    /// it starts from empty state.
    ///
    /// ```
    /// let store = tollgate::MemoryStore::new().max_keys(10_000)?;
    /// assert_eq!(store.get_max_keys(), 10_000);
    /// assert!(tollgate::MemoryStore::new().max_keys(0).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn max_keys(self, max_keys: usize) -> Result<Self, ConfigError> {
        if max_keys == 0 {
            return Err(ConfigError::new(
                "invalid max_keys 0: the memory store needs room for at least 1 key",
            ));
        }
        Ok(Self::build(
            self.inner.clock.clone(),
            max_keys,
            self.inner.max_bytes,
        ))
    }

    /// The same store bounded to `max_bytes` bytes of state (default
    /// [`DEFAULT_MAX_BYTES`](Self::DEFAULT_MAX_BYTES), 256 MiB), as well as to its keys. Call it before use: it
    /// starts from empty state.
    ///
    /// A key's state is counted as its table slot (its 16-byte key, the state itself
    /// and a control byte) plus what the state holds on the heap: the sub-window
    /// counts of [`SlidingWindowCounters`](crate::Algorithm::SlidingWindowCounters)
    /// (8 bytes each) and the entries of
    /// [`SlidingWindowLog`](crate::Algorithm::SlidingWindowLog) (16 bytes per distinct
    /// admission instant). The tables' spare buckets come on top: resident memory
    /// stays within about twice the slots plus the heap parts. Each of the store's
    /// shards gets an equal part of the budget, and one key's largest possible state
    /// must fit in a part: [`LimiterBuilder::build`](crate::LimiterBuilder::build)
    /// refuses a limit whose state could not.
    ///
    /// ```
    /// let store = tollgate::MemoryStore::new().max_bytes(64 << 20)?;
    /// assert_eq!(store.get_max_bytes(), 64 << 20);
    /// assert!(tollgate::MemoryStore::new().max_bytes(0).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn max_bytes(self, max_bytes: usize) -> Result<Self, ConfigError> {
        if max_bytes == 0 {
            return Err(ConfigError::new(
                "invalid max_bytes 0: the memory store needs room for at least one key's state",
            ));
        }
        Ok(Self::build(
            self.inner.clock.clone(),
            self.inner.max_keys,
            max_bytes,
        ))
    }

    fn build(clock: TimeSource, max_keys: usize, max_bytes: usize) -> Self {
        // A power of two, so a shard is picked with a mask, and at least
        // `MIN_KEYS_PER_SHARD` keys per shard: each shard bounds its own keys, and a
        // shard must be large enough that the keys hashing to it stay close to their
        // even share (64 shards of 16 keys each would see some shards' honest keys
        // alone overflow their part of the bound).
        let shard_count = (max_keys / MIN_KEYS_PER_SHARD).clamp(1, MAX_SHARDS);
        let shard_count = 1 << shard_count.ilog2();
        let per_shard = max_keys / shard_count;
        let bytes_per_shard = max_bytes / shard_count;
        let hasher = RandomState::default();
        let known = Arc::new(Known::default());
        let shards = (0..shard_count)
            .map(|_| {
                let mut shard = Shard::new(per_shard, bytes_per_shard, hasher.clone());
                shard.known = Arc::clone(&known);
                Padded(RwLock::new(shard))
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                clock,
                shards,
                max_keys,
                max_bytes,
                hasher: hasher.clone(),
                in_flight: Arc::new(InFlightTable::new(shard_count, hasher)),
            }),
        }
    }

    /// The bound on the bytes of stored state.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::new().get_max_bytes(), tollgate::MemoryStore::DEFAULT_MAX_BYTES);
    /// ```
    pub fn get_max_bytes(&self) -> usize {
        self.inner.max_bytes
    }

    /// The bytes stored state takes now, counted as [`max_bytes`](MemoryStore::max_bytes)
    /// says. Reads each shard in turn.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::new().bytes(), 0);
    /// ```
    pub fn bytes(&self) -> usize {
        self.inner.shards.iter().map(|s| read(&s.0).bytes()).sum()
    }

    /// The byte budget of one shard.
    fn bytes_per_shard(&self) -> usize {
        self.inner.max_bytes / self.inner.shards.len()
    }

    /// The bound on stored keys.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::new().get_max_keys(), 1_000_000);
    /// ```
    pub fn get_max_keys(&self) -> usize {
        self.inner.max_keys
    }

    /// How many (limit, key) states are stored now. Reads each shard in turn.
    ///
    /// ```
    /// assert_eq!(tollgate::MemoryStore::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| read(&s.0).len()).sum()
    }

    /// How many (limit, key) pairs have requests running under an in-flight limit
    /// now ([`Policy::in_flight`](crate::Policy::in_flight)). A key's entry is removed
    /// when its last slot is given back, so this never exceeds the number of requests
    /// running, however many keys callers make up. Reads each shard in turn.
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::Store;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("uploads", Quota::per_second(10))?;
    /// let slot = store.acquire_in_flight(&limit, &Key::from("alice"), 4).await?;
    /// assert_eq!(store.in_flight_keys(), 1);
    /// drop(slot);
    /// assert_eq!(store.in_flight_keys(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight_keys(&self) -> usize {
        self.inner.in_flight.keys()
    }

    /// Whether no state is stored.
    ///
    /// ```
    /// assert!(tollgate::MemoryStore::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key with its hash, computed once for both the shard and its table.
    #[inline]
    fn hashed<'k>(&self, key: &'k Key) -> Hashed<'k> {
        Hashed {
            key,
            hash: self.inner.hasher.hash_one(key),
        }
    }

    /// The key's shard: bits 32.. of its hash. hashbrown uses the low bits for the
    /// bucket and the top seven for its tag, so the shard choice is independent of both.
    #[inline]
    fn shard_index(&self, key: Hashed<'_>) -> usize {
        (key.hash >> 32) as usize & (self.inner.shards.len() - 1)
    }

    #[inline]
    fn shard(&self, key: Hashed<'_>) -> &RwLock<Shard> {
        &self.inner.shards[self.shard_index(key)].0
    }

    #[inline]
    fn now(&self) -> u64 {
        self.inner.clock.now_micros()
    }

    /// How many block, penalty and reservation records the store holds (one per
    /// limit name and key): at most [`max_keys`](MemoryStore::max_keys), each limit
    /// name holding at most its share of a shard's keys, besides the rate states
    /// [`len`](MemoryStore::len) counts; only blocks held past a share go past the
    /// bound (an operator's is always stored). Reads each shard in turn.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limiter, Limit, MemoryStore, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_second(1))?)
    ///     .store(store.clone())
    ///     .build()?;
    /// limiter.block("api", &Key::from("mallory"), Duration::from_secs(60)).await?;
    /// assert_eq!(store.block_records(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn block_records(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| read(&s.0).blocks_len())
            .sum()
    }

    /// How many penalty-box offences the store refused to record since it was built:
    /// a new offender's trip (or count toward one) that found its limit's share of
    /// block records (see [`block_records`](MemoryStore::block_records)) holding only
    /// blocks that have not ended and reservations still pending. Such a request gets
    /// its plain rejection; no existing block is lifted and no pending reservation is
    /// dropped to make room. A rising figure means a flood of offenders: each one is
    /// logged (feature `tracing`, at most once per shard and second). Reads each shard
    /// in turn.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, MemoryStore, Penalty, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// // One shard with room for one record: the first offender's block fills it.
    /// let store = MemoryStore::with_clock(clock).max_keys(1)?;
    /// let penalty = Penalty::after(1).within(Duration::from_secs(60)).block_for(Duration::from_secs(900));
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("login", Quota::per_minute(1))?.penalty(penalty))
    ///     .store(store.clone())
    ///     .build()?;
    /// for caller in ["mallory", "trudy"] {
    ///     let key = Key::from(caller);
    ///     limiter.check("login", &key, 1).await?;
    ///     limiter.check("login", &key, 1).await?; // rejected: trips the box
    /// }
    /// // Mallory's block stays; trudy's trip found no room and was refused.
    /// assert!(limiter.peek("login", &Key::from("mallory")).await?.blocked_for.is_some());
    /// assert_eq!(limiter.peek("login", &Key::from("trudy")).await?.blocked_for, None);
    /// assert_eq!(store.refused_trips(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refused_trips(&self) -> u64 {
        self.inner
            .shards
            .iter()
            .map(|s| read(&s.0).refused_trips())
            .sum()
    }

    /// How many tables of rate states the store holds: one per (limit name,
    /// algorithm, period) in use in each shard, at most 16 per name and shard (a
    /// limit's own period always gets its table: only a reload makes a new one). A
    /// quota over another period ([`Limiter::check_with`](crate::Limiter::check_with))
    /// or a reload that changes a limit's algorithm or period adds one; a table left
    /// empty, with nothing stored in it for a second, is dropped at a sweep of its
    /// shard. Each costs a few hundred bytes,
    /// counted in [`bytes`](MemoryStore::bytes). Reads each shard in turn.
    ///
    /// ```
    /// use tollgate::{Key, Limit, Limiter, MemoryStore, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new().max_keys(1)?; // one shard
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_minute(100))?)
    ///     .store(store.clone())
    ///     .build()?;
    /// assert_eq!(store.tables(), 0);
    /// let key = Key::from("alice");
    /// limiter.check("api", &key, 1).await?;
    /// limiter.check_with("api", &key, 1, Quota::per_hour(10_000)).await?;
    /// assert_eq!(store.tables(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tables(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| read(&s.0).tables_len())
            .sum()
    }
}

impl MemoryStore {
    /// Refuses a limit one of whose keys could outgrow a shard's part of
    /// [`max_bytes`](MemoryStore::max_bytes): at build time for a limit's own quota,
    /// at request time for a caller's ([`Limiter::check_with`](crate::Limiter::check_with)).
    pub(crate) fn check_bytes(&self, limit: &Limit) -> Result<(), ConfigError> {
        let worst = worst_case_bytes(limit.params());
        let part = self.bytes_per_shard();
        if worst > part {
            return Err(ConfigError::new(format!(
                "limit \"{}\": one key's {} state can take {worst} bytes, more than the \
                 memory store's part of max_bytes per shard ({part} bytes: {} bytes over {} \
                 shards); raise MemoryStore::max_bytes, lower the limit or pick another algorithm",
                limit.name(),
                limit.params().algorithm,
                self.inner.max_bytes,
                self.inner.shards.len(),
            )));
        }
        Ok(())
    }
}

// A poisoned shard only means a panic elsewhere while it was held; its state is plain
// data that every transition leaves consistent, so keep serving.

#[inline]
fn read(shard: &RwLock<Shard>) -> RwLockReadGuard<'_, Shard> {
    shard.read().unwrap_or_else(PoisonError::into_inner)
}

#[inline]
fn write(shard: &RwLock<Shard>) -> RwLockWriteGuard<'_, Shard> {
    shard.write().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The process's gauges count this store's states no more.
        for shard in &mut self.shards {
            let shard = shard.0.get_mut().unwrap_or_else(PoisonError::into_inner);
            crate::observe::memory_changed(
                -shard.len().cast_signed(),
                -shard.bytes().cast_signed(),
            );
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("clock", &self.inner.clock)
            .field("shards", &self.inner.shards.len())
            .field("max_keys", &self.inner.max_keys)
            .finish_non_exhaustive()
    }
}
