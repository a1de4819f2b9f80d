//! The operator's calls on a Redis key space: reset, block, penalize, a settle, and
//! the leaky bucket's reservations, each one script call within the store's deadline.
//!
//! A caller's block, penalty count and reservation queue are one record per (limit
//! name, key), `<prefix>:<limit>:{<subject>}:b`, whatever quota, period or algorithm
//! the key is decided under: a block through the limit reaches a plan caller, and a
//! reload that changes the algorithm or the period keeps blocks and counts. Reset,
//! block and penalize also reach the key's state under every other (algorithm,
//! period) this store has decided the limit's name under (`keys::Known`, up to 16 per
//! name); state under a period only another process has used is not reached (its
//! block is: the record is one per name and key).

use std::time::Duration;

use tokio::time::Instant;

use super::script::Mode;
use super::{MAX_BLOCK, RedisStore, missing_verdict};
use crate::decision::{ExtraAt, Receipt};
use crate::store::{Charge, Store, decision, settle};
use crate::time::micros_up;
use crate::{Decision, Key, Limit, StoreError};

impl RedisStore {
    /// Deletes the caller's record and the key's state under every (algorithm,
    /// period) known for the limit's name; this process's cache forgets the key.
    pub(super) async fn reset_everywhere(
        &self,
        limit: &Limit,
        key: &Key,
    ) -> Result<(), StoreError> {
        let limits = self.known.with_others(limit);
        let charges: Vec<Charge<'_>> = limits
            .iter()
            .map(|limit| Charge {
                limit,
                key,
                cost: 0,
            })
            .collect();
        let charge = charges[0];
        self.forget_cached_key(&charge);
        let deadline = Instant::now() + self.deadline;
        let all: Vec<&Charge<'_>> = charges.iter().collect();
        self.run(deadline, self.clock_now(), Mode::Reset, &all)
            .await?;
        // A denial recorded while the reset was on its way is stale too.
        self.forget_cached_key(&charge);
        Ok(())
    }

    /// Blocks the caller for `duration` (at most [`MAX_BLOCK`]) and marks the key's
    /// state under every known (algorithm, period); this process caches the block.
    pub(super) async fn block_everywhere(
        &self,
        limit: &Limit,
        key: &Key,
        duration: Duration,
    ) -> Result<Decision, StoreError> {
        let cost = micros_up(duration.min(MAX_BLOCK));
        let limits = self.known.with_others(limit);
        let charges: Vec<Charge<'_>> = limits
            .iter()
            .map(|limit| Charge { limit, key, cost })
            .collect();
        let charge = charges[0];
        let sent = self.local_now();
        let deadline = Instant::now() + self.deadline;
        let all: Vec<&Charge<'_>> = charges.iter().collect();
        let verdict = self
            .run(deadline, self.clock_now(), Mode::Block, &all)
            .await?
            .into_iter()
            .next()
            .ok_or_else(missing_verdict)?;
        let decision = decision(limit, verdict);
        self.remember_block(&charge, sent, &decision);
        Ok(decision)
    }

    /// Charges the penalty, clamped per algorithm, under the limit and every other
    /// known (algorithm, period); answers the limit's own decision.
    pub(super) async fn penalize_everywhere(
        &self,
        charge: Charge<'_>,
    ) -> Result<Decision, StoreError> {
        let limits = self.known.with_others(charge.limit);
        let charges: Vec<Charge<'_>> = std::iter::once(charge.limit)
            .chain(limits.iter().skip(1))
            .map(|limit| Charge {
                limit,
                key: charge.key,
                cost: charge
                    .cost
                    .min(crate::algorithm::max_penalty(limit.params())),
            })
            .collect();
        let deadline = Instant::now() + self.deadline;
        let all: Vec<&Charge<'_>> = charges.iter().collect();
        let verdict = self
            .run(deadline, self.clock_now(), Mode::Penalize, &all)
            .await?
            .into_iter()
            .next()
            .ok_or_else(missing_verdict)?;
        Ok(decision(charge.limit, verdict))
    }

    /// Settles the charge of `receipt` to `charge.cost` in one script call: the
    /// give-back by receipt, then the extra, on the charge's own state. A settle that
    /// gives back makes this process's denial cache forget the charge's denial, as a
    /// refund does; one that only adds debt leaves it.
    pub(super) async fn settle_charge(
        &self,
        charge: Charge<'_>,
        receipt: Receipt,
    ) -> Result<Decision, StoreError> {
        if !receipt.charged_under(charge.limit.table()) {
            // Made under a limit whose algorithm or period changed since: its charge
            // counts in state this limit does not use. Nothing moves.
            let peeked = Store::peek(self, charge.limit, charge.key).await?;
            return Ok(settle::standing_from(&peeked, None));
        }
        let plan = settle::plan(charge.limit, receipt, charge.cost);
        if plan.give_back > 0 {
            self.forget_cached(&charge);
        }
        let extra = Charge {
            cost: plan.extra,
            ..charge
        };
        let deadline = Instant::now() + self.deadline;
        let mode = Mode::Settle(plan.give_back);
        let state = self
            .run_call(deadline, self.clock_now(), mode, &[&extra], &[receipt])
            .await?
            .pop()
            .ok_or_else(missing_verdict)?;
        if plan.give_back > 0 {
            // A denial recorded while the settle was on its way is stale too.
            self.forget_cached(&charge);
        }
        let extra_at = state.receipt.map_or(ExtraAt::Unknown, |r| ExtraAt::Own {
            at_us: r.at_us(),
            until_us: r.until_us(),
        });
        // The script says (`allowed`: 0) when the receipt had given back before: then
        // it moved nothing, and no receipt stands for the caller to move again.
        let fresh = state.allowed;
        let standing = fresh
            .then(|| settle::after(charge.limit, receipt, charge.cost, plan, extra_at))
            .flatten();
        Ok(settle::standing(
            charge.limit,
            state,
            state.blocked_us,
            standing,
        ))
    }

    /// Finds and charges the place where the state lives, so processes sharing the
    /// key queue behind each other.
    pub(super) async fn reserve_place(
        &self,
        charge: Charge<'_>,
        max_wait: Duration,
    ) -> Result<Decision, StoreError> {
        let deadline = Instant::now() + self.deadline;
        let mode = Mode::Reserve(micros_up(max_wait));
        let verdict = self
            .run(deadline, self.clock_now(), mode, &[&charge])
            .await?
            .pop()
            .ok_or_else(missing_verdict)?;
        Ok(decision(charge.limit, verdict))
    }
}
