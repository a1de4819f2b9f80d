//! Where each of a `Fallback`'s calls goes: to the primary while it serves, else to
//! the insurance store (seeded with the primary's usage first, its admissions
//! counted to charge back); operators' resets and blocks to both.

use std::sync::Arc;
use std::time::Duration;

use super::{Fallback, Shared};
use crate::decision::Receipt;
use crate::store::settle::settle_dropped;
use crate::store::{Charge, InFlightSlot, Store, StoreCall, only, refund_dropped};
use crate::{ConfigError, Decision, Key, Limit, StoreError, StoreErrorKind};

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

fn primary_down() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "the primary store is down")
}

impl<P: Store, I: Store> Shared<P, I> {
    /// Whether this call goes to the primary. While it is down, no: a prober brings
    /// it back. Without a prober, a call once the hold is over tries it itself, after
    /// catching it up (replay, blocks, charges).
    async fn to_primary(self: &Arc<Self>) -> bool {
        if self.health.serves_primary() {
            return true;
        }
        if self.probing.load(std::sync::atomic::Ordering::Acquire) != 0
            || !self.health.claim_inline_try()
        {
            return false;
        }
        match self.recover().await {
            Ok(()) => {
                self.back_to_primary().await;
                true
            }
            Err(error) => {
                crate::observe::recovery_failed(&error);
                false
            }
        }
    }

