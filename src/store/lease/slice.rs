//! One lease: a slice of quota charged to the backing store, and the rule per algorithm
//! that says until when its unused units may still be spent here.
//!
//! Pure: no lock, no clock, no I/O. Times are whole microseconds; "local" times are
//! this process's clock, "store" times the backing store's (Redis: server `TIME`).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::algorithm::{Algorithm, Params};
use crate::decision::Receipt;

/// Why a lease cannot serve a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spent {
    /// Its time is over (or the store no longer counts every unused unit).
    Expired,
    /// Still valid, but too few units are left for this request.
    Exhausted,
}

/// How a lease's units stop counting, per algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Fixed window, sliding window, sliding window counters: the slice counts, in
    /// full, in the window (sub-window) it was charged in, so its units may be spent
    /// until that window ends. The end is a store instant.
    Window { ends_at: u64 },
    /// Token bucket, GCRA, leaky bucket: the slice is debt that time repays, oldest
    /// unit first, one unit per `unit_ns`. A unit may be spent while the store still
    /// counts it.
    Fluid {
        /// Time that repays one unit, in ns, rounded up (a longer unit makes the lease
        /// end sooner: the safe side).
        unit_ns: u64,
        /// Leaky bucket: a unit is served at its place in the queue, no later than the
        /// limit's bound on delays.
        max_delay_us: Option<u64>,
    },
}

impl Kind {
    /// The rule for a slice charged at store instant `at` under `p`; `None` for an
    /// algorithm that cannot lease exactly (the sliding log).
    pub(super) fn of(p: &Params, at: u64) -> Option<Self> {
        let window = |len: u64| Kind::Window {
            ends_at: (at / len.max(1) + 1) * len.max(1),
        };
        match p.algorithm {
            Algorithm::FixedWindow | Algorithm::SlidingWindow => Some(window(p.period_us)),
            Algorithm::SlidingWindowCounters { .. } => Some(window(p.bucket_us)),
            Algorithm::SlidingWindowLog => None,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket => {
                let unit_ns = (u128::from(p.period_us) * 1_000)
                    .div_ceil(u128::from(p.limit.max(1)))
                    .max(u128::from(p.emission_ns));
                Some(Kind::Fluid {
                    unit_ns: u64::try_from(unit_ns).unwrap_or(u64::MAX),
                    max_delay_us: (p.algorithm == Algorithm::LeakyBucket).then_some(p.max_delay_us),
                })
            }
        }
    }
}

/// Whether `algorithm` can lease at all (the sliding log cannot; see the module docs of
/// `lease`).
pub(super) fn leasable(algorithm: Algorithm) -> bool {
    algorithm != Algorithm::SlidingWindowLog
}

/// The next lease's number ([`Lease::id`]).
static NEXT_LEASE: AtomicU64 = AtomicU64::new(1);

/// A slice of `slice` units charged to the store in one call, and what was spent of it.
#[derive(Debug, Clone)]
pub(super) struct Lease {
    pub(super) kind: Kind,
    /// The slice charge's receipt (cost `slice`).
    pub(super) receipt: Receipt,
    /// This lease's number, unique in the process: the receipts of the requests it
    /// admits carry it ([`Lease::issue`]), so a refund or a settle finds its lease by
    /// it, never mistaking another charge decided in the same µs for one of its own.
    pub(super) id: u64,
    pub(super) slice: u64,
    /// Units spent (the request that charged the slice included), less local refunds.
    pub(super) used: u64,
    /// Local instant the slice charge was sent: the store decided no earlier.
    pub(super) sent: u64,
    /// Local instant its answer arrived: the store decided no later.
    pub(super) answered: u64,
    /// Local instant after which the lease is over whatever the algorithm says: the
    /// charge's window end or the longest lease, whichever comes first.
    pub(super) expires: u64,
    /// The store's `remaining` right after the slice charge.
    pub(super) remaining: u64,
    /// Whether a request was decided from it here, beyond the one that charged it:
    /// a lease that ends without serving one cost its machinery for nothing.
    pub(super) served: bool,
}

