//! In-flight slots on Redis: slot records in one sorted set per key, renewed while their
//! requests run.
//!
//! A slot is a record (member: an id unique to one request of one store, score: its
//! expiry on the server's clock) in `<prefix>:<limit>:{<subject>}:inflight`, the hash
//! tag of the key's rate state. Taking one is one script (drop the expired slot records,
//! count, add if below the bound, set the key's TTL); giving it back is one `ZREM`.
//! A process that dies without giving its slot records back stops renewing them, and they
//! expire within the TTL; the next acquire of the key drops them.
//!
//! **Cancel-safe acquire.** The record id is made before the call is sent, and a guard
//! removes that id (`ZREM`, a no-op if the call never took it; ids are never reused,
//! so it can remove nobody else's slot record) if the call fails, times out or is dropped
//! on its way (a client that gave up during a Redis stall). Without it, a cancelled
//! acquire that Redis still ran would hold the slot until the TTL.
//!
//! Each store (with its clones) keeps its live slot records by key (`slot records.rs`) and renews
//! them while their requests run (`renewal.rs`). A slot dropped where no runtime is
//! left to remove its slot record hands the slot record to the renewer, which removes it.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, LazyLock};

use redis::Script;
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{RedisStore, keys};
use crate::store::InFlightSlot;
use crate::{Key, Limit, StoreError, observe};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/acquire.lua")));

/// Removes a slot record unless disarmed: armed from before an acquire is sent until its
/// answer is known, so that a call dropped on its way (its caller gave up), failed or
/// timed out leaves no slot record behind.
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

/// Hands its slot record to the renewer if its `ZREM` never ran to the end (the task was
/// dropped, its runtime shutting down), so the removal is not lost with it.
struct Unsent {
    store: RedisStore,
    record: Option<(Arc<str>, u64)>,
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if let Some((set, number)) = self.record.take()
            && self.store.records.orphan(set, number)
        {
            self.store.start_renewing();
        }
    }
}

impl RedisStore {
    /// Takes one of `max` slot records of `key` under `limit`, or answers `None`.
    pub(super) async fn enter(
        &self,
        limit: &Limit,
        key: &Key,
        max: u32,
    ) -> Result<Option<InFlightSlot>, StoreError> {
        let set: Arc<str> = keys::in_flight_key(&self.prefix, limit, key).into();
        let number = self.records.next.fetch_add(1, Relaxed);
        let mut pending = Pending {
            store: self,
            set: set.clone(),
            number,
            armed: true,
        };
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(&*set)
            .arg(self.records.member(number))
            .arg(max)
            .arg(self.records.ttl_ms());
        let deadline = Instant::now() + self.deadline;
        // On an error or a timeout Redis may still have taken the slot record: `pending`
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
        if self.records.hold(&set, number, max, uncounted.clone()) {
            self.start_renewing();
        }
        let store = self.clone();
        Ok(Some(InFlightSlot::renewed(
            move || store.leave(&set, number),
            uncounted,
        )))
    }

    /// Gives a slot record back: at once to the renewer, in the background to Redis.
    fn leave(&self, set: &Arc<str>, number: u64) {
        self.records.forget(set, number);
        self.remove(set.clone(), number);
    }

    /// Removes a slot record from Redis in the background: on the caller's runtime, or,
    /// without one, on the renewer's.
    fn remove(&self, set: Arc<str>, number: u64) {
        let Ok(runtime) = Handle::try_current() else {
            if self.records.orphan(set, number) {
                self.start_renewing();
            }
            return;
        };
        let unsent = Unsent {
            store: self.clone(),
            record: Some((set, number)),
        };
        runtime.spawn(async move {
            let mut unsent = unsent;
            if let Some((set, number)) = unsent.record.clone() {
                unsent.store.zrem(&set, number).await;
            }
            unsent.record = None;
        });
    }

    pub(super) async fn zrem(&self, set: &str, number: u64) {
        let mut zrem = redis::cmd("ZREM");
        zrem.arg(set).arg(self.records.member(number));
        let deadline = Instant::now() + self.deadline;
        let result: Result<i64, StoreError> = self
            .exchange(deadline, |mut conn| async move { conn.query(&zrem).await })
            .await;
        if let Err(error) = result {
            observe::slot_record_failed(&error);
        }
    }
}
