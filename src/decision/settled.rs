//! Settling a charge by its receipt: what a settle gives back and charges
//! ([`Settlement`]), and the receipt of the charge it leaves standing
//! ([`Receipt::settled`]). Pure arithmetic, the same for every store, so that memory,
//! Redis, leases and fallbacks hand out identical receipts.

use std::num::NonZeroU64;

use super::Receipt;

/// What settling a charge to its actual cost does: one of the two is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settlement {
    /// Taken back from the charge, by its receipt (the store takes back at most what
    /// of it the key still counts).
    pub(crate) give_back: u64,
    /// Charged on top, whether or not it fits (a debt, as a penalty charges).
    pub(crate) extra: u64,
}

/// Where a settle charged its extra, for the receipt of the charge it leaves standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtraAt {
    /// Where the receipt's charge is counted (a lease's slice, which the extra was
    /// spent from).
    Same,
    /// A charge of its own, decided at `at_us` and counting until `until_us` (the
    /// store's reset instant right after it), as a check's receipt names its charge.
    Own { at_us: u64, until_us: u64 },
    /// Unknown (a store that settles through `refund_charge` and `penalize`): the
    /// extra is never given back by the receipt.
    Unknown,
}

impl Receipt {
    /// What settling this receipt's charge to `actual` does, charging at most
    /// `most_extra` on top (see `algorithm::max_settle_extra`). Less than the cost
    /// gives back the difference, but never the part counted where the receipt does
    /// not name ([`beyond`](Receipt::settled)); more charges the difference.
    pub(crate) fn settlement(&self, actual: u64, most_extra: u64) -> Settlement {
        let cost = self.cost();
        if actual < cost {
            Settlement {
                give_back: (cost - actual).min(cost - self.beyond),
                extra: 0,
            }
        } else {
            Settlement {
                give_back: 0,
                extra: (actual - cost).min(most_extra),
            }
        }
    }