impl Lease {
    /// A lease for a slice charged by a call sent at local `sent` and answered at local
    /// `answered`, whose store decision carried `receipt` and `remaining`; `used` of it
    /// already spent by the request that charged it.
    pub(super) fn new(
        kind: Kind,
        receipt: Receipt,
        used: u64,
        (sent, answered): (u64, u64),
        remaining: u64,
        max_lease_us: u64,
    ) -> Self {
        Self {
            // Relaxed: only uniqueness matters.
            id: NEXT_LEASE.fetch_add(1, Ordering::Relaxed),
            ..Self::unnumbered(
                kind,
                receipt,
                used,
                (sent, answered),
                remaining,
                max_lease_us,
            )
        }
    }

    /// As [`new`](Self::new), numbered 0, which no receipt a lease issues carries: for
    /// a lease that is only looked at, never installed ([`Shadow`]).
    fn unnumbered(
        kind: Kind,
        receipt: Receipt,
        used: u64,
        (sent, answered): (u64, u64),
        remaining: u64,
        max_lease_us: u64,
    ) -> Self {
        let mut expires = sent.saturating_add(max_lease_us);
        if let Kind::Window { ends_at } = kind {
            // The window ends `ends_at − at` of store time after the charge, which
            // happened no earlier than `sent`: this local instant is never late.
            expires = expires.min(sent.saturating_add(ends_at.saturating_sub(receipt.at_us())));
        }
        Self {
            kind,
            receipt,
            id: 0,
            slice: receipt.cost(),
            used,
            sent,
            answered,
            expires,
            remaining,
            served: false,
        }
    }

    pub(super) fn unused(&self) -> u64 {
        self.slice - self.used
    }

    /// The store instant now at latest: the store decided at `at` no earlier than local
    /// `sent`, and both clocks run at the same rate.
    fn store_now_latest(&self, now: u64) -> u64 {
        self.receipt
            .at_us()
            .saturating_add(now.saturating_sub(self.sent))
    }

    /// The store instant now at earliest: the store decided no later than `answered`.
    fn store_now_earliest(&self, now: u64) -> u64 {
        self.receipt
            .at_us()
            .saturating_add(now.saturating_sub(self.answered))
    }

    /// Spends `cost` units at local instant `now` if the lease covers them; returns the
    /// delay (µs) before the request may be served (leaky bucket; 0 otherwise).
    pub(super) fn spend(&mut self, now: u64, cost: u64) -> Result<u64, Spent> {
        if now >= self.expires {
            return Err(Spent::Expired);
        }
        let delay = match self.kind {
            Kind::Window { .. } => 0,
            Kind::Fluid {
                unit_ns,
                max_delay_us,
            } => {
                // The store still counts every unused unit while its debt, ending at
                // the receipt's reset instant, covers them: `now + unused·unit ≤ end`.
                // The reset instant is rounded up to the µs, so 999 ns are taken off.
                let end_ns = u128::from(self.receipt.until_us()) * 1_000;
                let unused_ns = u128::from(self.unused()) * u128::from(unit_ns);
                let now_ns = u128::from(self.store_now_latest(now)) * 1_000;
                if now_ns + unused_ns + 999 > end_ns {
                    return Err(Spent::Expired);
                }
                match max_delay_us {
                    None => 0,
                    Some(bound) => {
                        // The next unit's place in the queue starts `unused` units
                        // before the end; served then, on the late side of the clock.
                        let place = end_ns - unused_ns;
                        let from = u128::from(self.store_now_earliest(now)) * 1_000;
                        let delay = u64::try_from(place.saturating_sub(from).div_ceil(1_000))
                            .unwrap_or(u64::MAX);
                        if delay > bound {
                            return Err(Spent::Expired);
                        }
                        delay
                    }
                }
            }
        };
        if self.unused() < cost {
            return Err(Spent::Exhausted);
        }
        self.used += cost;
        Ok(delay)
    }

    /// Whether the store may still count some unused unit at local `now` (else
    /// returning them is a wasted call: the store would take back nothing). A charge
    /// counts until its reset instant, after the end of its lease's use: a sliding
    /// window's in the next window, weighted; a sub-window's until it leaves the window.
    pub(super) fn counts_any(&self, now: u64) -> bool {
        self.unused() > 0 && self.store_now_earliest(now) < self.receipt.until_us()
    }

