//! The blocks a `Fallback`'s primary reported to this process, enforced by it while
//! the insurance store serves: a caller the primary blocked (an operator's block, a
//! tripped penalty box) is not handed a fresh quota by the insurance store when the
//! primary fails. Kept by the rule and in the bounded map the Redis denial cache uses
//! (`store/denial.rs`, `store/denial_cache.rs`): per limit, quota and key, at most
//! [`MAX_SEEN`] keys (the oldest leave first), each until its block ends, on this
//! process's monotonic clock.

use std::time::Instant;

use crate::Decision;
use crate::store::Charge;
use crate::store::denial_cache::DenialCache;

/// The most blocked keys a `Fallback` remembers.
pub(super) const MAX_SEEN: usize = 10_000;

/// Blocks seen on the primary's answers.
pub(super) struct SeenBlocks {
    cache: DenialCache,
    /// µs are counted from here.
    epoch: Instant,
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
    pub(super) fn note(&self, charges: &[Charge<'_>], decisions: &[Decision], sent: u64) {
        for (charge, decision) in charges.iter().zip(decisions) {
            if decision.blocked_for.is_some() {
                self.cache.record(charge, sent, decision);
            }
        }
    }

    /// The denial of a batch one of whose keys this process saw blocked, if any.
    pub(super) fn check(&self, charges: &[Charge<'_>]) -> Option<Vec<Decision>> {
        self.cache.check(charges, self.now())
    }

    /// Forgets `charge`'s key under its limit (after a reset through this process).
    pub(super) fn forget(&self, charge: &Charge<'_>) {
        self.cache.forget_key(charge);
    }
}
