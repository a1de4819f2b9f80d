//! [`Penalty`]: the penalty box of a limit. Its files: `mod.rs` (the type, its
//! options and getters), `escalation.rs` (how the block grows with repeated trips),
//! `validate.rs` (what a limiter refuses), `record.rs` (the offence record both stores
//! keep next to a key's rate state; the Redis store's twin is `lua/block.lua`) and
//! `offences.rs` ([`Offences`], what [`Limiter::offences`](crate::Limiter::offences)
//! reports).

mod escalation;
mod offences;
mod record;
mod validate;

use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::time::micros_up;
use escalation::Escalation;
pub(crate) use escalation::MAX_STEPS;
pub use offences::Offences;
pub(crate) use record::OffenceRecord;
#[cfg(feature = "config")]
pub(crate) use validate::Culprit;

/// A penalty box: the `n`-th rejection of a key within a window blocks the key for a
/// while. Set on a limit with [`Limit::penalty`](crate::Limit::penalty).
///
/// - Only rejections count (a request the limit denies, at a cost above 0); admitted
///   requests and peeks never do.
/// - The window opens at a key's first counted rejection: a rejection `within` or
///   later after it starts a new count (the count restarts after the window).
/// - When the `n`-th rejection trips the box, that very decision reports the block,
///   and every request of the key is denied until it ends (`allowed: false`,
///   `remaining: 0`, `retry_after = reset_after = ` its end, see
///   [`Decision::blocked_for`](crate::Decision::blocked_for)); the count starts again
///   from 0. Rejections while blocked neither extend the block nor count.
/// - [`Limiter::reset`](crate::Limiter::reset) lifts the block and clears the count
///   and the trips.
/// - **Escalation** (opt-in): with [`remember`](Penalty::remember), a key that trips
///   the box again within that long of its previous trip is blocked for longer: the
///   blocks of [`escalate`](Penalty::escalate) one after the other, then, with
///   [`escalate_by`](Penalty::escalate_by), each block a factor longer than the one
///   before, up to a cap (e.g. 2 → 5 → 10 → 20 → 40 → 60 min). A trip later than
///   `remember` after the previous one starts over at the first block. Every trip
///   still needs `after` rejections within `within`. A decision reports the trips
///   remembered ([`Decision::trips`](crate::Decision::trips)), and
///   [`Limiter::offences`](crate::Limiter::offences) the block the next trip gets.
///
/// On Redis the count and the block live next to the rate state (same hash tag) and
/// are decided in the same call: a penalty costs no extra round trip, and every
/// process sees the block.
///
/// Zero rejections, a zero block, a zero window for more than one rejection, blocks
/// that shrink, or a `remember` no longer than the longest block is a
/// [`ConfigError`](crate::ConfigError) when the limiter is built (see
/// [`remember`](Penalty::remember)). Every duration is at most
/// [`MAX_DENIAL`](Penalty::MAX_DENIAL), and all arithmetic saturates.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Key, Limit, Limiter, MemoryStore, Penalty, Quota};
/// use tollgate::clock::ManualClock;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// let limiter = Limiter::builder()
///     .limit(Limit::new("login", Quota::per_minute(1))?.penalty(
///         Penalty::after(2).within(Duration::from_secs(60)).block_for(Duration::from_secs(600)),
///     ))
///     .store(MemoryStore::with_clock(clock.clone()))
///     .build()?;
/// let key = Key::from("mallory");
/// assert!(limiter.check("login", &key, 1).await?.allowed);
/// assert_eq!(limiter.check("login", &key, 1).await?.blocked_for, None); // 1st rejection
/// let tripped = limiter.check("login", &key, 1).await?; // 2nd: blocked for 10 min
/// assert_eq!(tripped.blocked_for, Some(Duration::from_secs(600)));
/// clock.advance(Duration::from_secs(120)); // the quota is back, the block is not
/// let d = limiter.check("login", &key, 1).await?;
/// assert_eq!((d.allowed, d.retry_after), (false, Some(Duration::from_secs(480))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Penalty {
    after: u32,
    within: Duration,
    block_for: Duration,
    escalation: Escalation,
}

