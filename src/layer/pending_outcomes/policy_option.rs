//! [`Policy::wait_for_outcomes`]: how long a request waits for its caller's pending
//! `count_when` outcomes.

use std::time::Duration;

use crate::Policy;

impl Policy {
    /// How long a request waits, at most, for the outcomes of this process's charges
    /// of its key that [`count_when`](Policy::count_when) has not classified yet, when
    /// only they stand between it and admission (default 5 s). A charge whose
    /// response does not count is refunded and frees quota for it; once none is
    /// pending, a request that still does not fit is rejected as usual (an offence for
    /// a [`penalty`](Policy::penalty)). Past the wait it is refused, with no charge
    /// and no offence. 0 refuses such a request at once, still without an offence.
    ///
    /// While it waits, the request is one of the layer's
    /// [held requests](crate::RateLimitLayer::max_held); when the layer holds as many
    /// as it may, it is refused at once, without an offence. Charges pending in other
    /// processes are not seen: there, they count as spent until their refund lands.
    ///
    /// ```
    /// use std::time::Duration;
    /// let logins = tollgate::Policy::new("logins", tollgate::Quota::per_minute(5))?
    ///     .count_when(|status| status == http::StatusCode::UNAUTHORIZED)
    ///     .wait_for_outcomes(Duration::from_secs(2));
    /// assert_eq!(logins.get_wait_for_outcomes(), Duration::from_secs(2));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn wait_for_outcomes(mut self, max_wait: Duration) -> Self {
        self.outcome_wait = max_wait;
        self
    }

    /// Other processes share this policy's store (several servers behind a balancer):
    /// a request that does not fit while no charge of its key is pending in this
    /// process looks at the store again every `every`, up to
    /// [`wait_for_outcomes`](Policy::wait_for_outcomes), before it is charged, so that
    /// charges pending in other processes can be refunded first. Only once the wait
    /// is over is a request that still does not fit charged, and refused: an offence.
    ///
    /// Each request then looks at the store before its charge (one more store call),
    /// and the charge is a trial that no refusal makes an offence: another process
    /// may take the last unit between the look and the charge. The cost: a refusal
    /// that is real (the failures are spent) comes only at the end of the wait, and
    /// each waiting request looks at the store once per `every` (at most
    /// [`max_held_per_key`](crate::RateLimitLayer::max_held_per_key) of one caller
    /// wait at once). Without it, a burst spread over processes can still trip the
    /// box. `every` is at least 1 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// let logins = tollgate::Policy::new("logins", tollgate::Quota::per_minute(5))?
    ///     .count_when(|status| status == http::StatusCode::UNAUTHORIZED)
    ///     .poll_other_processes(Duration::from_millis(50));
    /// assert_eq!(logins.get_poll_other_processes(), Some(Duration::from_millis(50)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn poll_other_processes(mut self, every: Duration) -> Self {
        self.outcome_poll = Some(every.max(Duration::from_millis(1)));
        self
    }

    /// How often a request looks again for other processes' outcomes, if it does (see
    /// [`poll_other_processes`](Policy::poll_other_processes)).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("logins", tollgate::Quota::per_minute(5))?;
    /// assert_eq!(policy.get_poll_other_processes(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_poll_other_processes(&self) -> Option<Duration> {
        self.outcome_poll
    }

    /// How long a request waits for its key's pending `count_when` outcomes (see
    /// [`wait_for_outcomes`](Policy::wait_for_outcomes)).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("logins", tollgate::Quota::per_minute(5))?;
    /// assert_eq!(policy.get_wait_for_outcomes(), std::time::Duration::from_secs(5));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_wait_for_outcomes(&self) -> Duration {
        self.outcome_wait
    }
}