    /// The receipt of the charge standing after this one was settled to `actual` by
    /// `plan` (`None` for an actual of 0: nothing stands). Its cost is `actual`, so a
    /// settle of it moves from `actual`; it names one place, and the part of `actual`
    /// counted elsewhere is `beyond` it, never given back:
    ///
    /// - settled down, it names the same charge, less what was given back;
    /// - settled up, it names the extra where it was charged (`extra_at`): a later
    ///   settle gives back at most that extra, the newest part, which counts longest;
    ///   the estimate before it stays counted where it was (the limiter's favour).
    ///
    /// So over a chain of settles, each from the receipt the last one returned, the
    /// total given back never exceeds what the chain charged.
    ///
    /// `freed_us` is how much earlier a charge that gave back ends: the give-back's
    /// refill time for the token bucket, GCRA and the leaky bucket, whose receipt names
    /// the end of the charge's debt (so a later settle takes back only what of the
    /// rest time has not repaid); 0 for the window algorithms, whose charge stays in
    /// its window.
    pub(crate) fn settled(
        self,
        actual: u64,
        plan: Settlement,
        extra_at: ExtraAt,
        freed_us: u64,
    ) -> Option<Self> {
        let cost = NonZeroU64::new(actual)?;
        let reachable = self.cost() - self.beyond;
        // An extra charged by the store itself is no lease's.
        let lease = match extra_at {
            ExtraAt::Own { .. } if plan.extra > 0 => 0,
            _ => self.lease,
        };
        let (at_us, until_us, reachable) = match extra_at {
            _ if plan.extra == 0 => (
                self.at_us,
                self.until_us.saturating_sub(freed_us),
                reachable.saturating_sub(plan.give_back),
            ),
            ExtraAt::Same => (
                self.at_us,
                self.until_us,
                reachable.saturating_add(plan.extra),
            ),
            ExtraAt::Own { at_us, until_us } => (at_us, until_us, plan.extra),
            ExtraAt::Unknown => (self.at_us, self.until_us, reachable),
        };
        Some(Self {
            at_us,
            until_us,
            cost,
            route: self.route,
            beyond: actual - reachable.min(actual),
            lease,
            // A receipt of its own: the settled one has given back already.
            nonce: super::fresh_nonce(),
            table: self.table,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{ExtraAt, Receipt, Settlement};

    fn receipt(cost: u64) -> Receipt {
        Receipt::new(10, 20, cost).expect("a charge")
    }

    /// Settles `receipt` to `actual`, returning what was given back and the new one.
    fn settle(receipt: Receipt, actual: u64, extra_at: ExtraAt) -> (u64, Option<Receipt>) {
        let plan = receipt.settlement(actual, u64::MAX);
        (plan.give_back, receipt.settled(actual, plan, extra_at, 0))
    }

    #[test]
    fn down_gives_back_the_difference_and_keeps_the_charge_named() {
        let (back, after) = settle(receipt(10), 4, ExtraAt::Unknown);
        assert_eq!(back, 6);
        let after = after.expect("4 stand");
        assert_eq!((after.cost(), after.beyond), (4, 0));
        assert!(after.same_charge(&receipt(10)));
        assert_eq!(settle(after, 0, ExtraAt::Unknown), (4, None));
    }

    #[test]
    fn a_debt_given_back_ends_earlier() {
        let plan = receipt(10).settlement(4, u64::MAX);
        let after = receipt(10).settled(4, plan, ExtraAt::Unknown, 6);
        assert_eq!(after.map(|r| (r.at_us, r.until_us)), Some((10, 14)));
        // Settled up, the receipt names the extra's own end, not a shifted one.
        let plan = receipt(10).settlement(12, u64::MAX);
        let own = ExtraAt::Own {
            at_us: 30,
            until_us: 40,
        };
        let after = receipt(10).settled(12, plan, own, 6);
        assert_eq!(after.map(|r| r.until_us), Some(40));
    }

    #[test]
    fn up_names_the_extra_and_gives_back_only_it_later() {
        let own = ExtraAt::Own {
            at_us: 30,
            until_us: 40,
        };
        let plan = receipt(5).settlement(8, u64::MAX);
        assert_eq!(
            plan,
            Settlement {
                give_back: 0,
                extra: 3
            }
        );
        let after = receipt(5).settled(8, plan, own, 0).expect("8 stand");
        assert_eq!((after.at_us, after.until_us, after.beyond), (30, 40, 5));
        // Down to 2: only the extra (3) comes back; the estimate stays counted.
        let (back, last) = settle(after, 2, ExtraAt::Unknown);
        assert_eq!(back, 3);
        assert_eq!(last.map(|r| (r.cost(), r.beyond)), Some((2, 2)));
        assert_eq!(settle(last.expect("2 stand"), 0, ExtraAt::Unknown).0, 0);
    }

    #[test]
    fn an_extra_spent_where_the_charge_is_stays_reachable() {
        let plan = receipt(5).settlement(8, u64::MAX);
        let after = receipt(5)
            .settled(8, plan, ExtraAt::Same, 0)
            .expect("8 stand");
        assert_eq!(after.beyond, 0);
        assert_eq!(settle(after, 0, ExtraAt::Unknown).0, 8);
    }

    #[test]
    fn an_unknown_place_keeps_the_extra_beyond_reach() {
        let plan = receipt(5).settlement(8, u64::MAX);
        let after = receipt(5)
            .settled(8, plan, ExtraAt::Unknown, 0)
            .expect("8 stand");
        assert_eq!(after.beyond, 3);
        assert_eq!(settle(after, 0, ExtraAt::Unknown).0, 5);
    }

    #[test]
    fn the_extremes_saturate_and_stay_within_the_cap() {
        let plan = receipt(1).settlement(u64::MAX, 1_000);
        assert_eq!(plan.extra, 1_000);
        let own = ExtraAt::Own {
            at_us: 30,
            until_us: 40,
        };
        let after = receipt(1).settled(u64::MAX, plan, own, 0).expect("stands");
        assert_eq!((after.cost(), after.beyond), (u64::MAX, u64::MAX - 1_000));
        // Back to 1: what the settle charged (the cap) comes back, no more.
        assert_eq!(settle(after, 1, ExtraAt::Unknown).0, 1_000);
        assert_eq!(settle(after, u64::MAX, ExtraAt::Unknown).0, 0);
    }

    #[test]
    fn a_chain_never_gives_back_more_than_it_charged() {
        let own = |at_us| ExtraAt::Own {
            at_us,
            until_us: at_us + 10,
        };
        let mut rng = 0x2545_f491_u64;
        for _ in 0..1_000 {
            let mut receipt = Some(receipt(50));
            let (mut charged, mut given) = (50_u64, 0_u64);
            for step in 0..8 {
                let Some(current) = receipt else { break };
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let actual = rng % 120;
                let plan = current.settlement(actual, u64::MAX);
                charged += plan.extra;
                given += plan.give_back;
                assert!(given <= charged, "{given} back of {charged}");
                receipt = current.settled(actual, plan, own(100 + step), 0);
            }
        }
    }
}
