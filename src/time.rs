//! Time conversions, in one place: every store, rule and header counts in whole
//! microseconds (or seconds, for headers), and each conversion below says which way
//! it rounds and that it saturates rather than wraps.

use std::time::Duration;

/// `d` in whole microseconds, rounded down; `u64::MAX` past it (some 584,000 years).
#[inline]
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `d` in whole microseconds, rounded up (a block never ends early, a positive age
/// never becomes 0); `u64::MAX` past it.
#[inline]
pub(crate) fn micros_up(d: Duration) -> u64 {
    let us = d.as_micros() + u128::from(!d.subsec_nanos().is_multiple_of(1_000));
    u64::try_from(us).unwrap_or(u64::MAX)
}

/// `d` in whole seconds, rounded up: a header never promises a reset earlier than
/// the real one.
#[cfg_attr(not(feature = "layer"), allow(dead_code))] // headers are the layer's
#[inline]
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_round_as_they_say_and_saturate() {
        let d = Duration::new(2, 1);
        assert_eq!(
            (micros(d), micros_up(d), ceil_secs(d)),
            (2_000_000, 2_000_001, 3)
        );
        let whole = Duration::from_micros(7);
        assert_eq!((micros(whole), micros_up(whole)), (7, 7));
        assert_eq!(ceil_secs(Duration::from_secs(4)), 4);
        assert_eq!(
            (micros(Duration::MAX), micros_up(Duration::MAX)),
            (u64::MAX, u64::MAX)
        );
    }
}
