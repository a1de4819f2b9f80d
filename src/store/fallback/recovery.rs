//! Bringing a `Fallback`'s primary back, in the background: probed after a failure
//! once its hold is over, then caught up before it decides again
//! — the operators' calls it missed replayed, the blocks this process knows
//! re-asserted where it lost them, the insurance store's admissions charged to it —
//! and only then serving. Requests meanwhile go to the insurance store: none waits
//! for a probe or for the catch-up.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Instant;

use super::Shared;
use super::carried::Admitted;
use super::health::PROBES_TO_RECOVER;
use crate::StoreError;
use crate::store::{Charge, Store};

/// Calls to the primary a catch-up makes at once.
const AT_ONCE: usize = 32;

/// One call of a catch-up.
pub(super) type Work<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs `work` with at most [`AT_ONCE`] futures at a time; their outputs, in the
/// order they end. On any executor: the futures are polled here, not spawned.
pub(super) async fn at_most<T>(work: Vec<Work<'_, T>>) -> Vec<T> {
    let mut work = work.into_iter();
    let mut running: Vec<Work<'_, T>> = Vec::new();
    let mut ended = Vec::new();
    std::future::poll_fn(|cx| {
        loop {
            while running.len() < AT_ONCE {
                match work.next() {
                    Some(future) => running.push(future),
                    None => break,
                }
            }
            if running.is_empty() {
                return Poll::Ready(());
            }
            let before = running.len();
            let mut i = 0;
            while i < running.len() {
                if let Poll::Ready(output) = running[i].as_mut().poll(cx) {
                    ended.push(output);
                    drop(running.swap_remove(i));
                } else {
                    i += 1;
                }
            }
            if running.len() == before {
                return Poll::Pending;
            }
        }
    })
    .await;
    ended
}

/// Within a Tokio runtime, once the minimum down time has passed: if no call has
/// reached the primary yet, probes it, and logs a primary unreachable at startup (a
/// warning, and a store error counted). Only logged: the first request decides the
/// switch. Not at once, so as not to race the first requests on a cold connection.
pub(super) fn probe_at_startup<P: Store, I: Store>(shared: &Arc<Shared<P, I>>) {
    if shared.health.every_call_tries() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let weak = Arc::downgrade(shared);
    runtime.spawn(async move {
        let wait = match weak.upgrade() {
            Some(shared) => shared.health.min_down(),
            None => return,
        };
        tokio::time::sleep(wait).await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        if shared.health.untouched() {
            match shared.probe().await {
                Ok(()) => shared.primary_answered(),
                Err(error) => crate::observe::unreachable_at_startup(&error),
            }
        }
    });
}

/// Starts the background prober of a primary that just went down, unless there is
/// one, or no Tokio runtime, or the switch has no hysteresis (a zero probe interval):
/// then calls try the primary themselves.
pub(super) fn watch<P: Store, I: Store>(shared: &Arc<Shared<P, I>>) {
    if shared.health.every_call_tries() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let id = shared.probers.fetch_add(1, Ordering::Relaxed) + 1;
    if shared
        .probing
        .compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let watching = Watching {
        shared: Arc::downgrade(shared),
        id,
    };
    runtime.spawn(probe_until_back(watching));
}

/// A prober's claim on its `Fallback`: given up when the prober ends however it
/// ends (back on the primary, the `Fallback` dropped, or its runtime shut down), so
/// that the next failure starts another, and calls never wait on a prober that is gone.
struct Watching<P, I> {
    shared: Weak<Shared<P, I>>,
    id: u64,
}

