//! The future of [`Limiter::check`](super::Limiter::check): on a store that answers
//! at once (the memory store) the decision is made and returned by its first poll; on
//! another, the store call is a [`Taking`]: a check dropped while its call is on the
//! wire (a timeout, a cancelled task) gives back what the call charged when its reply
//! arrives.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::{CheckEntry, Limiter, Taken, Taking, complete, unknown_limit};
use crate::store::{Charge, StoreFuture};
use crate::{Decision, Key, Limit, Quota, StoreError};

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

impl Limiter {
    /// Charges `cost` to `key` under `limit` if it fits. Cost 0 peeks: it reports the
    /// key's state and charges nothing.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(3))?).build()?;
    /// let key = Key::from("alice");
    /// assert_eq!(limiter.check("api", &key, 2).await?.remaining, 1);
    /// assert!(!limiter.check("api", &key, 2).await?.allowed);
    /// assert_eq!(limiter.check("api", &key, 0).await?.remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check<'a>(
        &'a self,
        limit: &'a str,
        key: &'a Key,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send + 'a {
        // A hand-written future rather than an `async fn`: on the memory store the
        // decision is made and returned by the first poll with nothing in between,
        // where the generated state machine copied the result through its own frame
        // (measured: a quarter of a hot-key check).
        Check {
            limiter: self,
            limit,
            key,
            cost,
            quota: None,
            state: CheckState::Start,
        }
    }

    /// Charges `cost` to `key` under `limit`, counted with this caller's `quota`
    /// instead of the limit's own: plans, where free callers get 100/min and paying
    /// ones 10,000/min. Everything else about the limit (name, algorithm, delay bound)
    /// stays; decisions and response headers state `quota`.
    ///
    /// **Usage carries over** between quotas of the same period: a key's state records
    /// what it has spent, and a new count or burst applies to that usage (used 80 of
    /// 100/min, upgraded to 1000/min: 920 left; used 800 of 1000/min, downgraded to
    /// 100/min: none left until it refills). For the token bucket, GCRA and the leaky
    /// bucket, usage is counted in whole requests when the quota changes, rounded up (in
    /// the limiter's favour). A quota over another period counts in state of its own.
    ///
    /// A quota the limit's algorithm or the store cannot count exactly (a burst on a
    /// window algorithm; a log too large for the memory store's bounds) is an error of
    /// kind [`InvalidQuota`](crate::StoreErrorKind::InvalidQuota), naming it; the
    /// layer treats it as a store failure (its fail mode).
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(100))?).build()?;
    /// let (free, pro) = (Quota::per_minute(100), Quota::per_minute(1000));
    /// let key = Key::from("alice");
    /// assert_eq!(limiter.check_with("api", &key, 80, free).await?.remaining, 20);
    /// // Upgraded: the 80 already used count against the new quota.
    /// let d = limiter.check_with("api", &key, 1, pro).await?;
    /// assert_eq!((d.remaining, d.quota), (919, pro));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_with<'a>(
        &'a self,
        limit: &'a str,
        key: &'a Key,
        cost: u32,
        quota: Quota,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send + 'a {
        Check {
            limiter: self,
            limit,
            key,
            cost,
            quota: Some(quota),
            state: CheckState::Start,
        }
    }

    /// Checks several (limit, key, cost) at one instant, all-or-nothing: if any limit
    /// denies, none is charged. Returns one decision per entry, in order; the request
    /// passes when every decision is allowed.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("burst", Quota::per_second(1))?)
    ///     .limit(Limit::new("daily", Quota::per_day(100))?)
    ///     .build()?;
    /// let key = Key::from("alice");
    /// let both = [("burst", &key, 1), ("daily", &key, 1)];
    /// assert!(limiter.check_all(&both).await?.iter().all(|d| d.allowed));
    /// let second = limiter.check_all(&both).await?;
    /// assert!(!second[0].allowed && second[1].allowed);
    /// assert_eq!(limiter.check("daily", &key, 0).await?.remaining, 99); // not charged twice
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn check_all<E: CheckEntry>(
        &self,
        checks: &[E],
    ) -> Result<Vec<Decision>, StoreError> {
        let set = self.snapshot();
        let limits = checks
            .iter()
            .map(|entry| {
                let (name, _, _, quota) = entry.parts();
                self.resolve(&set, name, quota)
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let charges: Vec<Charge<'_>> = checks
            .iter()
            .zip(&limits)
            .map(|(entry, limit)| {
                let (_, key, cost, _) = entry.parts();
                Charge {
                    limit,
                    key,
                    cost: u64::from(cost),
                }
            })
            .collect();
        // A store that decides in memory answers at once; else the call is made again
        // from owned arguments (as `check`'s): dropped on the wire, it runs on and
        // gives back what it charged when its reply arrives.
        if let Ok(answer) = self.inner.store.decide(&charges).into_ready() {
            return answer.and_then(|decisions| complete(decisions, charges.len()));
        }
        {
            {
                let mut targets = Vec::with_capacity(checks.len());
                let mut owned = Vec::with_capacity(checks.len());
                for (entry, limit) in checks.iter().zip(&limits) {
                    let (name, key, cost, _) = entry.parts();
                    let index = set.index_of(name).ok_or_else(|| unknown_limit(name))?;
                    targets.push((index, *key));
                    owned.push((Limit::clone(limit), *key, u64::from(cost)));
                }
                let store = self.inner.store.clone();
                let call: crate::store::StoreFuture<'static, Vec<Decision>> =
                    Box::pin(async move {
                        let charges: Vec<Charge<'_>> = owned
                            .iter()
                            .map(|(limit, key, cost)| Charge {
                                limit,
                                key,
                                cost: *cost,
                            })
                            .collect();
                        let decisions = store.decide(&charges).await?;
                        complete(decisions, charges.len())
                    });
                Ok(Taking::new(self.clone(), set.clone(), targets, call)
                    .await?
                    .keep())
            }
        }
    }
}
