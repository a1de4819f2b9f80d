//! A policy's in-flight limit: how many requests of one key may run at once.

use std::num::NonZeroU32;

use crate::layer::Policy;
use crate::{ConfigError, Quota};

impl Policy {
    /// At most `max` requests of one key (this policy's [`key`](Policy::key)) run at
    /// once; the next gets 429 with `Retry-After: 1` (gRPC `RESOURCE_EXHAUSTED`, retry
    /// pushback 1000 ms) until one of them ends. 0 is a [`ConfigError`].
    ///
    /// - **When a slot is taken:** before the rate decision, for every request with a
    ///   key (whatever its cost). A request refused here is never charged to any rate
    ///   policy; a request that a rate policy then denies (or that the layer cannot
    ///   hold for its leaky-bucket turn) gives its slot back at once.
    /// - **When it is given back:** when the response body ends, or is dropped before
    ///   it ends: the client went away, the inner service failed or panicked, the
    ///   request was cancelled. A request held for its leaky-bucket turn holds its slot
    ///   meanwhile.
    /// - **Headers:** the limit has no member in `RateLimit` / `RateLimit-Policy`:
    ///   those describe a quota that refills over a window, and a count of running
    ///   requests has neither. Its rejection says `Retry-After: 1` and names the
    ///   policy in [`RejectionInfo`](crate::layer::RejectionInfo) (reason
    ///   [`RejectReason::InFlight`](crate::layer::RejectReason::InFlight)).
    /// - **Stores:** counted per (policy name, key) on the limiter's store: in memory,
    ///   or as slot records in Redis that expire when a crashed process stops renewing them
    ///   (`RedisStore::in_flight_ttl`). A store failure follows the
    ///   layer's [`FailMode`](crate::layer::FailMode); shadow mode passes a refused request.
    /// - In wait mode ([`wait`](Policy::wait), or the layer's), a request that finds no
    ///   slot free waits for one instead, asking again with a backoff of 1 to 25 ms, and
    ///   gets the 429 only once its wait is over.
    ///
    /// The policy keeps its quota too; for a concurrency limit alone, see
    /// [`in_flight_only`](Policy::in_flight_only).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let reports = Policy::new("reports", Quota::per_minute(60))?.in_flight(2)?;
    /// assert_eq!(reports.get_in_flight(), Some(2));
    /// assert!(Policy::new("reports", Quota::per_minute(60))?.in_flight(0).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight(mut self, max: u32) -> Result<Self, ConfigError> {
        let max = NonZeroU32::new(max).ok_or_else(|| {
            ConfigError::new(format!(
                "policy \"{}\": invalid in_flight 0: at least one request must be able to run",
                self.name()
            ))
        })?;
        self.in_flight = Some(max);
        Ok(self)
    }

    /// A policy that only bounds how many requests of one key run at once: `max`, as
    /// [`in_flight`](Policy::in_flight) does, with no rate quota. It writes no
    /// rate-limit header and charges nothing; its [`quota`](Policy::quota) is a
    /// stand-in ([`Quota::MAX_COUNT`] per second) that the layer never checks. Its
    /// [`costs`](Policy::costs) do not apply. Name and `max` are checked as by
    /// [`Policy::new`] and [`in_flight`](Policy::in_flight).
    ///
    /// ```
    /// use tollgate::{Limiter, Policy, RateLimitLayer, key};
    /// let uploads = Policy::in_flight_only("uploads", 4)?.key(key::header("x-api-key")?);
    /// assert_eq!(uploads.get_in_flight(), Some(4));
    /// assert!(!uploads.has_rate());
    /// let layer = RateLimitLayer::builder().policy(uploads).build()?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_only(name: impl AsRef<str>, max: u32) -> Result<Self, ConfigError> {
        let mut policy = Self::new(name, Quota::per_second(Quota::MAX_COUNT))?.in_flight(max)?;
        policy.rate = false;
        Ok(policy)
    }

    /// How many requests of one key may run at once, if bounded.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// assert_eq!(policy.get_in_flight(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_in_flight(&self) -> Option<u32> {
        self.in_flight.map(NonZeroU32::get)
    }

    /// Whether the layer charges this policy's quota: `false` only for
    /// [`in_flight_only`](Policy::in_flight_only).
    ///
    /// ```
    /// assert!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.has_rate());
    /// assert!(!tollgate::Policy::in_flight_only("api", 1)?.has_rate());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn has_rate(&self) -> bool {
        self.rate
    }
}
