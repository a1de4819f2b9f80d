//! [`InFlightSlot`]: one of the places a key has for requests running at once, given
//! back when dropped.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What gives a slot back to its store.
type Release = Box<dyn FnOnce() + Send + Sync>;

/// One in-flight slot taken from a [`Store`](crate::store::Store) by
/// [`acquire_in_flight`](crate::store::Store::acquire_in_flight): the key has one place fewer
/// for requests running at once until this is dropped.
///
/// Dropping it gives the slot back, whatever the reason: the response ended, the
/// caller went away, a task was cancelled or unwound. A store that lost track of a
/// slot (a process that crashed holding it) gets it back by other means: the Redis
/// store's slots are slot records that expire unless renewed.
///
/// A slot record can also expire while its request still runs: the process was paused (a
/// stopped container, a VM migration, a debugger, a long GC-like stall of the host)
/// or cut off from Redis for longer than the slot record's TTL. Other processes may then
/// take its place, and the request runs on uncounted once the process resumes. The
/// Redis store's next renewal notices: it adds the slot record back if the key still has
/// room, or else counts it lost
/// ([`RedisStore::in_flight_slots_lost`](crate::RedisStore::in_flight_slots_lost),
/// a `tracing` warning) and keeps trying each renewal; either way
/// [`ran_uncounted`](InFlightSlot::ran_uncounted) says so. A crash and a pause differ
/// only in whether the request goes on: the bound holds for the requests the store
/// counts, and a paused process's requests are not counted while they are away.
///
/// ```
/// use tollgate::{Key, Limit, MemoryStore, Quota};
/// use tollgate::store::Store;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let store = MemoryStore::new();
/// let uploads = Limit::new("uploads", Quota::per_second(100))?;
/// let alice = Key::from("alice");
/// let slot = store.acquire_in_flight(&uploads, &alice, 1).await?.expect("a free slot");
/// assert!(store.acquire_in_flight(&uploads, &alice, 1).await?.is_none()); // the one is taken
/// drop(slot);
/// assert!(store.acquire_in_flight(&uploads, &alice, 1).await?.is_some());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "the slot is given back as soon as it is dropped"]
pub struct InFlightSlot {
    release: Option<Release>,
    /// Set by the store when it found the slot's record expired while it was held.
    uncounted: Option<Arc<AtomicBool>>,
}

impl InFlightSlot {
    /// A slot that runs `release` once, when it is dropped: for stores implementing
    /// [`Store::acquire_in_flight`](crate::store::Store::acquire_in_flight). `release` runs in
    /// `Drop`, possibly while a panic unwinds: it must not block or panic.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let running = Arc::new(AtomicUsize::new(1));
    /// let slot = tollgate::store::InFlightSlot::new({
    ///     let running = running.clone();
    ///     move || { running.fetch_sub(1, Ordering::Relaxed); }
    /// });
    /// drop(slot);
    /// assert_eq!(running.load(Ordering::Relaxed), 0);
    /// ```
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self {
            release: Some(Box::new(release)),
            uncounted: None,
        }
    }

    /// A slot whose store sets `uncounted` once it finds the slot's record expired
    /// while the request ran (see [`ran_uncounted`](InFlightSlot::ran_uncounted)).
    #[cfg(feature = "redis")]
    pub(crate) fn renewed(
        release: impl FnOnce() + Send + Sync + 'static,
        uncounted: Arc<AtomicBool>,
    ) -> Self {
        Self {
            release: Some(Box::new(release)),
            uncounted: Some(uncounted),
        }
    }

    /// Whether this slot's request ran, for a while at least, without being counted
    /// by its store: the store found the slot's record expired (its process paused or
    /// cut off from Redis longer than the slot record's TTL), so other requests may have
    /// run beside it beyond the bound. The slot record is added back when the key has room
    /// (from then on the request counts again); this stays `true`. Always `false` on
    /// stores whose slots cannot expire, such as the
    /// [`MemoryStore`](crate::MemoryStore).
    ///
    /// ```
    /// use tollgate::{Key, Limit, MemoryStore, Quota};
    /// use tollgate::store::Store;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let store = MemoryStore::new();
    /// let uploads = Limit::new("uploads", Quota::per_second(100))?;
    /// let slot = store.acquire_in_flight(&uploads, &Key::from("alice"), 1).await?.expect("free");
    /// assert!(!slot.ran_uncounted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ran_uncounted(&self) -> bool {
        self.uncounted
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
    }
}

impl Drop for InFlightSlot {
    fn drop(&mut self) {
        if let Some(release) = self.release.take() {
            release();
        }
    }
}

impl fmt::Debug for InFlightSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightSlot")
            .field("ran_uncounted", &self.ran_uncounted())
            .finish_non_exhaustive()
    }
}
