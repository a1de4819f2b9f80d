//! The future of [`Limiter::check`](super::Limiter::check): on a store that answers
//! at once (the memory store) the decision is made and returned by its first poll; on
//! another, the store call is a [`Taking`]: a check dropped while its call is on the
//! wire (a timeout, a cancelled task) gives back what the call charged when its reply
//! arrives.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{Limiter, Taken, Taking, unknown_limit};
use crate::store::{Charge, StoreFuture};
use crate::{Decision, Key, Quota, StoreError};

/// The future of [`Limiter::check`].
pub(super) struct Check<'a> {
    pub(super) limiter: &'a Limiter,
    pub(super) limit: &'a str,
    pub(super) key: &'a Key,
    pub(super) cost: u32,
    /// The caller's own quota ([`Limiter::check_with`]); `None`: the limit's.
    pub(super) quota: Option<Quota>,
    pub(super) state: CheckState<'a>,
}

pub(super) enum CheckState<'a> {
    Start,
    /// A store that does I/O: its call (a [`Taking`], owned from before it is sent,
    /// inside), polled until it is ready. A plain boxed future, as before the call was
    /// cancel-safe: the memory store's decision, the hot path, compiles as it did.
    Store(StoreFuture<'a, Decision>),
    Done,
}

impl Future for Check<'_> {
    type Output = Result<Decision, StoreError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let CheckState::Store(future) = &mut this.state {
            let poll = future.as_mut().poll(cx);
            if poll.is_ready() {
                this.state = CheckState::Done;
            }
            return poll;
        }
        assert!(
            matches!(this.state, CheckState::Start),
            "Limiter::check polled after it completed"
        );
        this.state = CheckState::Done;
        let limiter = this.limiter;
        let (limit, key, cost, quota) = (this.limit, this.key, u64::from(this.cost), this.quota);
        if let Some(memory) = limiter.memory() {
            // The memory store, called directly: one synchronous decision under the
            // current set, loaded without a lock, returned from this poll with no
            // call boundary, closure or `Cow` in between (through the `Store` vtable
            // and a `StoreCall`, the decision, some 170 bytes, is copied at each:
            // measured 477 instructions a hot-key check instead of 373).
            let set = limiter.current();
            let Some(limit) = set.find(limit) else {
                return Poll::Ready(Err(unknown_limit(limit)));
            };
            Poll::Ready(match quota {
                Some(quota) if quota != limit.quota() => {
                    limiter.caller_limit(limit, quota).map(|own| {
                        memory.decide_now(&Charge {
                            limit: &own,
                            key,
                            cost,
                        })
                    })
                }
                _ => Ok(memory.decide_now(&Charge { limit, key, cost })),
            })
        } else {
            // Any other store, through the trait, from owned arguments: the call holds
            // its set (a reload while it awaits the store does not change the limit it
            // decides under), and dropped on the wire it can run on and give its
            // charge back. A store that answers ready (a lease covering the charge) is
            // done at the first poll below. The two paths are the arms of one `if`:
            // with an early return for the memory store, or a first try through the
            // trait here, LLVM built the memory path's decision whole even for a
            // caller that reads only `allowed` (404-450 instructions a hot-key check
            // instead of 385).
            let set = limiter.snapshot();
            let Some(index) = set.index_of(limit) else {
                return Poll::Ready(Err(unknown_limit(limit)));
            };
            let (caller, store, set_of_call, key) = (
                limiter.clone(),
                limiter.inner.store.clone(),
                set.clone(),
                *key,
            );
            let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
                let limit = caller.with_quota(&set_of_call.limits[index], quota)?;
                let charge = Charge {
                    limit: &limit,
                    key: &key,
                    cost,
                };
                let decisions = store.decide(std::slice::from_ref(&charge)).await?;
                super::complete(decisions, 1)
            });
            let call = Taking::new(limiter.clone(), set, vec![(index, key)], call);
            let mut future: StoreFuture<'_, Decision> =
                Box::pin(async move { call.await.and_then(Taken::keep_one) });
            let poll = future.as_mut().poll(cx);
            if poll.is_pending() {
                this.state = CheckState::Store(future);
            }
            poll
        }
    }
}
