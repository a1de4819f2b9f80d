//! Plain decisions where a lease cannot help: a key whose leases would serve nothing
//! but the request that charges them (a quiet key, a fluid key under its rate, a key
//! near its limit) is decided by the backing store's own call, as without leases, and
//! its answer returned as the store made it. Leasing resumes when the answers show that
//! a larger slice would have served a request after all.
//!
//! A key *passes* while its next slice would be its cost, or after two leases in a row
//! ended having served nothing here. Each plain decision is remembered (a [`Shadow`]),
//! unless no later request could use it (see [`needs_record`](LeasedStore::needs_record));
//! a request that a slice one cost larger, charged by the previous decision, would have
//! served (its units still counted by the store's rule for leases) is a *hit*. Leasing
//! resumes with the request that makes `2^strikes` hits in a row (it charges the
//! key's next slice), where `strikes` counts the times in a row
//! leasing resumed and then served nothing (at most [`MAX_STRIKES`]): a key on the edge
//! does not flap between the two. A new key starts passing with adaptive slices (its
//! first hit resumes, so a hot key's slices grow as before: 1, 2, 4, …); with fixed
//! slices it starts leasing.
//!
//! What a plain decision records, under the key's shard lock after the answer: what
//! the store said is left (sizing), a denial to repeat (as a lease's charge does), and
//! the shadow. Nothing is recorded across an operator's call that dropped entries of
//! the shard meanwhile: the answer may predate a reset or a block.

use std::sync::atomic::Ordering;

use super::returns::Release;
use super::sizing::resumed;
use super::slice::Shadow;
use super::table::{Entry, TableKey, lock};
use super::{LeasedStore, SliceSizing};
use crate::store::denial::Denial;
use crate::store::{Charge, Store};
use crate::{Decision, StoreError};

/// The most strikes a key counts: at most `2^6 = 64` hits in a row resume leasing.
const MAX_STRIKES: u32 = 6;

/// Leases in a row that served nothing before a key passes (whatever its slice).
pub(super) const IDLE_LEASES: u32 = 2;

/// What the lease table says about a charge before any store call.
pub(super) enum Look {
    /// Decided here: from a lease, or a denial repeated.
    Decided(Decision),
    /// A plain store call (the key passes, or is new).
    Pass(Seen),
    /// Through the lease table ([`decide_leased`](LeasedStore::decide_leased)).
    Lease,
}

/// What a plain decision's request saw of its key before the call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    /// The local instant it looked: no later than the call is sent, so as a call's
    /// `sent` it is on the safe side (a denial repeated until no later, a shadow's
    /// units counted as no younger), and one clock reading serves both.
    pub(super) at: u64,
    /// Whether a larger slice charged by the key's previous plain decision would have
    /// served it ([`Entry::hit`]).
    pub(super) hit: bool,
    /// The key had an entry, passing with no hit counted: an answer whose charge can
    /// never be hit need not be recorded ([`needs_record`](LeasedStore::needs_record)).
    pub(super) settled: bool,
    /// The shard's count of operators' calls ([`Shard::epoch`](super::table::Shard)).
    pub(super) epoch: u64,
}

impl<S: Store> LeasedStore<S> {
    /// What to do with one charge of cost ≥ 1 on a leasable limit, from the table
    /// alone. Only `Decided` changes it (a unit spent): otherwise the table is left as
    /// it was (only the clock's floor moves), so a call made instead does nothing until
    /// it is polled, and one dropped unpolled has taken nothing.
    pub(super) fn look(&self, charge: &Charge<'_>) -> Look {
        let table_key = TableKey::of(charge);
        // The clock as it reads: only a lease needs the floor (`now`), which every
        // thread's reading moves, and nothing a plain decision records is spent.
        let raw = self.inner.clock.now_micros();
        let mut shard = lock(self.shard(&table_key));
        let epoch = shard.epoch;
        let Some(entry) = shard.entries.get_mut(&table_key) else {
            return if self.inner.sizing == SliceSizing::Adaptive {
                Look::Pass(Seen {
                    at: raw,
                    hit: false,
                    settled: false,
                    epoch,
                })
            } else {
                Look::Lease
            };
        };
        let now = if entry.lease.is_some() {
            self.floor(raw)
        } else {
            raw
        };
        match entry.decide_locally(charge, now) {
            Ok(decision) => Look::Decided(decision),
            Err(None) if entry.passing && entry.refill.is_none() => {
                let hit = entry.hit(charge, now, self.inner.max_lease_us);
                if hit && entry.resumes() {
                    // This request charges the key's next slice (`step` resumes).
                    return Look::Lease;
                }
                Look::Pass(Seen {
                    at: now,
                    hit,
                    settled: !hit && entry.hits == 0,
                    epoch,
                })
            }
            Err(_) => Look::Lease,
        }
    }