impl<P, I> Watching<P, I> {
    fn give_up(&self, shared: &Shared<P, I>) {
        let _ = shared
            .probing
            .compare_exchange(self.id, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

impl<P, I> Drop for Watching<P, I> {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            self.give_up(&shared);
        }
    }
}

/// Probes the primary after its hold, then every probe interval, until
/// [`PROBES_TO_RECOVER`] probes in a row answered and its catch-up succeeded; then it
/// serves again. Ends too when the `Fallback` is dropped.
async fn probe_until_back<P: Store, I: Store>(watching: Watching<P, I>) {
    let weak = watching.shared.clone();
    let mut answered = 0;
    loop {
        let wait = {
            let Some(shared) = weak.upgrade() else {
                return;
            };
            if answered == 0 {
                shared
                    .health
                    .until_probe()
                    .max(shared.health.probe_interval())
            } else {
                shared.health.probe_interval()
            }
        };
        tokio::time::sleep(wait).await;
        let Some(shared) = weak.upgrade() else {
            return;
        };
        match shared.probe().await {
            Ok(()) => answered += 1,
            Err(error) => {
                crate::observe::primary_error(&error);
                answered = 0;
                continue;
            }
        }
        if answered < PROBES_TO_RECOVER {
            continue;
        }
        match shared.recover().await {
            Ok(()) => {
                // A failure from now on starts a new prober.
                watching.give_up(&shared);
                shared.back_to_primary().await;
                return;
            }
            Err(error) => {
                crate::observe::recovery_failed(&error);
                answered = 0;
            }
        }
    }
}

impl<P: Store, I: Store> Shared<P, I> {
    /// A peek at a key no caller has: whether the primary answers at all.
    async fn probe(&self) -> Result<(), StoreError> {
        match &self.probe {
            (Some(limit), key) => self.primary.peek(limit, key).await.map(drop),
            (None, _) => self.primary.decide(&[]).await.map(drop),
        }
    }

    /// Catches the primary up before it decides again: what it missed, the blocks
    /// it lost, the insurance store's admissions. Stops at the first failure (what
    /// failed is kept for the next try).
    pub(super) async fn recover(&self) -> Result<(), StoreError> {
        self.replay_missed().await?;
        self.reassert_blocks().await?;
        self.charge_back().await
    }

    /// Serves from the primary again, then charges it what the insurance store
    /// admitted during the catch-up itself.
    pub(super) async fn back_to_primary(&self) {
        if self.health.recovered() {
            crate::observe::switched_to_primary();
        }
        if let Err(error) = self.charge_back().await {
            crate::observe::primary_error(&error);
        }
    }

    /// Re-asserts on the primary each block this process knows that is still in
    /// force and that the primary does not hold (it came back empty): for what is
    /// left of it. A block it holds (perhaps a longer one) is left alone.
    async fn reassert_blocks(&self) -> Result<(), StoreError> {
        let mut reasserted: Vec<Work<'_, Result<(), StoreError>>> = Vec::new();
        for (key, limit, until) in self.seen.in_force() {
            reasserted.push(Box::pin(async move {
                let held = self.primary.peek(&limit, &key).await?;
                if held.blocked_for.is_some() {
                    return Ok(());
                }
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(());
                }
                match self.primary.block(&limit, &key, left).await {
                    // A primary without blocks: nothing to re-assert there.
                    Err(error) if error.kind() == crate::StoreErrorKind::Unsupported => Ok(()),
                    other => other.map(drop),
                }
            }));
        }
        at_most(reasserted).await.into_iter().collect()
    }

    /// Charges the primary, per key, what the insurance store admitted for it in this
    /// outage — at most what the insurance store still counts of the key (time has
    /// repaid the rest there, and would have on the primary). One call per key.
    async fn charge_back(&self) -> Result<(), StoreError> {
        let admitted = self.carried.take_served();
        if admitted.is_empty() {
            return Ok(());
        }
        let mut charged: Vec<Work<'_, Result<(), (Admitted, StoreError)>>> = Vec::new();
        for admitted in admitted {
            charged.push(Box::pin(async move {
                let counted = match self.insurance.peek(&admitted.limit, &admitted.key).await {
                    Ok(now) => now.capacity.saturating_sub(now.remaining),
                    Err(_) => admitted.units,
                };
                let units = admitted.units.min(counted);
                if units == 0 {
                    return Ok(());
                }
                let charge = Charge {
                    limit: &admitted.limit,
                    key: &admitted.key,
                    cost: units,
                };
                match self.primary.penalize(charge).await {
                    Ok(_) => {
                        self.carried.moved(&admitted.limit, &admitted.key, units);
                        Ok(())
                    }
                    // A primary without `penalize`: the charges cannot be carried back.
                    Err(error) if error.kind() == crate::StoreErrorKind::Unsupported => Ok(()),
                    Err(error) => Err((admitted, error)),
                }
            }));
        }
        let mut failed: Vec<Admitted> = Vec::new();
        let mut first = None;
        for outcome in at_most(charged).await {
            if let Err((admitted, error)) = outcome {
                failed.push(admitted);
                first.get_or_insert(error);
            }
        }
        self.carried.restore_served(failed);
        first.map_or(Ok(()), Err)
    }
}
