//! The registry of a store's live in-flight slot records, shared by its clones, its slots
//! and its renewer: which slot records to renew (by record set, with the bound of its latest
//! acquire), which to remove for slots dropped outside a runtime, and what each
//! renewal found (added back or lost).
//!
//! A slot record is named by the store's random id and a number never reused, so a `ZREM`
//! of a slot record that was never taken can remove nobody else's. Every step leaves the
//! bookkeeping whole, so a panic elsewhere does not stop it serving.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

/// A store's live slot records, shared by its clones, its slots and its renewer.
pub(super) struct SlotRecords {
    pub(super) ttl: Duration,
    /// Sets this store's record ids apart from every other store's.
    id: u64,
    pub(super) next: AtomicU64,
    live: Mutex<Live>,
    /// Wakes the renewer for slot records to remove (see `Live::orphans`).
    pub(super) wake: Notify,
    /// Slot records found expired on renewal and added back.
    pub(super) readded: AtomicU64,
    /// Slot records found expired on renewal with no room left to add them back.
    pub(super) lost: AtomicU64,
}

#[derive(Default)]
pub(super) struct Live {
    /// Per record set (a Redis key): the bound of its latest acquire and this
    /// store's slot records in it.
    by_key: HashMap<Arc<str>, Held>,
    /// Slot records to remove that no runtime was there to remove (a slot dropped outside
    /// one, or while its runtime shut down): the renewer removes them.
    orphans: Vec<(Arc<str>, u64)>,
    /// Whether a renewer thread runs.
    pub(super) renewing: bool,
}

struct Held {
    bound: u32,
    records: Vec<SlotRecord>,
}

struct SlotRecord {
    number: u64,
    /// Shared with the slot: its request ran uncounted.
    uncounted: Arc<AtomicBool>,
    /// Counted lost already (a slot record is counted once, however many rounds find it
    /// so).
    lost: bool,
}

/// One key's slot records to renew: its record set, its bound and the record numbers.
pub(super) type Due = (Arc<str>, u32, Vec<u64>);
/// One renewal call's slot records.
pub(super) type Batch = Vec<Due>;

impl SlotRecords {
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

    pub(super) fn ttl_ms(&self) -> u64 {
        u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    pub(super) fn member(&self, number: u64) -> String {
        format!("{:016x}-{number:x}", self.id)
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Live> {
        // Plain bookkeeping that every step leaves whole: keep serving after a panic.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a slot record taken; says whether a renewer must be started.
    pub(super) fn hold(
        &self,
        set: &Arc<str>,
        number: u64,
        bound: u32,
        uncounted: Arc<AtomicBool>,
    ) -> bool {
        let mut live = self.lock();
        let held = live.by_key.entry(set.clone()).or_insert_with(|| Held {
            bound,
            records: Vec::new(),
        });
        held.bound = bound;
        held.records.push(SlotRecord {
            number,
            uncounted,
            lost: false,
        });
        !std::mem::replace(&mut live.renewing, true)
    }

    /// Forgets a slot record given back: it is renewed no more.
    pub(super) fn forget(&self, set: &str, number: u64) {
        let mut live = self.lock();
        if let Some(held) = live.by_key.get_mut(set) {
            held.records.retain(|record| record.number != number);
            if held.records.is_empty() {
                live.by_key.remove(set);
            }
        }
    }

    /// Hands a slot record to remove to the renewer; says whether one must be started.
    pub(super) fn orphan(&self, set: Arc<str>, number: u64) -> bool {
        let start = {
            let mut live = self.lock();
            live.orphans.push((set, number));
            !std::mem::replace(&mut live.renewing, true)
        };
        self.wake.notify_one();
        start
    }

    pub(super) fn take_orphans(&self) -> Vec<(Arc<str>, u64)> {
        std::mem::take(&mut self.lock().orphans)
    }

    /// The slot records to renew now, or `None` (and the renewer ends) when there is
    /// nothing left to do.
    pub(super) fn due(&self) -> Option<Vec<Due>> {
        let mut live = self.lock();
        if live.by_key.is_empty() && live.orphans.is_empty() {
            live.renewing = false;
            return None;
        }
        Some(
            live.by_key
                .iter()
                .map(|(set, held)| {
                    let numbers = held.records.iter().map(|record| record.number).collect();
                    (set.clone(), held.bound, numbers)
                })
                .collect(),
        )
    }

    /// Applies one renewal call's answer (`statuses`: one byte per slot record of `batch`,
    /// see `renew.lua`), and returns the slot records added back that were given back
    /// meanwhile: their `ZREM` may have run before the renewal, which brought them
    /// back, so they must be removed again.
    pub(super) fn settle(
        &self,
        batch: &Batch,
        statuses: &[u8],
    ) -> (Vec<(Arc<str>, u64)>, u64, u64) {
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
                let record = held
                    .as_mut()
                    .and_then(|h| h.records.iter_mut().find(|l| l.number == number));
                match (code, record) {
                    (b'2', None) => again.push((set.clone(), number)),
                    (b'2', Some(record)) => {
                        record.uncounted.store(true, Relaxed);
                        record.lost = false;
                        readded += 1;
                    }
                    (b'0', Some(record)) => {
                        record.uncounted.store(true, Relaxed);
                        if !std::mem::replace(&mut record.lost, true) {
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
