//! The blocks a `Fallback`'s primary reported to this process, enforced by it while
//! the insurance store serves: a caller the primary blocked (an operator's block, a
//! tripped penalty box) is not handed a fresh quota by the insurance store when the
//! primary fails. Kept by the rule and in the bounded map the Redis denial cache uses
//! (`store/denial.rs`, `store/denial_cache.rs`): per limit, quota and key, at most
//! [`MAX_SEEN`] keys (the oldest leave first), each until its block ends, on this
//! process's monotonic clock.
//!
//! They are also listed with their limit, so that on recovery each block still in
//! force is re-asserted on a primary that came back without it (restarted empty, or
//! flushed while it was down).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::store::Charge;
use crate::store::denial_cache::DenialCache;
use crate::{Decision, Key, Limit};

/// The most blocked keys a `Fallback` remembers.
pub(super) const MAX_SEEN: usize = 10_000;

/// Blocks seen on the primary's answers.
pub(super) struct SeenBlocks {
    cache: DenialCache,
    /// µs are counted from here.
    epoch: Instant,
    /// The same blocks, by (limit name, key), with their limit and end.
    known: Mutex<HashMap<(&'static str, Key), Known>>,
    /// Whether `known` holds any: the one load a primary's answer pays while none.
    any: AtomicBool,
}

/// A block this process knows of, to re-assert on the primary.
pub(super) struct Known {
    pub(super) limit: Limit,
    pub(super) until: Instant,
}

impl std::fmt::Debug for SeenBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeenBlocks")
            .field("keys", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl Default for SeenBlocks {
    fn default() -> Self {
        Self {
            // A block is kept until it ends: at most a century (`Penalty::MAX_DENIAL`).
            cache: DenialCache::new(MAX_SEEN, crate::time::micros(crate::Penalty::MAX_DENIAL)),
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
            if let Some(left) = decision.blocked_for {
                self.cache.record(charge, sent, decision);
                let until = self
                    .epoch
                    .checked_add(Duration::from_micros(sent))
                    .and_then(|at| at.checked_add(left))
                    .unwrap_or_else(|| Instant::now() + crate::Penalty::MAX_DENIAL);
                self.know(charge.limit, charge.key, until);
            } else if self.any.load(Ordering::Acquire) {
                self.known().remove(&(charge.limit.name(), *charge.key));
            }
        }
    }

    fn known(&self) -> MutexGuard<'_, HashMap<(&'static str, Key), Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lists a block of `key` under `limit` until `until`, to re-assert on recovery.
    fn know(&self, limit: &Limit, key: &Key, until: Instant) {
        let mut known = self.known();
        let slot = (limit.name(), *key);
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
                limit: limit.clone(),
                until,
            },
        );
        self.any.store(true, Ordering::Release);
    }

    /// The blocks still in force, with their keys (ended ones are dropped).
    pub(super) fn in_force(&self) -> Vec<(Key, Known)> {
        if !self.any.load(Ordering::Acquire) {
            return Vec::new();
        }
        let now = Instant::now();
        let mut known = self.known();
        known.retain(|_, block| block.until > now);
        known
            .iter()
            .map(|((_, key), block)| {
                (
                    *key,
                    Known {
                        limit: block.limit.clone(),
                        until: block.until,
                    },
                )
            })
            .collect()
    }

    /// The denial of a batch one of whose keys this process saw blocked, if any.
    pub(super) fn check(&self, charges: &[Charge<'_>]) -> Option<Vec<Decision>> {
        self.cache.check(charges, self.now())
    }

    /// Forgets `charge`'s key under its limit (after a reset through this process).
    pub(super) fn forget(&self, charge: &Charge<'_>) {
        self.cache.forget_key(charge);
        if self.any.load(Ordering::Acquire) {
            self.known().remove(&(charge.limit.name(), *charge.key));
        }
    }
}
