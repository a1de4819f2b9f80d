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
//! Renewal: each store (with its clones) keeps its live leases by key, and one task
//! renews them every TTL/3, one call per key with leases running, while it has any;
//! the task ends when the last lease is given back and starts again with the next.
//! Requests shorter than TTL/3, the usual case, are never renewed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use deadpool_redis::redis::{self, Script};
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::{RedisStore, keys};
use crate::store::InFlightSlot;
use crate::{Key, Limit, StoreError, observe};

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/acquire.lua")));
static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/renew.lua")));

/// The most leases one renewal call names: Lua's `unpack` returns a bounded number of
/// values (8000 by default), and each lease takes two.
const RENEW_BATCH: usize = 1000;

/// A store's live leases, shared by its clones and its renewal task.
pub(super) struct Leases {
    ttl: Duration,
    /// Sets this store's lease ids apart from every other store's.
    id: u64,
    next: AtomicU64,
    live: Mutex<Live>,
}

#[derive(Default)]
struct Live {
    /// Per lease set (a Redis key): the numbers of this store's leases in it.
    by_key: HashMap<String, Vec<u64>>,
    /// Whether a renewal task runs.
    renewing: bool,
}

impl Leases {
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            id: fastrand::u64(..),
            next: AtomicU64::new(0),
            live: Mutex::default(),
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

    /// Records a lease taken; says whether a renewal task must be started.
    fn hold(&self, set: &str, number: u64) -> bool {
        let mut live = self.lock();
        live.by_key.entry(set.to_owned()).or_default().push(number);
        !std::mem::replace(&mut live.renewing, true)
    }

    /// Forgets a lease given back: it is renewed no more.
    fn forget(&self, set: &str, number: u64) {
        let mut live = self.lock();
        if let Some(numbers) = live.by_key.get_mut(set) {
            numbers.retain(|&n| n != number);
            if numbers.is_empty() {
                live.by_key.remove(set);
            }
        }
    }

    /// The leases to renew now, or `None` (and the task ends) when there are none.
    fn due(&self) -> Option<Vec<(String, Vec<u64>)>> {
        let mut live = self.lock();
        if live.by_key.is_empty() {
            live.renewing = false;
            return None;
        }
        Some(
            live.by_key
                .iter()
                .map(|(set, numbers)| (set.clone(), numbers.clone()))
                .collect(),
        )
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
        let set = keys::in_flight_key(&self.prefix, limit, key);
        let number = self.leases.next.fetch_add(1, Relaxed);
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(&set)
            .arg(self.leases.member(number))
            .arg(max)
            .arg(self.leases.ttl_ms());
        let deadline = Instant::now() + self.deadline;
        // A call that times out after Redis took the lease leaves a lease nobody
        // renews: it expires within the TTL.
        let taken: i64 = self
            .exchange(deadline, |mut conn| async move {
                conn.invoke(&invocation).await
            })
            .await?;
        if taken != 1 {
            return Ok(None);
        }
        if self.leases.hold(&set, number) {
            self.start_renewing();
        }
        let store = self.clone();
        Ok(Some(InFlightSlot::new(move || store.leave(set, number))))
    }

    /// Gives a lease back: at once to the renewal task, in the background to Redis.
    /// Without a runtime (it is shutting down) the lease expires within the TTL.
    fn leave(&self, set: String, number: u64) {
        self.leases.forget(&set, number);
        let Ok(runtime) = Handle::try_current() else {
            return;
        };
        let store = self.clone();
        runtime.spawn(async move {
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(&set).arg(store.leases.member(number));
            let deadline = Instant::now() + store.deadline;
            let result: Result<i64, StoreError> = store
                .exchange(deadline, |mut conn| async move { conn.query(&zrem).await })
                .await;
            if let Err(error) = result {
                observe::lease_failed(&error);
            }
        });
    }

    fn start_renewing(&self) {
        let Ok(runtime) = Handle::try_current() else {
            // Not reached from an async call; if ever, the leases expire by themselves.
            self.leases.lock().renewing = false;
            return;
        };
        let store = self.clone();
        runtime.spawn(async move { store.renew_while_held().await });
    }

    /// Renews every live lease each TTL/3 until none is left. Calls run one after the
    /// other, each with the store's deadline: one per key with requests running.
    async fn renew_while_held(self) {
        let every = self.leases.ttl / 3;
        loop {
            tokio::time::sleep(every).await;
            let Some(due) = self.leases.due() else {
                return;
            };
            for (set, numbers) in due {
                for batch in numbers.chunks(RENEW_BATCH) {
                    let mut invocation = RENEW.prepare_invoke();
                    invocation.key(&set).arg(self.leases.ttl_ms());
                    for &number in batch {
                        invocation.arg(self.leases.member(number));
                    }
                    let deadline = Instant::now() + self.deadline;
                    let result: Result<i64, StoreError> = self
                        .exchange(deadline, |mut conn| async move {
                            conn.invoke(&invocation).await
                        })
                        .await;
                    if let Err(error) = result {
                        observe::lease_failed(&error);
                    }
                }
            }
        }
    }
}
