//! The receipts a shard has given back by (a refund by receipt, a settle), so that
//! each gives back once: a decision settled twice, or a refund retried, finds its
//! receipt here and gives nothing more.
//!
//! **Bounded.** A receipt is remembered only while its charge still counts (until its
//! reset instant: after that the store gives nothing back for it anyway), at most
//! [`PER_KEY`] per (limit name, key), and for at most as many keys as the shard holds
//! states. Past a bound, the receipt that stops counting soonest (of a key; or a whole
//! key, of the shard) is forgotten: a copy of it used again while its charge still
//! counts gives back once more. On the memory store a give-back is never retried by
//! the library (a call answers at once, it cannot time out): only a caller that keeps
//! a decision and settles it again after as many later settles of the same key reaches
//! past the bound.

use foldhash::fast::RandomState;
use hashbrown::HashMap;

use crate::Key;
use crate::decision::Receipt;

/// The most receipts one key remembers at once.
const PER_KEY: usize = 16;

/// One key's receipts given back, still counting: (nonce, counts until) of each.
type Given = Vec<(u64, u64)>;

/// A shard's receipts given back, per (limit name, key).
pub(super) struct GivenBack {
    keys: HashMap<(u32, Key), Given, RandomState>,
    /// The most keys remembered.
    bound: usize,
}

impl GivenBack {
    pub(super) fn new(bound: usize, hasher: RandomState) -> Self {
        Self {
            keys: HashMap::with_hasher(hasher),
            bound: bound.max(1),
        }
    }

    /// Whether `receipt` of `key` under the limit name numbered `name` may give back
    /// at `now`: it has not given back before. Records that it now does, until
    /// `until` (see [`Receipt::counts_until`]).
    pub(super) fn first_use(
        &mut self,
        (name, key): (u32, &Key),
        receipt: &Receipt,
        until: u64,
        now: u64,
    ) -> bool {
        let nonce = receipt.nonce();
        if until <= now {
            // Its charge counts no more: the store gives nothing back for it, whether
            // or not it did before, so there is nothing to remember.
            return true;
        }
        if !self.keys.contains_key(&(name, *key)) && self.keys.len() >= self.bound {
            self.sweep(now);
            if self.keys.len() >= self.bound
                && let Some(victim) = self.keys.keys().next().copied()
            {
                self.keys.remove(&victim);
            }
        }
        let given = self.keys.entry((name, *key)).or_default();
        if given.iter().any(|r| r.0 == nonce) {
            return false;
        }
        if given.len() >= PER_KEY {
            given.retain(|r| r.1 > now);
        }
        if given.len() >= PER_KEY
            && let Some(soonest) = (0..given.len()).min_by_key(|&i| given[i].1)
        {
            given.swap_remove(soonest);
        }
        given.push((nonce, until));
        true
    }

    /// Drops every receipt whose charge counts no more at `now`, and every key left
    /// with none.
    pub(super) fn sweep(&mut self, now: u64) {
        self.keys.retain(|_, given| {
            given.retain(|r| r.1 > now);
            !given.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::GivenBack;
    use crate::Key;
    use crate::decision::Receipt;

    fn receipt(at: u64, until: u64) -> Receipt {
        Receipt::new(at, until, 1).expect("a charge")
    }

    #[test]
    fn a_receipt_gives_back_once() {
        let mut given = GivenBack::new(8, foldhash::fast::RandomState::default());
        let key = Key::from("alice");
        let first = receipt(10, 100);
        assert!(given.first_use((0, &key), &first, 100, 20));
        assert!(!given.first_use((0, &key), &first, 100, 21));
        // Another charge decided at the same instant is another receipt.
        assert!(given.first_use((0, &key), &receipt(10, 100), 100, 21));
        // Once the charge counts no more, nothing is remembered of it.
        given.sweep(100);
        assert!(given.keys.is_empty());
    }

    #[test]
    fn the_bounds_hold() {
        let mut given = GivenBack::new(2, foldhash::fast::RandomState::default());
        for k in 0..10_u64 {
            for _ in 0..200 {
                assert!(given.first_use((0, &Key::from(k)), &receipt(10, 1_000), 1_000, 20));
            }
        }
        assert!(given.keys.len() <= 2);
        assert!(given.keys.values().all(|g| g.len() <= super::PER_KEY));
    }
}
