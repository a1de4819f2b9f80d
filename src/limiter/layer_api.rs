//! What the Tower layer asks of the limiter: decisions by limit index in one set of
//! limits, without a future on the memory store, and refunds it runs in the background.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::{Limiter, Resolved, Set, Taking, complete};
use crate::store::{Charge, InFlightSlot, StoreFuture};
use crate::{Decision, Key, Quota, StoreError};

/// A decision the layer can take without awaiting (memory store), or the store call
/// for it, which gives back what it took if the request goes away while it is on its
/// way.
pub(crate) enum Pending {
    Ready(Result<Vec<Decision>, StoreError>),
    Waiting(Taking),
}

/// One policy's part of a request: its index in the set, the key, the cost, and the
/// caller's own quota if it has one.
pub(crate) type LayerCheck = (usize, Key, u64, Option<Quota>);

/// A request's in-flight slots, one per policy with an in-flight limit; or, when one
/// of them had none free, that policy's index (the slots taken before it are given
/// back).
pub(crate) type Entry = Result<Vec<InFlightSlot>, usize>;

/// In-flight slots taken without awaiting (memory store), or a future for them.
pub(crate) enum Entering {
    Ready(Result<Entry, StoreError>),
    Waiting(StoreFuture<'static, Entry>),
}

/// What the Tower layer asks of the limiter: decisions by limit index, owned futures.
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
    pub(crate) fn enter(
        &self,
        set: &Arc<Set>,
        claims: &[(usize, Key, u32)],
        wait: Option<std::time::Duration>,
        lines: &Arc<SlotLines>,
        bounds: (usize, usize),
    ) -> Entering {
        let line = claims.first().map(|&(index, key, _)| (index, key));
        // Others wait for this key here: behind them, not ahead.
        let queued = wait.is_some() && line.is_some_and(|line| lines.waiting(&line));
        let store = &self.inner.store;
        // The first try at once: a store that keeps slots in memory answers ready.
        let mut first = None;
        if !queued {
            match enter_now(&**store, set, claims) {
                Some(Ok(Err(index))) if wait.is_some() && line.is_some() => {
                    first = Some(Err(index));
                }
                Some(entry) => return Entering::Ready(entry),
                None => {}
            }
        }
        let (store, set, claims) = (store.clone(), set.clone(), claims.to_vec());
        // In line from the start when others wait; else after a first try.
        let mut ticket = None;
        if let Some(line) = line.filter(|_| queued) {
            match lines.join(line, bounds) {
                Some(joined) => ticket = Some(joined),
                // The line is full: refused at once.
                None => return Entering::Ready(Ok(Err(claims[0].0))),
            }
        }
        let lines = lines.clone();
        Entering::Waiting(Box::pin(async move {
            let until = wait.map(|wait| tokio::time::Instant::now() + wait);
            if let (Some(ticket), Some(until)) = (&ticket, until)
                && !ticket.turn(until).await
            {
                return Ok(Err(claims[0].0));
            }
            let mut tries = until.map(Retries::until);
            let mut entry = match first {
                Some(entry) => entry,
                None => enter_store(&store, &set, &claims).await?,
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
                            let Some(joined) = lines.join(line, bounds) else {
                                return Ok(entry);
                            };
                            let joined = ticket.insert(joined);
                            if !joined.turn(tries.until).await {
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
                entry = enter_store(&store, &set, &claims).await?;
            }
        }))
    }

    /// The limits of `checks`, each under its caller's quota when it has one.
    fn limits_of<'s>(
        &self,
        set: &'s Set,
        checks: &[LayerCheck],
    ) -> Result<Vec<Resolved<'s>>, StoreError> {
        checks
            .iter()
            .map(|(index, _, _, quota)| self.with_quota(&set.limits[*index], *quota))
            .collect()
    }

    /// Decides `checks` all-or-nothing under `set`: synchronously on the memory store,
    /// else through a `'static` future that owns what it needs.
    pub(crate) fn decide(&self, set: &Arc<Set>, checks: &[LayerCheck]) -> Pending {
        let store = &*self.inner.store;
        // First with borrowed arguments: a store that decides in memory answers ready.
        let ready = if let [(index, key, cost, quota)] = checks {
            self.under_quota(&set.limits[*index], *quota, |limit| {
                let charge = Charge {
                    limit,
                    key,
                    cost: *cost,
                };
                store
                    .decide_one(charge)
                    .into_ready()
                    .ok()
                    .map(|answer| answer.map(|decision| vec![decision]))
            })
        } else {
            self.limits_of(set, checks).map(|limits| {
                store
                    .decide(&charges(checks, &limits))
                    .into_ready()
                    .ok()
                    .map(|answer| answer.and_then(|d| complete(d, checks.len())))
            })
        };
        match ready {
            Err(error) => return Pending::Ready(Err(error)),
            Ok(Some(answer)) => return Pending::Ready(answer),
            // A future, never polled: nothing sent. Made again from owned arguments.
            Ok(None) => {}
        }
        let (limiter, store, owned) = (self.clone(), self.inner.store.clone(), set.clone());
        let checks = checks.to_vec();
        let targets = targets(&checks);
        let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
            let limits = limiter.limits_of(&owned, &checks)?;
            let charges = charges(&checks, &limits);
            let decisions = store.decide(&charges).await?;
            complete(decisions, charges.len())
        });
        Pending::Waiting(Taking::new(self.clone(), set.clone(), targets, call))
    }

    /// Reserves `check`'s place under `set` within `max_wait` (the layer's wait mode):
    /// at once on a store that decides in memory, else through a `'static` future.
    pub(crate) fn decide_waiting(
        &self,
        set: &Arc<Set>,
        check: &LayerCheck,
        max_wait: std::time::Duration,
    ) -> Pending {
        let (index, key, cost, quota) = *check;
        let store = &*self.inner.store;
        let ready = self.under_quota(&set.limits[index], quota, |limit| {
            let charge = Charge {
                limit,
                key: &key,
                cost,
            };
            store.reserve(charge, max_wait).into_ready().ok()
        });
        match ready {
            Err(error) => return Pending::Ready(Err(error)),
            Ok(Some(answer)) => return Pending::Ready(answer.map(|decision| vec![decision])),
            Ok(None) => {}
        }
        let (limiter, store, owned) = (self.clone(), self.inner.store.clone(), set.clone());
        let call: StoreFuture<'static, Vec<Decision>> = Box::pin(async move {
            let limit = limiter.with_quota(&owned.limits[index], quota)?;
            let charge = Charge {
                limit: &limit,
                key: &key,
                cost,
            };
            Ok(vec![store.reserve(charge, max_wait).await?])
        });
        let targets = vec![(index, key)];
        Pending::Waiting(Taking::new(self.clone(), set.clone(), targets, call))
    }
}

