//! The blocks a `Fallback` knows of, enforced by this process while the insurance
//! store serves: a caller the primary blocked (an operator's block, a tripped
//! penalty box) is not handed a fresh quota by the insurance store when the primary
//! fails. Kept by (limit name, key) — a block is the key's under every quota (a
//! caller's plan), as one store keeps it — by the one denial rule (`store/denial.rs`),
//! at most [`MAX_SEEN`] keys (the block that ends first leaves first), each until its
//! block ends, on this process's monotonic clock.
//!
//! On recovery each block still in force is re-asserted on a primary that came back
//! without it (restarted empty, or flushed while it was down); so is a box the
//! insurance store tripped while it served.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::store::Charge;
use crate::store::denial::{Asked, Denial, answer_batch};
use crate::{Decision, Key, Limit};

/// The most blocked keys a `Fallback` remembers.
pub(super) const MAX_SEEN: usize = 10_000;

type Slot = (&'static str, Key);

/// Blocks seen on the stores' answers.
pub(super) struct SeenBlocks {
    /// µs are counted from here.
    epoch: Instant,
    /// By (limit name, key): whatever quota the block was seen under, it holds under
    /// every other.
    known: Mutex<HashMap<Slot, Known>>,
    /// Whether `known` holds any: the one load a primary's answer pays while none.
    any: AtomicBool,
}

/// A block this process knows of, to enforce and to re-assert on the primary.
pub(super) struct Known {
    pub(super) limit: Limit,
    pub(super) until: Instant,
    /// The store's answer, repeated (its waits shortened) while the block holds.
    denial: Denial,
}

impl std::fmt::Debug for SeenBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeenBlocks")
            .field("keys", &self.known().len())
            .finish_non_exhaustive()
    }
}

impl Default for SeenBlocks {
    fn default() -> Self {
        Self {
            epoch: Instant::now(),
            known: Mutex::default(),
            any: AtomicBool::new(false),
        }
    }
}

impl SeenBlocks {
    /// The local instant now, in µs: pass it to [`note`](Self::note) as the instant a
    /// call to the primary was sent.
    pub(super) fn now(&self) -> u64 {
        crate::time::micros(self.epoch.elapsed())
    }

    /// Remembers every block among the primary's `decisions` for `charges`, measured
    /// from `sent` (µs, [`now`](Self::now) when the call was sent).
    /// A key the primary answers unblocked is forgotten: the primary is the judge
    /// while it serves (another process may have reset the key).
    pub(super) fn note(&self, charges: &[Charge<'_>], decisions: &[Decision], sent: u64) {
        for (charge, decision) in charges.iter().zip(decisions) {
            if decision.blocked_for.is_some() {
                self.know(charge, decision, sent);
            } else if self.any.load(Ordering::Acquire) {
                self.known().remove(&(charge.limit.name(), *charge.key));
            }
        }
    }

    /// Remembers every block among the insurance store's `decisions` (a box it
    /// tripped), to enforce and re-assert on the primary once it is back. An
    /// unblocked answer forgets nothing: the insurance is asked only for keys no
    /// known block denies.
    pub(super) fn note_blocks(&self, charges: &[Charge<'_>], decisions: &[Decision], sent: u64) {
        for (charge, decision) in charges.iter().zip(decisions) {
            if decision.blocked_for.is_some() {
                self.know(charge, decision, sent);
            }
        }
    }

    fn known(&self) -> MutexGuard<'_, HashMap<Slot, Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists `decision`'s block of `charge`'s key, sent at `sent`.
    fn know(&self, charge: &Charge<'_>, decision: &Decision, sent: u64) {
        // Trusted until the block ends: at most a century (`Penalty::MAX_DENIAL`).
        let trust = crate::time::micros(crate::Penalty::MAX_DENIAL);
        let Some(denial) = Denial::of(decision, charge, sent, trust) else {
            return;
        };
        let left = decision.blocked_for.unwrap_or_default();
        let until = self
            .epoch
            .checked_add(Duration::from_micros(sent))
            .and_then(|at| at.checked_add(left))
            .unwrap_or_else(|| Instant::now() + crate::Penalty::MAX_DENIAL);
        let mut known = self.known();
        let slot = (charge.limit.name(), *charge.key);
        if known.len() >= MAX_SEEN && !known.contains_key(&slot) {
            // Full: the block that ends first leaves (rare: a scan of the table).
            let now = Instant::now();
            known.retain(|_, block| block.until > now);
            if known.len() >= MAX_SEEN {
                let first = known
                    .iter()
                    .min_by_key(|(_, block)| block.until)
                    .map(|(slot, _)| *slot);
                if let Some(first) = first {
                    known.remove(&first);
                }
            }
        }
        known.insert(
            slot,
            Known {
                limit: charge.limit.clone(),
                until,
                denial,
            },
        );
        self.any.store(true, Ordering::Release);
    }

    /// The blocks still in force, with their keys (ended ones are dropped).
    pub(super) fn in_force(&self) -> Vec<(Key, Limit, Instant)> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let now = Instant::now();
        let mut known = self.known();
        known.retain(|_, block| block.until > now);
        known
            .iter()
            .map(|((_, key), block)| (*key, block.limit.clone(), block.until))
            .collect()
    }

    /// The denial of a batch one of whose keys this process knows blocked (under any
    /// quota), if any: the whole batch is denied, as on one store.
    pub(super) fn check(&self, charges: &[Charge<'_>]) -> Option<Vec<Decision>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let now = self.now();
        let known = self.known();
        let answers = answer_batch(charges, Asked::Another, |charge| {
            let block = known.get(&(charge.limit.name(), *charge.key))?;
            block.denial.answer(charge, now)
        })?;
        for _ in answers.iter().filter(|d| !d.allowed) {
            crate::observe::denial_cache_hit();
        }
        Some(answers)
    }

    /// Forgets `charge`'s key under its limit (after a reset or a block through this
    /// process), under every quota.
    pub(super) fn forget(&self, charge: &Charge<'_>) {
        if self.any.load(Ordering::Acquire) {
            self.known().remove(&(charge.limit.name(), *charge.key));
        }
    }
}
