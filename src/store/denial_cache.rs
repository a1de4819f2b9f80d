//! The denial cache: once a remote store denies a key until T, the same process
//! denies it locally until T, without a round trip, for at most a bounded age. What
//! it records and answers is decided by the one denial rule (`store/denial.rs`): a
//! rejection a penalty box must count is neither; this file keeps the entries.
//!
//! A denied key under attack is the hottest key there is; answering it locally keeps
//! the attacker's traffic off Redis; so is a key in a penalty box or blocked by an
//! operator, whose entry denies every cost until the block ends (within `max_age`).
//! An entry is kept per (limit, key) and answers
//! only requests costing at least the denied cost (cost is monotone for every
//! algorithm: what did not fit at a cost does not fit at a higher one). The deadline
//! is measured from when the request was sent, so the local answer never outlasts
//! the store's.
//!
//! The store's state can change under an entry without this process knowing: another
//! process resets or refunds the key, an operator deletes it, the server's clock is
//! corrected (a denial computed on a clock ten years ahead says "retry in ten
//! years"). So an entry also dies `max_age` after it was recorded, whatever its
//! deadline: every such change reaches every process within `max_age`. A refund
//! through this process forgets the entry at once.
//!
//! Every operation is O(1) amortised under the one mutex every Redis decision takes:
//! entries are kept in the order they were recorded, which (all living at most
//! `max_age`) is the order in which their age runs out, so expired entries leave
//! from the front and a full cache evicts its oldest entry; nothing scans the map.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use foldhash::fast::RandomState;

use super::Charge;
use super::denial::{Asked, Denial, answer_batch};
use crate::algorithm::Params;
use crate::{Decision, Key};

/// A recorded denial and which record made it: the recording order holds
/// `(id, seq)` and an item whose seq is not its id's current one is stale.
#[derive(Debug, Clone, Copy)]
struct CachedDenial {
    denial: Denial,
    seq: u64,
}