/// Where each of `checks` charges: its limit's index and its key.
pub(crate) fn targets(checks: &[LayerCheck]) -> super::give_back::Targets {
    checks
        .iter()
        .map(|(index, key, _, _)| (*index, *key))
        .collect()
}

/// The charges of `checks`, each under its limit in `limits` (`Limiter::limits_of`).
fn charges<'c>(checks: &'c [LayerCheck], limits: &'c [Resolved<'_>]) -> Vec<Charge<'c>> {
    checks
        .iter()
        .zip(limits)
        .map(|((_, key, cost, _), limit)| Charge {
            limit,
            key,
            cost: *cost,
        })
        .collect()
}

/// One attempt at every slot of `claims`, if the store answers each at once (a store
/// that keeps slots in memory); `None` as soon as one call would await (the slots
/// taken before it go back as they are dropped; nothing was sent for it).
fn enter_now(
    store: &dyn crate::store::Store,
    set: &Set,
    claims: &[(usize, Key, u32)],
) -> Option<Result<Entry, StoreError>> {
    let mut slots = Vec::with_capacity(claims.len());
    for &(index, key, max) in claims {
        match store
            .acquire_in_flight(&set.limits[index], &key, max)
            .into_ready()
            .ok()?
        {
            Ok(Some(slot)) => slots.push(slot),
            Ok(None) => return Some(Ok(Err(index))),
            Err(error) => return Some(Err(error)),
        }
    }
    Some(Ok(Ok(slots)))
}

