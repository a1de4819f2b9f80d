//! Waiting instead of rejecting: [`Limiter::reserve`] takes a request's place in its
//! key's queue, [`Limiter::until_ready`] also waits for it, and gives the place back
//! if it is dropped while waiting, or while its reserve call is on its way; the `_with`
//! forms do the same, and [`Limiter::peek_with`] peeks, under a caller's own quota.

use std::time::Duration;

use super::{Limiter, Taken, Taking, unknown_limit};
use crate::store::Charge;
use crate::{Decision, Key, Quota, StoreError};

impl Limiter {
    /// Reserves `cost` for `key` under `limit`, to proceed within `max_wait`.
    ///
    /// The request's place is the earliest instant at which the limit's rule admits
    /// it, behind every reservation the key already holds (first come, first served).
    /// If that place is at most `max_wait` away, it is charged at once, counted at
    /// that instant (in the window, sub-window or log entry it falls in), and the
    /// decision is allowed with [`delay`](Decision::delay) the wait: the caller
    /// proceeds then, not before. Otherwise nothing is charged, and the denial's
    /// `retry_after` says how far the place is. One round trip on Redis.
    ///
    /// While a key holds reservations, a request that does not wait (a plain
    /// [`check`](Limiter::check)) is denied with the wait until its own place behind
    /// them. A reservation the caller no longer wants goes back with
    /// [`refund_charge`](Limiter::refund_charge) of its decision; [`until_ready`](
    /// Limiter::until_ready) does that by itself when it is dropped. The capacity comes
    /// back; the queue does not move its later places earlier. A `reserve` dropped
    /// before it returned (its call on its way to a remote store) gives its place back
    /// by itself when the reply arrives: the caller never saw the decision to refund.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("upstream", Quota::per_second(2))?)
    ///     .store(MemoryStore::with_clock(clock))
    ///     .build()?;
    /// let key = Key::from("api.example.com");
    /// let wait = Duration::from_secs(1);
    /// let delays: Vec<Duration> = [
    ///     limiter.reserve("upstream", &key, 1, wait).await?,
    ///     limiter.reserve("upstream", &key, 1, wait).await?,
    ///     limiter.reserve("upstream", &key, 1, wait).await?,
    ///     limiter.reserve("upstream", &key, 1, wait).await?,
    /// ].iter().map(|d| d.delay).collect();
    /// // A burst of 2 at once, then one place every 500 ms.
    /// assert_eq!(delays, [0, 0, 500, 1000].map(Duration::from_millis));
    /// // The next place is 1.5 s away: beyond max_wait, refused, nothing charged.
    /// let refused = limiter.reserve("upstream", &key, 1, wait).await?;
    /// assert_eq!((refused.allowed, refused.retry_after), (false, Some(Duration::from_millis(1500))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn reserve(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        let taken = self.take_place(limit, key, cost, None, max_wait).await?;
        taken.keep_one()
    }

    /// [`reserve`](Limiter::reserve) under the caller's own `quota` (a plan's, as
    /// [`check_with`](Limiter::check_with) takes it): the place is in the queue the
    /// caller's checks count in, so a plan caller waits by its plan, not by the
    /// limit's quota. A quota the limit's algorithm or the store cannot count exactly
    /// is an error, as for `check_with`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_second(1))?) // the free tier
    ///     .store(MemoryStore::with_clock(clock))
    ///     .build()?;
    /// let key = Key::from("customer-42");
    /// let pro = Quota::per_second(10); // this caller's plan
    /// let wait = Duration::from_secs(1);
    /// let mut delays = Vec::new();
    /// for _ in 0..12 {
    ///     delays.push(limiter.reserve_with("api", &key, 1, pro, wait).await?.delay);
    /// }
    /// // Its plan's burst of 10 at once, then one place every 100 ms.
    /// assert_eq!(delays[9], Duration::ZERO);
    /// assert_eq!(delays[10..], [100, 200].map(Duration::from_millis));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn reserve_with(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
        quota: Quota,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        let taken = self
            .take_place(limit, key, cost, Some(quota), max_wait)
            .await?;
        taken.keep_one()
    }

    /// Waits until `cost` may proceed for `key` under `limit`, at most `max_wait`:
    /// reserves its place ([`reserve`](Limiter::reserve)) and sleeps until then.
    /// Returns the allowed decision once it may proceed, or at once the denial that
    /// says when it could, if that is beyond `max_wait` (nothing charged).
    ///
    /// A waiter that is dropped before its time (a cancelled task, a `select!` that
    /// took another branch, a timeout) gives its reservation back, by its receipt, so
    /// no one else's charge: while it sleeps at once (memory) or in the background
    /// (another store); while its reserve call is still on its way to the store, the
    /// call runs on in the background and its place goes back when the reply arrives.
    /// The capacity comes back; later places are not moved earlier. For a client
    /// staying under a
    /// third party's limit, say:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, Quota};
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("upstream", Quota::per_second(10))?).build()?;
    /// let host = Key::from("api.example.com");
    /// let started = tokio::time::Instant::now();
    /// for _ in 0..12 {
    ///     let d = limiter.until_ready("upstream", &host, 1, Duration::from_secs(5)).await?;
    ///     assert!(d.allowed);
    ///     // … call the API …
    /// }
    /// // 10 at once, then one every 100 ms.
    /// assert!(started.elapsed() >= Duration::from_millis(200));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_ready(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        self.wait_for_place(limit, key, cost, None, max_wait).await
    }

    /// [`until_ready`](Limiter::until_ready) under the caller's own `quota` (see
    /// [`reserve_with`](Limiter::reserve_with)); cancelled, it gives its place back
    /// just the same.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, Quota};
    /// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("upstream", Quota::per_second(1))?).build()?;
    /// let host = Key::from("api.example.com");
    /// let contract = Quota::per_second(10); // what this host allows us
    /// let started = tokio::time::Instant::now();
    /// for _ in 0..12 {
    ///     let d = limiter.until_ready_with("upstream", &host, 1, contract, Duration::from_secs(5)).await?;
    ///     assert!(d.allowed);
    /// }
    /// // 10 at once, then one every 100 ms: by the contract, not by 1/s.
    /// assert!(started.elapsed() >= Duration::from_millis(200));
    /// assert!(started.elapsed() < Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn until_ready_with(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
        quota: Quota,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        self.wait_for_place(limit, key, cost, Some(quota), max_wait)
            .await
    }

    /// [`peek`](Limiter::peek) under the caller's own `quota`: what a cost-0
    /// [`check_with`](Limiter::check_with) returns, its numbers those of the caller's
    /// plan, charging nothing.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(10))?).build()?;
    /// let key = Key::from("customer-42");
    /// let pro = Quota::per_minute(1_000);
    /// limiter.check_with("api", &key, 3, pro).await?;
    /// let d = limiter.peek_with("api", &key, pro).await?;
    /// assert_eq!((d.allowed, d.capacity, d.remaining), (true, 1_000, 997));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn peek_with(
        &self,
        limit: &str,
        key: &Key,
        quota: Quota,
    ) -> Result<Decision, StoreError> {
        let set = self.snapshot();
        let limit = self.resolve(&set, limit, Some(quota))?;
        self.inner.store.peek(&limit, key).await
    }

    /// Reserves a place (under `quota` when given) and sleeps until it comes. What
    /// the reservation took is owned from before its call is sent: dropped on the
    /// way, or while asleep, it goes back.
    async fn wait_for_place(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
        quota: Option<Quota>,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        let taken = self.take_place(limit, key, cost, quota, max_wait).await?;
        let delay = match taken.decisions() {
            [decision] if decision.allowed => decision.delay,
            _ => Duration::ZERO,
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        taken.keep_one()
    }

    /// Reserves `cost` for `key` under `limit` (under `quota` when given) within
    /// `max_wait`: on the memory store at once, on another through a [`Taking`] call,
    /// which gives back what it took if it is dropped on its way.
    async fn take_place(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
        quota: Option<Quota>,
        max_wait: Duration,
    ) -> Result<Taken, StoreError> {
        let set = self.snapshot();
        let index = set.index_of(limit).ok_or_else(|| unknown_limit(limit))?;
        let targets = vec![(index, *key)];
        let ready = {
            let limit = self.with_quota(&set.limits[index], quota)?;
            let charge = Charge {
                limit: &limit,
                key,
                cost: u64::from(cost),
            };
            self.inner.store.reserve(charge, max_wait).into_ready().ok()
        };
        if let Some(answer) = ready {
            return Ok(Taken::new(self.clone(), set, targets, vec![answer?]));
        }
        // Not polled, so not sent: made again from owned arguments, so that dropped on
        // its way the call runs on and gives back what it took.
        let (limiter, store, owned, key) =
            (self.clone(), self.inner.store.clone(), set.clone(), *key);
        let call = Box::pin(async move {
            let limit = limiter.with_quota(&owned.limits[index], quota)?;
            let charge = Charge {
                limit: &limit,
                key: &key,
                cost: u64::from(cost),
            };
            Ok(vec![store.reserve(charge, max_wait).await?])
        });
        Taking::new(self.clone(), set, targets, call).await
    }
}
