//! The receipts a shard's leases have moved (given back into a lease, settled in one),
//! so that each moves its charge once: a decision settled twice, or a refund retried,
//! finds its receipt here and moves nothing more.
//!
//! The backing store keeps such a record for what it moves itself, but a move made in
//! a lease never reaches it: the units given back go into the lease (and to the store
//! only as part of the slice's unused units, by the slice's receipt), an extra is spent
//! from the slice. So the record outlives the lease: a copy of the receipt used again
//! after its lease ended would otherwise reach the store as if fresh, which would take
//! back the same units a second time from the slice's charge.
//!
//! **Bounded.** A receipt is remembered only while its charge may still count (until
//! one period past its reset instant, on the late side of the local clock: after that
//! nothing is given back for it anyway), at most [`MAX_MOVED`] per shard of the lease
//! table. Past the bound the receipt that stops counting soonest is forgotten: a copy
//! of it used again while its charge still counts moves it once more. Only settles and
//! refunds touch the record; a decision from a lease never does.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use crate::decision::Receipt;

/// The most receipts one shard remembers at once (32 shards: 32,768 in all, about
/// half a megabyte when full).
const MAX_MOVED: usize = 1024;

/// A shard's moved receipts: nonce → the local instant after which its charge counts
/// no more.
#[derive(Debug, Default)]
pub(super) struct Moved {
    until: HashMap<u64, u64, RandomState>,
}

impl Moved {
    /// Whether `receipt` has moved its charge before.
    pub(super) fn contains(&self, receipt: &Receipt) -> bool {
        !self.until.is_empty() && self.until.contains_key(&receipt.nonce())
    }

    /// Records that `receipt` moved its charge at local `now`; its charge counts no
    /// more after local `until`, and is not recorded if it already does not.
    pub(super) fn record(&mut self, receipt: &Receipt, until: u64, now: u64) {
        if until <= now {
            return;
        }
        let nonce = receipt.nonce();
        if self.until.len() >= MAX_MOVED && !self.until.contains_key(&nonce) {
            self.until.retain(|_, counts_until| *counts_until > now);
            if self.until.len() >= MAX_MOVED
                && let Some(soonest) = self
                    .until
                    .iter()
                    .min_by_key(|(_, counts_until)| **counts_until)
                    .map(|(nonce, _)| *nonce)
            {
                self.until.remove(&soonest);
            }
        }
        self.until.insert(nonce, until);
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_MOVED, Moved};
    use crate::decision::Receipt;

    fn receipt() -> Receipt {
        Receipt::new(10, 100, 1).expect("a charge")
    }

    #[test]
    fn a_receipt_is_remembered_while_its_charge_counts() {
        let mut moved = Moved::default();
        let first = receipt();
        assert!(!moved.contains(&first));
        moved.record(&first, 100, 20);
        assert!(moved.contains(&first));
        // Another charge with the same instants is another receipt.
        assert!(!moved.contains(&receipt()));
        // A charge that counts no more is not worth remembering.
        let spent = receipt();
        moved.record(&spent, 100, 100);
        assert!(!moved.contains(&spent));
    }

    #[test]
    fn the_bound_forgets_what_stops_counting_soonest() {
        let mut moved = Moved::default();
        let soonest = receipt();
        moved.record(&soonest, 50, 20);
        let rest: Vec<Receipt> = (0..MAX_MOVED + 10).map(|_| receipt()).collect();
        for (i, r) in (0_u64..).zip(&rest) {
            moved.record(r, 1_000 + i, 20);
        }
        assert_eq!(moved.until.len(), MAX_MOVED);
        assert!(!moved.contains(&soonest));
        assert!(rest[MAX_MOVED + 9..].iter().all(|r| moved.contains(r)));
        // Past their charges' ends, they make room before any live one is dropped.
        moved.record(&receipt(), 5_000, 3_000);
        assert_eq!(moved.until.len(), 1);
    }
}
