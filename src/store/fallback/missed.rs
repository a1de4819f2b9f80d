//! What a `Fallback`'s primary missed (operators' resets and blocks made while it was
//! down, or that it failed), and their replay on it before it decides again: in the
//! background, a bounded number at once, never inside one request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::Shared;
use super::recovery::{Work, at_most};
use crate::store::Store;
use crate::{Key, Limit, StoreError};

/// Resets and blocks a `Fallback`'s primary missed, by (limit name, key): the latest
/// of each, at most [`MAX_MISSED`] keys (beyond, one is dropped with a warning).
#[derive(Debug, Default)]
pub(super) struct Missed {
    /// Whether any is waiting: the one load a recovery pays while none is.
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

/// One replay's outcome: what failed is kept, with its error.
type Replayed = Result<(), (Key, MissedOp, StoreError)>;

/// The most keys whose missed operations a `Fallback` keeps for its primary.
const MAX_MISSED: usize = 10_000;

/// Replaying what the primary missed.
impl<P: Store, I: Store> Shared<P, I> {
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
    /// while it was down holds on it once it is back. A bounded number of calls at
    /// once; what fails stays for the next try, and the error is returned.
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
        let mut replays: Vec<Work<'_, Replayed>> = Vec::new();
        for ((_, key), op) in ops {
            replays.push(Box::pin(async move {
                let replayed = async {
                    if op.reset {
                        self.primary.reset(&op.limit, &key).await?;
                    }
                    if let Some(until) = op.block_until {
                        let left = until.saturating_duration_since(Instant::now());
                        self.primary.block(&op.limit, &key, left).await?;
                    }
                    Ok::<(), StoreError>(())
                }
                .await;
                replayed.map_err(|error| (key, op, error))
            }));
        }
        let mut first = None;
        for failed in at_most(replays).await {
            if let Err((key, op, error)) = failed {
                // Kept for the next time the primary answers.
                self.missed(&op.limit, &key, op.reset, op.block_until);
                first.get_or_insert(error);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
