//! The future of [`Limiter::check`](super::Limiter::check): on the memory store the
//! decision is made and returned by its first poll.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{Backend, Limiter, missing_decision, unknown_policy};
use crate::store::{Charge, StoreFuture};
use crate::{Decision, Key, Quota, StoreError};

/// The future of [`Limiter::check`].
pub(super) struct Check<'a> {
    pub(super) limiter: &'a Limiter,
    pub(super) policy: &'a str,
    pub(super) key: &'a Key,
    pub(super) cost: u32,
    /// The caller's own quota ([`Limiter::check_with`]); `None`: the limit's.
    pub(super) quota: Option<Quota>,
    pub(super) state: CheckState<'a>,
}

pub(super) enum CheckState<'a> {
    Start,
    /// A store that does I/O: its future, polled until it is ready.
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
        let (policy, key, cost, quota) = (this.policy, this.key, u64::from(this.cost), this.quota);
        match &limiter.inner.backend {
            Backend::Memory(store) => {
                // One synchronous decision under the current set, loaded without a
                // lock; no closure or `Cow` between the store and the caller, whose
                // decision would be copied through each.
                let set = limiter.current();
                let Some(limit) = set.find(policy) else {
                    return Poll::Ready(Err(unknown_policy(policy)));
                };
                Poll::Ready(match quota {
                    Some(quota) if quota != limit.quota() => {
                        limiter.caller_limit(limit, quota).map(|own| {
                            store.acquire_one(&Charge {
                                limit: &own,
                                key,
                                cost,
                            })
                        })
                    }
                    _ => Ok(store.acquire_one(&Charge { limit, key, cost })),
                })
            }
            Backend::Other(store) => {
                // The future holds its set: a reload while it awaits the store does
                // not change the limit it decides under.
                let set = limiter.snapshot();
                let mut future: StoreFuture<'_, Decision> = Box::pin(async move {
                    let limit = limiter.resolve(&set, policy, quota)?;
                    let charge = Charge {
                        limit: &limit,
                        key,
                        cost,
                    };
                    let mut decisions = store.acquire(std::slice::from_ref(&charge)).await?;
                    decisions.pop().ok_or_else(|| missing_decision(1, 0))
                });
                let poll = future.as_mut().poll(cx);
                if poll.is_pending() {
                    this.state = CheckState::Store(future);
                }
                poll
            }
        }
    }
}
