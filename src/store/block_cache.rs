//! The blocked-key cache: once a remote store denies a key until T, the same process
//! denies it locally until T, without a round trip.
//!
//! A denied key under attack is the hottest key there is; answering it locally keeps
//! the attacker's traffic off Redis. An entry is kept per (policy, key) and answers
//! only requests costing at least the denied cost (cost is monotone for every
//! algorithm: what did not fit at a cost does not fit at a higher one). The deadline
//! is measured from when the request was sent, so the local answer never outlasts
//! the store's. A refund through this process forgets the entry; a refund by another
//! process is seen once the entry expires.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;

use super::{Charge, decision};
use crate::algorithm::{Params, Verdict};
use crate::{Decision, Key};

/// What a denial said, in µs of the store's local clock.
#[derive(Debug, Clone, Copy)]
struct Block {
    /// Denied until then (exclusive).
    until: u64,
    /// Requests of at least this cost are denied.
    min_cost: u64,
    remaining: u64,
    reset_at: u64,
}

type Slot = (&'static str, Params, Key);

/// A bounded map of blocked keys.
pub(crate) struct BlockCache {
    max_keys: usize,
    blocks: Mutex<HashMap<Slot, Block, RandomState>>,
}

impl BlockCache {
    pub(crate) fn new(max_keys: usize) -> Self {
        Self {
            max_keys,
            blocks: Mutex::new(HashMap::with_hasher(RandomState::default())),
        }
    }

    fn slot(charge: &Charge<'_>) -> Slot {
        (charge.policy.name(), *charge.policy.params(), *charge.key)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Slot, Block, RandomState>> {
        self.blocks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The local denial of `charge` at `now`, if its key is blocked for that cost.
    pub(crate) fn check(&self, charge: &Charge<'_>, now: u64) -> Option<Decision> {
        if charge.cost == 0 || charge.cost > charge.policy.params().capacity {
            return None;
        }
        let mut blocks = self.lock();
        let slot = Self::slot(charge);
        let block = *blocks.get(&slot)?;
        if now >= block.until {
            blocks.remove(&slot);
            return None;
        }
        if charge.cost < block.min_cost {
            return None;
        }
        Some(decision(
            charge.policy,
            Verdict {
                allowed: false,
                remaining: block.remaining,
                reset_after_us: block.reset_at.saturating_sub(now),
                retry_after_us: Some(block.until - now),
                delay_us: 0,
                receipt: None,
            },
        ))
    }

    /// Records a denial that the store made for a request sent at `sent`.
    pub(crate) fn record(&self, charge: &Charge<'_>, sent: u64, denied: &Decision) {
        let Some(retry_after) = denied.retry_after else {
            return;
        };
        let retry_us = u64::try_from(retry_after.as_micros()).unwrap_or(u64::MAX);
        let reset_us = u64::try_from(denied.reset_after.as_micros()).unwrap_or(u64::MAX);
        let block = Block {
            until: sent.saturating_add(retry_us),
            min_cost: charge.cost,
            remaining: denied.remaining,
            reset_at: sent.saturating_add(reset_us),
        };
        let mut blocks = self.lock();
        if blocks.len() >= self.max_keys {
            blocks.retain(|_, b| b.until > sent);
            if blocks.len() >= self.max_keys {
                // Full of live blocks: those keys go to the store; memory stays bounded.
                return;
            }
        }
        // The newest denial is the best knowledge of the key.
        blocks.insert(Self::slot(charge), block);
    }

    /// Forgets `charge`'s key (after a refund through this process).
    pub(crate) fn forget(&self, charge: &Charge<'_>) {
        self.lock().remove(&Self::slot(charge));
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }
}
