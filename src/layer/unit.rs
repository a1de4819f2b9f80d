//! [`Unit`]: what a policy's quota counts, as the rate-limit headers name it.

use std::fmt;

/// What a policy's quota counts: requests (the default, and the unit of every
/// [`Costs`](crate::layer::Costs) and [`Meter`](crate::layer::Meter) report), or the
/// bytes of request or response bodies as they stream
/// ([`Policy::meter_request_bytes`](crate::Policy::meter_request_bytes),
/// [`Policy::meter_response_bytes`](crate::Policy::meter_response_bytes)).
///
/// The `RateLimit-Policy` header states a unit other than requests with the draft's
/// `qu` parameter: `"upload";q=1048576;w=1;qu="content-bytes"`.
///
/// ```
/// use tollgate::{Policy, Quota, layer::Unit};
/// let upload = Policy::new("upload", Quota::per_second(1 << 20))?.meter_request_bytes();
/// assert_eq!(upload.get_unit(), Unit::ContentBytes);
/// assert_eq!(Unit::ContentBytes.as_str(), "content-bytes");
/// assert_eq!(Policy::new("api", Quota::per_second(5))?.get_unit(), Unit::Requests);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Unit {
    /// Requests, or whatever the policy's costs and reports count (tokens, rows).
    #[default]
    Requests,
    /// Bytes of body content, counted as they stream.
    ContentBytes,
}

impl Unit {
    /// The unit's name in draft-ietf-httpapi-ratelimit-headers-11 (`qu`).
    ///
    /// ```
    /// assert_eq!(tollgate::layer::Unit::Requests.as_str(), "requests");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::ContentBytes => "content-bytes",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
