//! What the Tower layer asks of the limiter: decisions by limit index in one set of
//! limits, without a future on the memory store, and refunds it runs in the background.

use std::sync::Arc;

use super::{Backend, Limiter, Resolved, Set, Taking, missing_decision};
use crate::store::{Charge, InFlightSlot, StoreFuture};
use crate::{Decision, Key, Quota, StoreError};

/// A decision the layer can take without awaiting (memory store), or the store call
/// for it, which gives back what it took if the request goes away while it is on its
/// way.
pub(crate) enum Pending {
    Ready(Result<Vec<Decision>, StoreError>),
    Waiting(Taking),
}

/// One policy's part of a request: its index in the set, the key, the cost, and the
/// caller's own quota if it has one.
pub(crate) type LayerCheck = (usize, Key, u64, Option<Quota>);

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
    /// Takes one in-flight slot for each of `claims` (policy index in `set`, key,
    /// bound), all or none: synchronously on the memory store, else through a
    /// `'static` future. With `wait` (the layer's wait mode), a request that finds no
    /// slot free tries again, backing off from 1 ms to 25 ms, until one frees or the
    /// wait is over.
    pub(crate) fn enter(
        &self,
        set: &Arc<Set>,
        claims: &[(usize, Key, u32)],
        wait: Option<std::time::Duration>,
    ) -> Entering {
        match &self.inner.backend {
            Backend::Memory(store) => {
                let first = enter_memory(store, set, claims);
                match (first, wait) {
                    (Err(_), Some(wait)) => {
                        let (store, set, claims) = (store.clone(), set.clone(), claims.to_vec());
                        Entering::Waiting(Box::pin(async move {
                            let mut tries = Retries::new(wait);
                            loop {
                                let entry = enter_memory(&store, &set, &claims);
                                if entry.is_ok() || !tries.wait().await {
                                    return Ok(entry);
                                }
                            }
                        }))
                    }
                    (entry, _) => Entering::Ready(Ok(entry)),
                }
            }
            Backend::Other(store) => {
                let (store, set, claims) = (store.clone(), set.clone(), claims.to_vec());
                Entering::Waiting(Box::pin(async move {
                    let mut tries = wait.map(Retries::new);
                    loop {
                        let entry = enter_store(store.as_ref(), &set, &claims).await?;
                        let again = match (&entry, &mut tries) {
                            (Err(_), Some(tries)) => tries.wait().await,
                            _ => false,
                        };
                        if !again {
                            return Ok(entry);
                        }
                    }
                }))
            }
        }
    }

    /// The limits of `checks`, each under its caller's quota when it has one.
    fn limits_of<'s>(
        &self,
        set: &'s Set,
        checks: &[LayerCheck],
    ) -> Result<Vec<Resolved<'s>>, StoreError> {
        checks
            .iter()
            .map(|(index, _, _, quota)| self.with_quota(&set.limits[*index], *quota))
            .collect()
    }

    /// Decides `checks` all-or-nothing under `set`: synchronously on the memory store,
    /// else through a `'static` future that owns what it needs.
    pub(crate) fn decide(&self, set: &Arc<Set>, checks: &[LayerCheck]) -> Pending {
        match &self.inner.backend {
            Backend::Memory(store) => {
                if let [(index, key, cost, quota)] = checks {
                    let result = self.under_quota(&set.limits[*index], *quota, |limit| {
                        vec![store.acquire_one(&Charge {
                            limit,
                            key,
                            cost: *cost,
                        })]
                    });
                    return Pending::Ready(result);
                }
                let result = self
                    .limits_of(set, checks)
                    .map(|limits| store.acquire_all(&charges(checks, &limits)));
                Pending::Ready(result)
            }
            Backend::Other(store) => {
                let (limiter, store, owned) = (self.clone(), store.clone(), set.clone());
                let checks = checks.to_vec();
                let targets = targets(&checks);
                let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
                    let limits = limiter.limits_of(&owned, &checks)?;
                    let charges = charges(&checks, &limits);
                    let decisions = store.acquire(&charges).await?;
                    if decisions.len() == charges.len() {
                        Ok(decisions)
                    } else {
                        Err(missing_decision(charges.len(), decisions.len()))
                    }
                });
                Pending::Waiting(Taking::new(self.clone(), set.clone(), targets, call))
            }
        }
    }

    /// Reserves `check`'s place under `set` within `max_wait` (the layer's wait mode):
    /// synchronously on the memory store, else through a `'static` future.
    pub(crate) fn decide_waiting(
        &self,
        set: &Arc<Set>,
        check: &LayerCheck,
        max_wait: std::time::Duration,
    ) -> Pending {
        let (index, key, cost, quota) = check;
        match &self.inner.backend {
            Backend::Memory(store) => {
                Pending::Ready(self.under_quota(&set.limits[*index], *quota, |limit| {
                    vec![store.reserve_now(
                        &Charge {
                            limit,
                            key,
                            cost: *cost,
                        },
                        max_wait,
                    )]
                }))
            }
            Backend::Other(store) => {
                let (limiter, store, owned) = (self.clone(), store.clone(), set.clone());
                let (index, key, cost, quota) = (*index, *key, *cost, *quota);
                let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
                    let limit = limiter.with_quota(&owned.limits[index], quota)?;
                    let charge = Charge {
                        limit: &limit,
                        key: &key,
                        cost,
                    };
                    Ok(vec![store.reserve(charge, max_wait).await?])
                });
                let targets = vec![(index, key)];
                Pending::Waiting(Taking::new(self.clone(), set.clone(), targets, call))
            }
        }
    }
}