/// Hashes what tells penalties apart in practice, without the inline steps: equal
/// penalties still hash equal. (The limiter's own caches key on
/// the 16-byte `Penalty::fingerprint` instead.)
impl Hash for Penalty {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.after.hash(state);
        self.within.hash(state);
        self.block_for.hash(state);
        self.escalation.remember.hash(state);
        self.escalation.given.hash(state);
        self.escalation.factor.hash(state);
    }
}

impl Penalty {
    /// A 16-byte fingerprint of every field, escalation steps included: what the
    /// limiter's caches key on instead of the whole penalty (about 150 bytes, its
    /// steps inline), as they key on a caller's [`Key`](crate::Key) instead of its
    /// name. Equal penalties give equal fingerprints; different ones differ but for a
    /// 128-bit collision, the same odds every key relies on.
    pub(crate) fn fingerprint(&self) -> crate::Key {
        let e = &self.escalation;
        let mut bytes = Vec::with_capacity(64 + 8 * e.given);
        bytes.extend_from_slice(&self.after.to_le_bytes());
        for d in [self.within, self.block_for, e.remember, e.cap] {
            bytes.extend_from_slice(&d.as_nanos().to_le_bytes());
        }
        bytes.extend_from_slice(&e.factor.to_le_bytes());
        bytes.extend_from_slice(&(e.given as u64).to_le_bytes());
        for step in e.steps.iter().take(e.given) {
            bytes.extend_from_slice(&step.to_le_bytes());
        }
        crate::Key::from(bytes)
    }

    /// The longest any denial lasts: 100 years of 365 days.
    ///
    /// [`Limiter::block`](crate::Limiter::block) with a longer duration (up to
    /// `Duration::MAX`) blocks for exactly this long, and
    /// [`Limiter::penalize`](crate::Limiter::penalize) charges at most the capacity plus
    /// this much refill time, on every store alike: both stores keep instants exact
    /// (Redis in Lua doubles, below 2^53 µs since the epoch), so no input wraps, panics or
    /// yields a shorter denial than asked for anything shorter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Key, Limiter, Limit, Penalty, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(1))?).build()?;
    /// let d = limiter.block("api", &Key::from("mallory"), Duration::MAX).await?;
    /// assert_eq!(Penalty::MAX_DENIAL, Duration::from_secs(100 * 365 * 86_400));
    /// assert_eq!(d.blocked_for, Some(Penalty::MAX_DENIAL));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const MAX_DENIAL: Duration = Duration::from_secs(100 * 365 * 86_400);

    /// A penalty box tripped by the `rejections`-th rejection; set the block with
    /// [`block_for`](Penalty::block_for) (required) and, for more than one rejection,
    /// the window they must fall in with [`within`](Penalty::within).
    ///
    /// `Penalty::after(1)` needs no window: the first rejection blocks. With
    /// [`Policy::count_when`](crate::Policy::count_when) counting only failures, it
    /// is "N failed logins a minute block the caller for ten minutes": the quota
    /// counts the failures, and the first attempt it rejects trips the box.
    ///
    /// ```
    /// use std::time::Duration;
    /// let penalty = tollgate::Penalty::after(5)
    ///     .within(Duration::from_secs(60))
    ///     .block_for(Duration::from_secs(900));
    /// assert_eq!(penalty.get_after(), 5);
    /// ```
    pub fn after(rejections: u32) -> Self {
        Self {
            after: rejections,
            within: Duration::ZERO,
            block_for: Duration::ZERO,
            escalation: Escalation::default(),
        }
    }

    /// The window the rejections must fall in, from the first one counted.
    ///
    /// ```
    /// use std::time::Duration;
    /// let penalty = tollgate::Penalty::after(3).within(Duration::from_secs(10));
    /// assert_eq!(penalty.get_within(), Duration::from_secs(10));
    /// ```
    #[must_use]
    pub fn within(mut self, window: Duration) -> Self {
        self.within = window;
        self
    }

    /// How long a tripped box blocks the key: the first trip's block (every trip's,
    /// without escalation).
    ///
    /// ```
    /// use std::time::Duration;
    /// let penalty = tollgate::Penalty::after(3).block_for(Duration::from_secs(300));
    /// assert_eq!(penalty.get_block_for(), Duration::from_secs(300));
    /// ```
    #[must_use]
    pub fn block_for(mut self, duration: Duration) -> Self {
        self.block_for = duration;
        self
    }

