//! [`Fallback`]: a primary store with an insurance store for when it fails.
//!
//! The files, one job each: `health.rs` (which store serves; the hysteresis),
//! `recovery.rs` (the background prober, and what is done on the primary before it
//! serves again), `carried.rs` (usage carried into an outage and charged back out of
//! it), `missed.rs` (operators' resets and blocks the primary missed),
//! `seen_blocks.rs` (the blocks it reported, enforced while the insurance store
//! serves and re-asserted on its return), `route.rs` (the [`Store`] methods).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Store;
use crate::{Decision, Key, Limit, Quota, StoreError};

mod carried;
mod health;
mod missed;
mod recovery;
mod route;
mod seen_blocks;

use carried::Carried;
use health::Health;
use missed::Missed;
use seen_blocks::SeenBlocks;

/// How long a failed primary is left alone at least (doubled while it flaps).
const DEFAULT_MIN_DOWN: Duration = Duration::from_secs(1);
/// How often a down primary is probed after that.
const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// Serves from `primary`, and from `insurance` while the primary fails.
///
/// **Switching, with hysteresis.** When a primary call fails (a
/// [`StoreError`](crate::StoreError) of any kind: timeout, lost connection, Redis
/// loading or failing over), that call is answered by the insurance store, and the
/// insurance store serves every call for at least the [minimum down
/// time](Fallback::min_down) (default 1 s; doubled for each outage that begins soon
/// after the last recovery, up to 64 ×, so a flapping primary is left alone longer).
/// Meanwhile a background task probes the primary every [probe
/// interval](Fallback::probe_interval) (default 200 ms); after two probes in a row
/// answer, it does what the primary missed (below), then the primary serves again.
/// No request waits for a probe or for that catch-up, and a request pays at most one
/// primary deadline: the one that found it failing. (Without a Tokio runtime, or with
/// a zero probe interval, there is no background task: a call tries the primary
/// itself once the hold is over, and does the catch-up first.)
///
/// **One quota across a failover, per process.** The insurance store keeps its own
/// counts, but a key does not start an outage afresh: the first time the insurance
/// store serves a key in an outage, it is charged the usage the primary last
/// reported for it to this process (less what time repaid since, at the quota's
/// rate). On recovery, before the primary decides again, it is charged what the
/// insurance store admitted for each key it served (one call per key; at most what
/// the insurance store still counts of it). So within one process a key's admissions
/// across an outage stay within about one store's quota (at one instant: exactly
/// one); across `n` processes, within `n` quotas while the insurance serves, as each
/// process limits on its own. Both tables hold at most 10,000 keys.
///
/// **Blocks are carried.** A block the primary reported to this process (an
/// operator's, or a tripped penalty box's, seen on a decision's
/// [`blocked_for`](crate::Decision::blocked_for)) is enforced by this process while
/// the insurance store serves, until it ends — per limit and key, under every quota
/// (a caller's other plans too, as on one store), for at most 10,000 keys (the block
/// that ends first leaves first) — and re-asserted on a primary that comes back
/// without it (restarted empty, flushed), before it decides again. So is a penalty
/// box the insurance store tripped while it served. The trips an escalating
/// [`Penalty`](crate::Penalty) remembered on the primary's last answer
/// ([`Decision::trips`](crate::Decision::trips)) are carried too: a trip on the
/// insurance store counts after them and gets their next block (the trip itself is
/// not counted on the primary once it is back: its next trip there counts one less). A
/// block this process never saw (the caller was blocked through another process, and
/// has not asked this one since) is not known to it; a block another process lifted
/// while the primary was down is re-asserted by this one.
/// Carried blocks are timed on this process's monotonic clock, not on a store's
/// injected clock ([`ManualClock`](crate::clock::ManualClock)): in a simulation that
/// advances the stores' clock, a carried block ends in real time.
///
/// Refunds go where their charge went. A decision's [`Receipt`](crate::store::Receipt)
/// records which store took the charge (through nested `Fallback`s too), and
/// [`refund_charge`](Store::refund_charge) sends it there: a refund for a charge the
/// primary took while the primary is down is dropped (an error, and the charge stays
/// counted), never sent to the insurance store, which would gain quota it never
/// spent; and the other way round (a primary known down keeps counting it, and so
/// does the usage carried from it to the insurance store: over-denial, never
/// over-admission). A refund of the insurance store's charge that the primary was
/// charged on recovery is given back there too. A [`settle`](Store::settle) goes
/// there too; a settle of the primary's charge while the primary is down still
/// charges its extra (a debt): to the insurance store, carried back to the primary on
/// recovery, and drops what it would give back (an error when that is all it does). A
/// [`refund`](Store::refund) without a receipt goes to the store serving now, and is
/// dropped too when that store fails.
///
/// Operators' calls: a [`peek`](Store::peek) and a [`penalize`](Store::penalize) go to
/// the store serving now, as a charge does; a [`reset`](Store::reset) and a
/// [`block`](Store::block) go to both stores (the primary unless it is down: then it
/// is replayed there before the primary decides again), so that they hold whichever
/// store serves the key next; they fail only when both stores fail.
///
/// Observed: the layer's store metrics label a `Fallback`'s calls with the store that
/// answered (`store="primary"` or `"insurance"`), the primary's errors are counted in
/// `tollgate_store_errors_total` even when the insurance store answered, the gauge
/// `tollgate_fallback_serving` says which store serves, and each switch is logged
/// (a primary unreachable since startup says so).
///
/// ```
/// use tollgate::{Key, Limiter, MemoryStore, Limit, Quota};
/// use tollgate::store::Fallback;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// // Any two stores: in production the primary is usually a `RedisStore`.
/// let store = Fallback::new(MemoryStore::new(), MemoryStore::new());
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_second(1))?)
///     .store(store.clone())
///     .build()?;
/// assert!(limiter.check("api", &Key::from("alice"), 1).await?.allowed);
/// assert!(store.serving_primary());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Fallback<P, I> {
    shared: Arc<Shared<P, I>>,
}

