//! [`Penalty`]: the penalty box of a limit, and the offence record both stores keep
//! next to a key's rate state (the Redis store's twin is `lua/block.lua`).

use crate::time::micros_up;
use std::time::Duration;

use crate::ConfigError;

/// The longest a penalty's window or block may be: Redis keeps instants in Lua
/// doubles, exact below 2^53 µs since the epoch, and now is about 2^50.7.
const MAX_PENALTY: Duration = Penalty::MAX_DENIAL;

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
/// - [`Limiter::reset`](crate::Limiter::reset) lifts the block and clears the count.
///
/// On Redis the count and the block live next to the rate state (same hash tag) and
/// are decided in the same call: a penalty costs no extra round trip, and every
/// process sees the block.
///
/// Zero rejections, a zero block, or a zero window for more than one rejection is a
/// [`ConfigError`] when the limiter is built.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Penalty {
    after: u32,
    within: Duration,
    block_for: Duration,
}

impl Penalty {
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

    /// How long a tripped box blocks the key.
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

    /// The window in µs, rounded up.
    pub(crate) fn within_us(&self) -> u64 {
        micros_up(self.within)
    }

    /// The block in µs, rounded up.
    pub(crate) fn block_us(&self) -> u64 {
        micros_up(self.block_for)
    }

    /// Refuses zeros and spans the Redis store could not count exactly; the message
    /// names the limit.
    pub(crate) fn validate(&self, limit: &str) -> Result<(), ConfigError> {
        let problem = if self.after == 0 {
            Some("Penalty::after(0): at least 1 rejection must trip it".to_owned())
        } else if self.within.is_zero() && self.after > 1 {
            Some(format!(
                "Penalty::after({}) counts rejections within a window: set Penalty::within",
                self.after
            ))
        } else if self.block_for.is_zero() {
            Some("a zero block: set Penalty::block_for".to_owned())
        } else if self.within > MAX_PENALTY || self.block_for > MAX_PENALTY {
            Some(format!(
                "window {:?} or block {:?} longer than 100 years",
                self.within, self.block_for
            ))
        } else {
            None
        };
        match problem {
            Some(why) => Err(ConfigError::new(format!(
                "invalid penalty of limit \"{limit}\": {why}"
            ))),
            None => Ok(()),
        }
    }
}

/// A key's block and its count of rejections, in µs since the epoch: what the memory
/// store keeps in the caller's record (one per limit name and key), and the Redis
/// store in the record key `<prefix>:<limit>:{<fingerprint>}:b` as
/// "`<blocked_until> <count> <first_at> <queue_until>`".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Offences {
    /// Denied while `now < blocked_until`.
    pub(crate) blocked_until: u64,
    /// Rejections counted since `first_at` (0: none).
    pub(crate) count: u32,
    /// When the counted rejections' window opened.
    pub(crate) first_at: u64,
}

impl Offences {
    /// How long the key stays blocked from `now`, if it is.
    pub(crate) fn blocked_for(&self, now: u64) -> Option<u64> {
        (self.blocked_until > now).then(|| self.blocked_until - now)
    }

    /// Counts a rejection at `now` (the key not blocked); true when it trips the box,
    /// which then blocks the key and starts the count again.
    pub(crate) fn offend(&mut self, penalty: &Penalty, now: u64) -> bool {
        if self.count == 0 || now >= self.first_at.saturating_add(penalty.within_us()) {
            self.count = 1;
            self.first_at = now;
        } else {
            self.count += 1;
        }
        if self.count < penalty.after {
            return false;
        }
        self.blocked_until = now.saturating_add(penalty.block_us());
        self.count = 0;
        self.first_at = 0;
        true
    }

    /// The instant from which the record says nothing (no block, no window open), so
    /// a store may drop it.
    pub(crate) fn idle_at(&self, within_us: u64) -> u64 {
        let window_end = if self.count == 0 {
            0
        } else {
            self.first_at.saturating_add(within_us)
        };
        self.blocked_until.max(window_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn penalty() -> Penalty {
        Penalty::after(3)
            .within(Duration::from_micros(100))
            .block_for(Duration::from_micros(50))
    }

    #[test]
    fn the_third_rejection_within_the_window_trips() {
        let mut o = Offences::default();
        assert!(!o.offend(&penalty(), 10));
        assert!(!o.offend(&penalty(), 50));
        assert!(o.offend(&penalty(), 109));
        assert_eq!(o.blocked_for(109), Some(50));
        assert_eq!(o.blocked_for(159), None);
        assert_eq!(o.count, 0);
    }

    #[test]
    fn the_count_restarts_after_the_window() {
        let mut o = Offences::default();
        assert!(!o.offend(&penalty(), 10));
        assert!(!o.offend(&penalty(), 50));
        // 10 + 100: the window has closed, this is a first rejection again.
        assert!(!o.offend(&penalty(), 110));
        assert_eq!((o.count, o.first_at), (1, 110));
        assert_eq!(o.idle_at(100), 210);
    }
}
