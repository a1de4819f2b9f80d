//! What operators (and handlers) do to one key: refunds, by receipt or of the newest
//! charges, and `peek`, `offences`, `reset`, `block`, `penalize`. Each goes to the store through
//! the trait, under the current set.

use std::time::Duration;

use super::{Limiter, Set, unknown_limit};
use crate::penalty::Offences;
use crate::store::Charge;
use crate::{Decision, Key, Limit, StoreError};

impl Limiter {
    /// Returns up to `cost` of `key`'s newest charges under `limit`: an operator's
    /// refund, which knows no particular charge. Never leaves the key better than idle.
    ///
    /// To take back one request's charge (e.g. only failed logins count), use
    /// [`refund_charge`](Limiter::refund_charge) with its decision instead: a refund of
    /// the newest charges that arrives after that request's window rolled over takes
    /// back a charge of the new window.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("login", Quota::per_minute(5))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("login", &key, 1).await?;
    /// limiter.refund("login", &key, 1).await?;
    /// assert_eq!(limiter.check("login", &key, 0).await?.remaining, 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn refund(&self, limit: &str, key: &Key, cost: u32) -> Result<(), StoreError> {
        let set = self.snapshot();
        let charge = Charge {
            limit: set.find(limit).ok_or_else(|| unknown_limit(limit))?,
            key,
            cost: u64::from(cost),
        };
        self.inner.store.refund(charge).await
    }

    /// Takes back up to `amount` of what `decision` charged to `key`, for a request
    /// that should not count after all (e.g. only failed logins count): the
    /// [`Receipt`](crate::decision::Receipt) in the decision names the charge, so only what of *that* charge
    /// the key still counts comes back, from the store that took it.
    ///
    /// - Nothing comes back for a decision that charged nothing (denied, a peek, or
    ///   admitted by a [`check_all`](Limiter::check_all) that another limit denied),
    ///   nor more than it charged.
    /// - Fixed window: only within the charge's window. Sliding window: within its
    ///   window, then from the previous-window count during the next. Sliding window
    ///   counters and log: from the charge's own sub-window or log entry while it is in
    ///   the window. Token bucket, GCRA and leaky bucket: the part of the charge that
    ///   time has not repaid yet (in full at the instant it was made; otherwise rounded
    ///   to the µs in the limiter's favour).
    /// - Never leaves the key better than idle.
    ///
    /// - Nothing for a charge made under a limit whose algorithm or period a
    ///   [`reload`](Limiter::reload) changed since.
    ///
    /// Each receipt gives back once (the memory store, Redis, and a `Fallback` or a
    /// `LeasedStore` of them): a second refund of the same
    /// decision (a retry after a timeout whose first try may have run, or after a
    /// [`settle`](Limiter::settle) of it) gives nothing back, whatever its `amount`.
    /// On a [`Fallback`](crate::store::Fallback), a refund whose store is down is
    /// dropped (an error), never sent to the other store.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Algorithm, Key, Limiter, MemoryStore, Limit, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_020)); // 40 s into a minute
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("login", Quota::per_minute(2))?.algorithm(Algorithm::FixedWindow))
    ///     .store(MemoryStore::with_clock(clock.clone()))
    ///     .build()?;
    /// let key = Key::from("alice");
    /// let quick = limiter.check("login", &key, 1).await?;
    /// let slow = limiter.check("login", &key, 1).await?;
    /// limiter.refund_charge(&quick, &key, 1).await?; // same window: given back
    /// assert_eq!(limiter.check("login", &key, 0).await?.remaining, 1);
    ///
    /// clock.advance(Duration::from_secs(30)); // the next window: 2 left
    /// limiter.check("login", &key, 2).await?; // spent
    /// limiter.refund_charge(&slow, &key, 1).await?; // its window is gone: nothing back
    /// assert_eq!(limiter.check("login", &key, 0).await?.remaining, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn refund_charge(
        &self,
        decision: &Decision,
        key: &Key,
        amount: u32,
    ) -> Result<(), StoreError> {
        let Some(receipt) = decision.receipt else {
            return Ok(());
        };
        // Under the quota the charge was made with: a caller's own, if it had one.
        let set = self.snapshot();
        let limit = self.resolve(&set, decision.limit, Some(decision.quota))?;
        let charge = Charge {
            limit: &limit,
            key,
            cost: u64::from(amount).min(receipt.cost()),
        };
        // Nothing back for nothing, nor for a charge made under a limit whose
        // algorithm or period changed since: it counts in state this limit no longer
        // uses.
        if charge.cost == 0 || !receipt.charged_under(limit.table()) {
            return Ok(());
        }
        self.inner.store.refund_charge(charge, receipt).await
    }

    /// The limit named `name` in the current set.
    fn find(set: &Set, name: &str) -> Result<Limit, StoreError> {
        set.find(name).cloned().ok_or_else(|| unknown_limit(name))
    }

    /// `key`'s decision under `limit` now, charging nothing: what a cost-0
    /// [`check`](Limiter::check) returns. A blocked key says so (`allowed: false`,
    /// [`blocked_for`](Decision::blocked_for)). On Redis it always asks Redis (one
    /// round trip), never the denial cache.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(10))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("api", &key, 3).await?;
    /// let d = limiter.peek("api", &key).await?;
    /// assert_eq!((d.allowed, d.remaining, d.blocked_for), (true, 7, None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn peek(&self, limit: &str, key: &Key) -> Result<Decision, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        self.inner.store.peek(&limit, key).await
    }

    /// Where `key` stands with `limit`'s [`Penalty`](crate::Penalty): its block, the
    /// trips the penalty remembers and the block its next trip gets. One
    /// [`peek`](Limiter::peek): nothing is charged (on Redis, one round trip).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, Penalty, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let min = |m: u64| Duration::from_secs(60 * m);
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("login", Quota::per_minute(1))?.penalty(
    ///         Penalty::after(1).block_for(min(2)).escalate_by(2, min(30)).remember(min(60)),
    ///     ))
    ///     .build()?;
    /// let key = Key::from("mallory");
    /// let o = limiter.offences("login", &key).await?;
    /// assert_eq!((o.trips, o.blocked_for, o.next_block), (0, None, Some(min(2))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn offences(&self, limit: &str, key: &Key) -> Result<Offences, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        let peeked = self.inner.store.peek(&limit, key).await?;
        Ok(Offences::of(&peeked, limit.penalty_box()))
    }

    /// Makes `key` idle again under `limit`: its usage is forgotten, its block lifted
    /// and its penalty count cleared. On Redis, one round trip that every process
    /// sees at once; a process that cached the key as blocked sees it within its
    /// [`denial_cache_max_age`](crate::RedisStore::denial_cache_max_age) (this one at
    /// once).
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(2))?).build()?;
    /// let key = Key::from("alice");
    /// limiter.check("api", &key, 2).await?;
    /// assert!(!limiter.check("api", &key, 1).await?.allowed);
    /// limiter.reset("api", &key).await?;
    /// assert!(limiter.check("api", &key, 1).await?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn reset(&self, limit: &str, key: &Key) -> Result<(), StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        self.inner.store.reset(&limit, key).await
    }

    /// Denies every request of `key` under `limit` until `duration` from now
    /// (`allowed: false`, `remaining: 0`, `retry_after = reset_after =` the time
    /// left, [`blocked_for`](Decision::blocked_for) too), whatever its quota says; a
    /// later block replaces this one, a zero `duration` lifts it, and
    /// [`reset`](Limiter::reset) lifts it too. Returns the key's decision afterwards.
    /// A duration longer than [`Penalty::MAX_DENIAL`](crate::Penalty::MAX_DENIAL) (a century; up to
    /// `Duration::MAX`) blocks for exactly that long.
    /// On Redis the block is state like any other: one round trip, and every process
    /// denies the key from its next call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(100))?).build()?;
    /// let key = Key::from("mallory");
    /// limiter.block("api", &key, Duration::from_secs(3600)).await?;
    /// let d = limiter.check("api", &key, 1).await?;
    /// assert!(!d.allowed);
    /// assert_eq!(d.remaining, 0);
    /// assert!(d.blocked_for.is_some_and(|left| left <= Duration::from_secs(3600)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn block(
        &self,
        limit: &str,
        key: &Key,
        duration: Duration,
    ) -> Result<Decision, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        // Longer than a century is a century, on every store (see `Penalty::MAX_DENIAL`).
        let duration = duration.min(crate::Penalty::MAX_DENIAL);
        self.inner.store.block(&limit, key, duration).await
    }

    /// Charges `cost` to `key` under `limit` whether or not it fits: usage may
    /// exceed the capacity (a debt), and `remaining` stays 0 until time repays it
    /// (token bucket, GCRA and leaky bucket: until the refill covers it; the window
    /// algorithms count it in the window it is charged in, so it ends with that
    /// window — the sliding window's weighs on the next one too, the log's lasts one
    /// period: for a longer denial, [`block`](Limiter::block)). Returns the key's decision
    /// afterwards, as [`peek`](Limiter::peek) would. Not a rejection: it never counts
    /// toward a [`Penalty`](crate::Penalty). Any `cost` is safe: one penalty charges
    /// at most a century of debt ([`Penalty::MAX_DENIAL`](crate::Penalty::MAX_DENIAL)).
    ///
    /// It reaches the key under the limit's own quota and under every (algorithm,
    /// period) the store has decided the limit under (plans, the limit before a
    /// reload: up to 16 per name, the same on the memory store and Redis, where they
    /// are the ones this process has seen), even where the key's state there was
    /// swept idle; a plan caller under a period never decided under starts without
    /// the debt. A
    /// [`block`](Limiter::block) reaches every caller, whatever its plan.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limiter, Limit, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("api", Quota::per_second(10))?) // GCRA, T = 100 ms
    ///     .store(MemoryStore::with_clock(clock.clone()))
    ///     .build()?;
    /// let key = Key::from("alice");
    /// let d = limiter.penalize("api", &key, 15).await?; // 5 beyond the burst
    /// assert_eq!((d.remaining, d.reset_after), (0, Duration::from_millis(1500)));
    /// clock.advance(Duration::from_millis(600)); // 6 repaid: 1 free
    /// assert_eq!(limiter.peek("api", &key).await?.remaining, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn penalize(
        &self,
        limit: &str,
        key: &Key,
        cost: u32,
    ) -> Result<Decision, StoreError> {
        let limit = Self::find(&self.snapshot(), limit)?;
        // At most the capacity plus a century of refill, on every store (see
        // `Penalty::MAX_DENIAL`): more would deny no longer, and overflow the fluid algorithms.
        let charge = Charge {
            limit: &limit,
            key,
            cost: u64::from(cost).min(crate::algorithm::max_penalty(limit.params())),
        };
        self.inner.store.penalize(charge).await
    }
}
