//! Giving back what a store call took, by the receipts of its decisions: for the
//! layer's request accounts (`count_when`, the hold cap, a held request whose caller
//! left, settles of metered requests and byte advances: the store calls behind them),
//! for a call whose caller left while it was on its way, for a body frame's bytes, and
//! for a waiter that went away ([`Limiter::until_ready`]): at once on the memory store,
//! in the background on another.
//!
//! One mechanism for every call that takes something for a caller who may leave: the
//! call is a [`Taking`] from before it is sent, and what it took a [`Taken`] from the
//! instant its reply is read. Dropped while the call is on its way, a `Taking` lets the
//! call finish in the background and gives back what it took; dropped before
//! [`keep`](Taken::keep), a `Taken` gives it back. Each gives back once, by receipt:
//! the store takes back only what of *that* charge it still counts, so a late give-back
//! never returns a charge made since by someone else.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::{Limiter, Set};
use crate::decision::Receipt;
use crate::store::{Charge, StoreFuture};
use crate::{Decision, Key, Quota, StoreError};

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
        // A quota refused now was refused when charged: nothing to take back.
        let limit = self.with_quota(&set.limits[index], Some(quota)).ok()?;
        let charge = Charge {
            limit: &limit,
            key: &key,
            cost: receipt.cost(),
        };
        if self
            .inner
            .store
            .refund_charge(charge, receipt)
            .into_ready()
            .is_ok()
        {
            return None;
        }
        // Not polled, so not sent: made again from owned arguments, to run later.
        let (limiter, store, set) = (self.clone(), self.inner.store.clone(), set.clone());
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

/// A settle the layer makes for a request: settled already (a store that answers at
/// once: the memory store), or a future not sent yet, to run in the background with
/// [`spawn_settle`] (a settle dropped on the wire may or may not have run, so nobody
/// may cancel it) or to drop unsent.
#[cfg(feature = "layer")]
pub(crate) enum Settling {
    Done(Result<Decision, StoreError>),
    Later(StoreFuture<'static, Decision>),
}

#[cfg(feature = "layer")]
impl Limiter {
    /// Settles the charge of `receipt`, made to `key` under the limit at `index` of
    /// `set` with `quota` (the decision's), to `actual`: at once on a store that
    /// answers at once, else as a future, not sent, that owns what it needs.
    pub(crate) fn settle_charge_later(
        &self,
        set: &Arc<Set>,
        (index, key): (usize, Key),
        receipt: Receipt,
        quota: Quota,
        actual: u64,
    ) -> Settling {
        let limit = match self.with_quota(&set.limits[index], Some(quota)) {
            Ok(limit) => limit,
            Err(error) => return Settling::Done(Err(error)),
        };
        let charge = Charge {
            limit: &limit,
            key: &key,
            cost: actual,
        };
        match self.inner.store.settle(charge, receipt).into_ready() {
            Ok(answer) => Settling::Done(answer),
            // Not polled, so not sent: made again from owned arguments.
            Err(_unsent) => {
                let (limiter, store, set) = (self.clone(), self.inner.store.clone(), set.clone());
                Settling::Later(Box::pin(async move {
                    let limit = limiter.with_quota(&set.limits[index], Some(quota))?;
                    let charge = Charge {
                        limit: &limit,
                        key: &key,
                        cost: actual,
                    };
                    store.settle(charge, receipt).await
                }))
            }
        }
    }
}

/// Runs a remote settle to its end in the background: nobody waits for it, and no
/// client that goes away can cancel it halfway; a failure is recorded.
#[cfg(feature = "layer")]
pub(crate) fn spawn_settle(settle: StoreFuture<'static, Decision>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(error) = settle.await {
                crate::observe::settle_failed(&error);
            }
        });
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

/// Where a taking call charges: for each of its decisions, in order, the limit's
/// index in the set and the key.
pub(crate) type Targets = Vec<(usize, Key)>;

