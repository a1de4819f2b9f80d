//! A request's in-flight slots: taken at once from a store that keeps them in memory,
//! else through a future; in wait mode, in line behind this process's earlier waiters
//! for the same key.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::layer::shared::HeldCount;
use crate::layer::slot_lines::{SlotLines, Ticket};
use crate::limiter::{Limiter, Set};
use crate::observe::{Operation, StoreMetrics};
use crate::store::{InFlightSlot, StoreFuture};
use crate::{Key, StoreError};

/// The end of a wait too long to add to an instant: a century, further than any
/// process runs.
const FOREVER: std::time::Duration = std::time::Duration::from_secs(100 * 365 * 86_400);

/// One policy's in-flight claim: its index in the set, the key, and the most of its
/// requests that may run at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim {
    pub(crate) index: usize,
    pub(crate) key: Key,
    pub(crate) max: u32,
    /// The policy only watches this caller (shadow mode): a slot is taken if one is
    /// free, and the request runs without one if not; it never waits for one.
    pub(crate) shadow: bool,
}

/// A request's in-flight slots, one per policy with an in-flight limit that had one
/// free, and the (shadowed) policies that had none; or, when an enforced one had none
/// free, that policy's index (the slots taken before it are given back).
pub(crate) type Entry = Result<Entered, usize>;

/// The slots a request entered with.
pub(crate) struct Entered {
    pub(crate) slots: Vec<InFlightSlot>,
    /// The shadowed policies that found no slot free: the request runs without theirs.
    pub(crate) shadowed: Vec<usize>,
}

/// A request in a key's line for an in-flight slot, counted among the layer's held
/// requests until it leaves the line (served, refused, or gone).
struct InLine {
    ticket: Ticket,
    _count: HeldCount,
}

/// In-flight slots taken without awaiting (memory store), or a future for them.
pub(crate) enum Entering {
    Ready(Result<Entry, StoreError>),
    Waiting(StoreFuture<'static, Entry>),
}

impl Limiter {
    /// Takes one in-flight slot for each of `claims` (policy index in `set`, key,
    /// bound), all or none: synchronously on the memory store, else through a
    /// `'static` future. With `wait` (the layer's wait mode), a request that finds no
    /// slot free waits in `lines`, this process's line for its first claim's key, and
    /// once first in it tries again, backing off from 1 ms to 25 ms, until a slot
    /// frees or its wait is over. A request that arrives while others wait for that
    /// key joins the line behind them rather than try first: within one process,
    /// waiters get slots in the order they came. Across processes sharing a store
    /// nothing orders them: a freed slot goes to whichever process asks first, so a
    /// waiter may be overtaken by another process's requests, never beyond its
    /// `wait` (then it is refused).
    ///
    /// A request in line counts in `held`, the layer's one budget of held requests
    /// (`max_held`, shared with the requests held for their turn); a line holds at
    /// most `per_key` waiters. Past either bound the request is refused at once.
    pub(crate) fn enter(
        &self,
        set: &Arc<Set>,
        claims: &[Claim],
        wait: Option<std::time::Duration>,
        lines: &Arc<SlotLines>,
        (held, max_held, per_key): (&Arc<AtomicUsize>, usize, usize),
        metrics: &StoreMetrics,
    ) -> Entering {
        let line = claims.first().map(|claim| (claim.index, claim.key));
        // Others wait for this key here: behind them, not ahead.
        let queued = wait.is_some() && line.is_some_and(|line| lines.waiting(&line));
        let store = self.store();
        // The first try at once: a store that keeps slots in memory answers ready.
        let mut first = None;
        if !queued {
            let timer = metrics.start(Operation::InFlight);
            let now = enter_now(&**store, set, claims);
            if now.is_some() {
                metrics.stop(timer);
            }
            match now {
                Some(Ok(Err(index))) if wait.is_some() && line.is_some() => {
                    first = Some(Err(index));
                }
                Some(entry) => return Entering::Ready(entry),
                None => {}
            }
        }
        let (store, set, claims) = (store.clone(), set.clone(), claims.to_vec());
        let held = Arc::clone(held);
        let in_line = move |lines: &Arc<SlotLines>, line| {
            let count = HeldCount::take(&held, max_held)?;
            lines.join(line, per_key).map(|ticket| InLine {
                ticket,
                _count: count,
            })
        };
        // In line from the start when others wait; else after a first try.
        let mut ticket = None;
        if let Some(line) = line.filter(|_| queued) {
            match in_line(lines, line) {
                Some(joined) => ticket = Some(joined),
                // The line, or the layer, is full: refused at once.
                None => return Entering::Ready(Ok(Err(claims[0].index))),
            }
        }
        let lines = lines.clone();
        let metrics = metrics.clone();
        Entering::Waiting(Box::pin(async move {
            // Saturating: a wait of `Duration::MAX` is "as long as it takes", not a
            // panic at request time.
            let until = wait.map(|wait| {
                let now = tokio::time::Instant::now();
                now.checked_add(wait).unwrap_or(now + FOREVER)
            });
            if let (Some(InLine { ticket, .. }), Some(until)) = (&ticket, until)
                && !ticket.turn(until).await
            {
                return Ok(Err(claims[0].index));
            }
            let mut tries = until.map(Retries::until);
            let mut entry = match first {
                Some(entry) => entry,
                None => enter_store(&store, &set, &claims, &metrics).await?,
            };
            loop {
                let again = match (&entry, &mut tries) {
                    (Err(_), Some(tries)) => {
                        if ticket.is_none()
                            && let Some(line) = line
                        {
                            // No slot at the first try: in line, and wait for a turn
                            // behind any who came before (or refused now when the line
                            // is full).
                            let Some(joined) = in_line(&lines, line) else {
                                return Ok(entry);
                            };
                            let joined = ticket.insert(joined);
                            if !joined.ticket.turn(tries.until).await {
                                return Ok(entry);
                            }
                        }
                        tries.wait().await
                    }
                    _ => false,
                };
                if !again {
                    return Ok(entry);
                }
                entry = enter_store(&store, &set, &claims, &metrics).await?;
            }
        }))
    }
}

/// One attempt at every slot of `claims`, if the store answers each at once (a store
/// that keeps slots in memory); `None` as soon as one call would await (the slots
/// taken before it go back as they are dropped; nothing was sent for it).
fn enter_now(
    store: &dyn crate::store::Store,
    set: &Set,
    claims: &[Claim],
) -> Option<Result<Entry, StoreError>> {
    let mut entered = Entered::with_capacity(claims.len());
    for claim in claims {
        let Claim {
            index, key, max, ..
        } = *claim;
        match store
            .acquire_in_flight(&set.limits[index], &key, max)
            .into_ready()
            .ok()?
        {
            Ok(slot) => {
                if let Err(index) = entered.add(claim, slot) {
                    return Some(Ok(Err(index)));
                }
            }
            Err(error) => return Some(Err(error)),
        }
    }
    Some(Ok(Ok(entered)))
}

impl Entered {
    fn with_capacity(claims: usize) -> Self {
        Self {
            slots: Vec::with_capacity(claims),
            shadowed: Vec::new(),
        }
    }

