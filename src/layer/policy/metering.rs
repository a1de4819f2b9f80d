//! A policy's metering: settling charges to what requests actually cost (a reported
//! actual, a response header, body bytes), and the rules that refuse what cannot work.

use std::sync::Arc;

use crate::ConfigError;
use crate::layer::{Policy, Unit};

/// How a policy's charges are settled to what requests actually cost.
#[derive(Clone, Default)]
pub(super) struct MeterRules {
    /// Whether an admitted request's charge is settled to the actual the inner
    /// service reports through its [`Meter`](crate::layer::Meter).
    pub(super) metered: bool,
    /// Reads the actual from the response head (`settle_from_response`).
    pub(super) from_response: Option<Arc<FromResponse>>,
    /// The most a request of this policy is settled to.
    pub(super) max_actual: Option<u64>,
    /// Counts request body bytes as they stream.
    pub(super) request_bytes: bool,
    /// Counts response body bytes as they stream.
    pub(super) response_bytes: bool,
}

/// A policy's `settle_from_response` rule.
type FromResponse = dyn Fn(&http::response::Parts) -> Option<u64> + Send + Sync;

impl Policy {
    /// Refuses metering rules that cannot work together: a reported actual and a
    /// count of bytes (two figures for one charge), a cap with nothing to cap, a cap
    /// of 0 (which would give every charge back), and metering on a policy that
    /// charges no quota.
    pub(super) fn validate_metering(&self) -> Result<(), ConfigError> {
        let bytes = self.metering.request_bytes || self.metering.response_bytes;
        let problem = if self.metering.metered && bytes {
            "counts body bytes and also settles to a reported actual: choose one"
        } else if self.metering.max_actual.is_some() && !self.metering.metered {
            "has max_actual but is not metered (Policy::metered or settle_from_response)"
        } else if self.metering.max_actual == Some(0) {
            // Every request would be settled to nothing and given its whole charge
            // back: the policy would limit nothing.
            "has max_actual 0: every request would be settled to 0 and charged nothing, so \
             the policy would limit nothing (set max_actual to at least 1, or leave it out)"
        } else if (self.metering.metered || bytes) && !self.rate {
            "is metered but charges no quota (in_flight_only)"
        } else {
            return Ok(());
        };
        Err(ConfigError::new(format!(
            "invalid policy \"{}\": it {problem}",
            self.name()
        )))
    }

