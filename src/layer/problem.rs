//! [`ProblemType`]: the RFC 9457 problem details body of [`Rejection::Problem`], with
//! the problem types of the IETF draft on rate-limit headers.
//!
//! [`Rejection::Problem`]: crate::layer::Rejection::Problem

use std::fmt::Write as _;

use http::StatusCode;

use crate::layer::{RejectReason, RejectionInfo};

/// The problem type of a rejection in an RFC 9457 `application/problem+json` body
/// ([`Rejection::Problem`](crate::layer::Rejection::Problem)): one of the three that
/// [draft-ietf-httpapi-ratelimit-headers-11] §5 defines (and asks IANA to register in
/// its HTTP Problem Types registry), or `about:blank` for the rejections that are not
/// about quota.
///
/// | type | rejection | status |
/// |---|---|---|
/// | [`QuotaExceeded`](Self::QuotaExceeded) | a policy denied the request ([`RateLimited`](RejectReason::RateLimited)), or its in-flight bound did ([`InFlight`](RejectReason::InFlight)) | 429 |
/// | [`AbnormalUsageDetected`](Self::AbnormalUsageDetected) | a denying policy has the key blocked: a [`Penalty`](crate::Penalty) tripped, or an operator's [`block`](crate::Limiter::block) (a decision with [`blocked_for`](crate::Decision::blocked_for)) | 429 |
/// | [`TemporaryReducedCapacity`](Self::TemporaryReducedCapacity) | the store failed and the layer fails closed ([`StoreUnavailable`](RejectReason::StoreUnavailable), 503), or the layer holds all the delayed requests it may ([`QueueFull`](RejectReason::QueueFull), 429) | 503 / 429 |
/// | [`AboutBlank`](Self::AboutBlank) | a [`deny`](crate::RateLimitLayer::deny) predicate (403), a missing key under [`MissingKey::Reject`](crate::layer::MissingKey::Reject) (429) | the status |
///
/// The three draft types carry the draft's `violated-policies` member, the names of
/// the policies the rejection is about ([`RejectionInfo::violated_policies`]).
///
/// [draft-ietf-httpapi-ratelimit-headers-11]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
///
/// ```
/// use tollgate::layer::ProblemType;
/// assert_eq!(
///     ProblemType::QuotaExceeded.uri(),
///     "https://iana.org/assignments/http-problem-types#quota-exceeded"
/// );
/// assert_eq!(ProblemType::QuotaExceeded.title(), Some("Quota Exceeded"));
/// assert_eq!(ProblemType::AboutBlank.uri(), "about:blank");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemType {
    /// `https://iana.org/assignments/http-problem-types#quota-exceeded`: the request
    /// exceeds one or more quota policies.
    QuotaExceeded,
    /// `https://iana.org/assignments/http-problem-types#temporary-reduced-capacity`:
    /// the server cannot serve the request now for want of capacity.
    TemporaryReducedCapacity,
    /// `https://iana.org/assignments/http-problem-types#abnormal-usage-detected`: the
    /// caller's pattern of requests got it blocked.
    AbnormalUsageDetected,
    /// `about:blank` (RFC 9457 §4.2.1): no more than the status code says.
    AboutBlank,
}

impl ProblemType {
    /// The type's URI, the `type` member.
    ///
    /// ```
    /// use tollgate::layer::ProblemType;
    /// assert!(ProblemType::AbnormalUsageDetected.uri().ends_with("#abnormal-usage-detected"));
    /// ```
    pub fn uri(self) -> &'static str {
        match self {
            Self::QuotaExceeded => "https://iana.org/assignments/http-problem-types#quota-exceeded",
            Self::TemporaryReducedCapacity => {
                "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
            }
            Self::AbnormalUsageDetected => {
                "https://iana.org/assignments/http-problem-types#abnormal-usage-detected"
            }
            Self::AboutBlank => "about:blank",
        }
    }

    /// The type's title as the draft registers it; `None` for `about:blank`, whose
    /// title is the status code's reason phrase.
    ///
    /// ```
    /// use tollgate::layer::ProblemType;
    /// assert_eq!(ProblemType::TemporaryReducedCapacity.title(), Some("Temporary Reduced Capacity"));
    /// assert_eq!(ProblemType::AboutBlank.title(), None);
    /// ```
    pub fn title(self) -> Option<&'static str> {
        match self {
            Self::QuotaExceeded => Some("Quota Exceeded"),
            Self::TemporaryReducedCapacity => Some("Temporary Reduced Capacity"),
            Self::AbnormalUsageDetected => Some("Abnormal Usage Detected"),
            Self::AboutBlank => None,
        }
    }

    /// Whether the type defines the `violated-policies` member (the draft's three do).
    fn lists_policies(self) -> bool {
        self != Self::AboutBlank
    }
}

