//! [`LeaseBuilder`]: a [`LeasedStore`]'s settings, each checked as it is set, and
//! their defaults.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use foldhash::fast::RandomState;

use super::table::SHARDS;
use super::{Inner, LeasedStore, SliceSizing};
use crate::ConfigError;
use crate::clock::{Clock, SystemClock};
use crate::store::Store;

/// The longest lease [`LeaseBuilder::max_lease`] accepts.
const LONGEST_LEASE: Duration = Duration::from_secs(10);

/// Builds a [`LeasedStore`]; from [`LeasedStore::builder`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::MemoryStore;
/// use tollgate::store::LeasedStore;
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
    /// The defaults (see [`LeasedStore::builder`]).
    pub(super) fn new(store: S) -> Self {
        Self {
            store,
            clock: Arc::new(SystemClock),
            max_lease: Duration::from_millis(250),
            max_slice: 64,
            processes: 4,
            max_leases: 10_000,
            sizing: SliceSizing::Adaptive,
        }
    }

    /// The longest a lease lasts (default 250 ms; 1 ms to 10 s). Bounds how long a
    /// slice's unused units sit here, so how long other processes may be denied the
    /// units this one holds, and how late this process sees a block set elsewhere.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
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
    /// use tollgate::MemoryStore;
    /// use tollgate::store::{LeasedStore, SliceSizing};
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
    /// give it the backing store's [`ManualClock`](crate::clock::ManualClock).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::MemoryStore;
    /// use tollgate::clock::ManualClock;
    /// use tollgate::store::LeasedStore;
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let store = LeasedStore::builder(MemoryStore::with_clock(clock.clone())).clock(clock).build();
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Builds the store, with no lease yet: the table of
    /// [`max_leases`](Self::max_leases) keys is filled as keys are decided.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::LeasedStore;
    /// let store = LeasedStore::builder(MemoryStore::new()).build();
    /// assert_eq!((store.leases(), store.held()), (0, 0));
    /// ```
    pub fn build(self) -> LeasedStore<S> {
        let per_shard = self.max_leases.div_ceil(SHARDS).max(1);
        LeasedStore {
            inner: Arc::new(Inner {
                store: self.store,
                clock: self.clock,
                max_lease_us: crate::time::micros(self.max_lease),
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
