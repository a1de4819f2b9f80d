//! Renewing in-flight slot records while their requests run, in batched rounds on a
//! thread of the store's own.
//!
//! Each store (with its clones) keeps its live slot records by key (`slot records.rs`), and a
//! renewer renews them all every TTL/3 while there are any. It runs on a thread of
//! its own with a small current-thread runtime, so it belongs to the store, not to
//! the runtime of whichever caller came first: a runtime that ends (a test's, a
//! `block_on` in a CLI, a worker pool shut down) takes no renewal with it. The thread
//! ends when the last slot record is given back and starts again with the next; if it ever
//! died otherwise (a panic), the next slot record taken starts another. Requests shorter
//! than TTL/3, the usual case, are never renewed.
//!
//! A round is batched: up to [`LEASES_PER_CALL`] slot records (over many keys) per script
//! call, and the calls sent together (up to [`LEASES_AT_ONCE`] slot records on the wire), so they
//! are pipelined on the store's multiplexed connection: one round trip per batch of
//! calls, not one per key. On a cluster a call names the keys of one hash slot, and
//! redis-rs pipelines each node's calls on that node's connection. A slot record found
//! expired and dropped (its process was paused or cut off longer than the TTL) is
//! added back if its key has room, or else counted lost; either way its slot learns
//! that its request ran uncounted. A lost slot record is tried again each round.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, LazyLock};

use redis::Script;
use redis::cluster_routing::Slot;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::RedisStore;
use super::slot_records::{Batch, Due, SlotRecords};
use crate::{StoreError, StoreErrorKind, observe};

static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/in_flight/renew.lua")));

/// The most slot records one renewal call names: enough that 100 000 running keys take
/// 200 calls, few enough that one call holds Redis for a millisecond or so.
pub(super) const RECORDS_PER_CALL: usize = 500;
/// The most slot records in renewal calls on the wire at once (32 full calls, or on a
/// cluster, where a call names one hash slot's keys, thousands of small ones): they
/// pipeline on the connection(s), and the bound keeps a huge round from queueing
/// megabytes at once.
pub(super) const RECORDS_AT_ONCE: usize = 32 * RECORDS_PER_CALL;

/// Clears the renewer's flag if its thread ends without saying so (a panic), so that
/// the next slot record taken starts another.
struct Renewing(Arc<SlotRecords>);

impl Drop for Renewing {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.lock().renewing = false;
        }
    }
}

