//! [`InFlightSlot`]: one of the places a key has for requests running at once, given
//! back when dropped.

use std::fmt;

/// What gives a slot back to its store.
type Release = Box<dyn FnOnce() + Send + Sync>;

/// One in-flight slot taken from a [`Store`](crate::Store) by
/// [`acquire_in_flight`](crate::Store::acquire_in_flight): the key has one place fewer
/// for requests running at once until this is dropped.
///
/// Dropping it gives the slot back, whatever the reason: the response ended, the
/// caller went away, a task was cancelled or unwound. A store that lost track of a
/// slot (a process that crashed holding it) gets it back by other means: the Redis
/// store's slots are leases that expire unless renewed.
///
/// ```
/// use tollgate::{Key, Limit, MemoryStore, Quota, Store};
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
}

impl InFlightSlot {
    /// A slot that runs `release` once, when it is dropped: for stores implementing
    /// [`Store::acquire_in_flight`](crate::Store::acquire_in_flight). `release` runs in
    /// `Drop`, possibly while a panic unwinds: it must not block or panic.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// let running = Arc::new(AtomicUsize::new(1));
    /// let slot = tollgate::InFlightSlot::new({
    ///     let running = running.clone();
    ///     move || { running.fetch_sub(1, Ordering::Relaxed); }
    /// });
    /// drop(slot);
    /// assert_eq!(running.load(Ordering::Relaxed), 0);
    /// ```
    pub fn new(release: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self {
            release: Some(Box::new(release)),
        }
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
        f.debug_struct("InFlightSlot").finish_non_exhaustive()
    }
}