/// A cached denial answers only the same name, parameters, penalty box and key: a
/// reload that adds a box must see the next rejection (a denial cached before it,
/// under no box, would answer it locally, uncounted).
type DenialKey = (&'static str, Params, Option<Key>, Key);

/// The map and the order its entries were recorded in.
struct Denials {
    map: HashMap<DenialKey, CachedDenial, RandomState>,
    /// Oldest first. Holds stale items (entries replaced or removed since): they are
    /// skipped when they reach the front, and the whole queue is compacted when stale
    /// items outnumber live ones, so it stays within `2 × map.len() + SLACK`.
    order: VecDeque<(DenialKey, u64)>,
    next_seq: u64,
    /// Queue items examined (popped or compacted) so far: the work the cache did.
    #[cfg(test)]
    examined: u64,
}

/// Stale items the queue may hold beyond twice the live ones before a compaction.
const SLACK: usize = 32;

/// A bounded map of denied keys whose entries live at most `max_age_us`.
pub(crate) struct DenialCache {
    max_keys: usize,
    max_age_us: u64,
    denials: Mutex<Denials>,
}

impl Denials {
    fn is_current(&self, id: &DenialKey, seq: u64) -> bool {
        self.map.get(id).is_some_and(|b| b.seq == seq)
    }

    /// Pops the front item; removes its entry when it is current and `drop_entry`
    /// says so. Returns whether the front was current, or `None` for an empty queue.
    fn pop_front_if(&mut self, drop_entry: impl Fn(&CachedDenial) -> bool) -> Option<bool> {
        let (id, seq) = self.order.front()?;
        #[cfg(test)]
        {
            self.examined += 1;
        }
        match self.map.get(id) {
            Some(cached) if cached.seq == *seq => {
                if !drop_entry(cached) {
                    return Some(true);
                }
                let id = *id;
                self.map.remove(&id);
            }
            _ => {}
        }
        self.order.pop_front();
        Some(false)
    }

    /// Drops the entries whose age ran out by `now` (and stale items) from the front.
    fn expire(&mut self, now: u64, max_age_us: u64) {
        while let Some(false) =
            self.pop_front_if(|b| now >= b.denial.sent.saturating_add(max_age_us))
        {}
    }

    /// Evicts the oldest current entry.
    fn evict_oldest(&mut self) {
        while let Some(false) = self.pop_front_if(|_| false) {}
        if let Some((id, _)) = self.order.pop_front() {
            self.map.remove(&id);
        }
    }

    /// Drops every stale item when they outnumber the live ones: O(queue) once per
    /// at least `map.len() + SLACK` records, so O(1) amortised.
    fn compact(&mut self) {
        if self.order.len() <= 2 * self.map.len() + SLACK {
            return;
        }
        #[cfg(test)]
        {
            self.examined += self.order.len() as u64;
        }
        let mut order = std::mem::take(&mut self.order);
        order.retain(|(id, seq)| self.is_current(id, *seq));
        self.order = order;
    }
}

impl DenialCache {
    pub(crate) fn new(max_keys: usize, max_age_us: u64) -> Self {
        Self {
            max_keys,
            max_age_us,
            denials: Mutex::new(Denials {
                map: HashMap::with_hasher(RandomState::default()),
                order: VecDeque::new(),
                next_seq: 0,
                #[cfg(test)]
                examined: 0,
            }),
        }
    }

    fn denial_key(charge: &Charge<'_>) -> DenialKey {
        (
            charge.limit.name(),
            *charge.limit.params(),
            charge.limit.penalty_print(),
            *charge.key,
        )
    }

    fn lock(&self) -> MutexGuard<'_, Denials> {
        self.denials.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answer to `charge` at `now` by its cached denial, by the rule of
    /// `store/denial.rs`; an entry whose trust ran out leaves.
    fn check_one(denials: &mut Denials, charge: &Charge<'_>, now: u64) -> Option<Decision> {
        let id = Self::denial_key(charge);
        let cached = *denials.map.get(&id)?;
        if cached.denial.is_over(now) {
            // Its queue item goes stale and leaves when it reaches the front.
            denials.map.remove(&id);
            return None;
        }
        cached.denial.answer(charge, now)
    }

    /// Counts the requests a batch's local answer denied (a batch the rule sent to
    /// the store counts none).
    fn hits(answers: Option<Vec<Decision>>) -> Option<Vec<Decision>> {
        for _ in answers.iter().flatten().filter(|d| !d.allowed) {
            crate::observe::denial_cache_hit();
        }
        answers
    }

    /// The local answer to an all-or-nothing batch at `now`, for a cache in front of
    /// the store that made its denials (the Redis denial cache): `None` unless the
    /// rule ([`answer_batch`], [`Asked::TheSameStore`]) answers it here — some charge's
    /// key is denied for its cost, and no charge under a penalty box could be a
    /// rejection that store would count. The charges not denied here report
    /// [`answer_batch`]'s "not evaluated".
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn check_in_front(&self, charges: &[Charge<'_>], now: u64) -> Option<Vec<Decision>> {
        let mut denials = self.lock();
        Self::hits(answer_batch(charges, Asked::TheSameStore, |charge| {
            Self::check_one(&mut denials, charge, now)
        }))
    }

    /// The local answer to an all-or-nothing batch at `now` by denials carried to a
    /// store that never saw them (`Fallback`'s blocks, while the insurance serves):
    /// any charge denied here answers the batch ([`Asked::Another`]). A cache in front
    /// of the store that made its denials uses [`check_in_front`](Self::check_in_front).
    /// (`Fallback` now keeps its carried blocks per limit name and key: this stays
    /// for the rule's tests.)
    #[cfg(test)]
    pub(crate) fn check(&self, charges: &[Charge<'_>], now: u64) -> Option<Vec<Decision>> {
        let mut denials = self.lock();
        Self::hits(answer_batch(charges, Asked::Another, |charge| {
            Self::check_one(&mut denials, charge, now)
        }))
    }

    /// Records the denial the store made for `charge`, sent at `sent`, if the rule
    /// repeats it ([`Denial::of`]: not a rejection a penalty box must count).
    pub(crate) fn record(&self, charge: &Charge<'_>, sent: u64, denied: &Decision) {
        let Some(denial) = Denial::of(denied, charge, sent, self.max_age_us) else {
            return;
        };
        let mut denials = self.lock();
        denials.expire(sent, self.max_age_us);
        let id = Self::denial_key(charge);
        if !denials.map.contains_key(&id) && denials.map.len() >= self.max_keys {
            // Full of live entries: the oldest is the first to age out anyway.
            denials.evict_oldest();
        }
        let seq = denials.next_seq;
        denials.next_seq += 1;
        // The newest denial is the best knowledge of the key.
        denials.map.insert(id, CachedDenial { denial, seq });
        denials.order.push_back((id, seq));
        denials.compact();
    }

    /// Forgets `charge`'s key (after a refund through this process).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn forget(&self, charge: &Charge<'_>) {
        self.lock().map.remove(&Self::denial_key(charge));
    }

    /// Forgets every entry of `charge`'s limit and key, under any quota (after a
    /// reset or a block through this process). Scans the cache: operators' calls
    /// are rare, and a reset must not leave a caller's own quota denied.
    pub(crate) fn forget_key(&self, charge: &Charge<'_>) {
        let name = charge.limit.name();
        self.lock()
            .map
            .retain(|(limit, _, _, key), _| !(*limit == name && key == charge.key));
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn max_keys(&self) -> usize {
        self.max_keys
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn max_age_us(&self) -> u64 {
        self.max_age_us
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Limit, Quota};

    const SECOND: u64 = 1_000_000;

    fn denial(retry: Duration) -> Decision {
        Decision {
            allowed: false,
            capacity: 1,
            remaining: 0,
            reset_after: retry,
            retry_after: Some(retry),
            delay: Duration::ZERO,
            limit: "api",
            quota: crate::Quota::per_second(1),
            receipt: None,
            blocked_for: None,
            trips: 0,
        }
    }

    fn charge<'a>(limit: &'a Limit, key: &'a Key) -> Charge<'a> {
        Charge {
            limit,
            key,
            cost: 1,
        }
    }

    #[test]
    fn a_full_cache_does_constant_work_per_new_denial() {
        // Regression: a full cache used to `retain` the whole map on every new
        // denial (10 000 entries examined per denial at the default bound).
        let limit = Limit::new("api", Quota::per_day(1)).expect("limit");
        let keys: Vec<Key> = (0..5_000_u64).map(Key::from).collect();
        let cache = DenialCache::new(1_000, 3_600 * SECOND);
        let day = Duration::from_secs(86_400);
        for (i, key) in keys.iter().enumerate() {
            cache.record(&charge(&limit, key), 10 * SECOND + i as u64, &denial(day));
        }
        assert_eq!(cache.len(), 1_000);
        let examined = cache.lock().examined;
        // 4 000 evictions of one entry each (plus the rare compaction), where a scan
        // per denial examined 4 000 × 1 000.
        assert!(examined <= 3 * 5_000, "examined {examined}");
        // The newest are kept: the oldest were evicted first.
        let now = 10 * SECOND + 5_000;
        assert!(cache.check(&[charge(&limit, &keys[4_999])], now).is_some());
        assert!(cache.check(&[charge(&limit, &keys[0])], now).is_none());
    }

    #[test]
    fn a_key_denied_over_and_over_keeps_the_queue_bounded() {
        let limit = Limit::new("api", Quota::per_day(1)).expect("limit");
        let key = Key::from("mallory");
        let cache = DenialCache::new(1_000, 3_600 * SECOND);
        for i in 0..10_000 {
            cache.record(
                &charge(&limit, &key),
                SECOND + i,
                &denial(Duration::from_secs(60)),
            );
        }
        let denials = cache.lock();
        assert_eq!(denials.map.len(), 1);
        assert!(denials.order.len() <= 2 + SLACK, "{}", denials.order.len());
    }

    #[test]
    fn entries_die_at_their_max_age_or_when_the_clock_reads_earlier() {
        let limit = Limit::new("api", Quota::per_day(1)).expect("limit");
        let key = Key::from("alice");
        let cache = DenialCache::new(10, SECOND);
        let year = Duration::from_secs(365 * 86_400);
        let sent = 100 * SECOND;
        cache.record(&charge(&limit, &key), sent, &denial(year));
        let local = cache.check(&[charge(&limit, &key)], sent + SECOND - 1);
        assert_eq!(
            local.expect("cached")[0].retry_after,
            year.checked_sub(Duration::from_micros(SECOND - 1))
        );
        assert!(
            cache
                .check(&[charge(&limit, &key)], sent + SECOND)
                .is_none()
        );
        assert_eq!(cache.len(), 0);
        cache.record(&charge(&limit, &key), sent, &denial(year));
        assert!(cache.check(&[charge(&limit, &key)], sent - 1).is_none());
        // Expired entries leave from the front as new denials arrive.
        cache.record(&charge(&limit, &key), sent, &denial(year));
        let other = Key::from("bob");
        cache.record(&charge(&limit, &other), sent + 2 * SECOND, &denial(year));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_penalty_boxs_rejections_are_not_kept_and_its_batches_reach_the_store() {
        let plain = Limit::new("burst", Quota::per_day(1)).expect("limit");
        let boxed = Limit::new("login", Quota::per_day(1))
            .expect("limit")
            .penalty(crate::Penalty::after(3).within(Duration::from_secs(60)));
        let key = Key::from("mallory");
        let cache = DenialCache::new(10, 3_600 * SECOND);
        let minute = Duration::from_secs(60);
        cache.record(&charge(&boxed, &key), SECOND, &denial(minute));
        assert_eq!(cache.len(), 0, "a rejection the box must count");
        cache.record(&charge(&plain, &key), SECOND, &denial(minute));
        let batch = [charge(&plain, &key), charge(&boxed, &key)];
        assert!(
            cache.check_in_front(&batch, SECOND).is_none(),
            "the store that denied counts the boxed charge"
        );
        let carried = cache.check(&batch, SECOND).expect("a carried denial holds");
        assert!(!carried[0].allowed && carried[1].allowed);
        let mut blocked = denial(minute);
        blocked.blocked_for = Some(minute);
        cache.record(&charge(&boxed, &key), SECOND, &blocked);
        let local = cache
            .check_in_front(&batch, SECOND)
            .expect("nothing more to count");
        assert_eq!(local[1].blocked_for, Some(minute));
    }
}
