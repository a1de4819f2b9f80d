//! [`SlotLines`]: this process's requests waiting for an in-flight slot, in line per
//! key, served in the order they came.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::Key;

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
    pub(crate) fn waiting(&self, line: &(usize, Key)) -> bool {
        self.lock().contains_key(line)
    }

    /// A ticket at the end of `line`; `None` when `line` already holds `per_key`
    /// waiters (the layer's `max_held_per_key`: one caller must not queue without
    /// bound). The layer's `max_held` bounds every line together with the requests
    /// held for their turn, in one count the caller takes first.
    pub(crate) fn join(self: &Arc<Self>, line: (usize, Key), per_key: usize) -> Option<Ticket> {
        let mut lines = self.lock();
        let waiting =
            |l: &Line| usize::try_from(l.next - l.serving).unwrap_or(usize::MAX) - l.gone.len();
        let here = lines.get(&line).map_or(0, waiting);
        if here >= per_key {
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
pub(crate) struct Ticket {
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
    pub(crate) async fn turn(&self, until: tokio::time::Instant) -> bool {
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
