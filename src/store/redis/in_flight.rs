//! In-flight slots on Redis: leases in one sorted set per key, renewed while their
//! requests run.
//!
//! A slot is a lease (member: an id unique to one request of one store, score: its
//! expiry on the server's clock) in `<prefix>:<policy>:{<subject>}:inflight`, the hash
//! tag of the key's rate state. Taking one is one script (drop the expired leases,
//! count, add if below the bound, set the key's TTL); giving it back is one `ZREM`.
//! A process that dies without giving its leases back stops renewing them, and they
//! expire within the TTL; the next acquire of the key drops them.
//!
//! **Cancel-safe acquire.** The lease id is made before the call is sent, and a guard
//! removes that id (`ZREM`, a no-op if the call never took it; ids are never reused,
//! so it can remove nobody else's lease) if the call fails, times out or is dropped
//! on its way (a client that gave up during a Redis stall). Without it, a cancelled
//! acquire that Redis still ran would hold the slot until the TTL.
//!
//! **Renewal.** Each store (with its clones) keeps its live leases by key, and a
//! renewer renews them all every TTL/3 while there are any. It runs on a thread of
//! its own with a small current-thread runtime, so it belongs to the store, not to
//! the runtime of whichever caller came first: a runtime that ends (a test's, a
//! `block_on` in a CLI, a worker pool shut down) takes no renewal with it. The thread
//! ends when the last lease is given back and starts again with the next; if it ever
//! died otherwise (a panic), the next lease taken starts another. Requests shorter
//! than TTL/3, the usual case, are never renewed.
//!
//! A round is batched: up to [`LEASES_PER_CALL`] leases (over many keys) per script
//! call, and the calls sent together (up to [`LEASES_AT_ONCE`] leases on the wire), so they
//! are pipelined on the store's multiplexed connection: one round trip per batch of
//! calls, not one per key. On a cluster a call names the keys of one hash slot, and
//! redis-rs pipelines each node's calls on that node's connection. A lease found
//! expired and dropped (its process was paused or cut off longer than the TTL) is
//! added back if its key has room, or else counted lost; either way its slot learns
//! that its request ran uncounted. A lost lease is tried again each round.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use deadpool_redis::redis::cluster_routing::Slot;
use deadpool_redis::redis::{self, Script};
use tokio::runtime::Handle;
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{RedisStore, keys};
use crate::store::InFlightSlot;
use crate::{Key, Limit, StoreError, StoreErrorKind, observe};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/acquire.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/renew.lua")));

/// The most leases one renewal call names: enough that 100 000 running keys take
/// 200 calls, few enough that one call holds Redis for a millisecond or so.
pub(super) const LEASES_PER_CALL: usize = 500;
/// The most leases in renewal calls on the wire at once (32 full calls, or on a
/// cluster, where a call names one hash slot's keys, thousands of small ones): they
/// pipeline on the connection(s), and the bound keeps a huge round from queueing
/// megabytes at once.
pub(super) const LEASES_AT_ONCE: usize = 32 * LEASES_PER_CALL;

/// A store's live leases, shared by its clones, its slots and its renewer.
pub(super) struct Leases {
    ttl: Duration,
    /// Sets this store's lease ids apart from every other store's.
    id: u64,
    next: AtomicU64,
    live: Mutex<Live>,
    /// Wakes the renewer for leases to remove (see [`Live::orphans`]).
    wake: Notify,
    /// Leases found expired on renewal and added back.
    readded: AtomicU64,
    /// Leases found expired on renewal with no room left to add them back.
    lost: AtomicU64,
}

#[derive(Default)]
struct Live {
    /// Per lease set (a Redis key): the bound of its latest acquire and this
    /// store's leases in it.
    by_key: HashMap<Arc<str>, Held>,
    /// Leases to remove that no runtime was there to remove (a slot dropped outside
    /// one, or while its runtime shut down): the renewer removes them.
    orphans: Vec<(Arc<str>, u64)>,
    /// Whether a renewer thread runs.
    renewing: bool,
}

