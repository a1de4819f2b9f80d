//! [`Fallback`]: a primary store with an insurance store for when it fails.
//!
//! `missed.rs` replays on the primary the operators' calls it missed; `seen_blocks.rs`
//! carries the blocks it reported while the insurance store serves.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::settle::settle_dropped;
use super::{Charge, InFlightSlot, Store, StoreCall, refund_dropped};
use crate::decision::Receipt;
use crate::{ConfigError, Decision, Key, Limit, StoreError};

mod missed;
mod seen_blocks;

use missed::Missed;
use seen_blocks::SeenBlocks;

/// Serves from `primary`, and from `insurance` while the primary fails.
///
/// When a primary call fails (a [`StoreError`](crate::StoreError) of any kind: timeout,
/// lost connection, Redis loading or failing over), that call is answered by the
/// insurance store and the primary is left alone for the
/// [`probe interval`](Fallback::probe_interval) (default 200 ms). After it, the next
/// call tries the primary again; the first success returns all traffic to it.
///
/// The insurance store keeps its own counts: while it serves, each process limits on
/// its own (typically a [`MemoryStore`](crate::MemoryStore) per process), which is
/// looser than a shared Redis limit by the number of processes, and stricter than
/// failing open. Charges made on one store are not carried over to the other: a
/// caller starts the outage with a fresh quota, and a penalty box's count of
/// rejections starts again.
///
/// Blocks are carried: a block the primary reported to this process (an operator's,
/// or a tripped penalty box's, seen on a decision's
/// [`blocked_for`](crate::Decision::blocked_for)) is enforced by this process while
/// the insurance store serves, until it ends — under the quota it was seen under, for
/// at most 10,000 keys (the oldest seen leave first). A block this process never saw
/// (the caller was blocked through another process, and has not asked this one since)
/// is not known to it.
/// Carried blocks are timed on this process's monotonic clock, not on a store's
/// injected clock ([`ManualClock`](crate::clock::ManualClock)): in a simulation that
/// advances the stores' clock, a carried block ends in real time.
///
/// Refunds go where their charge went. A decision's [`Receipt`] records which store
/// took the charge (through nested `Fallback`s too), and
/// [`refund_charge`](Store::refund_charge) sends it there: a refund for a charge the
/// primary took while the primary is down is dropped (an error, and the charge stays
/// counted), never sent to the insurance store, which would gain quota it never
/// spent; and the other way round. A [`settle`](Store::settle) goes there too, and is
/// dropped (an error; nothing given back or charged) when that store is down. A
/// [`refund`](Store::refund) without a receipt goes to the store serving now, and is
/// dropped too when that store fails.
///
/// Operators' calls: a [`peek`](Store::peek) and a [`penalize`](Store::penalize) go to
/// the store serving now, as a charge does; a [`reset`](Store::reset) and a
/// [`block`](Store::block) go to both stores (the primary unless it is known to be
/// down, and the insurance), so that they hold whichever store serves the key next;
/// they fail only when both stores fail.
///
/// ```
/// use tollgate::{Key, Limiter, MemoryStore, Limit, Quota};
/// use tollgate::store::Fallback;
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// // Any two stores: in production the primary is usually a `RedisStore`.
/// let store = Fallback::new(MemoryStore::new(), MemoryStore::new());
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_second(1))?)
///     .store(store.clone())
///     .build()?;
/// assert!(limiter.check("api", &Key::from("alice"), 1).await?.allowed);
/// assert!(store.serving_primary());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Fallback<P, I> {
    primary: P,
    insurance: I,
    probe_interval: Duration,
    /// When the primary is down: the instant it may be tried again.
    down_until: std::sync::Arc<Mutex<Option<Instant>>>,
    /// Operators' resets and blocks the primary missed (down, or failing them), to
    /// replay on it before it decides again.
    missed: std::sync::Arc<Missed>,
    /// Blocks the primary reported, enforced while the insurance store serves.
    seen: std::sync::Arc<SeenBlocks>,
}