    /// The blocks of the 2nd, 3rd, … remembered trips, after
    /// [`block_for`](Penalty::block_for)'s first; past the last, the last repeats (or
    /// grows by [`escalate_by`](Penalty::escalate_by)). Needs
    /// [`remember`](Penalty::remember). Each step must be at least the block before it;
    /// at most 8 steps (a longer growth is a factor). Rounded up to whole µs. Replaces
    /// the steps of an earlier call.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Penalty;
    /// let min = |m: u64| Duration::from_secs(60 * m);
    /// // 2 min, then 5, then 10 for every later trip within a day of the one before.
    /// let penalty = Penalty::after(3).within(min(1)).block_for(min(2))
    ///     .escalate(&[min(5), min(10)])
    ///     .remember(Duration::from_secs(86_400));
    /// assert_eq!(penalty.get_escalate(), [min(5), min(10)]);
    /// assert_eq!(penalty.next_block(0), min(2));
    /// assert_eq!(penalty.next_block(1), min(5));
    /// assert_eq!(penalty.next_block(7), min(10));
    /// ```
    #[must_use]
    pub fn escalate(mut self, blocks: &[Duration]) -> Self {
        let e = &mut self.escalation;
        e.given = blocks.len();
        e.steps = [0; MAX_STEPS];
        for (step, block) in e.steps.iter_mut().zip(blocks) {
            *step = micros_up(*block);
        }
        self
    }

    /// After the last block of [`escalate`](Penalty::escalate) (or the first,
    /// [`block_for`](Penalty::block_for), without steps), each remembered trip's block
    /// is `factor` times the one before, up to `cap`. Needs
    /// [`remember`](Penalty::remember). `factor` is at least 2, and `cap` at least the
    /// last block and at most [`MAX_DENIAL`](Penalty::MAX_DENIAL). The growth
    /// saturates: any number of trips stays at `cap`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Penalty;
    /// let min = |m: u64| Duration::from_secs(60 * m);
    /// // 1, 2, 4, 8, … minutes, at most an hour.
    /// let penalty = Penalty::after(1).block_for(min(1))
    ///     .escalate_by(2, min(60))
    ///     .remember(Duration::from_secs(86_400));
    /// assert_eq!(penalty.get_escalate_by(), Some((2, min(60))));
    /// assert_eq!(penalty.next_block(3), min(8));
    /// assert_eq!(penalty.next_block(u32::MAX), min(60));
    /// ```
    #[must_use]
    pub fn escalate_by(mut self, factor: u32, cap: Duration) -> Self {
        self.escalation.factor = factor;
        self.escalation.cap = cap;
        self
    }

    /// How long a trip is remembered: a key that trips the box again within
    /// `window` of its previous trip gets the next, longer block; a trip later than
    /// that starts over at the first block. It must be longer than the longest block
    /// (the next trip comes after a block ends, so a shorter memory would forget every
    /// trip before it could repeat), and at most
    /// [`MAX_DENIAL`](Penalty::MAX_DENIAL). Without escalation it only counts the
    /// trips ([`Decision::trips`](crate::Decision::trips)).
    ///
    /// The caller's record keeps the trips that long, on every store; a reload that
    /// shortens `window` reaches every key at once, one that lengthens it never keeps
    /// a trip longer than the `remember` it tripped under.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Penalty;
    /// let penalty = Penalty::after(1)
    ///     .block_for(Duration::from_secs(60))
    ///     .escalate_by(4, Duration::from_secs(3_600))
    ///     .remember(Duration::from_secs(86_400));
    /// assert_eq!(penalty.get_remember(), Duration::from_secs(86_400));
    /// ```
    #[must_use]
    pub fn remember(mut self, window: Duration) -> Self {
        self.escalation.remember = window;
        self
    }

