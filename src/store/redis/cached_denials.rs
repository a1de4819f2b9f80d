//! The denial cache's wiring into the store: which answers it may give, which
//! denials it records, and which calls make it forget.
//!
//! Once Redis denies a key until T, this process denies the same key (at the same or
//! a higher cost) until T without a round trip, but for at most
//! [`denial_cache_max_age`](RedisStore::denial_cache_max_age) (1 s by default), so that a
//! reset, a refund by another process or a corrected server clock reaches this
//! process within it. The cache itself (bounds, ages, eviction) is
//! `store/denial_cache.rs`; on by default, bounded
//! ([`denial_cache`](RedisStore::denial_cache)).
//!
//! - **All or nothing.** A batch with any blocked charge is denied locally (it could
//!   not pass): its other charges were not evaluated, so each reports `allowed: true`
//!   (it did not deny the request; nothing was charged to it), `remaining: 0` and
//!   `reset_after: 0` (nothing is known of its key, so it promises no capacity), no
//!   `retry_after`.
//! - **Blocks answer every cost.** A blocked key
//!   ([`Limiter::block`](crate::Limiter::block), a tripped
//!   [`Penalty`](crate::Penalty)) is cached for every cost, so a caller hammering a
//!   blocked key costs Redis one call per key per max age.
//! - **A penalty box sees its rejections.** The denials of a limit with a penalty box
//!   are not cached until it trips: each rejection must reach Redis to be counted
//!   (nor is a batch with such a charge answered locally, unless that charge is
//!   blocked here). The one denial rule, `store/denial.rs`, says so for every local
//!   answer: this cache, `LeasedStore`'s table and `Fallback`'s carried blocks.
//! - **This process's own changes show at once.** A [`reset`](crate::Limiter::reset),
//!   a refund or a [`settle`](crate::Limiter::settle) that gives back through this
//!   process forgets the key at once (a settle that only adds debt leaves a denial
//!   cached: it can only be truer), and a block through it is cached at once.
//! - **Reservations are not answered from it:** a reservation asks how long, not
//!   whether.

use super::RedisStore;
use crate::Decision;
use crate::store::Charge;

impl RedisStore {
    /// The denial cache's clock, read only when there is a cache: the instant a
    /// call is sent, from which a denial it brings back is aged.
    pub(super) fn cache_clock(&self) -> Option<u64> {
        self.cache.as_ref().map(|_| self.local_now())
    }

    /// The whole batch's answer if one of its charges is blocked here: one blocked
    /// charge denies the all-or-nothing batch without a round trip (see
    /// `DenialCache::check` for what the others report).
    pub(super) fn cached_denial(
        &self,
        charges: &[Charge<'_>],
        sent: Option<u64>,
    ) -> Option<Vec<Decision>> {
        match (&self.cache, sent) {
            (Some(cache), Some(sent)) => cache.check_in_front(charges, sent),
            _ => None,
        }
    }

    /// Records the denials of a batch sent at `sent` that may be answered locally.
    pub(super) fn remember_denials(
        &self,
        charges: &[Charge<'_>],
        sent: Option<u64>,
        decisions: &[Decision],
    ) {
        if let (Some(cache), Some(sent)) = (&self.cache, sent) {
            for (charge, decision) in charges.iter().zip(decisions) {
                // What may be repeated is the one denial rule's to say (a penalty box's
                // rejections never are): `store/denial.rs`.
                cache.record(charge, sent, decision);
            }
        }
    }

    /// Forgets the charge's key under every quota it is cached under.
    pub(super) fn forget_cached_key(&self, charge: &Charge<'_>) {
        if let Some(cache) = &self.cache {
            cache.forget_key(charge);
        }
    }

    /// Forgets the denial cached for this very charge.
    pub(super) fn forget_cached(&self, charge: &Charge<'_>) {
        if let Some(cache) = &self.cache {
            cache.forget(charge);
        }
    }

    /// Replaces what is cached for the charge's key with the block `decision`, made
    /// by a call sent at `sent` (a lifted block only forgets).
    pub(super) fn remember_block(&self, charge: &Charge<'_>, sent: u64, decision: &Decision) {
        if let Some(cache) = &self.cache {
            cache.forget_key(charge);
            if decision.blocked_for.is_some() {
                cache.record(&Charge { cost: 1, ..*charge }, sent, decision);
            }
        }
    }
}