impl RedisStore {
    /// Starts the renewer: a thread with a runtime of its own, which ends when no
    /// slot record is left.
    pub(super) fn start_renewing(&self) {
        let store = self.clone();
        let guard = Renewing(self.records.clone());
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
                        store.records.lock().renewing = false;
                        observe::slot_record_failed(&StoreError::new(
                            StoreErrorKind::Unavailable,
                            format!("no runtime for in-flight slot record renewal: {error}"),
                        ));
                    }
                }
            });
        if let Err(error) = started {
            // The next slot record taken tries again; these expire within the TTL.
            self.records.lock().renewing = false;
            observe::slot_record_failed(&StoreError::new(
                StoreErrorKind::Unavailable,
                format!("no thread for in-flight slot record renewal: {error}"),
            ));
        }
    }

    /// Renews every live slot record each TTL/3 until none is left, and removes the slot records
    /// handed to it as soon as they come.
    async fn renew_while_held(self) {
        let every = self.records.ttl / 3;
        let mut next = Instant::now() + every;
        loop {
            loop {
                let orphans = self.records.take_orphans();
                if !orphans.is_empty() {
                    self.remove_all(orphans).await;
                }
                if Instant::now() >= next {
                    break;
                }
                let _ = tokio::time::timeout_at(next, self.records.wake.notified()).await;
            }
            next += every;
            let Some(due) = self.records.due() else {
                return;
            };
            self.renew(due).await;
            // A round longer than TTL/3 (a stalled Redis) is followed by the next at
            // once, not by a burst of the rounds it missed.
            next = next.max(Instant::now());
        }
    }

    async fn remove_all(&self, records: Vec<(Arc<str>, u64)>) {
        let mut calls = JoinSet::new();
        for (set, number) in records {
            let store = self.clone();
            calls.spawn(async move { store.zrem(&set, number).await });
        }
        while calls.join_next().await.is_some() {}
    }

    /// One renewal round over `due`: batched, the calls sent together (see the
    /// module's doc).
    async fn renew(&self, due: Vec<Due>) -> RenewalRound {
        let batches = self.batches(due);
        let at_once = Arc::new(Semaphore::new(RECORDS_AT_ONCE));
        let mut calls = JoinSet::new();
        for batch in batches {
            let store = self.clone();
            let at_once = at_once.clone();
            let records: usize = batch.iter().map(|(_, _, numbers)| numbers.len()).sum();
            let records = u32::try_from(records).unwrap_or(u32::MAX);
            calls.spawn(async move {
                let _permits = at_once.acquire_many_owned(records).await;
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

    /// Splits `due` into calls of at most [`LEASES_PER_CALL`] slot records; on a cluster,
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
            // slot record is renewed about every TTL/3, not up to a round later.
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
                for chunk in numbers.chunks(RECORDS_PER_CALL) {
                    if size + chunk.len() > RECORDS_PER_CALL {
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

    /// One renewal call; returns how many of its slot records were added back and lost.
    async fn renew_batch(self, batch: Batch) -> (u64, u64) {
        let mut invocation = RENEW.prepare_invoke();
        invocation.arg(self.records.ttl_ms());
        for (set, bound, numbers) in &batch {
            invocation.key(&**set).arg(*bound).arg(numbers.len());
            for &number in numbers {
                invocation.arg(self.records.member(number));
            }
        }
        // Renewal is not on any request's path: it may take what a round has, so a
        // big round does not time out behind itself under the request deadline.
        let deadline = Instant::now() + self.deadline.max(self.records.ttl / 3);
        let result: Result<Vec<u8>, StoreError> = self
            .exchange(deadline, |mut conn| async move {
                conn.invoke(&invocation).await
            })
            .await;
        let statuses = match result {
            Ok(statuses) => statuses,
            Err(error) => {
                observe::slot_record_failed(&error);
                return (0, 0);
            }
        };
        let (again, readded, lost) = self.records.settle(&batch, &statuses);
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
            ttl_ms = self.records.ttl_ms(),
            "in-flight records expired while their requests ran (a pause or an outage \
             longer than the TTL): added back where the key had room, else lost; \
             their requests ran uncounted"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = round;
    }

    /// How many in-flight slot records this store's renewal found expired while their
    /// requests still ran, with their keys full by then: those requests run on
    /// uncounted (their slots'
    /// [`ran_uncounted`](crate::store::InFlightSlot::ran_uncounted) says so), beside up to
    /// the bound of others. A slot record expires under a running request when its process
    /// is paused or cut off from Redis longer than the
    /// [`in_flight_ttl`](RedisStore::in_flight_ttl); each is counted once, and tried
    /// again each renewal until it fits or its request ends. Shared by clones; also
    /// the `tollgate_in_flight_leases_lost_total` counter (feature `metrics`) and a
    /// `tracing` warning per renewal round that finds any (feature `tracing`).
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.in_flight_slots_lost(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_slots_lost(&self) -> u64 {
        self.records.lost.load(Relaxed)
    }

    /// How many in-flight slot records this store's renewal found expired while their
    /// requests still ran and added back, their keys having room: those requests ran
    /// uncounted between the expiry and the renewal (see
    /// [`in_flight_slots_lost`](RedisStore::in_flight_slots_lost)). Shared by
    /// clones; also the `tollgate_in_flight_leases_readded_total` counter (feature
    /// `metrics`).
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.in_flight_slots_readded(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_slots_readded(&self) -> u64 {
        self.records.readded.load(Relaxed)
    }
}

/// What one renewal round found.
#[derive(Debug, Default, Clone, Copy)]
struct RenewalRound {
    readded: u64,
    lost: u64,
}