    /// The block the next trip of a key gets when `trips` trips are remembered
    /// ([`Decision::trips`](crate::Decision::trips)): the first block for 0.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Penalty;
    /// let penalty = Penalty::after(1)
    ///     .block_for(Duration::from_secs(120))
    ///     .escalate(&[Duration::from_secs(300)])
    ///     .remember(Duration::from_secs(3_600));
    /// assert_eq!(penalty.next_block(0), Duration::from_secs(120));
    /// assert_eq!(penalty.next_block(1), Duration::from_secs(300));
    /// ```
    pub fn next_block(&self, trips: u32) -> Duration {
        let trip = if self.escalation.remember.is_zero() {
            1
        } else {
            trips.saturating_add(1)
        };
        Duration::from_micros(self.escalation.block_of(self.block_us(), trip))
    }

    /// How many rejections trip the box.
    ///
    /// ```
    /// assert_eq!(tollgate::Penalty::after(3).get_after(), 3);
    /// ```
    pub fn get_after(&self) -> u32 {
        self.after
    }

    /// The window the rejections must fall in.
    ///
    /// ```
    /// assert_eq!(tollgate::Penalty::after(3).get_within(), std::time::Duration::ZERO);
    /// ```
    pub fn get_within(&self) -> Duration {
        self.within
    }

    /// How long a tripped box blocks the key.
    ///
    /// ```
    /// assert_eq!(tollgate::Penalty::after(3).get_block_for(), std::time::Duration::ZERO);
    /// ```
    pub fn get_block_for(&self) -> Duration {
        self.block_for
    }

    /// The blocks after the first ([`escalate`](Penalty::escalate)).
    ///
    /// ```
    /// assert!(tollgate::Penalty::after(3).get_escalate().is_empty());
    /// ```
    pub fn get_escalate(&self) -> Vec<Duration> {
        self.escalation
            .steps()
            .iter()
            .map(|&us| Duration::from_micros(us))
            .collect()
    }

    /// The growth factor and its cap ([`escalate_by`](Penalty::escalate_by)), if set.
    ///
    /// ```
    /// assert_eq!(tollgate::Penalty::after(3).get_escalate_by(), None);
    /// ```
    pub fn get_escalate_by(&self) -> Option<(u32, Duration)> {
        (self.escalation.factor > 0).then_some((self.escalation.factor, self.escalation.cap))
    }

    /// How long a trip is remembered ([`remember`](Penalty::remember)); zero: not at
    /// all.
    ///
    /// ```
    /// assert_eq!(tollgate::Penalty::after(3).get_remember(), std::time::Duration::ZERO);
    /// ```
    pub fn get_remember(&self) -> Duration {
        self.escalation.remember
    }

    /// The escalation as the Redis scripts read it (see `Escalation::wire`).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn escalation_wire(&self) -> String {
        self.escalation.wire()
    }

    /// The window in µs, rounded up.
    pub(crate) fn within_us(&self) -> u64 {
        micros_up(self.within)
    }

    /// The block in µs, rounded up.
    pub(crate) fn block_us(&self) -> u64 {
        micros_up(self.block_for)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Penalty {
        Penalty::after(3)
            .within(Duration::from_secs(60))
            .block_for(Duration::from_secs(120))
    }

    #[test]
    fn equal_penalties_share_a_fingerprint_and_any_difference_changes_it() {
        let minutes = |m: u64| Duration::from_secs(60 * m);
        assert_eq!(base().fingerprint(), base().fingerprint());
        let escalating = base().escalate(&[minutes(5), minutes(10)]);
        assert_eq!(
            escalating.fingerprint(),
            base().escalate(&[minutes(5), minutes(10)]).fingerprint()
        );
        let different = [
            Penalty::after(4)
                .within(Duration::from_secs(60))
                .block_for(Duration::from_secs(120)),
            base().within(Duration::from_secs(61)),
            base().block_for(Duration::from_secs(121)),
            escalating,
            // Only a later step differs: the steps are part of the fingerprint.
            base().escalate(&[minutes(5), minutes(11)]),
            base().escalate_by(2, minutes(60)),
            base().escalate_by(3, minutes(60)),
            base().escalate_by(2, minutes(61)),
            base().remember(Duration::from_secs(86_400)),
        ];
        let mut prints: Vec<_> = different.iter().map(Penalty::fingerprint).collect();
        prints.push(base().fingerprint());
        let count = prints.len();
        prints.sort();
        prints.dedup();
        assert_eq!(prints.len(), count, "every penalty has its own fingerprint");
    }
}
