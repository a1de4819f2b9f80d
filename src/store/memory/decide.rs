//! The memory store's [`Store`] implementation: every call decided at once, under
//! the key's shard lock, and answered ready (no future, no allocation on the hot
//! path).

use std::sync::{RwLock, RwLockWriteGuard};
use std::time::Duration;

use super::shard::{Hashed, Shard};
use super::{MemoryStore, read, write};
use crate::algorithm::{Refund, Verdict};
use crate::decision::Receipt;
use crate::store::{Charge, InFlightSlot, Store, StoreCall, charged, decision};
use crate::time::micros_up;
use crate::{Algorithm, ConfigError, Decision, Key, Limit};

impl Store for MemoryStore {
    /// Refuses a limit one of whose keys could outgrow a shard's part of
    /// [`max_bytes`](MemoryStore::max_bytes). Nothing is stored for it: a limit's
    /// share of the bounds counts from its first stored state or record in a shard.
    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.check_bytes(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.check_bytes(limit)
    }

    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        StoreCall::ready(Ok(self.decide_all(charges)))
    }

    #[inline]
    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::ready(Ok(self.decide_now(&charge)))
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.refund_now(&charge);
        StoreCall::ready(Ok(()))
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.refund_charge_now(&charge, receipt);
        StoreCall::ready(Ok(()))
    }

    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        StoreCall::ready(Ok(self.settle_now(&charge, receipt)))
    }

    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        StoreCall::ready(Ok(self.inner.in_flight.enter(limit, key, max)))
    }

    fn supports_in_flight(&self) -> bool {
        true
    }

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        StoreCall::ready(Ok(self.peek_now(limit, key)))
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        self.reset_now(limit, key);
        StoreCall::ready(Ok(()))
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        StoreCall::ready(Ok(self.block_now(limit, key, duration)))
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::ready(Ok(self.penalize_now(&charge)))
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        StoreCall::ready(Ok(self.reserve_now(&charge, max_wait)))
    }
}

impl MemoryStore {
    /// One charge: the limiter's hot path (a check calls it directly).
    #[inline]
    pub(crate) fn decide_now(&self, charge: &Charge<'_>) -> Decision {
        let key = self.hashed(charge.key);
        let now = self.now();
        let limit = charge.limit;
        let shard = self.shard(key);
        // The read guard must be gone before `offended` may take the write lock.
        let read_locked = if has_atomic_states(limit) {
            read(shard).evaluate_shared(limit, key, now, charge.cost)
        } else {
            None
        };
        let verdict = match read_locked {
            Some(verdict) => verdict,
            None => write(shard).evaluate(limit, key, now, charge.cost, true),
        };
        if verdict.allowed {
            // Only a rejection can count in a penalty box: the common case skips it.
            return decision(limit, verdict);
        }
        charged(charge, offended(shard, charge, key, now, verdict))
    }