impl<P, I> Clone for Fallback<P, I> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<P: std::fmt::Debug, I: std::fmt::Debug> std::fmt::Debug for Fallback<P, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Starts with the type's name: the layer's metrics read it.
        f.debug_struct("Fallback")
            .field("primary", &self.shared.primary)
            .field("insurance", &self.shared.insurance)
            .field("serving_primary", &self.shared.health.serves_primary())
            .finish_non_exhaustive()
    }
}

/// What a `Fallback`'s clones and its background prober share.
struct Shared<P, I> {
    primary: P,
    insurance: I,
    health: Health,
    /// The background prober watching the primary: its number, 0 for none.
    probing: AtomicU64,
    /// The last prober's number.
    probers: AtomicU64,
    /// Operators' resets and blocks the primary missed, to replay on it before it
    /// decides again.
    missed: Missed,
    /// Blocks the primary reported, enforced while the insurance store serves.
    seen: SeenBlocks,
    /// Usage carried into an outage and charged back out of it.
    carried: Carried,
    /// Held while a key is seeded on the insurance store.
    seeding: tokio::sync::Mutex<()>,
    /// What a probe peeks at: a key no caller has, under a limit no caller uses
    /// (`None` only if that limit could not be built: a probe is then an empty batch).
    probe: (Option<Limit>, Key),
}

impl<P, I> Drop for Shared<P, I> {
    fn drop(&mut self) {
        crate::observe::fallback_dropped(!self.health.serves_primary());
    }
}

impl<P: Store, I: Store> Fallback<P, I> {
    /// Serves from `primary`, falling back to `insurance` while `primary` fails.
    ///
    /// A primary that fails before it ever answered is logged as unreachable since
    /// startup (a `tracing` warning) and counted in `tollgate_store_errors_total`.
    /// Within a Tokio runtime, a primary no call has reached once the minimum down
    /// time has passed is probed once in the background, and logged so when it does
    /// not answer (a call decides the switch, not this probe).
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new());
    /// assert!(store.serving_primary());
    /// ```
    pub fn new(primary: P, insurance: I) -> Self {
        crate::observe::fallback_built();
        let shared = Arc::new(Shared {
            primary,
            insurance,
            health: Health::default(),
            probing: AtomicU64::new(0),
            probers: AtomicU64::new(0),
            missed: Missed::default(),
            seen: SeenBlocks::default(),
            carried: Carried::default(),
            seeding: tokio::sync::Mutex::new(()),
            probe: (
                Limit::new("tollgate-fallback-probe", Quota::per_second(1)).ok(),
                Key::from("tollgate-fallback-probe"),
            ),
        });
        recovery::probe_at_startup(&shared);
        Self { shared }
    }

    /// How often a down primary is probed once its minimum down time is over (default
    /// 200 ms). Zero leaves the switch without hysteresis: every call made while the
    /// primary is down tries it (and pays its deadline), as a test may want.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new())
    ///     .probe_interval(Duration::from_millis(500));
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn probe_interval(self, interval: Duration) -> Self {
        self.shared.health.set_probe_interval(interval);
        self
    }

    /// How long a primary that failed is left alone at least (default 1 s), before it
    /// is probed: doubled for each outage that begins soon after the last recovery,
    /// up to 64 ×.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new())
    ///     .min_down(Duration::from_secs(5));
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn min_down(self, min: Duration) -> Self {
        self.shared.health.set_min_down(min);
        self
    }

    /// Whether calls currently go to the primary store.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// assert!(Fallback::new(MemoryStore::new(), MemoryStore::new()).serving_primary());
    /// ```
    pub fn serving_primary(&self) -> bool {
        self.shared.health.serves_primary()
    }

    /// How many times the serving store changed (to the insurance store and back
    /// count one each) since this `Fallback` was built.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// assert_eq!(Fallback::new(MemoryStore::new(), MemoryStore::new()).switches(), 0);
    /// ```
    pub fn switches(&self) -> u64 {
        self.shared.health.switches()
    }
}

impl<P: Store, I: Store> Shared<P, I> {
    /// Whether a call goes straight to the insurance store, without a future: the
    /// primary is down and either a prober watches it or its hold is not over.
    fn insurance_now(&self) -> bool {
        !self.health.serves_primary()
            && (self.probing.load(Ordering::Acquire) != 0
                || self.health.until_probe() > Duration::ZERO)
    }

    /// The primary answered a call.
    fn primary_answered(&self) {
        self.health.answered();
    }

    /// A call to the primary failed: counted, and the insurance store serves from now
    /// on; a prober is started when the switch happened now.
    fn primary_failed(self: &Arc<Self>, error: &StoreError) {
        crate::observe::primary_error(error);
        if error.kind() == crate::StoreErrorKind::Unsupported {
            // Not a failure of the store: an operation it does not have.
            return;
        }
        let failed = self.health.failed();
        if failed.began.is_some() {
            crate::observe::switched_to_insurance(
                error,
                failed.never_answered,
                self.health.until_probe(),
            );
            recovery::watch(self);
        }
    }

    /// Remembers what the primary answered for `charges`.
    fn noted(&self, charges: &[super::Charge<'_>], decisions: &[Decision], sent: u64) {
        self.seen.note(charges, decisions, sent);
        self.carried.note_primary(charges, decisions);
    }
}

#[cfg(test)]
mod tests;
