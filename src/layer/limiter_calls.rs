//! What the Tower layer asks of the limiter: decisions by limit index in one set of
//! limits, answered at once by a store that decides in memory, else owned futures
//! that give back what they took if the request goes away.

use std::sync::Arc;

use crate::layer::few::{Decided, Few};
use crate::limiter::caller_limits::Resolved;
use crate::limiter::give_back::Targets;
use crate::limiter::{Limiter, Set, Taking, complete};
use crate::observe::{StoreMetrics, StoreTimer};
use crate::store::{Charge, StoreFuture};
use crate::{Decision, Key, Limit, Quota, StoreError};

/// A decision the layer can take without awaiting (memory store), or the store call
/// for it, which gives back what it took if the request goes away while it is on its
/// way.
pub(crate) enum Pending {
    /// Inline for one check: an admitted request allocates nothing for it.
    Ready(Result<Decided, StoreError>),
    Waiting(Taking),
}

/// One policy's part of a request: what the layer asks the limiter to decide.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerCheck {
    /// The policy's index in the set the request is decided under.
    pub(crate) index: usize,
    pub(crate) key: Key,
    pub(crate) cost: u64,
    /// The caller's own quota, if it has one (`Policy::quota_from`).
    pub(crate) quota: Option<Quota>,
    /// Whether the policy rejects this caller when over its limit (else shadow mode).
    pub(crate) enforced: bool,
}

/// What the Tower layer asks of the limiter: decisions by limit index, owned futures.
impl Limiter {
    /// Runs `f` on `limit` under `quota`, as `with_quota` but
    /// without moving a `Limit` (a few hundred bytes) on the common path, where the
    /// quota is the limit's own.
    #[inline]
    pub(crate) fn under_quota<R>(
        &self,
        limit: &Limit,
        quota: Option<Quota>,
        f: impl FnOnce(&Limit) -> R,
    ) -> Result<R, StoreError> {
        match quota {
            Some(quota) if quota != limit.quota() => {
                let own = self.caller_limit(limit, quota)?;
                Ok(f(&own))
            }
            _ => Ok(f(limit)),
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
            .map(|check| self.with_quota(&set.limits[check.index], check.quota))
            .collect()
    }

    /// Decides `checks` all-or-nothing under `set`: synchronously on the memory store,
    /// else through a `'static` future that owns what it needs. The store's answer
    /// stops `timer`.
    pub(crate) fn decide(
        &self,
        set: &Arc<Set>,
        checks: &[LayerCheck],
        (metrics, timer): (&StoreMetrics, StoreTimer),
    ) -> Pending {
        if let Some(memory) = self.memory() {
            // The memory store called directly, as `Limiter::check` does.
            let answer = if let [
                LayerCheck {
                    index,
                    key,
                    cost,
                    quota,
                    ..
                },
            ] = checks
            {
                self.under_quota(&set.limits[*index], *quota, |limit| {
                    Few::One([memory.decide_now(&Charge {
                        limit,
                        key,
                        cost: *cost,
                    })])
                })
            } else {
                self.limits_of(set, checks)
                    .map(|limits| Few::from(memory.decide_all(&charges(checks, &limits))))
            };
            metrics.stop(timer);
            return Pending::Ready(answer);
        }
        let store = &**self.store();
        // First with borrowed arguments: a store that decides in memory answers ready.
        let ready = if let [
            LayerCheck {
                index,
                key,
                cost,
                quota,
                ..
            },
        ] = checks
        {
            self.under_quota(&set.limits[*index], *quota, |limit| {
                let charge = Charge {
                    limit,
                    key,
                    cost: *cost,
                };
                store
                    .decide_one(charge)
                    .into_ready()
                    .ok()
                    .map(|answer| answer.map(|decision| Few::One([decision])))
            })
        } else {
            self.limits_of(set, checks).map(|limits| {
                store
                    .decide(&charges(checks, &limits))
                    .into_ready()
                    .ok()
                    .map(|answer| {
                        answer
                            .and_then(|d| complete(d, checks.len()))
                            .map(Few::from)
                    })
            })
        };
        match ready {
            Err(error) => return Pending::Ready(Err(error)),
            Ok(Some(answer)) => {
                metrics.stop(timer);
                return Pending::Ready(answer);
            }
            // A future, never polled: nothing sent. Made again from owned arguments.
            Ok(None) => {}
        }
        let (limiter, store, owned) = (self.clone(), self.store().clone(), set.clone());
        let checks = checks.to_vec();
        let targets = targets(&checks);
        let metrics = metrics.clone();
        let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
            let limits = limiter.limits_of(&owned, &checks)?;
            let charges = charges(&checks, &limits);
            let decisions = store.decide(&charges).await;
            metrics.stop(timer);
            complete(decisions?, charges.len())
        });
        Pending::Waiting(Taking::new(self.clone(), set.clone(), targets, call))
    }

    /// Reserves `check`'s place under `set` within `max_wait` (the layer's wait mode):
    /// at once on a store that decides in memory, else through a `'static` future.
    pub(crate) fn decide_waiting(
        &self,
        set: &Arc<Set>,
        check: &LayerCheck,
        max_wait: std::time::Duration,
        (metrics, timer): (&StoreMetrics, StoreTimer),
    ) -> Pending {
        let LayerCheck {
            index,
            key,
            cost,
            quota,
            ..
        } = *check;
        let store = &**self.store();
        let ready = self.under_quota(&set.limits[index], quota, |limit| {
            let charge = Charge {
                limit,
                key: &key,
                cost,
            };
            store.reserve(charge, max_wait).into_ready().ok()
        });
        match ready {
            Err(error) => return Pending::Ready(Err(error)),
            Ok(Some(answer)) => {
                metrics.stop(timer);
                return Pending::Ready(answer.map(|decision| Few::One([decision])));
            }
            Ok(None) => {}
        }
        let (limiter, store, owned) = (self.clone(), self.store().clone(), set.clone());
        let metrics = metrics.clone();
        let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
            let limit = limiter.with_quota(&owned.limits[index], quota)?;
            let charge = Charge {
                limit: &limit,
                key: &key,
                cost,
            };
            let decision = store.reserve(charge, max_wait).await;
            metrics.stop(timer);
            Ok(vec![decision?])
        });
        let targets = vec![(index, key)];
        Pending::Waiting(Taking::new(self.clone(), set.clone(), targets, call))
    }
}

/// Where each of `checks` charges: its limit's index and its key.
pub(crate) fn targets(checks: &[LayerCheck]) -> Targets {
    checks
        .iter()
        .map(|check| (check.index, check.key))
        .collect()
}

/// The charges of `checks`, each under its limit in `limits` (`Limiter::limits_of`).
fn charges<'c>(checks: &'c [LayerCheck], limits: &'c [Resolved<'_>]) -> Vec<Charge<'c>> {
    checks
        .iter()
        .zip(limits)
        .map(|(check, limit)| Charge {
            limit,
            key: &check.key,
            cost: check.cost,
        })
        .collect()
}
