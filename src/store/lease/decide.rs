//! One request's way through the lease table: decided here (a lease spent, a denial
//! repeated), waiting for the slice another task is charging, charging the key's next
//! slice, charging its own cost alongside, or a plain decision where no lease would
//! help (`pass.rs`).

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::pass::{IDLE_LEASES, Seen};
use super::returns::Release;
use super::sizing::{grow_under_demand, shrunk_after_expiry};
use super::slice::{Lease, Spent};
use super::table::{Entry, Shard, TableKey, lock};
use super::{LeasedStore, SliceSizing};
use crate::decision::Receipt;
use crate::store::{Charge, Store};
use crate::{Decision, Limit, StoreError};

/// What a request does next.
enum Step {
    /// Decided here: from a lease, or a denial repeated.
    Done(Decision),
    /// Wait for the task charging the next slice.
    Wait(Arc<Notify>),
    /// Charge a slice of this many units, as the key's one refilling task.
    Charge(u64, Arc<Notify>),
    /// Charge the request's own cost, leaving the lease to the refilling task.
    Direct,
    /// A plain decision: the key passes (see `pass.rs`).
    Pass(Seen),
}

impl Entry {
    /// Decides `charge` at local `now` from this entry alone: units spent from its
    /// lease, or its denial answered by the one denial rule (`store/denial.rs`: never a
    /// rejection a penalty box must count). Else why the lease cannot serve it
    /// (`None`: there is none), having changed nothing.
    ///
    /// A live lease's units serve before a denial the store gave since (another
    /// request's, made alongside the slice charge or while passing): they were charged
    /// when the store still had them, so spending them is exact, and leaving them
    /// behind a denial repeated at a frozen instant would lose them (found by
    /// `lease_pass::passing_processes_admit_exactly_the_capacity_on_redis`: 27 of 28
    /// returned units admitted again). A block is the exception: after one, nothing.
    pub(super) fn decide_locally(
        &mut self,
        charge: &Charge<'_>,
        now: u64,
    ) -> Result<Decision, Option<Spent>> {
        if let Some(repeated) = self.denied.and_then(|denied| denied.answer(charge, now)) {
            if repeated.blocked_for.is_none()
                && let Ok(decision) = self.spend_lease(charge, now)
            {
                return Ok(decision);
            }
            return Ok(repeated);
        }
        self.spend_lease(charge, now)
    }

    /// Spends `charge` from the lease if it covers it.
    fn spend_lease(&mut self, charge: &Charge<'_>, now: u64) -> Result<Decision, Option<Spent>> {
        let Some(lease) = &mut self.lease else {
            return Err(None);
        };
        let delay = lease.spend(now, charge.cost).map_err(Some)?;
        lease.served = true;
        crate::observe::lease_hit();
        let receipt = lease.issue(charge.cost);
        Ok(Decision {
            delay: Duration::from_micros(delay),
            ..lease_decision(lease, now, charge.limit, receipt)
        })
    }
}

impl<S: Store> LeasedStore<S> {
    /// Decides one charge of cost ≥ 1 on a leasable limit.
    pub(super) async fn decide_leased(&self, charge: &Charge<'_>) -> Result<Decision, StoreError> {
        let table_key = TableKey::of(charge);
        loop {
            let now = self.now();
            let (step, expired, evicted) = self.step(charge, &table_key, now);
            if let Some(lease) = expired {
                let release = Release {
                    limit: charge.limit.clone(),
                    key: *charge.key,
                    lease,
                };
                let _ = self.give_back(release, now).await;
            }
            if let Some(release) = evicted {
                let _ = self.give_back(release, now).await;
            }
            match step {
                Step::Done(decision) => return Ok(decision),
                Step::Wait(refill) => {
                    let mut notified = pin!(refill.notified());
                    // Registered before looking: the refill notifies under the shard's
                    // lock, after clearing itself, so no wake-up is missed.
                    notified.as_mut().enable();
                    if self.refilling(&table_key, &refill) {
                        notified.await;
                    }
                }
                Step::Direct => {
                    let sent = self.now();
                    let decision = self.acquire_one(charge, charge.cost).await?;
                    self.note(charge, &decision, sent, &table_key);
                    return Ok(decision);
                }
                Step::Pass(seen) => {
                    let decision = self.acquire_one(charge, charge.cost).await?;
                    self.after_pass(charge, &decision, seen).await;
                    return Ok(decision);
                }
                Step::Charge(slice, notify) => {
                    let mut refill = Refill {
                        owner: self,
                        table_key: &table_key,
                        notify,
                        done: false,
                    };
                    let decision = self
                        .charge_slice(charge, slice, &table_key, &refill.notify)
                        .await;
                    refill.done = true;
                    refill.finish();
                    return decision;
                }
            }
        }
    }