    /// A plain decision of `charges` (one charge): the backing store's own call and
    /// answer, recorded in the key's entry after.
    pub(super) async fn pass(
        &self,
        charges: &[Charge<'_>],
        seen: Seen,
    ) -> Result<Vec<Decision>, StoreError> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let decisions = self.inner.store.decide(charges).await?;
        if let ([charge], Some(decision)) = (charges, decisions.first())
            && self.needs_record(charge, decision, seen)
        {
            self.after_pass(charge, decision, seen).await;
        }
        Ok(decisions)
    }

    /// [`pass`](Self::pass) through the store's `decide_one`.
    pub(super) async fn pass_one(
        &self,
        charge: Charge<'_>,
        seen: Seen,
    ) -> Result<Decision, StoreError> {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let decision = self.inner.store.decide_one(charge).await?;
        if self.needs_record(&charge, &decision, seen) {
            self.after_pass(&charge, &decision, seen).await;
        }
        Ok(decision)
    }

    /// Whether a plain decision must be recorded. Not when it would change nothing
    /// that matters: the key's entry passes with no hit counted (so no run of hits to
    /// break), the request was admitted (no denial to repeat), and its charge can no
    /// longer be hit by any request (a GCRA key under its rate: its debt is repaid
    /// before the answer is back). Its entry keeps the older shadow, as dead, and what
    /// was left then, which only caps a slice the store still decides whole. This
    /// spares the common plain decision its second lock.
    fn needs_record(&self, charge: &Charge<'_>, decision: &Decision, seen: Seen) -> bool {
        let Some(receipt) = decision
            .receipt
            .filter(|_| seen.settled && decision.allowed)
        else {
            return true;
        };
        let now = self.inner.clock.now_micros();
        let shadow = Shadow {
            receipt,
            sent: seen.at,
        };
        !shadow.dead(charge.limit.params(), now, self.inner.max_lease_us)
    }

    /// Records a plain decision (sent no earlier than `seen.at`), and gives back the
    /// lease of an entry evicted to make room for the key.
    pub(super) async fn after_pass(&self, charge: &Charge<'_>, decision: &Decision, seen: Seen) {
        if let Some(release) = self.record_pass(charge, decision, seen) {
            // Boxed: the rare path does not size every plain decision's future.
            let _ = Box::pin(self.give_back(release, self.now())).await;
        }
    }

    /// Records a plain decision in the key's entry (made if the key has none): what is
    /// left, a denial, the shadow, and whether leasing resumes. Returns the lease of an
    /// entry evicted to make room.
    fn record_pass(&self, charge: &Charge<'_>, decision: &Decision, seen: Seen) -> Option<Release> {
        let table_key = TableKey::of(charge);
        let mut guard = lock(self.shard(&table_key));
        if guard.epoch != seen.epoch {
            return None;
        }
        // One lookup on the common path: the key has an entry.
        if let Some(entry) = guard.entries.get_mut(&table_key) {
            self.record_in(entry, charge, decision, seen);
            return None;
        }
        let evicted = self.make_room(&mut guard);
        guard.tick += 1;
        let mut entry = Entry::new(charge.limit.clone(), guard.tick, true);
        self.record_in(&mut entry, charge, decision, seen);
        guard.entries.insert(table_key, entry);
        evicted
    }

    /// [`record_pass`](Self::record_pass) into the key's entry.
    fn record_in(&self, entry: &mut Entry, charge: &Charge<'_>, decision: &Decision, seen: Seen) {
        let sent = seen.at;
        entry.left = Some(decision.remaining);
        if let Some(denial) = Denial::of(decision, charge, sent, self.inner.max_lease_us) {
            entry.denied = Some(denial);
        }
        if !entry.passing {
            // Leasing resumed while this call was on its way.
            return;
        }
        entry.hits = if seen.hit { entry.hits + 1 } else { 0 };
        entry.last = decision.receipt.map(|receipt| Shadow { receipt, sent });
    }