    /// The store's reset instant, as a wait from local `now` (on the late side).
    pub(super) fn reset_after(&self, now: u64) -> u64 {
        self.receipt
            .until_us()
            .saturating_sub(self.store_now_earliest(now))
    }

    /// The local instant after which `receipt`'s charge, spent from this lease, counts
    /// no more under a limit of period `period_us`, on the late side: its
    /// [`counts_until`](Receipt::counts_until) is a store instant, reached no later than
    /// that much after the slice charge was answered.
    pub(super) fn counts_until_local(&self, receipt: &Receipt, period_us: u64) -> u64 {
        self.answered.saturating_add(
            receipt
                .counts_until(period_us)
                .saturating_sub(self.receipt.at_us()),
        )
    }

    /// The receipt of `cost` units spent from this lease (`None` for 0).
    pub(super) fn issue(&self, cost: u64) -> Option<Receipt> {
        Some(self.receipt.with_cost(cost)?.spent_from_lease(self.id))
    }

    /// Whether `receipt` was issued from this lease (any cost, and any part of it
    /// settled in it).
    pub(super) fn issued(&self, receipt: Receipt) -> bool {
        receipt.lease() == self.id && receipt.same_charge(&self.receipt)
    }
}

/// A plain decision's charge (one the store made without a lease), kept to tell
/// whether a larger slice charged by it would have served a later request.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shadow {
    pub(super) receipt: Receipt,
    /// Local instant the charge was sent (at the latest). Taken as the instant it was
    /// answered too, saving a clock reading per plain decision: a shadow admits
    /// nothing, it only tells whether leasing resumes (a leaky bucket's delay is then
    /// judged a round trip short).
    pub(super) sent: u64,
}

impl Shadow {
    /// Whether a request of `cost` at local `now` would have been decided from a lease
    /// of its charge had the slice been `cost` units larger: a request arriving while
    /// a lease of exactly the charge is valid but used up (`Exhausted` by the rule of
    /// [`Lease::spend`]: for a fluid slice the `cost` more units would end the debt
    /// `cost·T` later, so they count exactly while the charge's own debt is unpaid).
    /// A fluid one also only within a quarter of the longest lease, as its slices grow
    /// ([`grown_after_use`](super::LeasedStore::grown_after_use)).
    pub(super) fn would_serve(&self, p: &Params, now: u64, cost: u64, max_lease_us: u64) -> bool {
        let Some(kind) = Kind::of(p, self.receipt.at_us()) else {
            return false;
        };
        let cost_now = self.receipt.cost();
        let mut lease = Lease::unnumbered(
            kind,
            self.receipt,
            cost_now,
            (self.sent, self.sent),
            0,
            max_lease_us,
        );
        let quick = now.saturating_sub(self.sent) * 4 < max_lease_us;
        lease.spend(now, cost) == Err(Spent::Exhausted)
            && (matches!(kind, Kind::Window { .. }) || quick)
    }