    /// What a request of `charge` does at local `now`, decided under the key's shard
    /// lock; with the lease that ended (expired, or too short for this cost) and the
    /// evicted entry to return, outside it.
    fn step(
        &self,
        charge: &Charge<'_>,
        table_key: &TableKey,
        now: u64,
    ) -> (Step, Option<Lease>, Option<Release>) {
        let cost = charge.cost;
        let cap = self.cap(charge.limit.params().capacity);
        let mut guard = lock(self.shard(table_key));
        let mut evicted = None;
        if !guard.entries.contains_key(table_key) {
            evicted = self.make_room(&mut guard);
            guard.tick += 1;
            let stamp = guard.tick;
            let passing = self.inner.sizing == SliceSizing::Adaptive;
            guard.entries.insert(
                table_key.clone(),
                Entry::new(charge.limit.clone(), stamp, passing),
            );
        }
        let Shard {
            entries,
            tick,
            epoch,
            ..
        } = &mut *guard;
        let Some(entry) = entries.get_mut(table_key) else {
            unreachable!("inserted above, under the same lock");
        };
        let unserved = match entry.decide_locally(charge, now) {
            Ok(decision) => return (Step::Done(decision), None, evicted),
            Err(unserved) => unserved,
        };
        if entry
            .denied
            .as_ref()
            .is_some_and(|denied| denied.is_over(now))
        {
            entry.denied = None;
        }
        let mut expired = None;
        if let (Some(spent), Some(lease)) = (unserved, &entry.lease) {
            if lease.served {
                entry.served = true;
                entry.idle_leases = 0;
            } else {
                entry.idle_leases += 1;
            }
            match spent {
                Spent::Exhausted => {
                    entry.slice = self.grown_after_use(entry.slice, lease, now, cap);
                    // Too few units left for this cost: the lease ends here and its
                    // units go back to the store, as an expired lease's do. Kept, they
                    // would be dropped with it when the next slice is installed:
                    // charged and never spent (at cost 33 on 100,000/h, 48,390 units).
                    expired = entry.lease.take();
                }
                Spent::Expired => {
                    entry.slice = shrunk_after_expiry(entry.slice, lease);
                    expired = entry.lease.take();
                }
            }
        }
        if let Some(refill) = &entry.refill {
            // Another task is charging the next slice: wait for it if it will leave
            // enough over, then look again; else charge alongside it, as without
            // leases (waiting would queue every request behind one round trip).
            let step = if entry.spare >= cost {
                // As many wait as the slice will leave units for.
                entry.spare -= cost;
                Step::Wait(refill.clone())
            } else {
                grow_under_demand(entry, cap);
                Step::Direct
            };
            return (step, expired, evicted);
        }
        let hit = entry.passing && entry.hit(charge, now, self.inner.max_lease_us);
        if hit && entry.resumes() {
            self.resume(entry, charge);
        }
        let slice = self.next_slice(entry, cost, cap);
        if entry.passing || slice <= cost || entry.idle_leases >= IDLE_LEASES {
            // A lease would leave nothing over for another request, or its leases
            // have served nothing: a plain decision, as without leases.
            entry.begin_passing();
            let seen = Seen {
                at: now,
                hit: hit && entry.passing,
                settled: false,
                epoch: *epoch,
            };
            return (Step::Pass(seen), expired, evicted);
        }
        let notify = Arc::new(Notify::new());
        entry.refill = Some(notify.clone());
        entry.spare = slice - cost;
        entry.lease = None;
        *tick += 1;
        entry.stamp = *tick;
        (Step::Charge(slice, notify), expired, evicted)
    }

    /// Whether `refill` is still charging the entry's next slice.
    fn refilling(&self, table_key: &TableKey, refill: &Arc<Notify>) -> bool {
        lock(self.shard(table_key))
            .entries
            .get(table_key)
            .is_some_and(|entry| entry.refilled_by(refill))
    }
}

/// An admitted decision from `lease` at local `now`, with `receipt` (no delay): what
/// this process knows is left, and the store's reset instant as of the slice charge.
pub(super) fn lease_decision(
    lease: &Lease,
    now: u64,
    limit: &Limit,
    receipt: Option<Receipt>,
) -> Decision {
    let capacity = limit.params().capacity;
    Decision {
        allowed: true,
        capacity,
        remaining: lease.remaining.saturating_add(lease.unused()).min(capacity),
        reset_after: Duration::from_micros(lease.reset_after(now)),
        retry_after: None,
        delay: Duration::ZERO,
        limit: limit.name(),
        quota: limit.quota(),
        blocked_for: None,
        trips: 0,
        receipt,
    }
}

/// The task charging a key's next slice: whatever happens to it (an answer, an error,
/// being cancelled), the key stops waiting on it.
struct Refill<'a, S: Store> {
    owner: &'a LeasedStore<S>,
    table_key: &'a TableKey,
    notify: Arc<Notify>,
    done: bool,
}

impl<S: Store> Refill<'_, S> {
    fn finish(&mut self) {
        let mut shard = lock(self.owner.shard(self.table_key));
        if let Some(entry) = shard.entries.get_mut(self.table_key)
            && entry.refilled_by(&self.notify)
        {
            entry.refill = None;
        }
        // Under the lock: a waiter registers under it too, so none misses this.
        self.notify.notify_waiters();
    }
}

impl<S: Store> Drop for Refill<'_, S> {
    fn drop(&mut self) {
        if !self.done {
            self.finish();
        }
    }
}