    /// Charges the insurance store, for each key of `charges` it has not served yet in
    /// this outage, the usage the primary last reported (what it does not count yet).
    async fn seed(&self, charges: &[Charge<'_>], seeds: Vec<super::carried::Seed>) {
        for seed in seeds {
            let charge = charges[seed.index];
            let Ok(now) = self.insurance.peek(charge.limit, charge.key).await else {
                continue;
            };
            if now.blocked_for.is_some() {
                continue;
            }
            let counted = now.capacity.saturating_sub(now.remaining);
            let missing = seed.used.saturating_sub(counted);
            if missing > 0 {
                // A store without `penalize` starts the key afresh, as before.
                let _ = self
                    .insurance
                    .penalize(Charge {
                        cost: missing,
                        ..charge
                    })
                    .await;
            }
        }
    }

    /// Seeds the keys of `charges` not yet seeded in `outage`, one seeding at a time:
    /// a key is marked seeded only once its seed landed, so a concurrent first request
    /// of it waits for the seed rather than be decided without it.
    async fn seeded(&self, charges: &[Charge<'_>], outage: u64) {
        if !self.carried.needs_seed(charges, outage) {
            return;
        }
        let _one_at_a_time = self.seeding.lock().await;
        let seeds = self.carried.seeds(charges, outage);
        self.seed(charges, seeds).await;
        self.carried.mark_seeded(charges, outage);
    }

    /// `charges` decided by the insurance store: a block this process saw answers at
    /// once; a key first served in this outage is seeded first; admissions are counted.
    fn on_insurance<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        if let Some(blocked) = self.seen.check(charges) {
            return StoreCall::ready(Ok(blocked));
        }
        let outage = self.health.outage();
        let sent = self.seen.now();
        if !self.carried.needs_seed(charges, outage) && !self.carried.any_trips(charges) {
            return self.insurance.decide(charges).map(move |answer| {
                answer.map(|decisions| {
                    self.insurance_answered(charges, &decisions, sent);
                    routed(decisions, true)
                })
            });
        }
        StoreCall::future(async move {
            self.seeded(charges, outage).await;
            let sent = self.seen.now();
            let mut decisions = self.insurance.decide(charges).await?;
            self.escalated(charges, &mut decisions).await;
            self.insurance_answered(charges, &decisions, sent);
            Ok(routed(decisions, true))
        })
    }

    /// A settle of the primary's charge while the primary is down: its extra (a
    /// debt) is charged on the insurance store, the key seeded first, and counted to
    /// charge the primary on recovery; its give-back is dropped (the primary holds
    /// that charge). Without an extra, the settle is dropped: an error.
    async fn settle_while_down(
        &self,
        charge: Charge<'_>,
        receipt: Receipt,
    ) -> Result<Decision, StoreError> {
        let plan = crate::store::settle::plan(charge.limit, receipt, charge.cost);
        if plan.extra == 0 {
            return Err(settle_dropped(
                "the primary store took this charge and is down",
            ));
        }
        let extra = Charge {
            cost: plan.extra,
            ..charge
        };
        let one = std::slice::from_ref(&extra);
        self.seeded(one, self.health.outage()).await;
        let sent = self.seen.now();
        let decision = self.insurance.penalize(extra).await?;
        self.carried.served_units(&extra, plan.extra);
        self.seen
            .note_blocks(one, std::slice::from_ref(&decision), sent);
        Ok(routed_one(
            crate::store::settle::standing_from(&decision, None),
            true,
        ))
    }

    /// After a refund of the insurance store's charge: the part of it already charged
    /// to the primary on recovery is given back there too (the primary serving), so
    /// that a refunded request holds nothing on either store.
    async fn refund_moved(self: &Arc<Self>, charge: Charge<'_>) {
        let units = self.carried.insurance_refund(&charge);
        if units == 0 || !self.health.serves_primary() {
            return;
        }
        let back = Charge {
            cost: units,
            ..charge
        };
        if let Err(error) = self.primary.refund(back).await {
            // Dropped: the primary counts it still (over-denial, never over-admission).
            self.primary_failed(&error);
        }
    }

    /// A penalty box the insurance store just tripped, for a key whose escalating
    /// penalty remembered trips on the primary: the trip counts after those, and gets
    /// their next block (the insurance store's block lengthened to it, as an
    /// operator's block, which keeps its trips), as on one store.
    async fn escalated(&self, charges: &[Charge<'_>], decisions: &mut [Decision]) {
        for (charge, decision) in charges.iter().zip(decisions.iter_mut()) {
            let (Some(blocked), Some(penalty)) = (decision.blocked_for, charge.limit.penalty_box())
            else {
                continue;
            };
            let carried = self.carried.trips(charge);
            if carried == 0 || decision.trips == 0 || charge.cost == 0 {
                continue;
            }
            let trips = carried.saturating_add(decision.trips);
            let block = penalty.next_block(trips - 1);
            if block <= blocked {
                continue;
            }
            if self
                .insurance
                .block(charge.limit, charge.key, block)
                .await
                .is_err()
            {
                continue;
            }
            decision.blocked_for = Some(block);
            decision.retry_after = Some(block);
            decision.reset_after = block;
            decision.trips = trips;
        }
    }

    /// What the insurance store answered for `charges` (sent at `sent`): its
    /// admissions are counted to charge the primary, and a box it tripped is a block
    /// this process knows, enforced under every quota and re-asserted on the primary.
    fn insurance_answered(&self, charges: &[Charge<'_>], decisions: &[Decision], sent: u64) {
        self.carried.served(charges, decisions);
        self.seen.note_blocks(charges, decisions, sent);
    }

    /// Runs an operation that goes to both stores on the primary, unless it is down
    /// (then it fails at once, and is replayed there before it decides again).
    async fn on_primary_too<T>(self: &Arc<Self>, call: StoreCall<'_, T>) -> Result<T, StoreError> {
        // A store call does nothing until polled: unpolled, it is simply dropped.
        if !self.health.serves_primary() {
            return Err(primary_down());
        }
        let result = call.await;
        match &result {
            Ok(_) => self.primary_answered(),
            Err(error) => self.primary_failed(error),
        }
        result
    }
}

impl<P: Store, I: Store> Store for Fallback<P, I> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        let shared = &self.shared;
        if shared.insurance_now() {
            return shared.on_insurance(charges);
        }
        StoreCall::future(async move {
            if shared.to_primary().await {
                let sent = shared.seen.now();
                match shared.primary.decide(charges).await {
                    Ok(decisions) => {
                        shared.primary_answered();
                        shared.noted(charges, &decisions, sent);
                        return Ok(routed(decisions, false));
                    }
                    Err(error) => shared.primary_failed(&error),
                }
            }
            shared.on_insurance(charges).await
        })
    }

    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        let shared = &self.shared;
        if shared.insurance_now() {
            let one = std::slice::from_ref(&charge);
            if let Some(mut blocked) = shared.seen.check(one) {
                return StoreCall::ready(Ok(blocked.remove(0)));
            }
            let outage = shared.health.outage();
            let sent = shared.seen.now();
            if !shared.carried.needs_seed(one, outage) && !shared.carried.any_trips(one) {
                return shared.insurance.decide_one(charge).map(move |answer| {
                    answer.map(|decision| {
                        shared.insurance_answered(
                            std::slice::from_ref(&charge),
                            std::slice::from_ref(&decision),
                            sent,
                        );
                        routed_one(decision, true)
                    })
                });
            }
            return StoreCall::future(async move {
                let one = std::slice::from_ref(&charge);
                shared.seeded(one, outage).await;
                let sent = shared.seen.now();
                let mut decision = shared.insurance.decide_one(charge).await?;
                shared
                    .escalated(one, std::slice::from_mut(&mut decision))
                    .await;
                shared.insurance_answered(one, std::slice::from_ref(&decision), sent);
                Ok(routed_one(decision, true))
            });
        }
        StoreCall::future(async move { only(self.decide(std::slice::from_ref(&charge)).await?) })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        let shared = &self.shared;
        StoreCall::future(async move {
            // Without a receipt, the newest charges are those of the store serving now.
            // A primary that fails the refund is not replaced by the insurance store:
            // the charges it holds are not the insurance store's to give back.
            if !shared.health.serves_primary() {
                return shared.insurance.refund(charge).await;
            }
            shared
                .primary
                .refund(charge)
                .await
                .inspect_err(|error| shared.primary_failed(error))
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        let shared = &self.shared;
        StoreCall::future(async move {
            match receipt.unrouted() {
                Some((true, receipt)) => {
                    shared.insurance.refund_charge(charge, receipt).await?;
                    shared.refund_moved(charge).await;
                    Ok(())
                }
                Some((false, receipt)) => {
                    // A primary known to be down is not called: the refund would wait
                    // out its deadline only to fail. Either way it is dropped.
                    if !shared.health.serves_primary() {
                        return Err(refund_dropped(
                            "the primary store took this charge and is down",
                        ));
                    }
                    shared
                        .primary
                        .refund_charge(charge, receipt)
                        .await
                        .inspect_err(|error| shared.primary_failed(error))
                }
                None => Err(refund_dropped(
                    "the receipt does not say which store of the fallback took the charge",
                )),
            }
        })
    }

    /// To the store that took the charge, as a refund by receipt goes, never to the
    /// other store for its give-back (it holds nothing of the charge). A settle of a
    /// primary's charge while the primary is down (or failing it) still charges its
    /// extra — a debt is not forgotten: to the insurance store (the key seeded first),
    /// counted with its admissions and charged to the primary on recovery; what it
    /// would have given back is dropped (an error when that is all it does). The
    /// decision's receipt keeps the route.
    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        let shared = &self.shared;
        StoreCall::future(async move {
            let Some((insurance, receipt)) = receipt.unrouted() else {
                return Err(settle_dropped(
                    "the receipt does not say which store of the fallback took the charge",
                ));
            };
            if insurance {
                let settled = shared.insurance.settle(charge, receipt).await?;
                return Ok(routed_one(settled, true));
            }
            if shared.health.serves_primary() {
                let sent = shared.seen.now();
                match shared.primary.settle(charge, receipt).await {
                    Ok(settled) => {
                        shared.noted(
                            std::slice::from_ref(&charge),
                            std::slice::from_ref(&settled),
                            sent,
                        );
                        return Ok(routed_one(settled, false));
                    }
                    Err(error) if error.kind() == StoreErrorKind::Unsupported => {
                        return Err(error);
                    }
                    Err(error) => shared.primary_failed(&error),
                }
            }
            shared.settle_while_down(charge, receipt).await
        })
    }

    /// To both stores, the primary first (unless it is down: then replayed there
    /// before it decides again): a reset must hold whichever store serves the key
    /// next. Fails only when both fail.
    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        let shared = &self.shared;
        StoreCall::future(async move {
            shared.seen.forget(&Charge {
                limit,
                key,
                cost: 1,
            });
            shared.carried.forget(limit, key);
            let primary = shared
                .on_primary_too(shared.primary.reset(limit, key))
                .await;
            if primary.is_err() {
                shared.missed(limit, key, true, None);
            }
            let insurance = shared.insurance.reset(limit, key).await;
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
        let shared = &self.shared;
        StoreCall::future(async move {
            // The new block (or its lifting, for a zero duration) replaces the seen one.
            let charge = Charge {
                limit,
                key,
                cost: 1,
            };
            shared.seen.forget(&charge);
            let sent = shared.seen.now();
            let primary = shared
                .on_primary_too(shared.primary.block(limit, key, duration))
                .await;
            if let Ok(decision) = &primary {
                // Known to this process: re-asserted should the primary come back empty.
                shared.seen.note(
                    std::slice::from_ref(&charge),
                    std::slice::from_ref(decision),
                    sent,
                );
            } else {
                // Replayed on the primary before it decides again, for what is left of it.
                let until = std::time::Instant::now()
                    .checked_add(duration)
                    .unwrap_or_else(|| std::time::Instant::now() + crate::Penalty::MAX_DENIAL);
                shared.missed(limit, key, false, Some(until));
            }
            let insurance = shared.insurance.block(limit, key, duration).await;
            primary.or(insurance)
        })
    }

    /// To the store serving now, as a charge of [`decide`](Store::decide) goes: a
    /// penalty is charged once.
    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        let shared = &self.shared;
        StoreCall::future(async move {
            if shared.to_primary().await {
                let sent = shared.seen.now();
                match shared.primary.penalize(charge).await {
                    Ok(decision) => {
                        shared.primary_answered();
                        shared.noted(
                            std::slice::from_ref(&charge),
                            std::slice::from_ref(&decision),
                            sent,
                        );
                        return Ok(decision);
                    }
                    Err(error) => shared.primary_failed(&error),
                }
            }
            let one = std::slice::from_ref(&charge);
            shared.seeded(one, shared.health.outage()).await;
            let sent = shared.seen.now();
            let decision = shared.insurance.penalize(charge).await?;
            shared.carried.served_units(&charge, charge.cost);
            shared
                .seen
                .note_blocks(one, std::slice::from_ref(&decision), sent);
            Ok(decision)
        })
    }

    /// Reserves on the store serving now; the receipt says which, so that a cancelled
    /// reservation is given back there.
    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        let shared = &self.shared;
        StoreCall::future(async move {
            let one = std::slice::from_ref(&charge);
            if shared.to_primary().await {
                let sent = shared.seen.now();
                match shared.primary.reserve(charge, max_wait).await {
                    Ok(decision) => {
                        shared.primary_answered();
                        shared.noted(one, std::slice::from_ref(&decision), sent);
                        return Ok(routed_one(decision, false));
                    }
                    Err(error) => shared.primary_failed(&error),
                }
            }
            if let Some(mut blocked) = shared.seen.check(one) {
                return Ok(blocked.remove(0));
            }
            shared.seeded(one, shared.health.outage()).await;
            let sent = shared.seen.now();
            let decision = shared.insurance.reserve(charge, max_wait).await?;
            shared.insurance_answered(one, std::slice::from_ref(&decision), sent);
            Ok(routed_one(decision, true))
        })
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.shared.primary.validate(limit)?;
        self.shared.insurance.validate(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.shared.primary.validate_quota(limit)?;
        self.shared.insurance.validate_quota(limit)
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
        let shared = &self.shared;
        StoreCall::future(async move {
            if shared.to_primary().await {
                match shared.primary.acquire_in_flight(limit, key, max).await {
                    Ok(slot) => {
                        shared.primary_answered();
                        return Ok(slot);
                    }
                    Err(error) => shared.primary_failed(&error),
                }
            }
            shared.insurance.acquire_in_flight(limit, key, max).await
        })
    }

    fn supports_in_flight(&self) -> bool {
        self.shared.primary.supports_in_flight() && self.shared.insurance.supports_in_flight()
    }

    fn insurance_serving(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        Some(self.shared.health.flag())
    }
}