impl RejectionInfo {
    /// The problem type [`Rejection::Problem`](crate::layer::Rejection::Problem) gives
    /// this rejection (see [`ProblemType`]).
    ///
    /// ```
    /// use tollgate::layer::{ProblemType, RejectionInfo};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = tollgate::Limiter::builder()
    ///     .limit(tollgate::Limit::new("api", tollgate::Quota::per_minute(1))?)
    ///     .build()?;
    /// let caller = tollgate::Key::from("alice");
    /// limiter.check("api", &caller, 1).await?;
    /// let denied = limiter.check("api", &caller, 1).await?;
    /// let info = RejectionInfo::rate_limited(vec![denied]);
    /// assert_eq!(info.problem_type(), ProblemType::QuotaExceeded);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn problem_type(&self) -> ProblemType {
        match self.reason {
            RejectReason::RateLimited
                if self
                    .enforced()
                    .any(|d| !d.allowed && d.blocked_for.is_some()) =>
            {
                ProblemType::AbnormalUsageDetected
            }
            RejectReason::RateLimited | RejectReason::InFlight => ProblemType::QuotaExceeded,
            RejectReason::StoreUnavailable | RejectReason::QueueFull => {
                ProblemType::TemporaryReducedCapacity
            }
            RejectReason::MissingKey | RejectReason::Denied => ProblemType::AboutBlank,
        }
    }

    /// The policies this rejection is about, the draft's `violated-policies`: those
    /// that denied the request ([`denied_by`](Self::denied_by)), or, when the layer
    /// holds all the delayed requests it may
    /// ([`QueueFull`](RejectReason::QueueFull)), those whose delay would have held it.
    /// Empty when the store failed (no policy was decided).
    ///
    /// ```
    /// # use tollgate::layer::RejectionInfo;
    /// # fn show(info: &RejectionInfo) -> String {
    /// info.violated_policies().collect::<Vec<_>>().join(", ")
    /// # }
    /// ```
    pub fn violated_policies(&self) -> impl Iterator<Item = &'static str> + '_ {
        let queue_full = self.reason == RejectReason::QueueFull;
        self.enforced()
            .filter(move |d| {
                if queue_full {
                    !d.delay.is_zero()
                } else {
                    !d.allowed
                }
            })
            .map(|d| d.limit)
    }
}

/// The `application/problem+json` body for `info` answered with `status`; `retry` in
/// whole seconds, when waiting helps.
pub(crate) fn body(info: &RejectionInfo, status: StatusCode, retry: Option<u64>) -> String {
    let problem = info.problem_type();
    let mut body = String::with_capacity(256);
    body.push_str("{\"type\":");
    push_json_string(&mut body, problem.uri());
    body.push_str(",\"title\":");
    push_json_string(
        &mut body,
        problem
            .title()
            .or(status.canonical_reason())
            .unwrap_or("Error"),
    );
    let _ = write!(body, ",\"status\":{},\"detail\":", status.as_u16());
    push_json_string(&mut body, info.reason.message(info.retry_after));
    body.push_str(",\"retry_after\":");
    match retry {
        Some(secs) => body.push_str(itoa::Buffer::new().format(secs)),
        None => body.push_str("null"),
    }
    if problem.lists_policies() {
        body.push_str(",\"violated-policies\":");
        push_json_array(&mut body, info.violated_policies());
    }
    body.push('}');
    body
}

/// `names` as a JSON array of strings.
pub(crate) fn push_json_array<'a>(out: &mut String, names: impl Iterator<Item = &'a str>) {
    out.push('[');
    for (i, name) in names.enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_json_string(out, name);
    }
    out.push(']');
}

/// `text` as a JSON string (RFC 8259 §7): quoted, with `"`, `\` and control
/// characters escaped. Policy names are printable ASCII, so only the first two occur
/// today; the rest keep the body well-formed whatever a name may hold one day.
pub(crate) fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::push_json_string;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        let mut out = String::new();
        push_json_string(&mut out, "a\"b\\c\n\u{1}\u{7f}é");
        assert_eq!(out, r#""a\"b\\c\u000a\u0001\u007fé""#);
    }
}