    /// Whether no request at local `now` or later can be one this charge's larger
    /// slice would have served ([`would_serve`](Self::would_serve) false for good):
    /// past the lease's end, or for a fluid charge past its debt or a quarter of the
    /// longest lease. (A leaky bucket's bound on delays is left out: a unit's delay
    /// shrinks as time passes.)
    pub(super) fn dead(&self, p: &Params, now: u64, max_lease_us: u64) -> bool {
        let Some(kind) = Kind::of(p, self.receipt.at_us()) else {
            return true;
        };
        let lease = Lease::unnumbered(
            kind,
            self.receipt,
            self.receipt.cost(),
            (self.sent, self.sent),
            0,
            max_lease_us,
        );
        if now >= lease.expires {
            return true;
        }
        match kind {
            Kind::Window { .. } => false,
            Kind::Fluid { .. } => {
                now.saturating_sub(self.sent) * 4 >= max_lease_us
                    || u128::from(lease.store_now_latest(now)) * 1_000 + 999
                        > u128::from(self.receipt.until_us()) * 1_000
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, Lease, Spent};
    use crate::decision::Receipt;
    use crate::{Algorithm, Limit, Quota};

    fn params(algorithm: Algorithm, quota: Quota) -> crate::algorithm::Params {
        *Limit::new("t", quota)
            .expect("limit")
            .algorithm(algorithm)
            .params()
    }

    #[test]
    fn a_window_lease_ends_with_the_window_it_was_charged_in() {
        let p = params(Algorithm::FixedWindow, Quota::per_second(100));
        let at = 5_000_900_000; // 0.9 s into a window
        let kind = Kind::of(&p, at).expect("leasable");
        let receipt = Receipt::new(at, 5_001_000_000, 10).expect("charged");
        let mut lease = Lease::new(kind, receipt, 1, (7, 9), 90, 1_000_000);
        assert_eq!(lease.expires, 7 + 100_000);
        assert_eq!(lease.spend(7 + 99_999, 9), Ok(0));
        assert_eq!(lease.spend(7 + 99_999, 1), Err(Spent::Exhausted));
        let mut lease = Lease::new(kind, receipt, 1, (7, 9), 90, 1_000_000);
        assert_eq!(lease.spend(7 + 100_000, 1), Err(Spent::Expired));
    }

    #[test]
    fn a_fluid_lease_lasts_while_the_store_counts_every_unused_unit() {
        // 10/s: one unit is repaid every 100 ms. A slice of 5 from idle ends 500 ms on.
        let p = params(Algorithm::Gcra, Quota::per_second(10));
        let at = 1_000_000_000;
        let receipt = Receipt::new(at, at + 500_000, 5).expect("charged");
        let kind = Kind::of(&p, at).expect("leasable");
        let mut lease = Lease::new(kind, receipt, 1, (at, at), 5, 10_000_000);
        // Four unused: counted until 100 ms on, when the first unit is repaid.
        assert_eq!(lease.spend(at + 100_000, 1), Err(Spent::Expired));
        assert_eq!(lease.spend(at + 99_000, 1), Ok(0));
        // Three unused: counted until 200 ms.
        assert_eq!(lease.spend(at + 198_000, 3), Ok(0));
        assert_eq!(lease.unused(), 0);
    }

    #[test]
    fn a_leaky_lease_serves_each_unit_at_its_place_in_the_queue() {
        let p = params(Algorithm::LeakyBucket, Quota::per_second(10));
        let at = 1_000_000_000;
        let receipt = Receipt::new(at, at + 300_000, 3).expect("charged");
        let kind = Kind::of(&p, at).expect("leasable");
        let mut lease = Lease::new(kind, receipt, 1, (at, at), 7, 10_000_000);
        assert_eq!(lease.spend(at, 1), Ok(100_000));
        assert_eq!(lease.spend(at + 50_000, 1), Ok(150_000));
    }

    #[test]
    fn a_shadow_is_hit_while_its_charge_counts_and_dead_after() {
        use super::Shadow;
        // GCRA 10/s: a charge of 1 from idle is debt for 100 ms.
        let p = params(Algorithm::Gcra, Quota::per_second(10));
        let at = 1_000_000_000;
        let receipt = Receipt::new(at, at + 100_000, 1).expect("charged");
        let shadow = Shadow { receipt, sent: at };
        assert!(shadow.would_serve(&p, at + 50_000, 1, 250_000));
        assert!(!shadow.dead(&p, at + 50_000, 250_000));
        // Past the debt: never again.
        assert!(!shadow.would_serve(&p, at + 100_000, 1, 250_000));
        assert!(shadow.dead(&p, at + 100_000, 250_000));
        // A window charge: until the lease would have ended (250 ms here).
        let p = params(Algorithm::FixedWindow, Quota::per_minute(100));
        let receipt = Receipt::new(at, at + 60_000_000, 1).expect("charged");
        let shadow = Shadow { receipt, sent: at };
        assert!(shadow.would_serve(&p, at + 249_999, 1, 250_000));
        assert!(!shadow.dead(&p, at + 249_999, 250_000));
        assert!(shadow.dead(&p, at + 250_000, 250_000));
    }

    #[test]
    fn the_sliding_log_does_not_lease() {
        let p = params(Algorithm::SlidingWindowLog, Quota::per_second(10));
        assert_eq!(Kind::of(&p, 0), None);
    }
}
