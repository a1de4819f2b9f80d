//! [`Offences`]: where a key stands with its limit's penalty box, for an operator.

use std::time::Duration;

use super::Penalty;
use crate::Decision;

/// Where a key stands with its limit's [`Penalty`]: its block, the trips remembered
/// and the block its next trip gets. What
/// [`Limiter::offences`](crate::Limiter::offences) returns (one peek; nothing is
/// charged).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Key, Limit, Limiter, MemoryStore, Penalty, Quota};
/// use tollgate::clock::ManualClock;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let min = |m: u64| Duration::from_secs(60 * m);
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// let limiter = Limiter::builder()
///     .limit(Limit::new("login", Quota::per_minute(1))?.penalty(
///         Penalty::after(1).block_for(min(2)).escalate(&[min(5), min(10)]).remember(min(60)),
///     ))
///     .store(MemoryStore::with_clock(clock.clone()))
///     .build()?;
/// let key = Key::from("mallory");
/// limiter.check("login", &key, 1).await?;
/// limiter.check("login", &key, 1).await?; // rejected: the 1st trip, 2 min
/// let o = limiter.offences("login", &key).await?;
/// assert_eq!((o.trips, o.blocked_for, o.next_block), (1, Some(min(2)), Some(min(5))));
/// clock.advance(min(61)); // an hour after the trip: forgotten
/// let o = limiter.offences("login", &key).await?;
/// assert_eq!((o.trips, o.blocked_for, o.next_block), (0, None, Some(min(2))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Offences {
    /// The key's trips in a row that the penalty still remembers
    /// ([`Decision::trips`]): 0 when it has none, or its penalty remembers none.
    pub trips: u32,
    /// The time until the key's block ends (an operator's or a penalty's); `None`
    /// when it is not blocked.
    pub blocked_for: Option<Duration>,
    /// The block the key's next trip gets ([`Penalty::next_block`]), if it tripped
    /// now; `None` when the limit has no penalty.
    pub next_block: Option<Duration>,
}

impl Offences {
    /// Where the key of `peeked` stands under `penalty`.
    pub(crate) fn of(peeked: &Decision, penalty: Option<&Penalty>) -> Self {
        Self {
            trips: peeked.trips,
            blocked_for: peeked.blocked_for,
            next_block: penalty.map(|p| p.next_block(peeked.trips)),
        }
    }
}
