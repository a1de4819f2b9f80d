//! [`Params`]: every number an algorithm needs, derived once from a quota.
//!
//! Derived values are computed here, in Rust, once; the Redis scripts receive them as
//! arguments so both stores round identically.

use std::time::Duration;

use crate::Quota;

use super::{Algorithm, Divisor};

/// The longest a fluid algorithm's tolerance (`B·T`) may be: a century, in nanoseconds.
/// Keeps `TAT = now + B·T` far inside `u64` nanoseconds since the epoch.
const MAX_TOLERANCE_NS: u64 = 100 * 365 * 86_400 * 1_000_000_000;

/// Keeps the token bucket's scaled capacity exact for Lua doubles.
const MAX_TOKEN_UNITS: u64 = 1 << 53;

/// Derived parameters of one (quota, algorithm) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Params {
    pub(crate) algorithm: Algorithm,
    /// `L`.
    pub(crate) limit: u64,
    /// `P` in microseconds.
    pub(crate) period_us: u64,
    /// `C`: `L` for window algorithms, `B` otherwise.
    pub(crate) capacity: u64,
    /// `T = P/L` in nanoseconds, rounded up (GCRA, leaky bucket).
    pub(crate) emission_ns: u64,
    /// `B·T` in nanoseconds (GCRA, leaky bucket).
    pub(crate) tolerance_ns: u64,
    /// Token bucket: one token is `P/g` units, `g = gcd(L, P)`.
    pub(crate) units_per_token: u64,
    /// Token bucket: `L/g` units refill per microsecond.
    pub(crate) units_per_us: u64,
    /// Sliding window counters: number of sub-windows.
    pub(crate) buckets: u64,
    /// Sliding window counters: sub-window length in microseconds.
    pub(crate) bucket_us: u64,
    /// Leaky bucket: the longest an admitted request may wait for its turn, in µs,
    /// at most `B·T` rounded up (a longer bound never binds); 0 for the other
    /// algorithms, which never delay.
    pub(crate) max_delay_us: u64,
    /// Division by `period_us`, `emission_ns`, `units_per_token` and `bucket_us`,
    /// without a `div` instruction on every decision.
    pub(crate) per_period: Divisor,
    pub(crate) per_emission: Divisor,
    pub(crate) per_token: Divisor,
    pub(crate) per_bucket: Divisor,
}

impl Params {
    /// Derives the parameters and says whether the combination is invalid.
    ///
    /// The parameters are always usable, even for an invalid combination (values are
    /// clamped into range), so a store handed an unvalidated limit answers sanely
    /// instead of panicking; [`LimiterBuilder::build`](crate::LimiterBuilder::build)
    /// refuses such limits with the returned message.
    ///
    /// `max_delay` bounds the leaky bucket's delays (see
    /// [`Limit::max_delay`](crate::Limit::max_delay)); the other algorithms ignore it.
    pub(crate) fn new(
        quota: &Quota,
        algorithm: Algorithm,
        max_delay: Duration,
    ) -> (Self, Option<String>) {
        let limit = quota.limit();
        let period_us = quota.period_micros();
        let mut problem = None;
        if !algorithm.takes_burst() && quota.has_custom_burst() && quota.burst() != limit {
            problem = Some(format!(
                "{algorithm} has capacity equal to the limit; burst {} for quota \"{quota}\" \
                 needs token_bucket, gcra or leaky_bucket",
                quota.burst()
            ));
        }
        let capacity = if algorithm.takes_burst() {
            quota.burst()
        } else {
            limit
        };
        let period_in_ns = u128::from(period_us) * 1_000;
        let emission_ns = period_in_ns.div_ceil(u128::from(limit)) as u64;
        let tolerance_ns = u128::from(capacity) * u128::from(emission_ns);
        if algorithm.takes_burst() && tolerance_ns > u128::from(MAX_TOLERANCE_NS) {
            problem = Some(format!(
                "burst {capacity} at quota \"{quota}\" takes more than a century to refill"
            ));
        }
        let g = gcd(limit, period_us);
        let (mut units_per_token, mut units_per_us) = (period_us / g, limit / g);
        if u128::from(capacity) * u128::from(units_per_token) > u128::from(MAX_TOKEN_UNITS) {
            if algorithm == Algorithm::TokenBucket {
                problem = Some(format!(
                    "quota \"{quota}\" with burst {capacity} is too fine-grained for exact \
                     token-bucket arithmetic; use a limit that divides the period more evenly"
                ));
            }
            // Usable stand-ins: one unit per token, refilled at the rate rounded up.
            units_per_token = 1;
            units_per_us = limit.div_ceil(period_us);
        }
        let (buckets, bucket_us) = match algorithm {
            Algorithm::SlidingWindowCounters { buckets } => {
                let n = u64::from(buckets);
                if !(1..=1024).contains(&n) {
                    problem = Some(format!(
                        "sliding_window_counters needs 1 to 1024 buckets, got {buckets}"
                    ));
                } else if !period_us.is_multiple_of(n) {
                    problem = Some(format!(
                        "{buckets} buckets do not divide the period of quota \"{quota}\" \
                         ({period_us} µs) evenly"
                    ));
                }
                let n = n.clamp(1, 1024).min(period_us);
                (n, period_us / n)
            }
            _ => (1, period_us),
        };
        let tolerance_ns = tolerance_ns.min(u128::from(MAX_TOLERANCE_NS)) as u64;
        let max_delay_us = if algorithm == Algorithm::LeakyBucket {
            // Every admitted delay is below `B·T` already: clamping there keeps the
            // sums with `now` far from overflow (and exact in Lua) and changes no answer.
            // Rounded up: a request is served at a whole µs.
            u64::try_from(max_delay.as_nanos().div_ceil(1_000))
                .unwrap_or(u64::MAX)
                .min(tolerance_ns.div_ceil(1_000))
        } else {
            0
        };
        let params = Self {
            algorithm,
            limit,
            period_us,
            capacity,
            emission_ns,
            tolerance_ns,
            units_per_token,
            units_per_us,
            buckets,
            bucket_us,
            max_delay_us,
            per_period: Divisor::new(period_us),
            per_emission: Divisor::new(emission_ns),
            per_token: Divisor::new(units_per_token),
            per_bucket: Divisor::new(bucket_us),
        };
        (params, problem)
    }
}

pub(crate) const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}