/// One attempt at every slot of `claims` on another store. A request dropped while
/// a call is on its way (its client left) drops the call: a store's
/// `acquire_in_flight` is cancel-safe (see its docs; Redis sends the removal of the
/// lease right behind the call, on the same connection, so the next request already
/// finds the slot free), and the slots taken before it go back as they are dropped.
/// Letting the call run on instead would give the slot back only a round trip after
/// its reply: a request right after a Redis stall would find it taken.
async fn enter_store(
    store: &Arc<dyn crate::store::Store>,
    set: &Arc<Set>,
    claims: &[(usize, Key, u32)],
) -> Result<Entry, StoreError> {
    let mut slots = Vec::with_capacity(claims.len());
    for &(index, key, max) in claims {
        match store
            .acquire_in_flight(&set.limits[index], &key, max)
            .await?
        {
            Some(slot) => slots.push(slot),
            None => return Ok(Err(index)),
        }
    }
    Ok(Ok(slots))
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

/// This process's requests waiting for an in-flight slot, in line per (policy index,
/// key): each line serves its tickets in the order they were taken. Shared by every
/// clone of a layer; a key with nobody waiting has no line.
#[derive(Debug, Default)]
pub(crate) struct SlotLines(Mutex<HashMap<(usize, Key), Line, foldhash::fast::RandomState>>);

/// One key's line.
#[derive(Debug)]
struct Line {
    /// The next ticket to hand out.
    next: u64,
    /// The ticket whose turn it is.
    serving: u64,
    /// Tickets given up before their turn (their waiters left or ran out of time):
    /// skipped when the line moves.
    gone: BTreeSet<u64>,
    /// Wakes the line when it moves.
    moved: Arc<Notify>,
}

impl SlotLines {
    fn lock(&self) -> MutexGuard<'_, HashMap<(usize, Key), Line, foldhash::fast::RandomState>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether requests wait in `line`.
    fn waiting(&self, line: &(usize, Key)) -> bool {
        self.lock().contains_key(line)
    }

    /// A ticket at the end of `line`; `None` when `line` already holds `per_key`
    /// waiters or every line together holds `total` (the layer's `max_held_per_key`
    /// and `max_held`: waiting for a slot is holding a request too, and one caller
    /// must not queue without bound).
    fn join(
        self: &Arc<Self>,
        line: (usize, Key),
        (total, per_key): (usize, usize),
    ) -> Option<Ticket> {
        let mut lines = self.lock();
        let waiting =
            |l: &Line| usize::try_from(l.next - l.serving).unwrap_or(usize::MAX) - l.gone.len();
        let here = lines.get(&line).map_or(0, waiting);
        if here >= per_key || lines.values().map(waiting).sum::<usize>() >= total {
            return None;
        }
        let entry = lines.entry(line).or_insert_with(|| Line {
            next: 0,
            serving: 0,
            gone: BTreeSet::new(),
            moved: Arc::new(Notify::new()),
        });
        let number = entry.next;
        entry.next += 1;
        Some(Ticket {
            lines: self.clone(),
            line,
            number,
            moved: entry.moved.clone(),
        })
    }
}

/// A place in a key's line for an in-flight slot; dropped (served, refused, or its
/// request gone), the line moves past it.
struct Ticket {
    lines: Arc<SlotLines>,
    line: (usize, Key),
    number: u64,
    moved: Arc<Notify>,
}

impl Ticket {
    fn first(&self) -> bool {
        self.lines
            .lock()
            .get(&self.line)
            .is_some_and(|line| line.serving == self.number)
    }

    /// Waits until this ticket is first in its line; `false` if `until` came first.
    async fn turn(&self, until: tokio::time::Instant) -> bool {
        loop {
            let moved = self.moved.notified();
            let mut moved = std::pin::pin!(moved);
            // Registered before looking: a move between the look and the wait wakes it.
            moved.as_mut().enable();
            if self.first() {
                return true;
            }
            if tokio::time::timeout_at(until, moved).await.is_err() {
                return self.first();
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut lines = self.lines.lock();
        let Some(line) = lines.get_mut(&self.line) else {
            return;
        };
        if line.serving != self.number {
            line.gone.insert(self.number);
            return;
        }
        line.serving += 1;
        while line.gone.remove(&line.serving) {
            line.serving += 1;
        }
        if line.serving == line.next {
            lines.remove(&self.line);
        }
        self.moved.notify_waiters();
    }
}
