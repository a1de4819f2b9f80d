//! Waiting instead of rejecting: [`Limiter::reserve`] takes a request's place in its
//! key's queue, [`Limiter::until_ready`] also waits for it, and gives the place back
//! if it is dropped while waiting.

use std::sync::Arc;
use std::time::Duration;

use super::{Backend, Limiter, Set, spawn_refund, unknown_policy};
use crate::store::Charge;
use crate::{Decision, Key, StoreError};

impl Limiter {
    /// Reserves `cost` for `key` under `policy`, to proceed within `max_wait`.
    ///
    /// The request's place is the earliest instant at which the policy's rule admits
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
    /// back; the queue does not move its later places earlier.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, ManualClock, MemoryStore, Quota};
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
        policy: &str,
        key: &Key,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        let set = self.snapshot();
        let limit = set.find(policy).ok_or_else(|| unknown_policy(policy))?;
        let charge = Charge {
            limit,
            key,
            cost: u64::from(cost),
        };
        match &self.inner.backend {
            Backend::Memory(store) => Ok(store.reserve_now(&charge, max_wait)),
            Backend::Other(store) => store.reserve(charge, max_wait).await,
        }
    }

    /// Waits until `cost` may proceed for `key` under `policy`, at most `max_wait`:
    /// reserves its place ([`reserve`](Limiter::reserve)) and sleeps until then.
    /// Returns the allowed decision once it may proceed, or at once the denial that
    /// says when it could, if that is beyond `max_wait` (nothing charged).
    ///
    /// A waiter that is dropped before its time (a cancelled task, a `select!` that
    /// took another branch) gives its reservation back. For a client staying under a
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
        policy: &str,
        key: &Key,
        cost: u32,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        let set = self.snapshot();
        let decision = self.reserve(policy, key, cost, max_wait).await?;
        if !decision.allowed || decision.delay.is_zero() {
            return Ok(decision);
        }
        let place = Place {
            limiter: self,
            set,
            key: *key,
            decision: Some(decision.clone()),
        };
        tokio::time::sleep(decision.delay).await;
        place.keep();
        Ok(decision)
    }

    /// Gives back what `decision` reserved for `key` in `set`: at once on the memory
    /// store, in the background on another.
    fn give_back(&self, set: &Arc<Set>, key: Key, decision: &Decision) {
        let (Some(receipt), Some(index)) = (decision.receipt(), set.index_of(decision.policy))
        else {
            return;
        };
        if let Some(refund) = self.refund_charge_later(set, index, key, receipt, decision.quota) {
            spawn_refund(refund);
        }
    }
}

/// A reservation being waited for: given back if dropped before [`keep`](Place::keep).
struct Place<'a> {
    limiter: &'a Limiter,
    set: Arc<Set>,
    key: Key,
    decision: Option<Decision>,
}

impl Place<'_> {
    fn keep(mut self) {
        self.decision = None;
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if let Some(decision) = self.decision.take() {
            self.limiter.give_back(&self.set, self.key, &decision);
        }
    }
}