impl<P: Store, I: Store> Fallback<P, I> {
    /// Serves from `primary`, falling back to `insurance` while `primary` fails.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new());
    /// assert!(store.serving_primary());
    /// ```
    pub fn new(primary: P, insurance: I) -> Self {
        Self {
            primary,
            insurance,
            probe_interval: Duration::from_millis(200),
            down_until: std::sync::Arc::default(),
            missed: std::sync::Arc::default(),
            seen: std::sync::Arc::default(),
        }
    }

    /// How long to leave a failed primary alone before trying it again (default
    /// 200 ms). Zero tries it on every call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// let store = Fallback::new(MemoryStore::new(), MemoryStore::new())
    ///     .probe_interval(Duration::from_millis(500));
    /// # let _ = store;
    /// ```
    #[must_use]
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// Whether calls currently go to the primary store.
    ///
    /// ```
    /// use tollgate::MemoryStore;
    /// use tollgate::store::Fallback;
    /// assert!(Fallback::new(MemoryStore::new(), MemoryStore::new()).serving_primary());
    /// ```
    pub fn serving_primary(&self) -> bool {
        self.lock().is_none()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this call should try the primary. While it is down, one call per
    /// interval does (the probe); the others go straight to the insurance store.
    fn try_primary(&self) -> bool {
        let mut down_until = self.lock();
        match *down_until {
            None => true,
            Some(until) if Instant::now() >= until => {
                *down_until = Some(Instant::now() + self.probe_interval);
                true
            }
            Some(_) => false,
        }
    }

    fn primary_failed(&self, error: &StoreError) {
        let was_up = self
            .lock()
            .replace(Instant::now() + self.probe_interval)
            .is_none();
        #[cfg(feature = "tracing")]
        if was_up {
            tracing::warn!(target: "tollgate", %error, "primary store failed; serving from the insurance store");
        }
        let _ = (was_up, error);
    }

    fn primary_answered(&self) {
        let was_down = self.lock().take().is_some();
        #[cfg(feature = "tracing")]
        if was_down {
            tracing::info!(target: "tollgate", "primary store answers again; back to it");
        }
        let _ = was_down;
    }
}

/// Records on each receipt which of a `Fallback`'s stores took the charge.
impl<P: Store, I: Store> Fallback<P, I> {
    /// Runs an operation that goes to both stores on the primary, unless it is known
    /// to be down (then it fails at once, without waiting out a deadline).
    async fn both_primary<T>(&self, call: StoreCall<'_, T>) -> Result<T, StoreError> {
        if !self.try_primary() {
            return Err(StoreError::new(
                crate::StoreErrorKind::Unavailable,
                "the primary store is down",
            ));
        }
        let result = call.await;
        match &result {
            Ok(_) => self.primary_answered(),
            Err(error) => self.primary_failed(error),
        }
        result
    }
}

fn routed(decisions: Vec<Decision>, insurance: bool) -> Vec<Decision> {
    decisions
        .into_iter()
        .map(|decision| routed_one(decision, insurance))
        .collect()
}

/// `decision`, its receipt recording which store took the charge.
fn routed_one(mut decision: Decision, insurance: bool) -> Decision {
    decision.receipt = decision.receipt.map(|r| r.routed(insurance));
    decision
}

impl<P: Store, I: Store> Fallback<P, I> {
    /// Whether the primary is known down and no probe is due: calls go straight to
    /// the insurance store (and are answered at once when it answers at once, as the
    /// memory store does). Reads only; the probe is claimed by the call that makes it.
    fn known_down(&self) -> bool {
        self.lock().is_some_and(|until| Instant::now() < until)
    }
}

impl<P: Store, I: Store> Store for Fallback<P, I> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        if self.known_down() {
            if let Some(blocked) = self.seen.check(charges) {
                return StoreCall::ready(Ok(blocked));
            }
            return self
                .insurance
                .decide(charges)
                .map(|answer| answer.map(|decisions| routed(decisions, true)));
        }
        StoreCall::future(async move {
            if self.try_primary() {
                let sent = self.seen.now();
                let replayed = self.replay_missed().await;
                match replayed.and(self.primary.decide(charges).await) {
                    Ok(decisions) => {
                        self.primary_answered();
                        self.seen.note(charges, &decisions, sent);
                        return Ok(routed(decisions, false));
                    }
                    Err(error) => self.primary_failed(&error),
                }
            }
            if let Some(blocked) = self.seen.check(charges) {
                return Ok(blocked);
            }
            Ok(routed(self.insurance.decide(charges).await?, true))
        })
    }

    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        if self.known_down() {
            if let Some(mut blocked) = self.seen.check(std::slice::from_ref(&charge)) {
                return StoreCall::ready(Ok(blocked.remove(0)));
            }
            return self
                .insurance
                .decide_one(charge)
                .map(|answer| answer.map(|decision| routed_one(decision, true)));
        }
        StoreCall::future(
            async move { super::only(self.decide(std::slice::from_ref(&charge)).await?) },
        )
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            // Without a receipt, the newest charges are those of the store serving now.
            // A primary that fails the refund is not replaced by the insurance store:
            // the charges it holds are not the insurance store's to give back.
            if !self.serving_primary() {
                return self.insurance.refund(charge).await;
            }
            self.primary.refund(charge).await.inspect_err(|error| {
                self.primary_failed(error);
            })
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            match receipt.unrouted() {
                Some((true, receipt)) => self.insurance.refund_charge(charge, receipt).await,
                Some((false, receipt)) => {
                    // A primary known to be down is not called: the refund would wait
                    // out its deadline only to fail. Either way it is dropped.
                    if !self.serving_primary() {
                        return Err(refund_dropped(
                            "the primary store took this charge and is down",
                        ));
                    }
                    self.primary
                        .refund_charge(charge, receipt)
                        .await
                        .inspect_err(|error| self.primary_failed(error))
                }
                None => Err(refund_dropped(
                    "the receipt does not say which store of the fallback took the charge",
                )),
            }
        })
    }

    /// To the store that took the charge, as a refund by receipt goes: a settle whose
    /// store is down (or fails) is dropped, an error, never sent to the other store,
    /// which holds nothing of the charge. The decision's receipt keeps the route.
    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            let Some((insurance, receipt)) = receipt.unrouted() else {
                return Err(settle_dropped(
                    "the receipt does not say which store of the fallback took the charge",
                ));
            };
            let settled = if insurance {
                self.insurance.settle(charge, receipt).await?
            } else if self.serving_primary() {
                self.primary
                    .settle(charge, receipt)
                    .await
                    .inspect_err(|error| self.primary_failed(error))?
            } else {
                return Err(settle_dropped(
                    "the primary store took this charge and is down",
                ));
            };
            Ok(routed_one(settled, insurance))
        })
    }

    /// To both stores, the primary first (unless it is known to be down): a reset must
    /// hold whichever store serves the key next. Fails only when both fail.
    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            self.seen.forget(&Charge {
                limit,
                key,
                cost: 1,
            });
            let primary = self.both_primary(self.primary.reset(limit, key)).await;
            if primary.is_err() {
                self.missed(limit, key, true, None);
            }
            let insurance = self.insurance.reset(limit, key).await;
            primary.or(insurance)
        })
    }

    /// To both stores, as [`reset`](Fallback::reset): a block must hold through a
    /// failover. Returns the primary's decision, or the insurance's when the primary
    /// failed; fails only when both fail.
    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            // The new block (or its lifting, for a zero duration) replaces the seen one.
            self.seen.forget(&Charge {
                limit,
                key,
                cost: 1,
            });
            let primary = self
                .both_primary(self.primary.block(limit, key, duration))
                .await;
            if primary.is_err() {
                // Replayed on the primary once it answers, for what is left of it.
                let until = Instant::now()
                    .checked_add(duration)
                    .unwrap_or_else(|| Instant::now() + crate::Penalty::MAX_DENIAL);
                self.missed(limit, key, false, Some(until));
            }
            let insurance = self.insurance.block(limit, key, duration).await;
            primary.or(insurance)
        })
    }

    /// To the store serving now, as a charge of [`decide`](crate::store::Store::decide) goes:
    /// a penalty is charged once.
    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            if self.try_primary() {
                match self.primary.penalize(charge).await {
                    Ok(decision) => {
                        self.primary_answered();
                        return Ok(decision);
                    }
                    Err(error) => self.primary_failed(&error),
                }
            }
            self.insurance.penalize(charge).await
        })
    }

    /// Reserves on the store serving now; the receipt says which, so that a cancelled
    /// reservation is given back there.
    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            if self.try_primary() {
                let sent = self.seen.now();
                match self.primary.reserve(charge, max_wait).await {
                    Ok(decision) => {
                        self.primary_answered();
                        self.seen.note(
                            std::slice::from_ref(&charge),
                            std::slice::from_ref(&decision),
                            sent,
                        );
                        return Ok(routed(vec![decision], false).remove(0));
                    }
                    Err(error) => self.primary_failed(&error),
                }
            }
            if let Some(mut blocked) = self.seen.check(std::slice::from_ref(&charge)) {
                return Ok(blocked.remove(0));
            }
            let decision = self.insurance.reserve(charge, max_wait).await?;
            Ok(routed(vec![decision], true).remove(0))
        })
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.primary.validate(limit)?;
        self.insurance.validate(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.primary.validate_quota(limit)?;
        self.insurance.validate_quota(limit)
    }

    /// Takes the slot where a charge would go: from the primary, or from the
    /// insurance store while the primary fails. A slot goes back to the store that
    /// gave it. While the insurance store serves, each process counts its own
    /// requests, as it does their charges.
    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        StoreCall::future(async move {
            if self.try_primary() {
                match self.primary.acquire_in_flight(limit, key, max).await {
                    Ok(slot) => {
                        self.primary_answered();
                        return Ok(slot);
                    }
                    Err(error) => self.primary_failed(&error),
                }
            }
            self.insurance.acquire_in_flight(limit, key, max).await
        })
    }

    fn supports_in_flight(&self) -> bool {
        self.primary.supports_in_flight() && self.insurance.supports_in_flight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, Quota, StoreErrorKind};

    /// A primary that is always down, answering as a remote store does: a future.
    #[derive(Debug)]
    struct Down;

    impl Store for Down {
        fn decide<'a>(&'a self, _: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
            StoreCall::future(async { Err(StoreError::new(StoreErrorKind::Connection, "down")) })
        }

        fn refund<'a>(&'a self, _: Charge<'a>) -> StoreCall<'a, ()> {
            StoreCall::future(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_known_down_primary_is_skipped_and_the_memory_store_answers_at_once() {
        let store = Fallback::new(Down, MemoryStore::new()).probe_interval(Duration::from_secs(60));
        let limit = Limit::new("api", Quota::per_minute(2)).expect("limit");
        let key = Key::from("alice");
        let charge = Charge {
            limit: &limit,
            key: &key,
            cost: 1,
        };
        // The first call tries the primary: a future, answered by the insurance store.
        let first = store.decide_one(charge);
        assert!(!first.is_ready());
        assert!(first.await.expect("insurance").allowed);
        assert!(!store.serving_primary());
        // Known down, no probe due: at once, from the insurance store, routed there.
        let second = store
            .decide_one(charge)
            .into_ready()
            .expect("answered at once");
        let second = second.expect("insurance");
        assert_eq!((second.allowed, second.remaining), (true, 0));
        let third = store
            .decide(&[charge])
            .into_ready()
            .expect("answered at once");
        assert!(!third.expect("insurance")[0].allowed);
        let (insurance, _) = second
            .receipt
            .expect("charged")
            .unrouted()
            .expect("a route");
        assert!(insurance);
    }
}