    /// Leasing resumes for `entry` (a larger slice would have served its last `hits`
    /// requests of `charge`'s cost, and this one), with the slice a lease used up by
    /// them would have grown to; unless even that slice would be the cost alone.
    pub(super) fn resume(&self, entry: &mut Entry, charge: &Charge<'_>) {
        let params = charge.limit.params();
        let cap = self.cap(params.capacity);
        let slice = resumed(entry.slice, charge.cost, params, cap);
        let before = std::mem::replace(&mut entry.slice, slice);
        if self.next_slice(entry, charge.cost, cap) <= charge.cost {
            entry.slice = before;
            return;
        }
        entry.passing = false;
        entry.hits = 0;
        entry.last = None;
        entry.idle_leases = 0;
        entry.served = false;
    }
}

impl Entry {
    /// Whether a larger slice charged by the key's last plain decision would have
    /// served `charge` at local `now` (a hit).
    pub(super) fn hit(&self, charge: &Charge<'_>, now: u64, max_lease_us: u64) -> bool {
        self.last.is_some_and(|last| {
            last.would_serve(charge.limit.params(), now, charge.cost, max_lease_us)
        })
    }

    /// Whether one hit more makes `2^strikes` in a row: leasing resumes with it.
    pub(super) fn resumes(&self) -> bool {
        self.hits + 1 >= 1 << self.strikes
    }

    /// The key passes from now: a lease would leave no unit over for another request,
    /// or its leases served nothing. A strike more if none served since leasing last
    /// resumed.
    pub(super) fn begin_passing(&mut self) {
        if self.passing {
            return;
        }
        self.passing = true;
        self.strikes = if self.served {
            0
        } else {
            (self.strikes + 1).min(MAX_STRIKES)
        };
        self.hits = 0;
        self.last = None;
        self.idle_leases = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::store::{Charge, LeasedStore, Store};
    use crate::{Algorithm, Decision, Key, Limit, MemoryStore, Quota};

    const BASE: Duration = Duration::from_secs(1_700_000_000);

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    }

    /// A leased store and a plain one, each over its own memory store, on one clock.
    fn twins() -> (ManualClock, LeasedStore<MemoryStore>, MemoryStore) {
        let clock = ManualClock::new(BASE);
        let leased = LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
            .clock(clock.clone())
            .build();
        (clock.clone(), leased, MemoryStore::with_clock(clock))
    }

    fn decide(store: &impl Store, limit: &Limit, cost: u64) -> Decision {
        let key = Key::from("k");
        let charges = [Charge {
            limit,
            key: &key,
            cost,
        }];
        let mut decisions = runtime().block_on(store.decide(&charges)).expect("decided");
        decisions.remove(0)
    }

