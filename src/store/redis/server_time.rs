//! [`ServerTime`]: the latest Redis server time this store has seen, carried forward
//! on the local monotonic clock, so that a server clock stepping back cannot re-open
//! keys that were idle through the step.
//!
//! Each key's state also records the latest instant it saw, which holds that key still
//! when the server's clock steps back; but a key that was idle (or expired) through
//! the step has no such record and would be decided at the earlier time, then again
//! when the clock returns: up to two periods' quota more for the window algorithms
//! (measured by `tests/redis/clock_faults.rs`). The store therefore sends the server
//! time it last saw, extrapolated, as a floor with every call.

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// The floor advances at 63/64 of local time: after the server's clock steps back by
/// `d`, the store rejoins it within `64 d` (limits are at most 1.6% stricter in the
/// meantime), and a drift between the two clocks can never push the floor ahead of a
/// correct server clock.
const SLOWDOWN: u64 = 64;

/// The latest server time seen (µs since the epoch) and when it arrived.
#[derive(Debug, Default)]
pub(super) struct ServerTime {
    latest: Mutex<Option<(u64, Instant)>>,
}

impl ServerTime {
    /// The floor to send with a call: the latest server time seen plus 63/64 of the
    /// local time elapsed since; `None` before the first reply.
    pub(super) fn floor(&self) -> Option<u64> {
        let latest = *self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.map(|(server_us, at)| extrapolate(server_us, at, Instant::now()))
    }

    /// Records the instant a reply was decided at, `decided_us`, for a call that sent
    /// `sent_floor`. A reply earlier than the floor it was sent means the script
    /// refused the floor (the server's clock was behind it by more than the script's
    /// bound: a deliberate correction, or the end of a glitch far ahead), so the store
    /// follows the server from then on.
    pub(super) fn observe(&self, decided_us: u64, sent_floor: Option<u64>) {
        let now = Instant::now();
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        let refused = sent_floor.is_some_and(|floor| decided_us < floor);
        let ahead =
            latest.is_none_or(|(server_us, at)| decided_us >= extrapolate(server_us, at, now));
        if refused || ahead {
            *latest = Some((decided_us, now));
        }
    }
}

fn extrapolate(server_us: u64, at: Instant, now: Instant) -> u64 {
    let elapsed = crate::time::micros(now.saturating_duration_since(at));
    server_us.saturating_add(elapsed - elapsed / SLOWDOWN)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_floor_follows_the_latest_reply_and_advances_a_little_slower_than_time() {
        let time = ServerTime::default();
        assert_eq!(time.floor(), None);
        time.observe(1_000_000, None);
        let floor = time.floor().expect("a floor after a reply");
        assert!(floor >= 1_000_000);
        // A reply behind the floor that was accepted (the script used the floor) does
        // not move it back.
        time.observe(999_000, None);
        assert!(time.floor().expect("floor") >= 1_000_000);
        let at = Instant::now();
        let later = at + Duration::from_secs(64);
        assert_eq!(extrapolate(5, at, later), 5 + 63_000_000);
    }

    #[test]
    fn a_refused_floor_resets_to_the_server() {
        let time = ServerTime::default();
        time.observe(10_000_000_000, None);
        // The script decided at 1 s although it was sent a floor of ~10^4 s: it refused
        // the floor, and the store follows the server.
        time.observe(1_000_000, Some(10_000_000_000));
        let floor = time.floor().expect("floor");
        assert!((1_000_000..2_000_000).contains(&floor), "{floor}");
    }
}
