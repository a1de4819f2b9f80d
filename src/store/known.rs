//! The (algorithm, period) pairs a store has decided each limit name under: the
//! limit's own, a plan's other periods, the pairs of before a reload. One caller, one
//! record: a penalty through the limit charges the key under each of them, and a reset
//! forgets each, so that operators' calls reach plan callers. Shared by the memory
//! store and the Redis store, so that both reach the same pairs.

use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use crate::Limit;

/// How many (algorithm, period) pairs the store remembers per limit name.
pub(crate) const MAX_PAIRS: usize = 16;

/// The (algorithm, period) pairs a store has decided each limit name under. A reset
/// deletes the key's state under each of them and a penalty charges each, so that
/// they reach plan callers; on Redis, a name decided under more than one base pair (a
/// reload changed its algorithm or period) has its record read on every decision,
/// since its older states were not marked by the records written since.
///
/// Bounded: at most [`MAX_PAIRS`] per name, the oldest forgotten first. Read without
/// a lock on every decision (one atomic load and a scan of at most 16 numbers);
/// written, copied whole, only when a pair is new.
#[derive(Default)]
pub(crate) struct Known {
    /// Indexed by [`Limit::record`]: the limits seen under that name, one per pair.
    by_record: ArcSwap<Vec<Option<Arc<Pairs>>>>,
    writing: Mutex<()>,
}

/// One name's pairs, oldest first, each as the first limit seen with it (its quota
/// is what a penalty charges that state under).
#[derive(Default)]
struct Pairs {
    limits: Vec<Limit>,
    /// Whether more than one of `limits` is a base pair (its own period, not a plan's).
    reloaded: bool,
}

/// Whether `limit` is decided under the period of the limit it was derived from.
pub(crate) fn is_base(limit: &Limit) -> bool {
    limit.params().period_us == limit.base_period_us()
}

impl Known {
    /// Remembers `limit`'s pair; returns whether its name was decided under more than
    /// one base pair.
    pub(crate) fn note(&self, limit: &Limit) -> bool {
        let all = self.by_record.load();
        if let Some(Some(pairs)) = all.get(limit.record() as usize)
            && pairs.limits.iter().any(|l| l.table() == limit.table())
        {
            return pairs.reloaded;
        }
        self.insert(limit)
    }

    #[cold]
    fn insert(&self, limit: &Limit) -> bool {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let all = self.by_record.load_full();
        let index = limit.record() as usize;
        let mut limits = match all.get(index) {
            Some(Some(pairs)) => {
                if pairs.limits.iter().any(|l| l.table() == limit.table()) {
                    return pairs.reloaded;
                }
                pairs.limits.clone()
            }
            _ => Vec::new(),
        };
        if limits.len() >= MAX_PAIRS {
            limits.remove(0);
        }
        limits.push(limit.clone());
        let reloaded = limits.iter().filter(|l| is_base(l)).count() > 1;
        let mut next = Vec::clone(&all);
        if next.len() <= index {
            next.resize(index + 1, None);
        }
        next[index] = Some(Arc::new(Pairs { limits, reloaded }));
        self.by_record.store(Arc::new(next));
        reloaded
    }

    /// `limit` first, then every other pair known under its name (another period,
    /// algorithm or bucket count than `limit`'s).
    pub(crate) fn with_others(&self, limit: &Limit) -> Vec<Limit> {
        let mut out = vec![limit.clone()];
        if let Some(Some(pairs)) = self.by_record.load().get(limit.record() as usize) {
            out.extend(
                pairs
                    .limits
                    .iter()
                    .filter(|l| l.table() != limit.table())
                    .cloned(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Algorithm, Quota};

    #[test]
    fn known_pairs_are_bounded_per_name_and_a_second_base_pair_marks_a_reload() {
        let known = Known::default();
        let api = Limit::new("known-api", Quota::per_minute(100)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!known.note(&api));
        // A plan's other period is not a reload.
        let plan = api.with_quota(Quota::per_hour(10_000));
        assert!(!known.note(&plan));
        let names = |limits: Vec<Limit>| limits.iter().map(Limit::table).collect::<Vec<_>>();
        assert_eq!(
            names(known.with_others(&api)),
            vec![api.table(), plan.table()]
        );
        assert_eq!(
            names(known.with_others(&plan)),
            vec![plan.table(), api.table()]
        );
        // A reload to another algorithm: a second base pair, and both report it.
        let reloaded = api.clone().algorithm(Algorithm::FixedWindow);
        assert!(known.note(&reloaded));
        assert!(known.note(&api));
        // Another name is its own.
        let other =
            Limit::new("known-other", Quota::per_minute(1)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!known.note(&other));
        assert_eq!(known.with_others(&other).len(), 1);
        // At most MAX_PAIRS per name, the oldest forgotten first.
        for minutes in 2..40 {
            let period = std::time::Duration::from_secs(60 * minutes);
            known.note(&api.with_quota(Quota::new(1, period).unwrap_or_else(|e| panic!("{e}"))));
        }
        // The pairs first seen (api, the plan, the reload) were forgotten: the limit
        // itself, then the 16 newest.
        let kept = known.with_others(&reloaded);
        assert_eq!(kept.len(), 1 + MAX_PAIRS);
        let old = [api.table(), plan.table(), reloaded.table()];
        assert!(!kept.iter().skip(1).any(|l| old.contains(&l.table())));
    }
}
