//! In-flight slots on Redis: leases in one sorted set per key, renewed while their
//! requests run.
//!
//! A slot is a lease (member: an id unique to one request of one store, score: its
//! expiry on the server's clock) in `<prefix>:<limit>:{<subject>}:inflight`, the hash
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
//! Each store (with its clones) keeps its live leases by key (`leases.rs`) and renews
//! them while their requests run (`renewal.rs`). A slot dropped where no runtime is
//! left to remove its lease hands the lease to the renewer, which removes it.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, LazyLock};

use deadpool_redis::redis::{self, Script};
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{RedisStore, keys};
use crate::store::InFlightSlot;
use crate::{Key, Limit, StoreError, observe};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/acquire.lua")));

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

    pub(super) async fn zrem(&self, set: &str, number: u64) {
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
}