struct Held {
    bound: u32,
    leases: Vec<Lease>,
}

struct Lease {
    number: u64,
    /// Shared with the slot: its request ran uncounted.
    uncounted: Arc<AtomicBool>,
    /// Counted lost already (a lease is counted once, however many rounds find it
    /// so).
    lost: bool,
}

/// One key's leases to renew: its lease set, its bound and the lease numbers.
type Due = (Arc<str>, u32, Vec<u64>);
/// One renewal call's leases.
type Batch = Vec<Due>;

impl Leases {
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            id: fastrand::u64(..),
            next: AtomicU64::new(0),
            live: Mutex::default(),
            wake: Notify::new(),
            readded: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }

    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn member(&self, number: u64) -> String {
        format!("{:016x}-{number:x}", self.id)
    }

    fn lock(&self) -> MutexGuard<'_, Live> {
        // Plain bookkeeping that every step leaves whole: keep serving after a panic.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a lease taken; says whether a renewer must be started.
    fn hold(&self, set: &Arc<str>, number: u64, bound: u32, uncounted: Arc<AtomicBool>) -> bool {
        let mut live = self.lock();
        let held = live.by_key.entry(set.clone()).or_insert_with(|| Held {
            bound,
            leases: Vec::new(),
        });
        held.bound = bound;
        held.leases.push(Lease {
            number,
            uncounted,
            lost: false,
        });
        !std::mem::replace(&mut live.renewing, true)
    }

    /// Forgets a lease given back: it is renewed no more.
    fn forget(&self, set: &str, number: u64) {
        let mut live = self.lock();
        if let Some(held) = live.by_key.get_mut(set) {
            held.leases.retain(|lease| lease.number != number);
            if held.leases.is_empty() {
                live.by_key.remove(set);
            }
        }
    }

    /// Hands a lease to remove to the renewer; says whether one must be started.
    fn orphan(&self, set: Arc<str>, number: u64) -> bool {
        let start = {
            let mut live = self.lock();
            live.orphans.push((set, number));
            !std::mem::replace(&mut live.renewing, true)
        };
        self.wake.notify_one();
        start
    }

    fn take_orphans(&self) -> Vec<(Arc<str>, u64)> {
        std::mem::take(&mut self.lock().orphans)
    }

    /// The leases to renew now, or `None` (and the renewer ends) when there is
    /// nothing left to do.
    fn due(&self) -> Option<Vec<Due>> {
        let mut live = self.lock();
        if live.by_key.is_empty() && live.orphans.is_empty() {
            live.renewing = false;
            return None;
        }
        Some(
            live.by_key
                .iter()
                .map(|(set, held)| {
                    let numbers = held.leases.iter().map(|lease| lease.number).collect();
                    (set.clone(), held.bound, numbers)
                })
                .collect(),
        )
    }

    /// Applies one renewal call's answer (`statuses`: one byte per lease of `batch`,
    /// see `renew.lua`), and returns the leases added back that were given back
    /// meanwhile: their `ZREM` may have run before the renewal, which brought them
    /// back, so they must be removed again.
    fn settle(&self, batch: &Batch, statuses: &[u8]) -> (Vec<(Arc<str>, u64)>, u64, u64) {
        let mut again = Vec::new();
        let (mut readded, mut lost) = (0, 0);
        let mut live = self.lock();
        let mut status = statuses.iter();
        for (set, _, numbers) in batch {
            let mut held = live.by_key.get_mut(set);
            for &number in numbers {
                let Some(&code) = status.next() else {
                    return (again, readded, lost);
                };
                let lease = held
                    .as_mut()
                    .and_then(|h| h.leases.iter_mut().find(|l| l.number == number));
                match (code, lease) {
                    (b'2', None) => again.push((set.clone(), number)),
                    (b'2', Some(lease)) => {
                        lease.uncounted.store(true, Relaxed);
                        lease.lost = false;
                        readded += 1;
                    }
                    (b'0', Some(lease)) => {
                        lease.uncounted.store(true, Relaxed);
                        if !std::mem::replace(&mut lease.lost, true) {
                            lost += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        drop(live);
        self.readded.fetch_add(readded, Relaxed);
        self.lost.fetch_add(lost, Relaxed);
        (again, readded, lost)
    }
}

/// Removes a lease unless disarmed: armed from before an acquire is sent until its
/// answer is known, so that a call dropped on its way (its caller gave up), failed or
/// timed out leaves no lease behind.
struct Pending<'a> {
    store: &'a RedisStore,
    set: Arc<str>,
    number: u64,
    armed: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.store.remove(self.set.clone(), self.number);
        }
    }
}

/// Hands its lease to the renewer if its `ZREM` never ran to the end (the task was
/// dropped, its runtime shutting down), so the removal is not lost with it.
struct Unsent {
    store: RedisStore,
    lease: Option<(Arc<str>, u64)>,
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some((set, number)) = self.lease.take()
            && self.store.leases.orphan(set, number)
        {
            self.store.start_renewing();
        }
    }
}