    /// Settles each admitted request's charge to the actual cost the inner service
    /// reports through the request's [`Meter`](crate::layer::Meter) (in the request
    /// extensions): the request is admitted on an estimate, its
    /// [`costs`](Policy::costs) (e.g. a closure reading the request's `max_tokens`),
    /// and charged what the work used once that is known. See
    /// [`Meter`](crate::layer::Meter) for when the settle happens, what the response
    /// headers show, and the bound a caller reaches by under-estimating;
    /// [`max_actual`](Policy::max_actual) caps a report, and
    /// [`in_flight`](Policy::in_flight) how many under-estimated requests one caller
    /// runs at once.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, key};
    /// use tollgate::layer::Costs;
    /// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?
    ///     .key(key::header("x-api-key")?)
    ///     .costs(Costs::from_fn(|parts: &http::request::Parts| {
    ///         // the estimate: the caller's max_tokens, read by a layer in front
    ///         parts.headers.get("x-max-tokens")
    ///             .and_then(|v| v.to_str().ok()?.parse().ok())
    ///             .unwrap_or(1_000)
    ///     }))
    ///     .metered();
    /// assert!(tokens.is_metered());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn metered(mut self) -> Self {
        self.metering.metered = true;
        self
    }

    /// Whether this policy settles its requests' charges to their actual cost
    /// ([`metered`](Policy::metered) or [`settle_from_response`](Policy::settle_from_response)).
    ///
    /// ```
    /// assert!(!tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.is_metered());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn is_metered(&self) -> bool {
        self.metering.metered
    }

    /// Reads a request's actual cost from its response head (an upstream's usage
    /// header, say) and settles the charge to it as soon as the head arrives, before
    /// the headers are written: on the memory store the response's rate-limit headers
    /// then show where the caller stands after the settle. `None` leaves the actual
    /// to the request's [`Meter`](crate::layer::Meter) (the policy is
    /// [`metered`](Policy::metered)); a figure read here is final, and later reports
    /// to the meter do not change it.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?
    ///     .settle_from_response(|parts: &http::response::Parts| {
    ///         parts.headers.get("x-usage-tokens")?.to_str().ok()?.parse().ok()
    ///     });
    /// let (head, _) = http::Response::builder().header("x-usage-tokens", "240").body(())?.into_parts();
    /// assert_eq!(tokens.actual_from_response(&head), Some(240));
    /// assert!(tokens.is_metered());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn settle_from_response<F>(mut self, actual: F) -> Self
    where
        F: Fn(&http::response::Parts) -> Option<u64> + Send + Sync + 'static,
    {
        self.metering.from_response = Some(Arc::new(actual));
        self.metering.metered = true;
        self
    }

    /// The actual cost [`settle_from_response`](Policy::settle_from_response) reads
    /// from `head`, if it was set and finds one (not capped by
    /// [`max_actual`](Policy::max_actual)).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (head, _) = http::Response::new(()).into_parts();
    /// assert_eq!(policy.actual_from_response(&head), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn actual_from_response(&self, head: &http::response::Parts) -> Option<u64> {
        self.metering
            .from_response
            .as_ref()
            .and_then(|actual| actual(head))
    }

    /// Whether the policy reads actuals from response heads.
    pub(crate) fn reads_response(&self) -> bool {
        self.metering.from_response.is_some()
    }

    /// The most one request of this [`metered`](Policy::metered) policy is settled to:
    /// a larger report is charged as `max`. It bounds the debt one report can make (a
    /// buggy or hostile inner figure, `u64::MAX`), and with an
    /// [`in_flight`](Policy::in_flight) limit of `n` it bounds what a caller who
    /// under-estimates gets beyond its quota to `n × (max − its estimate)`: make the
    /// work itself stop at `max` too (clamp the caller's `max_tokens` to it), or the
    /// work past `max` is done and not charged. Without it, any `u64` is settled (see
    /// [`Limiter::settle`](crate::Limiter::settle) for the most one settle charges).
    ///
    /// `max_actual(0)` is refused when the layer is built: every request would be
    /// settled to nothing, and the policy would limit nothing.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?.metered().max_actual(4_096);
    /// assert_eq!(tokens.get_max_actual(), Some(4_096));
    ///
    /// let nothing = Policy::new("tokens", Quota::per_minute(5))?.metered().max_actual(0);
    /// let err = RateLimitLayer::builder().policy(nothing).build().unwrap_err();
    /// assert!(err.to_string().contains("max_actual 0"), "{err}");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_actual(mut self, max: u64) -> Self {
        self.metering.max_actual = Some(max);
        self
    }

    /// The cap on a request's actual, if set (see [`max_actual`](Policy::max_actual)).
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.get_max_actual(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_max_actual(&self) -> Option<u64> {
        self.metering.max_actual
    }

    /// Counts the bytes of request bodies, per key, as the inner service reads them:
    /// the policy's quota is in bytes (`Quota::per_second(1 << 20)`: 1 MiB/s), and
    /// its headers say so (`qu="content-bytes"`). Needs the
    /// [`MeterBytes`](crate::layer::MeterBytes) layer inside the
    /// `RateLimitLayer`, which wraps the body; see there for how frames are held to
    /// the rate, what a body that would wait too long gets, and how the request's
    /// admission charge (its [`costs`](Policy::costs), default 1: one byte) counts as
    /// bytes paid in advance.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, key, layer::Unit};
    /// let upload = Policy::new("upload", Quota::per_second(1 << 20))?
    ///     .key(key::header("x-api-key")?)
    ///     .meter_request_bytes();
    /// assert!(upload.meters_request_bytes());
    /// assert_eq!(upload.get_unit(), Unit::ContentBytes);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn meter_request_bytes(mut self) -> Self {
        self.metering.request_bytes = true;
        self
    }

    /// Counts the bytes of response bodies, per key, as they are sent: as
    /// [`meter_request_bytes`](Policy::meter_request_bytes), for downloads. Both may
    /// be set: the policy then counts both directions in one quota.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let download = Policy::new("download", Quota::per_second(1 << 20))?.meter_response_bytes();
    /// assert!(download.meters_response_bytes());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn meter_response_bytes(mut self) -> Self {
        self.metering.response_bytes = true;
        self
    }

    /// Whether this policy counts request body bytes.
    ///
    /// ```
    /// assert!(!tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.meters_request_bytes());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn meters_request_bytes(&self) -> bool {
        self.metering.request_bytes
    }

    /// Whether this policy counts response body bytes.
    ///
    /// ```
    /// assert!(!tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.meters_response_bytes());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn meters_response_bytes(&self) -> bool {
        self.metering.response_bytes
    }

    /// What this policy's quota counts: [`Unit::ContentBytes`] when it meters body
    /// bytes, else [`Unit::Requests`].
    ///
    /// ```
    /// use tollgate::{Policy, Quota, layer::Unit};
    /// assert_eq!(Policy::new("api", Quota::per_second(1))?.get_unit(), Unit::Requests);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_unit(&self) -> Unit {
        if self.metering.request_bytes || self.metering.response_bytes {
            Unit::ContentBytes
        } else {
            Unit::Requests
        }
    }

    /// Whether requests under this policy need the layer's metering: a meter, or a
    /// count of body bytes.
    #[inline]
    pub(crate) fn meters(&self) -> bool {
        self.metering.metered || self.metering.request_bytes || self.metering.response_bytes
    }
}