/// Where each of `checks` charges: its limit's index and its key.
pub(crate) fn targets(checks: &[LayerCheck]) -> super::give_back::Targets {
    checks
        .iter()
        .map(|(index, key, _, _)| (*index, *key))
        .collect()
}

/// The charges of `checks`, each under its limit in `limits` (`Limiter::limits_of`).
fn charges<'c>(checks: &'c [LayerCheck], limits: &'c [Resolved<'_>]) -> Vec<Charge<'c>> {
    checks
        .iter()
        .zip(limits)
        .map(|((_, key, cost, _), limit)| Charge {
            limit,
            key,
            cost: *cost,
        })
        .collect()
}

/// One attempt at every slot of `claims` on the memory store.
fn enter_memory(store: &crate::MemoryStore, set: &Set, claims: &[(usize, Key, u32)]) -> Entry {
    let mut slots = Vec::with_capacity(claims.len());
    for &(index, key, max) in claims {
        match store.enter(&set.limits[index], &key, max) {
            Some(slot) => slots.push(slot),
            None => return Err(index),
        }
    }
    Ok(slots)
}

/// One attempt at every slot of `claims` on another store.
async fn enter_store(
    store: &dyn crate::store::Store,
    set: &Set,
    claims: &[(usize, Key, u32)],
) -> Result<Entry, StoreError> {
    let mut slots = Vec::with_capacity(claims.len());
    for &(index, key, max) in claims {
        match store
            .acquire_in_flight(&set.limits[index], &key, max)
            .await?
        {
            Some(slot) => slots.push(slot),
            None => return Ok(Err(index)),
        }
    }
    Ok(Ok(slots))
}

/// The waits between a waiting request's tries for an in-flight slot: 1 ms, doubling
/// up to 25 ms, until `wait` is over. A slot frees when a response body ends, which no
/// store announces (on Redis, in another process), so the request asks again.
struct Retries {
    until: tokio::time::Instant,
    next: std::time::Duration,
}

impl Retries {
    fn new(wait: std::time::Duration) -> Self {
        Self {
            until: tokio::time::Instant::now() + wait,
            next: std::time::Duration::from_millis(1),
        }
    }

    /// Sleeps before the next try; false when the wait is over.
    async fn wait(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if now >= self.until {
            return false;
        }
        tokio::time::sleep(self.next.min(self.until - now)).await;
        self.next = (self.next * 2).min(std::time::Duration::from_millis(25));
        true
    }
}
