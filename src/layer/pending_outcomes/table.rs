//! The table: per (`count_when` policy, key), this process's charges whose outcome is
//! not known yet, and whose turn it is to be decided.
//!
//! Two facts per caller, both local to this process. *Pending*: the cost of the
//! charges admitted here whose response `count_when` has not classified yet (and of
//! refunds of them still on their way to a remote store); a refund frees that much.
//! *Deciding*: one request of the caller is between its look at the store and its
//! charge. Requests of one caller are decided one at a time while it has pending
//! charges, so that a look that says "it fits" is still true when the charge is made,
//! and no charge can be denied (an offence) for want of quota a look promised.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::Key;
use crate::store::StoreFuture;

/// A `count_when` policy's caller: the policy's name and the key.
pub(crate) type Target = (&'static str, Key);

/// The most callers the table tracks at once (default of [`PendingOutcomes`]). A
/// caller is tracked while one of its requests is being decided or awaits its
/// outcome, so this bounds callers with a request in the handler at once, not callers
/// seen. Past it, a new caller's requests are decided as if the table were not there.
pub(crate) const MAX_TRACKED: usize = 4_096;

/// What waiters watch a caller's entry for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Events {
    /// Bumped when a pending outcome becomes known, or a refund of one lands.
    pub(crate) resolved: u64,
    /// Bumped when a turn to decide ends.
    pub(crate) turns: u64,
}

struct Entry {
    deciding: bool,
    pending: u64,
    /// The guards that count in `pending`: the entry ends with the last of them (and
    /// no turn), whatever the costs were.
    holders: usize,
    events: watch::Sender<Events>,
}

impl Entry {
    fn new() -> Self {
        Self {
            deciding: false,
            pending: 0,
            holders: 0,
            events: watch::Sender::new(Events::default()),
        }
    }

    fn idle(&self) -> bool {
        self.holders == 0 && !self.deciding
    }
}

type Entries = HashMap<Target, Entry, foldhash::fast::RandomState>;

/// Per (`count_when` policy, key): the charges this process made whose outcome is not
/// known yet, and whose turn it is to be decided. Shared by every clone of a layer;
/// bounded in callers; an entry lives only while a request of its caller is being
/// decided, awaits its outcome or has a refund on its way.
pub(crate) struct PendingOutcomes {
    entries: Mutex<Entries>,
    max_tracked: usize,
}

impl Default for PendingOutcomes {
    fn default() -> Self {
        Self::new(MAX_TRACKED)
    }
}

/// What a request finds when it asks for its turn to be decided.
pub(crate) enum TakeTurn {
    /// The table is full: decided as if it were not there.
    Untracked,
    /// Another request of one of its callers is being decided: wait for a change.
    Busy(watch::Receiver<Events>),
    /// Its turn.
    Mine(Turn),
}

impl PendingOutcomes {
    /// A table of at most `max_tracked` callers.
    pub(crate) fn new(max_tracked: usize) -> Self {
        Self {
            entries: Mutex::default(),
            max_tracked,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // The table only counts: a panic elsewhere leaves it consistent.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many callers are tracked now.
    pub(crate) fn tracked(&self) -> usize {
        self.lock().len()
    }

    /// The turn to decide a request that charges each of `targets` its cost: all of
    /// them at once, or none.
    pub(crate) fn take_turn(self: &Arc<Self>, targets: Vec<(Target, u64)>) -> TakeTurn {
        let mut entries = self.lock();
        for (target, _) in &targets {
            if let Some(entry) = entries.get(target)
                && entry.deciding
            {
                return TakeTurn::Busy(entry.events.subscribe());
            }
        }
        let new = targets
            .iter()
            .filter(|(target, _)| !entries.contains_key(target))
            .count();
        if entries.len() + new > self.max_tracked {
            return TakeTurn::Untracked;
        }
        let mut awaited = false;
        for (target, _) in &targets {
            let entry = entries.entry(*target).or_insert_with(Entry::new);
            entry.deciding = true;
            awaited |= entry.pending > 0;
        }
        // Subscribed with the look at `pending`, under one lock: an outcome known
        // after it is seen by the receiver.
        let pending = if awaited {
            targets
                .iter()
                .filter_map(|(target, _)| entries.get(target))
                .map(|entry| Watch {
                    pending: entry.pending,
                    resolved: entry.events.borrow().resolved,
                    events: entry.events.subscribe(),
                })
                .collect()
        } else {
            Vec::new()
        };
        TakeTurn::Mine(Turn {
            table: Arc::clone(self),
            targets,
            pending,
        })
    }

    /// `refund` (a remote refund of `cost` charged to `target`), counted as pending
    /// until it lands: a waiter that looks at the store before it has landed waits for
    /// it rather than being refused for it. Untracked callers' refunds run as they are.
    pub(crate) fn landing(
        self: &Arc<Self>,
        target: Target,
        cost: u64,
        refund: StoreFuture<'static, ()>,
    ) -> StoreFuture<'static, ()> {
        {
            let mut entries = self.lock();
            let Some(entry) = entries.get_mut(&target) else {
                return refund;
            };
            entry.pending = entry.pending.saturating_add(cost);
            entry.holders += 1;
        }
        let landed = Charges {
            table: Arc::clone(self),
            targets: vec![(target, cost)],
        };
        Box::pin(async move {
            let result = refund.await;
            drop(landed);
            result
        })
    }

    /// Each of `targets` in `entries` (present: a guard holds it), updated by `update`,
    /// its waiters told `event`; removed once idle.
    fn release(
        entries: &mut Entries,
        targets: &[(Target, u64)],
        mut update: impl FnMut(&mut Entry, u64),
        event: fn(&mut Events),
    ) {
        for (target, cost) in targets {
            let Some(entry) = entries.get_mut(target) else {
                continue;
            };
            update(entry, *cost);
            entry.events.send_modify(event);
            if entry.idle() {
                // Its waiters see the sender go: they look again, and find none.
                entries.remove(target);
            }
        }
    }
}

/// A request's turn to be decided: no other request of its callers is decided in this
/// process until it ends, by being dropped (nothing charged) or
/// [`admitted`](Turn::admitted).
pub(crate) struct Turn {
    table: Arc<PendingOutcomes>,
    targets: Vec<(Target, u64)>,
    /// Per target, when one had pending charges as the turn began: what was pending
    /// then. Empty when none had.
    pending: Vec<Watch>,
}

/// A target's pending charges as a turn began, and the outcomes known by then.
struct Watch {
    pending: u64,
    resolved: u64,
    events: watch::Receiver<Events>,
}

impl Turn {
    /// Whether charges of its callers awaited their outcome as the turn began.
    pub(crate) fn awaits_outcomes(&self) -> bool {
        !self.pending.is_empty()
    }

