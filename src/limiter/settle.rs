//! [`Limiter::settle`]: a charge made on an estimate, moved to what the work actually
//! cost once that is known.

use super::Limiter;
use crate::store::{Charge, settle};
use crate::{Decision, Key, StoreError};

impl Limiter {
    /// Moves the charge `decision` made to `key` from its estimate (the cost it was
    /// checked with) to `actual`, for work whose size is known only once it is done
    /// (tokens generated, bytes sent, rows written):
    ///
    /// - **Less:** the difference comes back by the decision's
    ///   [`Receipt`](crate::decision::Receipt), as
    ///   [`refund_charge`](Limiter::refund_charge) gives it back: only what of that
    ///   charge the key still counts (nothing once its window has passed or time has
    ///   repaid it), never leaving the key better than idle.
    /// - **More:** the difference is charged whether or not it fits, as
    ///   [`penalize`](Limiter::penalize) charges: usage may go past the capacity (a
    ///   debt), and `remaining` stays 0 until it is repaid. A settled request is never
    ///   denied after the fact. One settle charges at most what a penalty does (GCRA
    ///   and the leaky bucket: a century of debt; the token bucket: 2^52 units; the
    ///   sliding window: `extra × period` below 2^53) and, on the fixed window, the
    ///   sliding window counters and the log, at most
    ///   [`Quota::MAX_COUNT`](crate::Quota::MAX_COUNT), the largest capacity of any
    ///   quota (a charge that alone fills the capacity keeps the key denied while it
    ///   counts, however large it is, under every quota of the key: a per-caller quota
    ///   of a larger count sees the same usage).
    ///   Any `actual` is safe: nothing panics, wraps or overflows.
    /// - **Equal:** nothing changes.
    ///
    /// It settles under the quota the charge was made with (a caller's own, from
    /// [`check_with`](Limiter::check_with), included), on the store that took it (on a
    /// [`Fallback`](crate::store::Fallback), a settle whose store is down fails and
    /// settles nothing), in one atomic call on the memory store and in one round trip
    /// on Redis and Redis Cluster. A blocked key is settled too (it is accounting, not
    /// admission).
    ///
    /// Returns the settled request's decision: `allowed` (it stays admitted), no
    /// `retry_after` or `delay`, the key's `remaining` and `reset_after` as
    /// [`peek`](Limiter::peek) reports them (a blocked key: 0 and its block's end, with
    /// `blocked_for`), and a receipt of the charge now standing, of cost `actual`
    /// (`None` for 0).
    ///
    /// **Settle a decision once; settle again with the decision this returns**, which
    /// moves from `actual`. Over such a chain, the total given back never exceeds
    /// what the chain charged (the estimate and every extra). After a settle that
    /// charged more, a later settle gives back at most that extra (the newest part,
    /// which counts longest); the estimate stays counted where it was. Settling to 0
    /// ends the charge: the returned decision has no receipt, and settles nothing
    /// more.
    ///
    /// **Each receipt moves its charge once** (the memory store, Redis, and a
    /// [`Fallback`](crate::store::Fallback) or a
    /// [`LeasedStore`](crate::store::LeasedStore) of them). Settling the same
    /// decision again (or after a [`refund_charge`](Limiter::refund_charge) of it), or
    /// retrying a settle that failed with a timeout whose first try may have run,
    /// gives nothing back and charges nothing more: it returns the key's standing
    /// without a receipt. The memory store remembers the receipts given back while
    /// their charges count (at most 16 per key, and as many keys as it holds states;
    /// past that, the one that stops counting soonest is forgotten); Redis keeps a
    /// record per receipt, written in the same script call as the give-back, under
    /// the key's hash tag, for as long as the charge counts; a `LeasedStore`
    /// remembers the receipts moved in its leases (at most 1,024 per shard of its
    /// table), past the lease's end, for as long as their charges count.
    ///
    /// A decision that charged nothing (denied, a peek, admitted by a
    /// [`check_all`](Limiter::check_all) that another limit denied, a fail-open or
    /// shadow decision of the layer: no [`receipt`](Decision::receipt)) settles
    /// nothing: `Ok` with a copy of the decision, unchanged, and no store call.
    ///
    /// A settle dropped before it completes may or may not have settled (on Redis its
    /// script may have run): where the caller may go away (a client that disconnects),
    /// run it to completion, e.g. in a spawned task.
    ///
    /// A decision from before a [`reset`](Limiter::reset) of its key gives nothing
    /// back (its charge was forgotten with the key's state), but an extra is still
    /// charged: the work happened. A decision whose limit a
    /// [`reload`](Limiter::reload) has removed fails with
    /// [`StoreErrorKind::UnknownLimit`](crate::StoreErrorKind::UnknownLimit). One whose
    /// limit a reload changed in algorithm (its parameters included, such as the
    /// sliding window counters' buckets) or period since the charge (the receipt
    /// names the limit it was charged under) settles nothing, neither giving back nor
    /// charging more: the charge counts in state the limit no longer uses, and the
    /// state it uses now holds other requests' charges. One whose count or burst
    /// changed settles under the limit as it is now, with the quota the charge was
    /// made with (as [`refund_charge`](Limiter::refund_charge) does).
    ///
    /// Settle a decision with the key it was made for: a receipt names a charge, not
    /// its key, so a decision settled under another key gives that key back what it
    /// never paid (as a `refund_charge` under another key would). The layer always
    /// settles with the request's own key.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limit, Limiter, MemoryStore, Quota};
    /// use tollgate::clock::ManualClock;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let limiter = Limiter::builder()
    ///     .limit(Limit::new("tokens", Quota::per_minute(1_000))?) // GCRA, T = 60 ms
    ///     .store(MemoryStore::with_clock(clock.clone()))
    ///     .build()?;
    /// let key = Key::from("alice");
    ///
    /// // Admitted on an estimate of 300 tokens; the answer used 120.
    /// let estimate = limiter.check("tokens", &key, 300).await?;
    /// let settled = limiter.settle(&estimate, &key, 120).await?;
    /// assert_eq!(settled.remaining, 880);
    ///
    /// // Another admitted on 100 used 1 500: a debt beyond the capacity.
    /// let estimate = limiter.check("tokens", &key, 100).await?;
    /// let settled = limiter.settle(&estimate, &key, 1_500).await?;
    /// assert!(settled.allowed); // never denied after the fact
    /// assert_eq!(settled.remaining, 0);
    /// assert!(!limiter.check("tokens", &key, 1).await?.allowed); // until repaid
    ///
    /// // Settled again from the returned decision: from 1 500 to 1 000.
    /// let again = limiter.settle(&settled, &key, 1_000).await?;
    /// assert_eq!(again.receipt().map(|r| r.cost()), Some(1_000));
    /// clock.advance(Duration::from_secs(60)); // a minute repays 1 000 tokens
    /// assert!(limiter.check("tokens", &key, 1).await?.allowed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn settle(
        &self,
        decision: &Decision,
        key: &Key,
        actual: u64,
    ) -> Result<Decision, StoreError> {
        let Some(receipt) = decision.receipt else {
            return Ok(decision.clone());
        };
        // Under the quota the charge was made with: a caller's own, if it had one.
        let set = self.snapshot();
        let limit = self.resolve(&set, decision.limit, Some(decision.quota))?;
        if !receipt.charged_under(limit.table()) {
            // The limit's algorithm or period changed since the charge: it counts in
            // state this limit no longer uses, and nothing of the state it uses now is
            // its to give back (nor, for the work it paid for, to charge again).
            let peeked = self.inner.store.peek(&limit, key).await?;
            return Ok(settle::standing_from(&peeked, None));
        }
        let charge = Charge {
            limit: &limit,
            key,
            cost: actual,
        };
        self.inner.store.settle(charge, receipt).await
    }
}
