//! [`LeasedStore`] as a [`Store`]: a single charge on a leasable limit is decided from
//! the lease table (at once when the key's lease or cached denial decides it; by the
//! backing store's own call where no lease would help, `pass.rs`); refunds
//! and settles go into a live lease first; everything else goes to the backing store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::LeasedStore;
use super::pass::Look;
use super::returns::{Local, Release};
use super::slice::leasable;
use super::table::{TableKey, lock};
use crate::decision::Receipt;
use crate::store::{Charge, InFlightSlot, Store, StoreCall, only, settle};
use crate::{ConfigError, Decision, Key, Limit};

/// Whether `charge` is decided from leases: a charge (not a peek) on a limit whose
/// algorithm can lease.
fn spends_leases(charge: &Charge<'_>) -> bool {
    charge.cost > 0 && leasable(charge.limit.get_algorithm())
}

impl<S: Store> Store for LeasedStore<S> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        match charges {
            [charge] if spends_leases(charge) => match self.look(charge) {
                Look::Decided(decision) => StoreCall::ready(Ok(vec![decision])),
                Look::Pass(seen) => StoreCall::future(self.pass(charges, seen)),
                Look::Lease => {
                    StoreCall::future(async move { Ok(vec![self.decide_leased(charge).await?]) })
                }
            },
            _ => StoreCall::future(async move {
                // A peek sees what the store counts: an expired lease's units go
                // back first, so it sees them returned.
                if let [charge] = charges
                    && charge.cost == 0
                    && let Some(release) = self.take_expired(charge, self.now())
                {
                    let _ = self.give_back(release, self.now()).await;
                }
                self.inner.calls.fetch_add(1, Ordering::Relaxed);
                self.inner.store.decide(charges).await
            }),
        }
    }

    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        if !spends_leases(&charge) {
            return StoreCall::future(async move {
                only(self.decide(std::slice::from_ref(&charge)).await?)
            });
        }
        match self.look(&charge) {
            Look::Decided(decision) => StoreCall::ready(Ok(decision)),
            Look::Pass(seen) => StoreCall::future(self.pass_one(charge, seen)),
            Look::Lease => StoreCall::future(async move { self.decide_leased(&charge).await }),
        }
    }
    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            // An operator's refund returns the key's newest charges, which may be this
            // process's parked units: return them first, so the refund cannot free
            // units this process would still spend.
            let lease_release = {
                let table_key = TableKey::of(&charge);
                let mut shard = lock(self.shard(&table_key));
                shard
                    .entries
                    .get_mut(&table_key)
                    .and_then(|entry| entry.lease.take())
                    .map(|lease| Release {
                        limit: charge.limit.clone(),
                        key: *charge.key,
                        lease,
                    })
            };
            if let Some(release) = lease_release {
                self.give_back(release, self.now()).await?;
            }
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.store.refund(charge).await
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            match self.refund_locally(&charge, receipt) {
                Local::Moved(()) | Local::Again(_) => return Ok(()),
                Local::Store => {}
            }
            self.inner.calls.fetch_add(1, Ordering::Relaxed);
            self.inner.store.refund_charge(charge, receipt).await?;
            self.moved_at_store(&charge, receipt);
            Ok(())
        })
    }

    /// In the lease the charge was spent from, while it lasts: a give-back returns
    /// units to it (as a refund does), an extra is spent from its unused units when
    /// they cover it; both at once, without the backing store. Otherwise (the lease
    /// is over or too short, or the charge was not spent from one) the backing store
    /// settles it. Either way each unit is spent or given back once, and each receipt
    /// moves its charge once: a receipt settled or refunded before moves nothing (no
    /// receipt stands for it), answered by its lease while it lives, else by a peek.
    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        match self.settle_locally(&charge, receipt) {
            Local::Moved(settled) | Local::Again(Some(settled)) => StoreCall::ready(Ok(settled)),
            Local::Again(None) => StoreCall::future(async move {
                self.inner.calls.fetch_add(1, Ordering::Relaxed);
                let peeked = self.inner.store.peek(charge.limit, charge.key).await?;
                Ok(settle::standing_from(&peeked, None))
            }),
            Local::Store => StoreCall::future(async move {
                self.inner.calls.fetch_add(1, Ordering::Relaxed);
                let settled = self.inner.store.settle(charge, receipt).await?;
                self.moved_at_store(&charge, receipt);
                Ok(settled)
            }),
        }
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.store.validate(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.store.validate_quota(limit)
    }

    // Operators' calls, reservations and in-flight slots go to the store itself: they
    // are not spent from leases. A block, reset or penalty made through this store
    // drops the key's leases here before it returns (`forget`): before the call, so
    // that nothing more is spent from them, and after it, for a slice charged while
    // the call was on its way. Other processes' leases see it when they end, within
    // their `max_lease`.

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.inner.store.peek(limit, key)
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            self.forget(limit.name(), key);
            let result = self.inner.store.reset(limit, key).await;
            self.forget(limit.name(), key);
            result
        })
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            self.forget(limit.name(), key);
            let result = self.inner.store.block(limit, key, duration).await;
            self.forget(limit.name(), key);
            result
        })
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            let (name, key) = (charge.limit.name(), *charge.key);
            self.forget(name, &key);
            let result = self.inner.store.penalize(charge).await;
            self.forget(name, &key);
            result
        })
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        self.inner.store.reserve(charge, max_wait)
    }

    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        self.inner.store.acquire_in_flight(limit, key, max)
    }

    fn supports_in_flight(&self) -> bool {
        self.inner.store.supports_in_flight()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::clock::ManualClock;
    use crate::store::{Charge, Store};
    use crate::store::{LeasedStore, SliceSizing};
    use crate::{Algorithm, Key, Limit, MemoryStore, Quota};

    fn store() -> LeasedStore<MemoryStore> {
        let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
        LeasedStore::builder(MemoryStore::with_clock(clock.clone()))
            .clock(clock)
            .sizing(SliceSizing::Fixed(8))
            .expect("sizing")
            .build()
    }

    fn limit() -> Limit {
        Limit::new("api", Quota::per_minute(1_000))
            .expect("limit")
            .algorithm(Algorithm::FixedWindow)
    }

    #[test]
    fn a_charge_a_live_lease_covers_is_answered_at_once() {
        let (store, limit, key) = (store(), limit(), Key::from("alice"));
        let charge = Charge {
            limit: &limit,
            key: &key,
            cost: 1,
        };
        let first = store.decide_one(charge);
        assert!(
            !first.is_ready(),
            "no lease yet: the slice is charged when polled"
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        assert!(runtime.block_on(first).expect("decided").allowed);
        assert_eq!((store.store_calls(), store.held()), (1, 7));
        let second = store
            .decide_one(charge)
            .into_ready()
            .expect("from the lease");
        assert!(second.expect("decided").allowed);
        let third = store.decide(std::slice::from_ref(&charge));
        assert!(third.is_ready());
        assert_eq!((store.store_calls(), store.held()), (1, 5));
    }

    #[test]
    fn a_call_dropped_unpolled_takes_nothing() {
        let (store, limit, key) = (store(), limit(), Key::from("bob"));
        let charge = Charge {
            limit: &limit,
            key: &key,
            cost: 1,
        };
        drop(store.decide_one(charge));
        drop(store.decide(std::slice::from_ref(&charge)));
        assert_eq!(
            (store.store_calls(), store.leases(), store.held()),
            (0, 0, 0)
        );
        let peek = store
            .get_ref()
            .peek(&limit, &key)
            .into_ready()
            .expect("memory");
        assert_eq!(peek.expect("peeked").remaining, 1_000);
    }
}
