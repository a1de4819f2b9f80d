//! The offence record both stores keep in a caller's record, one per (limit name,
//! key): the key's block, its count of rejections and its remembered trips. The
//! Redis store's twin is `lua/block.lua` (`pb_offend`, `pb_remembered`).

use super::Penalty;

/// A key's block, its count of rejections and its trips, in µs since the epoch: what
/// the memory store keeps in the caller's record, and the Redis store in the record
/// key `<prefix>:<limit>:{<fingerprint>}:b` as
/// "`<blocked_until> <count> <first_at> <queue_until>`", the trips in its suffix
/// (`' t<trips>:<tripped_at>:<remembered_until>'`; a record without them has none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OffenceRecord {
    /// Denied while `now < blocked_until`.
    pub(crate) blocked_until: u64,
    /// Rejections counted since `first_at` (0: none).
    pub(crate) count: u32,
    /// When the counted rejections' window opened.
    pub(crate) first_at: u64,
    /// Trips in a row, each within the penalty's `remember` of the one before (0:
    /// none); saturates at `u32::MAX`.
    pub(crate) trips: u32,
    /// When the latest of them tripped.
    pub(crate) tripped_at: u64,
    /// Until when they may be remembered: the latest trip's instant plus the
    /// penalty's `remember` at that trip. A reload that lengthens `remember` does not
    /// move it (the Redis record lives that long, not longer), so both stores forget
    /// at the same instant however their records expire.
    pub(crate) remembered_until: u64,
}

impl OffenceRecord {
    /// How long the key stays blocked from `now`, if it is.
    pub(crate) fn blocked_for(&self, now: u64) -> Option<u64> {
        (self.blocked_until > now).then(|| self.blocked_until - now)
    }

    /// The trips `penalty` still remembers at `now`: 0 once its `remember` has passed
    /// since the latest (or without a penalty that remembers), or the `remember` of
    /// the latest trip's own penalty. Read with the penalty of now, so a reload that
    /// shortens `remember` reaches every key at once; one that lengthens it keeps the
    /// trips no longer than they were to be kept.
    pub(crate) fn remembered(&self, penalty: Option<&Penalty>, now: u64) -> u32 {
        let remember = penalty.map_or(0, |p| p.escalation.remember_us());
        let kept = now < self.tripped_at.saturating_add(remember) && now < self.remembered_until;
        if self.trips > 0 && kept {
            self.trips
        } else {
            0
        }
    }

    /// Counts a rejection at `now` (the key not blocked). When it trips the box, the
    /// key is blocked for the block of its trip (the first, or a longer one when
    /// earlier trips are remembered), the count starts again, and the block (µs) is
    /// returned.
    pub(crate) fn offend(&mut self, penalty: &Penalty, now: u64) -> Option<u64> {
        if self.count == 0 || now >= self.first_at.saturating_add(penalty.within_us()) {
            self.count = 1;
            self.first_at = now;
        } else {
            self.count = self.count.saturating_add(1);
        }
        if self.count < penalty.after {
            return None;
        }
        let escalation = &penalty.escalation;
        let (trips, block) = if escalation.remember.is_zero() {
            // Nothing remembered: every trip is a first one, and no trip is kept.
            (0, penalty.block_us())
        } else {
            let trips = self.remembered(Some(penalty), now).saturating_add(1);
            (trips, escalation.block_of(penalty.block_us(), trips))
        };
        self.trips = trips;
        (self.tripped_at, self.remembered_until) = if trips == 0 {
            (0, 0)
        } else {
            (now, now.saturating_add(escalation.remember_us()))
        };
        self.blocked_until = now.saturating_add(block);
        self.count = 0;
        self.first_at = 0;
        Some(block)
    }

    /// An operator's block until `until` (0 lifts it): the block and the count of
    /// rejections are replaced; the trips stay (only a reset forgets them).
    pub(crate) fn block_until(&mut self, until: u64) {
        *self = Self {
            blocked_until: until,
            trips: self.trips,
            tripped_at: self.tripped_at,
            remembered_until: self.remembered_until,
            ..Self::default()
        };
    }

    /// The instant from which the record says nothing under `penalty` (no block, no
    /// window open, no trip that may be remembered), so a store may drop it.
    pub(crate) fn idle_at(&self, penalty: Option<&Penalty>) -> u64 {
        let window_end = match penalty {
            Some(p) if self.count > 0 => self.first_at.saturating_add(p.within_us()),
            _ => 0,
        };
        // The trips may matter until they were to be kept, whatever `penalty` says
        // now: a reload may lengthen `remember` again.
        let trips_end = if self.trips > 0 {
            self.remembered_until
        } else {
            0
        };
        self.blocked_until.max(window_end).max(trips_end)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn penalty() -> Penalty {
        Penalty::after(3)
            .within(Duration::from_micros(100))
            .block_for(Duration::from_micros(50))
    }

    #[test]
    fn the_third_rejection_within_the_window_trips() {
        let mut o = OffenceRecord::default();
        assert_eq!(o.offend(&penalty(), 10), None);
        assert_eq!(o.offend(&penalty(), 50), None);
        assert_eq!(o.offend(&penalty(), 109), Some(50));
        assert_eq!(o.blocked_for(109), Some(50));
        assert_eq!(o.blocked_for(159), None);
        assert_eq!((o.count, o.trips), (0, 0));
    }

    #[test]
    fn the_count_restarts_after_the_window() {
        let mut o = OffenceRecord::default();
        assert_eq!(o.offend(&penalty(), 10), None);
        assert_eq!(o.offend(&penalty(), 50), None);
        // 10 + 100: the window has closed, this is a first rejection again.
        assert_eq!(o.offend(&penalty(), 110), None);
        assert_eq!((o.count, o.first_at), (1, 110));
        assert_eq!(o.idle_at(Some(&penalty())), 210);
    }

    #[test]
    fn remembered_trips_escalate_and_are_forgotten_after_remember() {
        let p = Penalty::after(1)
            .block_for(Duration::from_micros(10))
            .escalate(&[Duration::from_micros(20), Duration::from_micros(40)])
            .remember(Duration::from_micros(100));
        let mut o = OffenceRecord::default();
        assert_eq!(o.offend(&p, 1_000), Some(10));
        assert_eq!(o.remembered(Some(&p), 1_099), 1);
        assert_eq!(o.offend(&p, 1_050), Some(20));
        assert_eq!(o.offend(&p, 1_100), Some(40));
        assert_eq!(o.offend(&p, 1_150), Some(40));
        assert_eq!((o.trips, o.idle_at(Some(&p))), (4, 1_250));
        // 100 after the latest trip: forgotten, the first block again.
        assert_eq!(o.remembered(Some(&p), 1_250), 0);
        assert_eq!(o.offend(&p, 1_250), Some(10));
        assert_eq!(o.trips, 1);
        // An operator's block keeps the trips.
        o.block_until(0);
        assert_eq!(o.remembered(Some(&p), 1_300), 1);
        // A longer memory (a reload) keeps them no longer than they were to be kept.
        let longer = p.remember(Duration::from_millis(1));
        assert_eq!(o.remembered(Some(&longer), 1_349), 1);
        assert_eq!(o.remembered(Some(&longer), 1_350), 0);
        assert_eq!(o.idle_at(Some(&longer)), 1_350);
    }
}
