//! Usage carried across a switch, so that a key's admissions across a failover stay
//! within about one store's quota in this process:
//!
//! - **into the outage**: the primary's last decision for each key (its usage,
//!   `capacity − remaining`) is remembered; the first time the insurance store serves
//!   the key in an outage, it is charged that usage (less what time has repaid since,
//!   at the quota's rate), so it starts the key where the primary left it;
//! - **out of it**: what the insurance store admitted for each key is summed, and on
//!   recovery the primary is charged it (one call per key, at most what the insurance
//!   store still counts of it: time repays there too).
//!
//! Both tables are bounded ([`MAX_KEYS`] each): beyond, the oldest usage is forgotten
//! (that key starts the outage afresh) and a new key's admissions are not carried
//! back (counted on the insurance store only).

use std::collections::HashMap;
use std::mem;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use crate::store::Charge;
use crate::{Decision, Key, Limit};

/// The most keys each table holds.
pub(super) const MAX_KEYS: usize = 10_000;

type Slot = (&'static str, Key);

#[derive(Debug, Default)]
pub(super) struct Carried {
    tables: Mutex<Tables>,
}

#[derive(Debug, Default)]
struct Tables {
    /// The primary's last known usage per key, in two generations: when the young one
    /// is full it becomes the old one, and the old one is dropped.
    young: HashMap<Slot, Last>,
    old: HashMap<Slot, Last>,
    /// What the insurance store admitted per key, to charge the primary on recovery.
    served: HashMap<Slot, Served>,
    /// What was charged to the primary per key on recovery: a refund of an insurance
    /// charge that arrives after it gives back there too.
    moved: HashMap<Slot, u64>,
    /// The trips an escalating penalty remembered for each key on the primary's last
    /// answer, and when: a trip on the insurance store counts after them.
    trips: HashMap<Slot, (u32, Instant)>,
}

#[derive(Debug, Clone, Copy)]
struct Last {
    used: u64,
    at: Instant,
    /// The outage in which the insurance store was last seeded with it.
    seeded: u64,
}

#[derive(Debug)]
struct Served {
    limit: Limit,
    admitted: u64,
}

/// A key the insurance store is to be charged before it decides for it.
pub(super) struct Seed {
    /// The index of its charge in the batch.
    pub(super) index: usize,
    /// The primary's usage of it, less what time has repaid since.
    pub(super) used: u64,
}

/// What the insurance store admitted for one key during an outage.
pub(super) struct Admitted {
    pub(super) limit: Limit,
    pub(super) key: Key,
    pub(super) units: u64,
}

impl Carried {
    fn lock(&self) -> MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers the usage the primary reported for each charge.
    pub(super) fn note_primary(&self, charges: &[Charge<'_>], decisions: &[Decision]) {
        let at = Instant::now();
        let mut tables = self.lock();
        for (charge, decision) in charges.iter().zip(decisions) {
            note_trips(&mut tables, charge, decision, at);
            if decision.blocked_for.is_some() {
                // A block says `remaining: 0` whatever the usage: the block itself is
                // carried (`seen_blocks.rs`), the usage before it stays as it was.
                continue;
            }
            let used = decision.capacity.saturating_sub(decision.remaining);
            let slot = (charge.limit.name(), *charge.key);
            if used == 0 {
                tables.young.remove(&slot);
                tables.old.remove(&slot);
                continue;
            }
            if tables.young.len() >= MAX_KEYS && !tables.young.contains_key(&slot) {
                tables.old = mem::take(&mut tables.young);
            }
            let seeded = tables
                .young
                .get(&slot)
                .or_else(|| tables.old.get(&slot))
                .map_or(0, |last| last.seeded);
            tables.young.insert(slot, Last { used, at, seeded });
        }
    }

    /// The trips the primary last reported for `charge`'s key that its penalty still
    /// remembers (counted from when they were reported: never shorter than on the
    /// primary), 0 for none.
    pub(super) fn trips(&self, charge: &Charge<'_>) -> u32 {
        let Some(remember) = charge.limit.penalty_box().map(crate::Penalty::get_remember) else {
            return 0;
        };
        let tables = self.lock();
        match tables.trips.get(&(charge.limit.name(), *charge.key)) {
            Some((trips, at)) if at.elapsed() < remember => *trips,
            _ => 0,
        }
    }

    /// Whether any key of `charges` has trips carried from the primary.
    pub(super) fn any_trips(&self, charges: &[Charge<'_>]) -> bool {
        let tables = self.lock();
        !tables.trips.is_empty()
            && charges
                .iter()
                .any(|c| tables.trips.contains_key(&(c.limit.name(), *c.key)))
    }

    /// Whether a key of `charges` is still to be seeded in `outage` (reads only: a
    /// store call made and dropped unpolled must change nothing).
    pub(super) fn needs_seed(&self, charges: &[Charge<'_>], outage: u64) -> bool {
        let tables = self.lock();
        if tables.young.is_empty() && tables.old.is_empty() {
            return false;
        }
        charges.iter().any(|charge| {
            let slot = (charge.limit.name(), *charge.key);
            tables
                .young
                .get(&slot)
                .or_else(|| tables.old.get(&slot))
                .is_some_and(|last| last.seeded != outage)
        })
    }

    /// The charges of `charges` whose key the insurance store has not yet been seeded
    /// with in `outage`, each with the usage to seed it with (marked seeded by
    /// [`mark_seeded`](Self::mark_seeded), once the seed landed).
    pub(super) fn seeds(&self, charges: &[Charge<'_>], outage: u64) -> Vec<Seed> {
        let mut tables = self.lock();
        if tables.young.is_empty() && tables.old.is_empty() {
            return Vec::new();
        }
        let now = Instant::now();
        let mut seeds = Vec::new();
        for (index, charge) in charges.iter().enumerate() {
            let slot = (charge.limit.name(), *charge.key);
            let Tables { young, old, .. } = &mut *tables;
            let Some(last) = young.get_mut(&slot).or_else(|| old.get_mut(&slot)) else {
                continue;
            };
            if last.seeded == outage {
                continue;
            }
            let used = repaid(
                last.used,
                now.saturating_duration_since(last.at),
                charge.limit,
            );
            if used > 0 {
                seeds.push(Seed { index, used });
            }
        }
        seeds
    }

    /// Marks the keys of `charges` seeded in `outage`.
    pub(super) fn mark_seeded(&self, charges: &[Charge<'_>], outage: u64) {
        let mut tables = self.lock();
        for charge in charges {
            let slot = (charge.limit.name(), *charge.key);
            let Tables { young, old, .. } = &mut *tables;
            if let Some(last) = young.get_mut(&slot).or_else(|| old.get_mut(&slot)) {
                last.seeded = outage;
            }
        }
    }

    /// Adds what the insurance store admitted among `decisions` to its keys' sums.
    pub(super) fn served(&self, charges: &[Charge<'_>], decisions: &[Decision]) {
        let admitted = charges
            .iter()
            .zip(decisions)
            .filter(|(charge, decision)| decision.allowed && charge.cost > 0);
        let mut tables = None;
        for (charge, _) in admitted {
            let tables = tables.get_or_insert_with(|| self.lock());
            add_served(tables, charge, charge.cost);
        }
    }

    /// Adds `units` charged on the insurance store whether or not they fit (a penalty).
    pub(super) fn served_units(&self, charge: &Charge<'_>, units: u64) {
        if units > 0 {
            add_served(&mut self.lock(), charge, units);
        }
    }

    /// Takes every key's admissions, to charge them to the primary.
    pub(super) fn take_served(&self) -> Vec<Admitted> {
        mem::take(&mut self.lock().served)
            .into_iter()
            .map(|((_, key), served)| Admitted {
                limit: served.limit,
                key,
                units: served.admitted,
            })
            .collect()
    }

    /// Puts back admissions the primary could not be charged (it failed again).
    pub(super) fn restore_served(&self, admitted: Vec<Admitted>) {
        let mut tables = self.lock();
        for Admitted { limit, key, units } in admitted {
            let charge = Charge {
                limit: &limit,
                key: &key,
                cost: units,
            };
            add_served(&mut tables, &charge, units);
        }
    }

    /// Records `units` of `key`'s admissions charged to the primary on recovery.
    pub(super) fn moved(&self, limit: &Limit, key: &Key, units: u64) {
        let mut tables = self.lock();
        let slot = (limit.name(), *key);
        if tables.moved.len() >= MAX_KEYS && !tables.moved.contains_key(&slot) {
            // Full: the oldest recoveries' refunds are long in; start afresh (a refund
            // of one of them then gives back on the insurance only: over-denial).
            tables.moved.clear();
        }
        let moved = tables.moved.entry(slot).or_insert(0);
        *moved = moved.saturating_add(units);
    }

    /// A refund of the insurance store's charge (given back there by its receipt): off
    /// its admissions not yet charged to the primary, else off what was charged there
    /// on recovery. Returns the units to give back on the primary too.
    pub(super) fn insurance_refund(&self, charge: &Charge<'_>) -> u64 {
        let slot = (charge.limit.name(), *charge.key);
        let mut tables = self.lock();
        let mut left = charge.cost;
        if let Some(served) = tables.served.get_mut(&slot) {
            let off = served.admitted.min(left);
            served.admitted -= off;
            left -= off;
            if served.admitted == 0 {
                tables.served.remove(&slot);
            }
        }
        if left == 0 {
            return 0;
        }
        let Some(moved) = tables.moved.get_mut(&slot) else {
            return 0;
        };
        let off = (*moved).min(left);
        *moved -= off;
        if *moved == 0 {
            tables.moved.remove(&slot);
        }
        off
    }

    /// Forgets `key` under `limit` (a reset: both stores start it afresh).
    pub(super) fn forget(&self, limit: &Limit, key: &Key) {
        let slot = (limit.name(), *key);
        let mut tables = self.lock();
        tables.young.remove(&slot);
        tables.old.remove(&slot);
        tables.served.remove(&slot);
        tables.moved.remove(&slot);
        tables.trips.remove(&slot);
    }
}

/// Remembers the trips `decision` reports for `charge`'s key (an escalating penalty's).
fn note_trips(tables: &mut Tables, charge: &Charge<'_>, decision: &Decision, at: Instant) {
    let escalates = charge
        .limit
        .penalty_box()
        .is_some_and(|p| !p.get_remember().is_zero());
    if !escalates || !decision.evaluated() {
        return;
    }
    let slot = (charge.limit.name(), *charge.key);
    if decision.trips == 0 {
        tables.trips.remove(&slot);
        return;
    }
    if tables.trips.len() >= MAX_KEYS && !tables.trips.contains_key(&slot) {
        // Full: start afresh (a key's trips then count from the insurance's own).
        tables.trips.clear();
    }
    tables.trips.insert(slot, (decision.trips, at));
}

fn add_served(tables: &mut Tables, charge: &Charge<'_>, units: u64) {
    let slot = (charge.limit.name(), *charge.key);
    if let Some(served) = tables.served.get_mut(&slot) {
        served.admitted = served.admitted.saturating_add(units);
        served.limit = charge.limit.clone();
        return;
    }
    if tables.served.len() >= MAX_KEYS {
        #[cfg(feature = "tracing")]
        tracing::warn!(target: "tollgate", limit = charge.limit.name(), "too many keys served by the insurance store: this one's admissions are not charged to the primary");
        return;
    }
    tables.served.insert(
        slot,
        Served {
            limit: charge.limit.clone(),
            admitted: units,
        },
    );
}

/// `used`, less what `elapsed` repays at `limit`'s rate (its count per period).
fn repaid(used: u64, elapsed: std::time::Duration, limit: &Limit) -> u64 {
    let quota = limit.quota();
    let period = quota.period().as_micros().max(1);
    let repaid = elapsed
        .as_micros()
        .saturating_mul(u128::from(quota.limit()))
        / period;
    u64::try_from(u128::from(used).saturating_sub(repaid)).unwrap_or(0)
}