/// What a store call took for a caller, given back by its receipts when dropped
/// before [`keep`](Taken::keep): the caller went away (a waiter cancelled, a call
/// whose caller left while it was on its way) or will not use it (a body frame cut
/// off). The layer keeps what a request's admission took in the request's account
/// instead, from the instant the decision is read.
pub(crate) struct Taken {
    limiter: Limiter,
    set: Arc<Set>,
    targets: Targets,
    /// Empty once kept or given back: each charge goes back at most once.
    decisions: Vec<Decision>,
}

impl Taken {
    /// What `decisions` took, charged to `targets` under `set`.
    pub(crate) fn new(
        limiter: Limiter,
        set: Arc<Set>,
        targets: Targets,
        decisions: Vec<Decision>,
    ) -> Self {
        Self {
            limiter,
            set,
            targets,
            decisions,
        }
    }

    /// The decisions.
    pub(crate) fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The caller uses what was taken: nothing goes back.
    pub(crate) fn keep(mut self) -> Vec<Decision> {
        std::mem::take(&mut self.decisions)
    }

    /// Keeps the one decision of a single-charge call (a check, a reservation).
    pub(crate) fn keep_one(self) -> Result<Decision, StoreError> {
        crate::store::only(self.keep())
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        let decisions = std::mem::take(&mut self.decisions);
        for (&(index, key), decision) in self.targets.iter().zip(&decisions) {
            // A denial charged nothing and has no receipt: nothing goes back.
            if let Some(receipt) = decision.receipt
                && let Some(refund) =
                    self.limiter
                        .refund_charge_later(&self.set, index, key, receipt, decision.quota)
            {
                spawn_refund(refund);
            }
        }
    }
}

/// A store call that takes something (a charge, a reservation, an in-flight slot),
/// owned from before it is sent. What it resolves to gives back what was taken when
/// dropped (a [`Taken`], an in-flight slot); dropped while the call is on its way (its
/// caller went away), the call runs on in the background and what it returns is
/// dropped there, so it comes back when the reply arrives. A call never polled was
/// never sent and is just dropped.
///
/// Without a Tokio runtime at the drop, the call cannot run on: it is dropped, and a
/// store that had received it keeps what it took (no Tower or async caller drops a
/// future outside its runtime).
pub(crate) struct OnTheWire<T: Send + 'static> {
    call: Option<StoreFuture<'static, T>>,
    sent: bool,
}

/// A call that charges or reserves, resolving to what it took.
pub(crate) type Taking = OnTheWire<Taken>;

impl<T: Send + 'static> OnTheWire<T> {
    /// `call`, not sent yet.
    pub(crate) fn call(call: StoreFuture<'static, T>) -> Self {
        Self {
            call: Some(call),
            sent: false,
        }
    }
}

impl OnTheWire<Taken> {
    /// `call`, whose decisions charge `targets` under `set`.
    pub(crate) fn new(
        limiter: Limiter,
        set: Arc<Set>,
        targets: Targets,
        call: StoreFuture<'static, Vec<Decision>>,
    ) -> Self {
        Self::call(Box::pin(async move {
            let decisions = call.await?;
            Ok(Taken::new(limiter, set, targets, decisions))
        }))
    }
}

impl<T: Send + 'static> Future for OnTheWire<T> {
    type Output = Result<T, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let call = this
            .call
            .as_mut()
            .expect("a store call polled after it completed");
        this.sent = true;
        let result = std::task::ready!(call.as_mut().poll(cx));
        this.call = None;
        Poll::Ready(result)
    }
}

impl<T: Send + 'static> Drop for OnTheWire<T> {
    fn drop(&mut self) {
        let (Some(call), true) = (self.call.take(), self.sent) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // Nobody is left to use it: what it took goes back as it is dropped. (A
            // call that failed took nothing this process can name.)
            runtime.spawn(async move {
                drop(call.await);
            });
        }
    }
}