    /// Adds what the store answered for `claim`: its slot, or, with none free, the
    /// claim's policy among the shadowed ones, or (enforced) its index as the refusal.
    fn add(&mut self, claim: &Claim, slot: Option<InFlightSlot>) -> Result<(), usize> {
        match slot {
            Some(slot) => self.slots.push(slot),
            None if claim.shadow => self.shadowed.push(claim.index),
            None => return Err(claim.index),
        }
        Ok(())
    }
}

/// One attempt at every slot of `claims` on another store. A request dropped while
/// a call is on its way (its client left) drops the call: a store's
/// `acquire_in_flight` is cancel-safe (see its docs; Redis sends the removal of the
/// slot record right behind the call, on the same connection, so the next request already
/// finds the slot free), and the slots taken before it go back as they are dropped.
/// Letting the call run on instead would give the slot back only a round trip after
/// its reply: a request right after a Redis stall would find it taken.
async fn enter_store(
    store: &Arc<dyn crate::store::Store>,
    set: &Arc<Set>,
    claims: &[Claim],
    metrics: &StoreMetrics,
) -> Result<Entry, StoreError> {
    let timer = metrics.start(Operation::InFlight);
    let entry = enter_each(store, set, claims).await;
    metrics.stop(timer);
    entry
}

/// [`enter_store`]'s calls, one claim after the other.
async fn enter_each(
    store: &Arc<dyn crate::store::Store>,
    set: &Arc<Set>,
    claims: &[Claim],
) -> Result<Entry, StoreError> {
    let mut entered = Entered::with_capacity(claims.len());
    for claim in claims {
        let Claim {
            index, key, max, ..
        } = *claim;
        let slot = store
            .acquire_in_flight(&set.limits[index], &key, max)
            .await?;
        if let Err(index) = entered.add(claim, slot) {
            return Ok(Err(index));
        }
    }
    Ok(Ok(entered))
}

/// The waits between a waiting request's tries for an in-flight slot: 1 ms, doubling
/// up to 25 ms, until its wait is over. A slot frees when a response body ends, which
/// no store announces (on Redis, in another process), so the request asks again.
struct Retries {
    until: tokio::time::Instant,
    next: std::time::Duration,
}

impl Retries {
    fn until(until: tokio::time::Instant) -> Self {
        Self {
            until,
            next: std::time::Duration::from_millis(1),
        }
    }

    /// Sleeps before the next try; false when the wait is over.
    async fn wait(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if now >= self.until {
            return false;
        }
        tokio::time::sleep(self.next.min(self.until - now)).await;
        self.next = (self.next * 2).min(std::time::Duration::from_millis(25));
        true
    }
}