    /// Several charges, all-or-nothing, at one instant.
    pub(crate) fn decide_all(&self, charges: &[Charge<'_>]) -> Vec<Decision> {
        if let [one] = charges {
            return vec![self.decide_now(one)];
        }
        let now = self.now();
        let keys: Vec<Hashed<'_>> = charges.iter().map(|c| self.hashed(c.key)).collect();
        let shard_of: Vec<usize> = keys.iter().map(|&k| self.shard_index(k)).collect();
        // Lock every involved shard in ascending order, so concurrent batches cannot
        // deadlock, and hold them all: nobody sees a half-charged batch.
        let mut order = shard_of.clone();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<RwLockWriteGuard<'_, Shard>> = order
            .iter()
            .map(|&i| write(&self.inner.shards[i].0))
            .collect();
        let mut evaluate = |i: usize, charge: bool| -> Verdict {
            let c = &charges[i];
            let guard = order.binary_search(&shard_of[i]).unwrap_or_default();
            guards[guard].evaluate(c.limit, keys[i], now, c.cost, charge)
        };
        let tentative: Vec<Verdict> = (0..charges.len()).map(|i| evaluate(i, false)).collect();
        let verdicts = if tentative.iter().all(|v| v.allowed) {
            let mut admitted = Vec::with_capacity(charges.len());
            for i in 0..charges.len() {
                let verdict = evaluate(i, true);
                if !verdict.allowed {
                    // Only possible when one batch names the same (limit, key) twice:
                    // each part fits alone, not together. Undo and deny the batch.
                    for j in 0..i {
                        let c = &charges[j];
                        let guard = order.binary_search(&shard_of[j]).unwrap_or_default();
                        guards[guard].refund(c.limit, keys[j], now, c.cost);
                    }
                    let mut denied = tentative;
                    denied[i] = verdict;
                    return charges
                        .iter()
                        .zip(denied)
                        .map(|(c, v)| charged(c, v))
                        .collect();
                }
                admitted.push(verdict);
            }
            admitted
        } else {
            // Each limit that denied counts the rejection in its penalty box.
            tentative
                .into_iter()
                .enumerate()
                .map(|(i, verdict)| {
                    let c = &charges[i];
                    match c.limit.penalty_box() {
                        Some(penalty) if is_offence(c, &verdict) => {
                            let guard = order.binary_search(&shard_of[i]).unwrap_or_default();
                            guards[guard].offend(c.limit, keys[i], now, penalty, verdict)
                        }
                        _ => verdict,
                    }
                })
                .collect()
        };
        charges
            .iter()
            .zip(verdicts)
            .map(|(c, v)| charged(c, v))
            .collect()
    }

    /// The key's state under `limit`, charging nothing (a cost-0 check).
    fn peek_now(&self, limit: &Limit, key: &Key) -> Decision {
        self.decide_now(&Charge {
            limit,
            key,
            cost: 0,
        })
    }

    /// Makes `key` idle under `limit`: state, block and penalty count gone.
    fn reset_now(&self, limit: &Limit, key: &Key) {
        let key = self.hashed(key);
        let now = self.now();
        write(self.shard(key)).reset(limit, key, now);
    }

    /// Blocks `key` under `limit` for `duration` from now (0 lifts the block).
    fn block_now(&self, limit: &Limit, key: &Key, duration: Duration) -> Decision {
        let hashed = self.hashed(key);
        let now = self.now();
        let duration_us = micros_up(duration);
        let trips = write(self.shard(hashed)).block(limit, hashed, now, duration_us);
        if duration_us == 0 {
            return self.peek_now(limit, key);
        }
        // Answered at the instant of the block, as the Redis store answers.
        decision(
            limit,
            Verdict::blocked(duration_us, false).with_trips(trips),
        )
    }

    /// Reserves `charge.cost` within `max_wait` (see [`Store::reserve`]).
    fn reserve_now(&self, charge: &Charge<'_>, max_wait: Duration) -> Decision {
        let key = self.hashed(charge.key);
        let now = self.now();
        let verdict = write(self.shard(key)).reserve(
            charge.limit,
            key,
            now,
            charge.cost,
            micros_up(max_wait),
        );
        decision(charge.limit, verdict)
    }

    /// Charges `charge.cost` whether or not it fits; the key's state afterwards.
    fn penalize_now(&self, charge: &Charge<'_>) -> Decision {
        let key = self.hashed(charge.key);
        let now = self.now();
        let verdict = write(self.shard(key)).penalize(charge.limit, key, now, charge.cost);
        decision(charge.limit, verdict)
    }

    /// Refunds synchronously.
    fn refund_now(&self, charge: &Charge<'_>) {
        let key = self.hashed(charge.key);
        let now = self.now();
        write(self.shard(key)).refund(charge.limit, key, now, charge.cost);
    }

    /// Refunds the charge of `receipt` synchronously.
    fn refund_charge_now(&self, charge: &Charge<'_>, receipt: Receipt) {
        let key = self.hashed(charge.key);
        let now = self.now();
        let what = Refund::Charge {
            amount: charge.cost,
            receipt,
        };
        let mut shard = write(self.shard(key));
        if shard.may_give_back(charge.limit, key, now, &receipt) {
            shard.refund_as(charge.limit, key, now, what);
        }
    }
}

/// Whether `verdict` is a rejection that a penalty box counts: denied at a cost, and
/// not because the key is blocked already.
#[inline]
fn is_offence(charge: &Charge<'_>, verdict: &Verdict) -> bool {
    !verdict.allowed && charge.cost > 0 && verdict.blocked_us.is_none()
}

/// `verdict`, after counting it in the penalty box of `charge`'s limit if it is an
/// offence (taking the shard's write lock only then).
#[inline]
fn offended(
    shard: &RwLock<Shard>,
    charge: &Charge<'_>,
    key: Hashed<'_>,
    now: u64,
    verdict: Verdict,
) -> Verdict {
    match charge.limit.penalty_box() {
        Some(penalty) if is_offence(charge, &verdict) => {
            write(shard).offend(charge.limit, key, now, penalty, verdict)
        }
        _ => verdict,
    }
}

/// Whether `limit`'s states can be updated under a shard's read lock.
#[inline]
fn has_atomic_states(limit: &Limit) -> bool {
    matches!(
        limit.params().algorithm,
        Algorithm::Gcra | Algorithm::LeakyBucket
    )
}