/// Clears the renewer's flag if its thread ends without saying so (a panic), so that
/// the next lease taken starts another.
struct Renewing(Arc<Leases>);

impl Drop for Renewing {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().renewing = false;
        }
    }
}

impl RedisStore {
    /// Takes one of `max` leases of `key` under `limit`, or answers `None`.
    pub(super) async fn enter(
        &self,
        limit: &Limit,
        key: &Key,
        max: u32,
    ) -> Result<Option<InFlightSlot>, StoreError> {
        let set: Arc<str> = keys::in_flight_key(&self.prefix, limit, key).into();
        let number = self.leases.next.fetch_add(1, Relaxed);
        let mut pending = Pending {
            store: self,
            set: set.clone(),
            number,
            armed: true,
        };
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(&*set)
            .arg(self.leases.member(number))
            .arg(max)
            .arg(self.leases.ttl_ms());
        let deadline = Instant::now() + self.deadline;
        // On an error or a timeout Redis may still have taken the lease: `pending`
        // removes it.
        let taken: i64 = self
            .exchange(deadline, |mut conn| async move {
                conn.invoke(&invocation).await
            })
            .await?;
        pending.armed = false;
        if taken != 1 {
            return Ok(None);
        }
        let uncounted = Arc::new(AtomicBool::new(false));
        if self.leases.hold(&set, number, max, uncounted.clone()) {
            self.start_renewing();
        }
        let store = self.clone();
        Ok(Some(InFlightSlot::leased(
            move || store.leave(&set, number),
            uncounted,
        )))
    }

    /// Gives a lease back: at once to the renewer, in the background to Redis.
    fn leave(&self, set: &Arc<str>, number: u64) {
        self.leases.forget(set, number);
        self.remove(set.clone(), number);
    }

    /// Removes a lease from Redis in the background: on the caller's runtime, or,
    /// without one, on the renewer's.
    fn remove(&self, set: Arc<str>, number: u64) {
        let Ok(runtime) = Handle::try_current() else {
            if self.leases.orphan(set, number) {
                self.start_renewing();
            }
            return;
        };
        let unsent = Unsent {
            store: self.clone(),
            lease: Some((set, number)),
        };
        runtime.spawn(async move {
            let mut unsent = unsent;
            if let Some((set, number)) = unsent.lease.clone() {
                unsent.store.zrem(&set, number).await;
            }
            unsent.lease = None;
        });
    }

    async fn zrem(&self, set: &str, number: u64) {
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(set).arg(self.leases.member(number));
        let deadline = Instant::now() + self.deadline;
        let result: Result<i64, StoreError> = self
            .exchange(deadline, |mut conn| async move { conn.query(&zrem).await })
            .await;
        if let Err(error) = result {
            observe::lease_failed(&error);
        }
    }

