//! The future of [`Limiter::check`](super::Limiter::check): on the memory store the
//! decision is made and returned by its first poll.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{Backend, Limiter, missing_decision};
use crate::store::{Charge, StoreFuture};
use crate::{Decision, Key, StoreError};

/// The future of [`Limiter::check`].
pub(super) struct Check<'a> {
    pub(super) limiter: &'a Limiter,
    pub(super) policy: &'a str,
    pub(super) key: &'a Key,
    pub(super) cost: u32,
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
        let (key, cost) = (this.key, u64::from(this.cost));
        let limit = match limiter.find(this.policy) {
            Ok(limit) => limit,
            Err(error) => return Poll::Ready(Err(error)),
        };
        match &limiter.inner.backend {
            Backend::Memory(store) => {
                Poll::Ready(Ok(store.acquire_one(&Charge { limit, key, cost })))
            }
            Backend::Other(store) => {
                let mut future: StoreFuture<'_, Decision> = Box::pin(async move {
                    let charge = Charge { limit, key, cost };
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
