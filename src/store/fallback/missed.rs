//! What a `Fallback`'s primary missed (operators' resets and blocks made while it was
//! down, or that it failed), and their replay on it before it decides again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::Fallback;
use crate::store::Store;
use crate::{Key, Limit, StoreError};

/// Resets and blocks a `Fallback`'s primary missed, by (limit name, key): the latest
/// of each, at most [`MAX_MISSED`] keys (beyond, one is dropped with a warning).
#[derive(Debug, Default)]
pub(super) struct Missed {
    /// Whether any is waiting: the one load a decision pays while none is.
    any: AtomicBool,
    ops: Mutex<HashMap<(&'static str, Key), MissedOp>>,
}

/// What the primary missed for one key: a reset, then a block (or its lifting) until
/// an instant of this process's monotonic clock.
#[derive(Debug)]
struct MissedOp {
    limit: Limit,
    reset: bool,
    block_until: Option<Instant>,
}

/// The most keys whose missed operations a `Fallback` keeps for its primary.
const MAX_MISSED: usize = 10_000;

/// Replaying what the primary missed.
impl<P: Store, I: Store> Fallback<P, I> {
    /// Remembers that the primary missed `op` for `key` under `limit`.
    pub(super) fn missed(
        &self,
        limit: &Limit,
        key: &Key,
        reset: bool,
        block_until: Option<Instant>,
    ) {
        let mut ops = self
            .missed
            .ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let slot = (limit.name(), *key);
        if !ops.contains_key(&slot) && ops.len() >= MAX_MISSED {
            #[cfg(feature = "tracing")]
            tracing::warn!(target: "tollgate", limit = limit.name(), "too many operators' calls missed by the primary store: this one is not replayed");
            return;
        }
        let op = ops.entry(slot).or_insert_with(|| MissedOp {
            limit: limit.clone(),
            reset: false,
            block_until: None,
        });
        op.limit = limit.clone();
        if reset {
            // A reset lifts any block before it.
            op.reset = true;
            op.block_until = None;
        }
        if block_until.is_some() {
            op.block_until = block_until;
        }
        self.missed.any.store(true, Ordering::Release);
    }

    /// Replays on the primary what it missed, before it decides again: a block made
    /// while it was down holds on it once it is back. What fails stays for the next
    /// try (and fails this call over to the insurance store).
    pub(super) async fn replay_missed(&self) -> Result<(), StoreError> {
        if !self.missed.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let ops: Vec<((&'static str, Key), MissedOp)> = {
            let mut ops = self
                .missed
                .ops
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.missed.any.store(false, Ordering::Release);
            ops.drain().collect()
        };
        let mut ops = ops.into_iter();
        while let Some((slot, op)) = ops.next() {
            let replayed = async {
                if op.reset {
                    self.primary.reset(&op.limit, &slot.1).await?;
                }
                if let Some(until) = op.block_until {
                    let left = until.saturating_duration_since(Instant::now());
                    self.primary.block(&op.limit, &slot.1, left).await?;
                }
                Ok::<(), StoreError>(())
            }
            .await;
            if let Err(error) = replayed {
                // Kept, with the rest, for the next time the primary answers.
                for (slot, op) in std::iter::once((slot, op)).chain(ops) {
                    self.missed(&op.limit, &slot.1, op.reset, op.block_until);
                }
                return Err(error);
            }
        }
        Ok(())
    }
}