    /// Starts the renewer: a thread with a runtime of its own, which ends when no
    /// lease is left.
    fn start_renewing(&self) {
        let store = self.clone();
        let guard = Renewing(self.leases.clone());
        let started = std::thread::Builder::new()
            .name("tollgate-in-flight-renewal".to_owned())
            .spawn(move || {
                let _guard = guard;
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(store.renew_while_held()),
                    Err(error) => {
                        store.leases.lock().renewing = false;
                        observe::lease_failed(&StoreError::new(
                            StoreErrorKind::Unavailable,
                            format!("no runtime for in-flight lease renewal: {error}"),
                        ));
                    }
                }
            });
        if let Err(error) = started {
            // The next lease taken tries again; these expire within the TTL.
            self.leases.lock().renewing = false;
            observe::lease_failed(&StoreError::new(
                StoreErrorKind::Unavailable,
                format!("no thread for in-flight lease renewal: {error}"),
            ));
        }
    }

    /// Renews every live lease each TTL/3 until none is left, and removes the leases
    /// handed to it as soon as they come.
    async fn renew_while_held(self) {
        let every = self.leases.ttl / 3;
        let mut next = Instant::now() + every;
        loop {
            loop {
                let orphans = self.leases.take_orphans();
                if !orphans.is_empty() {
                    self.remove_all(orphans).await;
                }
                if Instant::now() >= next {
                    break;
                }
                let _ = tokio::time::timeout_at(next, self.leases.wake.notified()).await;
            }
            next += every;
            let Some(due) = self.leases.due() else {
                return;
            };
            self.renew(due).await;
            // A round longer than TTL/3 (a stalled Redis) is followed by the next at
            // once, not by a burst of the rounds it missed.
            next = next.max(Instant::now());
        }
    }

    async fn remove_all(&self, leases: Vec<(Arc<str>, u64)>) {
        let mut calls = JoinSet::new();
        for (set, number) in leases {
            let store = self.clone();
            calls.spawn(async move { store.zrem(&set, number).await });
        }
        while calls.join_next().await.is_some() {}
    }

    /// One renewal round over `due`: batched, the calls sent together (see the
    /// module's doc).
    async fn renew(&self, due: Vec<Due>) -> RenewalRound {
        let batches = self.batches(due);
        let at_once = Arc::new(Semaphore::new(LEASES_AT_ONCE));
        let mut calls = JoinSet::new();
        for batch in batches {
            let store = self.clone();
            let at_once = at_once.clone();
            let leases: usize = batch.iter().map(|(_, _, numbers)| numbers.len()).sum();
            let leases = u32::try_from(leases).unwrap_or(u32::MAX);
            calls.spawn(async move {
                let _permits = at_once.acquire_many_owned(leases).await;
                store.renew_batch(batch).await
            });
        }
        let mut round = RenewalRound::default();
        while let Some(outcome) = calls.join_next().await {
            if let Ok((readded, lost)) = outcome {
                round.readded += readded;
                round.lost += lost;
            }
        }
        if round.readded + round.lost > 0 {
            self.report_expired(round);
        }
        round
    }

    /// Splits `due` into calls of at most [`LEASES_PER_CALL`] leases; on a cluster,
    /// each call's keys share one hash slot.
    fn batches(&self, due: Vec<Due>) -> Vec<Batch> {
        let groups: Vec<Vec<Due>> = if self.is_cluster() {
            let mut by_slot: HashMap<Slot, Vec<_>> = HashMap::new();
            for entry in due {
                by_slot
                    .entry(Slot::for_key(entry.0.as_bytes()))
                    .or_default()
                    .push(entry);
            }
            // The same order every round (a new map's order is random), so that each
            // lease is renewed about every TTL/3, not up to a round later.
            let mut groups: Vec<_> = by_slot.into_values().collect();
            groups.sort_unstable_by(|a, b| a[0].0.cmp(&b[0].0));
            groups
        } else {
            // The registry's order, the same from round to round while its keys stay.
            vec![due]
        };
        let mut batches = Vec::new();
        for group in groups {
            let mut batch: Batch = Vec::new();
            let mut size = 0;
            for (set, bound, numbers) in group {
                for chunk in numbers.chunks(LEASES_PER_CALL) {
                    if size + chunk.len() > LEASES_PER_CALL {
                        batches.push(std::mem::take(&mut batch));
                        size = 0;
                    }
                    size += chunk.len();
                    batch.push((set.clone(), bound, chunk.to_vec()));
                }
            }
            if !batch.is_empty() {
                batches.push(batch);
            }
        }
        batches
    }

    /// One renewal call; returns how many of its leases were added back and lost.
    async fn renew_batch(self, batch: Batch) -> (u64, u64) {
        let mut invocation = RENEW.prepare_invoke();
        invocation.arg(self.leases.ttl_ms());
        for (set, bound, numbers) in &batch {
            invocation.key(&**set).arg(*bound).arg(numbers.len());
            for &number in numbers {
                invocation.arg(self.leases.member(number));
            }
        }
        // Renewal is not on any request's path: it may take what a round has, so a
        // big round does not time out behind itself under the request deadline.
        let deadline = Instant::now() + self.deadline.max(self.leases.ttl / 3);
        let result: Result<Vec<u8>, StoreError> = self
            .exchange(deadline, |mut conn| async move {
                conn.invoke(&invocation).await
            })
            .await;
        let statuses = match result {
            Ok(statuses) => statuses,
            Err(error) => {
                observe::lease_failed(&error);
                return (0, 0);
            }
        };
        let (again, readded, lost) = self.leases.settle(&batch, &statuses);
        for (set, number) in again {
            self.zrem(&set, number).await;
        }
        (readded, lost)
    }

    #[cfg_attr(not(feature = "tracing"), allow(clippy::unused_self))]
    fn report_expired(&self, round: RenewalRound) {
        #[cfg(feature = "metrics")]
        {
            metrics::counter!("tollgate_in_flight_leases_readded_total").increment(round.readded);
            metrics::counter!("tollgate_in_flight_leases_lost_total").increment(round.lost);
        }
        #[cfg(feature = "tracing")]
        tracing::warn!(
            target: "tollgate",
            readded = round.readded,
            lost = round.lost,
            ttl_ms = self.leases.ttl_ms(),
            "in-flight leases expired while their requests ran (a pause or an outage \
             longer than the TTL): added back where the key had room, else lost; \
             their requests ran uncounted"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = round;
    }

    /// How many in-flight leases this store's renewal found expired while their
    /// requests still ran, with their keys full by then: those requests run on
    /// uncounted (their slots'
    /// [`ran_uncounted`](crate::InFlightSlot::ran_uncounted) says so), beside up to
    /// the bound of others. A lease expires under a running request when its process
    /// is paused or cut off from Redis longer than the
    /// [`in_flight_ttl`](RedisStore::in_flight_ttl); each is counted once, and tried
    /// again each renewal until it fits or its request ends. Shared by clones; also
    /// the `tollgate_in_flight_leases_lost_total` counter (feature `metrics`) and a
    /// `tracing` warning per renewal round that finds any (feature `tracing`).
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.in_flight_leases_lost(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_leases_lost(&self) -> u64 {
        self.leases.lost.load(Relaxed)
    }

    /// How many in-flight leases this store's renewal found expired while their
    /// requests still ran and added back, their keys having room: those requests ran
    /// uncounted between the expiry and the renewal (see
    /// [`in_flight_leases_lost`](RedisStore::in_flight_leases_lost)). Shared by
    /// clones; also the `tollgate_in_flight_leases_readded_total` counter (feature
    /// `metrics`).
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.in_flight_leases_readded(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_leases_readded(&self) -> u64 {
        self.leases.readded.load(Relaxed)
    }
}

/// What one renewal round found.
#[derive(Debug, Default, Clone, Copy)]
struct RenewalRound {
    readded: u64,
    lost: u64,
}
