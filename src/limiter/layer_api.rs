//! What the Tower layer asks of the limiter: decisions by limit index, without a
//! future on the memory store, and refunds it runs in the background.

use super::{Backend, Limiter, missing_decision};
use crate::store::{Charge, InFlightSlot, StoreFuture};
use crate::{Decision, Key, Receipt, StoreError};

/// A decision the layer can take without awaiting (memory store), or a future for it.
pub(crate) enum Pending {
    Ready(Result<Vec<Decision>, StoreError>),
    Waiting(StoreFuture<'static, Vec<Decision>>),
}

/// A request's in-flight slots, one per policy with an in-flight limit; or, when one
/// of them had none free, that policy's index (the slots taken before it are given
/// back).
pub(crate) type Entry = Result<Vec<InFlightSlot>, usize>;

/// In-flight slots taken without awaiting (memory store), or a future for them.
pub(crate) enum Entering {
    Ready(Result<Entry, StoreError>),
    Waiting(StoreFuture<'static, Entry>),
}

/// What the Tower layer asks of the limiter: decisions by limit index, owned futures.
impl Limiter {
    /// Takes one in-flight slot for each of `claims` (policy index, key, bound), all
    /// or none: synchronously on the memory store, else through a `'static` future.
    pub(crate) fn enter(&self, claims: &[(usize, Key, u32)]) -> Entering {
        let limits = &self.inner.limits;
        match &self.inner.backend {
            Backend::Memory(store) => {
                let mut slots = Vec::with_capacity(claims.len());
                for &(index, key, max) in claims {
                    match store.enter(&limits[index], &key, max) {
                        Some(slot) => slots.push(slot),
                        None => return Entering::Ready(Ok(Err(index))),
                    }
                }
                Entering::Ready(Ok(Ok(slots)))
            }
            Backend::Other(store) => {
                let (limiter, store, claims) = (self.clone(), store.clone(), claims.to_vec());
                Entering::Waiting(Box::pin(async move {
                    let mut slots = Vec::with_capacity(claims.len());
                    for (index, key, max) in claims {
                        let limit = &limiter.inner.limits[index];
                        match store.acquire_in_flight(limit, &key, max).await? {
                            Some(slot) => slots.push(slot),
                            None => return Ok(Err(index)),
                        }
                    }
                    Ok(Ok(slots))
                }))
            }
        }
    }

    /// Decides `checks` (policy index, key, cost) all-or-nothing: synchronously on the
    /// memory store, else through a `'static` future that owns what it needs.
    pub(crate) fn decide(&self, checks: &[(usize, Key, u64)]) -> Pending {
        let limits = &self.inner.limits;
        match &self.inner.backend {
            Backend::Memory(store) => {
                if let [(index, key, cost)] = checks {
                    let charge = Charge {
                        limit: &limits[*index],
                        key,
                        cost: *cost,
                    };
                    return Pending::Ready(Ok(vec![store.acquire_one(&charge)]));
                }
                let charges: Vec<Charge<'_>> = checks
                    .iter()
                    .map(|(index, key, cost)| Charge {
                        limit: &limits[*index],
                        key,
                        cost: *cost,
                    })
                    .collect();
                Pending::Ready(Ok(store.acquire_all(&charges)))
            }
            Backend::Other(store) => {
                let (limiter, store, checks) = (self.clone(), store.clone(), checks.to_vec());
                Pending::Waiting(Box::pin(async move {
                    let charges: Vec<Charge<'_>> = checks
                        .iter()
                        .map(|(index, key, cost)| Charge {
                            limit: &limiter.inner.limits[*index],
                            key,
                            cost: *cost,
                        })
                        .collect();
                    let decisions = store.acquire(&charges).await?;
                    if decisions.len() == charges.len() {
                        Ok(decisions)
                    } else {
                        Err(missing_decision(charges.len(), decisions.len()))
                    }
                }))
            }
        }
    }

    /// Takes back the whole charge of `receipt`, made to `key` under the policy at
    /// `index`: at once on the memory store, else in a future the caller runs in the
    /// background.
    pub(crate) fn refund_charge_later(
        &self,
        index: usize,
        key: Key,
        receipt: Receipt,
    ) -> Option<StoreFuture<'static, ()>> {
        match &self.inner.backend {
            Backend::Memory(store) => {
                let charge = Charge {
                    limit: &self.inner.limits[index],
                    key: &key,
                    cost: receipt.cost(),
                };
                store.refund_charge_now(&charge, receipt);
                None
            }
            Backend::Other(store) => {
                let (limiter, store) = (self.clone(), store.clone());
                Some(Box::pin(async move {
                    let charge = Charge {
                        limit: &limiter.inner.limits[index],
                        key: &key,
                        cost: receipt.cost(),
                    };
                    store.refund_charge(charge, receipt).await
                }))
            }
        }
    }
}
