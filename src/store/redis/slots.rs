//! A cluster batch whose keys live on several hash slots: one all-or-nothing call per
//! slot, in order, and the earlier slots' charges taken back when a later one denies.

use tokio::time::Instant;

use super::RedisStore;
use super::script::Mode;
use crate::algorithm::Verdict;
use crate::decision::Receipt;
use crate::store::Charge;
use crate::{Key, StoreError, StoreErrorKind, observe};

impl RedisStore {
    /// A cluster batch whose keys live on several slots: each slot's charges are one
    /// all-or-nothing script, run in order; a denial refunds the slots charged before
    /// it, and the slots after it are decided without charging.
    pub(super) async fn acquire_across_slots(
        &self,
        deadline: Instant,
        now: Option<u64>,
        charges: &[Charge<'_>],
    ) -> Result<Vec<Verdict>, StoreError> {
        let mut groups: Vec<(Key, Vec<&Charge<'_>>, Vec<usize>)> = Vec::new();
        for (i, charge) in charges.iter().enumerate() {
            match groups.iter_mut().find(|(key, _, _)| key == charge.key) {
                Some((_, members, indices)) => {
                    members.push(charge);
                    indices.push(i);
                }
                None => groups.push((*charge.key, vec![charge], vec![i])),
            }
        }
        let mut verdicts: Vec<Option<Verdict>> = vec![None; charges.len()];
        let mut charged_groups = 0;
        let mut denied = false;
        for (_, members, indices) in &groups {
            let mode = if denied { Mode::DryRun } else { Mode::Acquire };
            let result = self.run(deadline, now, mode, members).await;
            let group_verdicts = match result {
                Ok(v) => v,
                Err(err) => {
                    if !denied {
                        self.refund_groups(now, &groups[..charged_groups], &verdicts)
                            .await;
                    }
                    return Err(err);
                }
            };
            if !denied {
                if group_verdicts.iter().all(|v| v.allowed) {
                    charged_groups += 1;
                } else {
                    denied = true;
                    self.refund_groups(now, &groups[..charged_groups], &verdicts)
                        .await;
                }
            }
            for (&i, v) in indices.iter().zip(group_verdicts) {
                verdicts[i] = Some(v);
            }
        }
        verdicts
            .into_iter()
            .map(|v| {
                v.ok_or_else(|| {
                    StoreError::new(StoreErrorKind::Protocol, "a charge got no verdict")
                })
            })
            .collect()
    }

    /// Takes back the charges of `groups` after a later slot denied or failed, each by
    /// the receipt of its verdict (the groups' verdicts are in `verdicts`, at their
    /// charges' indices), so that a refund arriving after a window edge takes back
    /// nothing of the new window. Each refund has a deadline of its own: the batch's
    /// may be spent (a slot that timed out spent all of it), and a refund under it
    /// would give up before sending. A refund that fails leaves those keys charged for
    /// a request that was denied, which errs on the limiter's side; it is reported
    /// (`tracing` / `metrics`).
    async fn refund_groups(
        &self,
        now: Option<u64>,
        groups: &[(Key, Vec<&Charge<'_>>, Vec<usize>)],
        verdicts: &[Option<Verdict>],
    ) {
        for (_, members, indices) in groups {
            let (charged, receipts): (Vec<&Charge<'_>>, Vec<Receipt>) = members
                .iter()
                .zip(indices)
                .filter_map(|(&charge, &i)| Some((charge, verdicts.get(i).copied()??.receipt?)))
                .unzip();
            if charged.is_empty() {
                continue;
            }
            let deadline = Instant::now() + self.deadline;
            if let Err(error) = self
                .run_call(deadline, now, Mode::RefundCharges, &charged, &receipts)
                .await
            {
                observe::refund_failed(&error);
            }
        }
    }
}
