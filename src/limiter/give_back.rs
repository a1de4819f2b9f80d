//! Giving a charge back by its receipt, from the layer (`count_when`, held-cap
//! refunds) and from a waiter that went away ([`Limiter::until_ready`]): at once on
//! the memory store, in the background on another.

use std::sync::Arc;

use super::{Backend, Limiter, Set};
use crate::store::{Charge, StoreFuture};
use crate::{Key, Quota, Receipt};

impl Limiter {
    /// Takes back the whole charge of `receipt`, made to `key` under the limit at
    /// `index` of `set` with `quota` (the decision's): at once on the memory store,
    /// else in a future the caller runs in the background.
    pub(crate) fn refund_charge_later(
        &self,
        set: &Arc<Set>,
        index: usize,
        key: Key,
        receipt: Receipt,
        quota: Quota,
    ) -> Option<StoreFuture<'static, ()>> {
        match &self.inner.backend {
            Backend::Memory(store) => {
                // A quota refused now was refused when charged: nothing to take back.
                let limit = self.with_quota(&set.limits[index], Some(quota)).ok()?;
                let charge = Charge {
                    limit: &limit,
                    key: &key,
                    cost: receipt.cost(),
                };
                store.refund_charge_now(&charge, receipt);
                None
            }
            Backend::Other(store) => {
                let (limiter, store, set) = (self.clone(), store.clone(), set.clone());
                Some(Box::pin(async move {
                    let limit = limiter.with_quota(&set.limits[index], Some(quota))?;
                    let charge = Charge {
                        limit: &limit,
                        key: &key,
                        cost: receipt.cost(),
                    };
                    store.refund_charge(charge, receipt).await
                }))
            }
        }
    }
}

/// Runs a remote refund in the background: nobody waits for it; a failure is
/// recorded.
pub(crate) fn spawn_refund(refund: StoreFuture<'static, ()>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(error) = refund.await {
                crate::observe::refund_failed(&error);
            }
        });
    }
}