    /// What was pending for target `i` as the turn began (0 when nothing was).
    pub(crate) fn pending(&self, i: usize) -> u64 {
        self.pending.get(i).map_or(0, |watch| watch.pending)
    }

    /// Ends the turn, and returns target `i`'s receiver with the count of outcomes
    /// known as the turn began: one known since, even before this call, shows as a
    /// higher count.
    pub(crate) fn end_watching(mut self, i: usize) -> Option<(u64, watch::Receiver<Events>)> {
        if i >= self.pending.len() {
            return None;
        }
        let watch = self.pending.swap_remove(i);
        Some((watch.resolved, watch.events))
    }

    /// The request was admitted: its charges await their outcome from now, and the
    /// turn passes on.
    pub(crate) fn admitted(mut self) -> Charges {
        let targets = std::mem::take(&mut self.targets);
        {
            let mut entries = self.table.lock();
            PendingOutcomes::release(
                &mut entries,
                &targets,
                |entry, cost| {
                    entry.deciding = false;
                    entry.pending = entry.pending.saturating_add(cost);
                    entry.holders += 1;
                },
                |events| events.turns += 1,
            );
        }
        Charges {
            table: Arc::clone(&self.table),
            targets,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.targets.is_empty() {
            return;
        }
        let mut entries = self.table.lock();
        PendingOutcomes::release(
            &mut entries,
            &self.targets,
            |entry, _| entry.deciding = false,
            |events| events.turns += 1,
        );
    }
}

/// Charges that await their outcome (or refunds of them on their way): pending until
/// dropped, which tells the caller's waiters.
pub(crate) struct Charges {
    table: Arc<PendingOutcomes>,
    targets: Vec<(Target, u64)>,
}

impl Drop for Charges {
    fn drop(&mut self) {
        let mut entries = self.table.lock();
        PendingOutcomes::release(
            &mut entries,
            &self.targets,
            |entry, cost| {
                entry.pending = entry.pending.saturating_sub(cost);
                entry.holders = entry.holders.saturating_sub(1);
            },
            |events| events.resolved += 1,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &'static str, key: &str) -> Vec<(Target, u64)> {
        vec![((name, Key::from(key)), 1)]
    }

    fn mine(taken: TakeTurn) -> Turn {
        match taken {
            TakeTurn::Mine(turn) => turn,
            TakeTurn::Busy(_) => panic!("busy"),
            TakeTurn::Untracked => panic!("untracked"),
        }
    }

    #[test]
    fn a_flood_of_callers_is_tracked_up_to_the_bound_and_leaves_nothing_behind() {
        let table = Arc::new(PendingOutcomes::new(8));
        let mut charges = Vec::new();
        for i in 0..8 {
            charges.push(mine(table.take_turn(target("logins", &i.to_string()))).admitted());
        }
        assert_eq!(table.tracked(), 8);
        // The ninth caller is decided as if there were no table: nothing grows.
        for i in 8..1_000 {
            assert!(matches!(
                table.take_turn(target("logins", &i.to_string())),
                TakeTurn::Untracked
            ));
        }
        assert_eq!(table.tracked(), 8);
        // A tracked caller still takes its turns.
        let turn = mine(table.take_turn(target("logins", "3")));
        assert!(turn.awaits_outcomes());
        assert_eq!(turn.pending(0), 1);
        drop(turn);
        drop(charges);
        assert_eq!(table.tracked(), 0);
    }

    #[test]
    fn one_request_of_a_caller_decides_at_a_time() {
        let table = Arc::new(PendingOutcomes::new(8));
        let first = mine(table.take_turn(target("logins", "office")));
        assert!(!first.awaits_outcomes());
        assert!(matches!(
            table.take_turn(target("logins", "office")),
            TakeTurn::Busy(_)
        ));
        // Another caller, or another policy, is not held up.
        drop(mine(table.take_turn(target("logins", "home"))));
        drop(mine(table.take_turn(target("signups", "office"))));
        let charge = first.admitted();
        let second = mine(table.take_turn(target("logins", "office")));
        assert_eq!(second.pending(0), 1);
        let (seen, events) = second.end_watching(0).expect("pending");
        // The turn's end is no outcome.
        assert_eq!(events.borrow().resolved, seen);
        drop(charge);
        // Its last outcome known, the entry goes: the watcher sees the change.
        assert!(events.has_changed().is_err() || events.borrow().resolved > seen);
        assert_eq!(table.tracked(), 0);
    }
}
