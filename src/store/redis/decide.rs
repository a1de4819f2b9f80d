//! The Redis store's [`Store`] implementation: every call one script (or function)
//! call within the store's deadline, answered as a future.
//!
//! A single decision calls the function library (`FCALL`, see `function.rs`), alone
//! or, while calls are in flight, with the other single decisions waiting
//! (`coalesce.rs`); a batch, a refund or an operation runs a script (`EVALSHA`, see
//! `script.rs`); a
//! multi-limit [`check_all`](crate::Limiter::check_all) is one script that decides
//! every limit and charges all or none. On a cluster, limits whose keys live on
//! different slots are charged in order, and the charged ones are refunded when a
//! later one denies (`slots.rs`). Denials are answered from the denial cache
//! where they may be (`cached_denials.rs`); the operator's calls (reset, block,
//! penalize, reserve) and settles are `operations.rs`.

use std::time::Duration;

use tokio::time::Instant;

use super::script::Mode;
use super::{LUA_EXACT, RedisStore};
use crate::algorithm::Verdict;
use crate::decision::Receipt;
use crate::store::{Charge, InFlightSlot, Store, StoreCall, charged};
use crate::{Algorithm, ConfigError, Decision, Key, Limit, StoreError};

impl Store for RedisStore {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        StoreCall::future(async move {
            if charges.is_empty() {
                return Ok(Vec::new());
            }
            let sent = self.cache_clock();
            if let Some(decisions) = self.cached_denial(charges, sent) {
                return Ok(decisions);
            }
            let verdicts = self.acquire_remote(charges).await?;
            let decisions: Vec<Decision> = charges
                .iter()
                .zip(verdicts)
                .map(|(c, v)| charged(c, v))
                .collect();
            self.remember_denials(charges, sent, &decisions);
            Ok(decisions)
        })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            // Even a refund of 0 goes to Redis: it records the instant, as the memory
            // store's refund does. An operator's refund (the only caller) frees the
            // key under every quota it is cached under: a plan caller's denial too.
            self.forget_cached_key(&charge);
            let deadline = Instant::now() + self.deadline;
            self.run(deadline, self.clock_now(), Mode::Refund, &[&charge])
                .await
                .map(drop)
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            if !receipt.charged_under(charge.limit.table()) {
                // Made under a limit whose algorithm or period changed since: its
                // charge counts in state this limit does not use.
                return Ok(());
            }
            self.forget_cached(&charge);
            let charge = Charge {
                cost: charge.cost.min(receipt.cost()),
                ..charge
            };
            let deadline = Instant::now() + self.deadline;
            self.run_call(
                deadline,
                self.clock_now(),
                Mode::RefundCharges,
                &[&charge],
                &[receipt],
            )
            .await
            .map(drop)
        })
    }

    /// One script call (`Mode::Settle`): the give-back by receipt (as
    /// `refund_charge`) and the extra (as `penalize`, on the charge's own state only),
    /// then the state as a peek reads it, with the key's block beside it.
    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        StoreCall::future(self.settle_charge(charge, receipt))
    }

    /// Takes a slot record in one script call, within the store's deadline (see
    /// [`in_flight_ttl`](RedisStore::in_flight_ttl)).
    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        StoreCall::future(self.enter(limit, key, max))
    }

    fn supports_in_flight(&self) -> bool {
        true
    }

    /// One script call (`Mode::Reset`): deletes the caller's record (block, penalty
    /// count, reservations) and the key's state (and log) under the limit and under
    /// every other (algorithm, period) this store has decided the limit's name under
    /// (a plan's period, the limit before a reload; up to 16 per name). State under a
    /// period only another process has used is not reached (its block is: the record
    /// is one per name and key). This process's denial cache forgets the key at
    /// once; other processes' caches, within their max age.
    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        StoreCall::future(self.reset_everywhere(limit, key))
    }

    /// One script call (`Mode::Block`): writes the caller's record, replacing its
    /// block and count, and marks the key's state under every (algorithm, period)
    /// this store knows for the limit's name, so that their decisions read it. A
    /// duration beyond a century (of 365-day years) blocks for a century, which Lua's
    /// doubles count exactly (and so does the memory store). This process caches the block at once.
    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        StoreCall::future(self.block_everywhere(limit, key, duration))
    }

    /// One script call (`Mode::Penalize`): the algorithm's own decision, charging even
    /// what does not fit, under the limit and under every other (algorithm, period)
    /// this store knows for its name (a plan caller is penalised too; each such state
    /// is charged under the first quota seen with that period). Each charge is
    /// clamped to the most its algorithm counts exactly (GCRA and the leaky bucket: a
    /// century of debt; the token bucket: 2^52 units; the sliding window: `cost ×
    /// period` below 2^53). Answers the limit's own decision.
    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::future(self.penalize_everywhere(charge))
    }

    /// One script call (`Mode::Reserve`): the place is found and charged where the
    /// state lives, so processes sharing the key queue behind each other. Not answered
    /// from the denial cache: a reservation asks how long, not whether.
    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        StoreCall::future(self.reserve_place(charge, max_wait))
    }

    /// Rejects limits whose arithmetic would leave the integers Lua holds exactly
    /// (below 2^53): a sliding window multiplies counts by the period, so `limit ×
    /// period in µs` must stay below 2^53 (e.g. at most 104 days at a limit of 1000).
    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        limit.validate()?;
        let p = limit.params();
        if p.algorithm == Algorithm::SlidingWindow
            && u128::from(p.limit) * u128::from(p.period_us) >= LUA_EXACT
        {
            return Err(ConfigError::new(format!(
                "invalid limit \"{}\" for the redis store: sliding_window computes \
                 limit × period ({} × {} µs), which must stay below 2^53 to be exact in \
                 Lua; use a smaller limit, a shorter period or sliding_window_counters",
                limit.name(),
                p.limit,
                p.period_us
            )));
        }
        Ok(())
    }
}

impl RedisStore {
    /// Decides `charges` in Redis: one all-or-nothing script on one server or one hash
    /// tag, else one per cluster slot in order (see `slots.rs`).
    async fn acquire_remote(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, StoreError> {
        let deadline = Instant::now() + self.deadline;
        let now = self.clock_now();
        let all: Vec<&Charge<'_>> = charges.iter().collect();
        if let [charge] = charges
            && self.coalesces()
        {
            // One decision: alone, or with others in flight at the moment (see
            // `coalesce.rs`).
            return self.decide_coalesced(deadline, now, charge).await;
        }
        if !self.is_cluster() || charges.iter().all(|c| c.key == charges[0].key) {
            // One server, or one hash tag: one script decides and charges everything.
            return self.run(deadline, now, Mode::Acquire, &all).await;
        }
        let mut verdicts = self.acquire_across_slots(deadline, now, charges).await?;
        if !verdicts.iter().all(|v| v.allowed) {
            // The slots charged before the denial were refunded: nothing is charged,
            // so nothing may be refunded again.
            for verdict in &mut verdicts {
                verdict.receipt = None;
            }
        }
        Ok(verdicts)
    }
}