    #[test]
    fn a_key_under_its_rate_gets_the_plain_stores_answers_one_call_each() {
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::SlidingWindowCounters { buckets: 10 },
            Algorithm::TokenBucket,
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
        ] {
            let (clock, leased, plain) = twins();
            // 10/s: one request per 300 ms is under the rate, and past any lease's end
            // (250 ms), so no larger slice would serve the next request.
            let limit = Limit::new("api", Quota::per_second(10))
                .expect("a limit")
                .algorithm(algorithm);
            for i in 1..=40_u64 {
                clock.set(BASE + Duration::from_millis(300 * i));
                let cost = 1 + i % 3;
                let with = decide(&leased, &limit, cost);
                let without = decide(&plain, &limit, cost);
                assert_eq!(with, without, "{algorithm}, request {i}");
                // The receipt too (`==` on decisions leaves it out): the store's own.
                assert_eq!(
                    with.receipt(),
                    without.receipt(),
                    "{algorithm}, request {i}"
                );
            }
            assert_eq!(leased.store_calls(), 40, "{algorithm}");
            assert_eq!(leased.held(), 0, "{algorithm}");
        }
    }

    #[test]
    fn a_denial_while_passing_is_repeated_without_a_call() {
        let (clock, leased, _) = twins();
        // A burst of 2, and slices of at most 1 (2 / (4 × 4 processes)): always passing.
        let limit = Limit::new("api", Quota::per_minute(2))
            .expect("a limit")
            .algorithm(Algorithm::Gcra);
        clock.set(BASE + Duration::from_secs(1));
        assert!(decide(&leased, &limit, 1).allowed);
        assert!(decide(&leased, &limit, 1).allowed);
        // Two more at the same instant: the first asks, the second is repeated here.
        assert!(!decide(&leased, &limit, 1).allowed);
        assert_eq!(leased.store_calls(), 3);
        let again = decide(&leased, &limit, 1);
        assert!(!again.allowed);
        assert!(again.retry_after.is_some());
        assert_eq!(leased.store_calls(), 3);
    }

    #[test]
    fn leasing_resumes_when_traffic_rises_and_passes_again_when_it_falls() {
        let (clock, leased, _) = twins();
        let limit = Limit::new("api", Quota::per_minute(6_000))
            .expect("a limit")
            .algorithm(Algorithm::FixedWindow);
        let mut at = BASE;
        // Quiet: one request per 300 ms, each a plain call.
        for _ in 0..10 {
            at += Duration::from_millis(300);
            clock.set(at);
            assert!(decide(&leased, &limit, 1).allowed);
        }
        assert_eq!((leased.store_calls(), leased.held()), (10, 0));
        // Hot: one request per millisecond. The second finds the first's charge still
        // in its window and charges a slice; slices double to the cap (6000 / 16).
        for _ in 0..200 {
            at += Duration::from_millis(1);
            clock.set(at);
            assert!(decide(&leased, &limit, 1).allowed);
        }
        let hot = leased.store_calls() - 10;
        assert!(hot < 20, "{hot} calls for 200 hot decisions");
        // Quiet again. The first request finds the last hot lease expired: its unused
        // units go back (a call) and it charges a slice of what that lease served
        // (10, a call); the second finds that one expired with one unit spent: its
        // units go back (a call) and the key passes (a plain call); then one plain
        // call per request.
        let before = leased.store_calls();
        for _ in 0..10 {
            at += Duration::from_millis(300);
            clock.set(at);
            assert!(decide(&leased, &limit, 1).allowed);
        }
        assert_eq!(leased.held(), 0);
        assert_eq!(leased.store_calls() - before, 2 + 2 + 8);
    }

    #[test]
    fn a_key_whose_leases_serve_nothing_needs_more_hits_each_time_to_lease_again() {
        let (clock, leased, _) = twins();
        // GCRA 10/s: a charge's debt lasts 100 ms a unit; a burst of 40, so slices of
        // up to 2 (40 / (4 × 4 processes)).
        let quota = Quota::per_second(10).with_burst(40).expect("a burst");
        let limit = Limit::new("api", quota)
            .expect("a limit")
            .algorithm(Algorithm::Gcra);
        let mut at = BASE;
        let mut step = |ms: u64| {
            at += Duration::from_millis(ms);
            clock.set(at);
            assert!(decide(&leased, &limit, 1).allowed);
            (leased.store_calls(), leased.held())
        };
        assert_eq!(step(0), (1, 0), "a new key: a plain call");
        // 10 ms on, within the first charge's debt: a slice of 2 would have served it,
        // so this request charges one (1 spent, 1 held).
        assert_eq!(step(10), (2, 1), "the first hit resumes leasing");
        // 500 ms on the lease's unit has been repaid: it served nothing. The key passes
        // again, one strike: two hits in a row now resume.
        assert_eq!(step(500), (3, 0));
        assert_eq!(step(10), (4, 0), "one hit: still passing");
        assert_eq!(step(10), (5, 1), "the second hit in a row resumes");
        assert_eq!(step(500), (6, 0), "served nothing again: two strikes");
        for calls in 7..=9 {
            assert_eq!(step(10), (calls, 0), "hits 1 to 3 of 4");
        }
        assert_eq!(step(10), (10, 1), "the fourth hit in a row resumes");
        // This lease serves a request, so the key leases on when it ends...
        assert_eq!(step(1), (10, 0), "decided from the lease");
        assert_eq!(step(500), (11, 1), "a slice charged at once");
        // ...until a lease serves nothing: passing again, with no strike.
        assert_eq!(step(500), (12, 0));
        assert_eq!(step(10), (13, 1), "one hit resumes again");
    }
}
