//! Rejections: the responses the layer writes instead of calling the inner service,
//! for HTTP (text, JSON, RFC 9457 problem details, or your own) and for gRPC.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::Decision;
use crate::layer::header_bytes;
use crate::layer::headers::{digits, write_retry_after};
use crate::layer::problem;
use crate::time::ceil_secs;

/// Why the layer answered a request itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// A policy denied the request (429, gRPC `RESOURCE_EXHAUSTED`).
    RateLimited,
    /// A policy set to [`MissingKey::Reject`](crate::layer::MissingKey::Reject) found no key
    /// (429, gRPC `RESOURCE_EXHAUSTED`).
    MissingKey,
    /// The request matched a [`deny`](crate::RateLimitLayer::deny) predicate (403,
    /// gRPC `PERMISSION_DENIED`).
    Denied,
    /// The store failed and the layer fails closed (503, gRPC `UNAVAILABLE`).
    StoreUnavailable,
    /// The policies admitted the request with a delay, but the layer already holds
    /// [`max_held`](crate::RateLimitLayer::max_held) requests; its charge was refunded
    /// (429, gRPC `RESOURCE_EXHAUSTED`).
    QueueFull,
    /// As many requests of the key as its policy's
    /// [`in_flight`](crate::Policy::in_flight) bound allows are running already (429
    /// with `Retry-After: 1`, gRPC `RESOURCE_EXHAUSTED`). The policy is in
    /// [`RejectionInfo::denied_by`]; no rate policy was charged.
    InFlight,
}

impl RejectReason {
    fn status(self) -> StatusCode {
        match self {
            Self::RateLimited | Self::MissingKey | Self::QueueFull | Self::InFlight => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Self::Denied => StatusCode::FORBIDDEN,
            Self::StoreUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The gRPC status code: 8 `RESOURCE_EXHAUSTED`, 7 `PERMISSION_DENIED`, 14
    /// `UNAVAILABLE`.
    pub(super) fn grpc_status(self) -> u64 {
        match self {
            Self::RateLimited | Self::MissingKey | Self::QueueFull | Self::InFlight => 8,
            Self::Denied => 7,
            Self::StoreUnavailable => 14,
        }
    }

    fn code(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::MissingKey => "missing_key",
            Self::Denied => "denied",
            Self::StoreUnavailable => "limiter_unavailable",
            Self::QueueFull => "queue_full",
            Self::InFlight => "too_many_in_flight",
        }
    }

    /// [`message`](Self::message) and a newline: the text rejection's body when there
    /// is no retry time to print.
    fn line(self, retry_after: Option<Duration>) -> &'static str {
        match self {
            Self::RateLimited if retry_after.is_none() => "request cost exceeds the rate limit\n",
            Self::RateLimited => "rate limit exceeded\n",
            Self::MissingKey => "request has no rate-limit key\n",
            Self::Denied => "request denied\n",
            Self::StoreUnavailable => "rate limiter unavailable\n",
            Self::QueueFull => "too many requests waiting\n",
            Self::InFlight => "too many requests in flight\n",
        }
    }

    pub(super) fn message(self, retry_after: Option<Duration>) -> &'static str {
        let line = self.line(retry_after);
        &line[..line.len() - 1]
    }
}

/// What a rejection is about; handed to a custom [`Rejection`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RejectionInfo {
    /// Why the request is rejected.
    pub reason: RejectReason,
    /// The decisions of every policy checked (empty when none was), shadowed ones
    /// included: a shadowed policy's denial is here, but never in
    /// [`denied_by`](Self::denied_by), the `violated-policies` or the problem type
    /// (it did not reject the request).
    pub decisions: Vec<Decision>,
    /// When the request may be retried; `None` when waiting will not help (its cost
    /// exceeds a policy's capacity) or does not apply (a deny list).
    pub retry_after: Option<Duration>,
    /// The positions in `decisions` of the policies in shadow mode for this caller.
    pub(crate) shadowed: Vec<usize>,
}

impl RejectionInfo {
    /// The rejection of a request that `decisions` denied (a policy, or several, said
    /// no): what a handler that checks a [`Limiter`](crate::Limiter) itself hands to
    /// [`Rejection::reject`] to answer as the layer would. It may be retried after
    /// the longest wait of the denying decisions; not at all when one of them can never
    /// admit it (its `retry_after` is `None`: the cost exceeds the capacity).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::layer::{RejectReason, RejectionInfo};
    /// use tollgate::{Key, Limit, Limiter, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("export", Quota::per_hour(1))?).build()?;
    /// let caller = Key::from("alice");
    /// limiter.check("export", &caller, 1).await?;
    /// let denied = limiter.check("export", &caller, 1).await?;
    /// let info = RejectionInfo::rate_limited(vec![denied]);
    /// assert_eq!(info.reason, RejectReason::RateLimited);
    /// assert!(info.retry_after.is_some_and(|wait| wait <= Duration::from_secs(3600)));
    /// assert_eq!(info.denied_by().collect::<Vec<_>>(), ["export"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rate_limited(decisions: Vec<Decision>) -> Self {
        // A denial whose cost can never fit has no retry time: say so rather than
        // invite a retry that cannot succeed.
        let retry_after = decisions
            .iter()
            .filter(|d| !d.allowed)
            .map(|d| d.retry_after)
            .try_fold(Duration::ZERO, |wait, retry| retry.map(|r| wait.max(r)));
        Self {
            reason: RejectReason::RateLimited,
            decisions,
            retry_after,
            shadowed: Vec::new(),
        }
    }

    /// The rejection of a request for `reason`, with no decision to report (none
    /// was made, or none is about a rate), retried after `retry_after`.
    pub(crate) fn without_decisions(reason: RejectReason, retry_after: Option<Duration>) -> Self {
        Self {
            reason,
            decisions: Vec::new(),
            retry_after,
            shadowed: Vec::new(),
        }
    }

    /// The decisions of the policies that enforce their limits on this caller (a
    /// shadowed policy only watches).
    pub(crate) fn enforced(&self) -> impl Iterator<Item = &Decision> + '_ {
        self.decisions
            .iter()
            .enumerate()
            .filter(|(position, _)| !self.shadowed.contains(position))
            .map(|(_, decision)| decision)
    }

    /// Names of the policies that denied the request.
    ///
    /// ```
    /// # use tollgate::layer::{RejectionInfo, RejectReason};
    /// # fn show(info: &RejectionInfo) -> String {
    /// info.denied_by().collect::<Vec<_>>().join(", ")
    /// # }
    /// ```
    pub fn denied_by(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.enforced().filter(|d| !d.allowed).map(|d| d.limit)
    }
}

// Checked once, at compile time: `HeaderValue::from_static` outside a constant checks
// every byte on every call.
const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");
const APPLICATION_PROBLEM_JSON: HeaderValue = HeaderValue::from_static("application/problem+json");

type CustomFn = dyn Fn(&RejectionInfo) -> Response<Bytes> + Send + Sync;

/// How HTTP rejections look. gRPC requests always get a gRPC status instead.
///
/// Whatever the body, the layer adds `Retry-After` and the rate-limit headers when
/// the response does not set them itself.
///
/// ```
/// use bytes::Bytes;
/// use http::{Response, StatusCode};
/// use tollgate::layer::{Rejection, RejectionInfo};
///
/// assert!(matches!(Rejection::default(), Rejection::Text));
/// let custom = Rejection::custom(|info: &RejectionInfo| {
///     Response::builder()
///         .status(StatusCode::TOO_MANY_REQUESTS)
///         .body(Bytes::from(format!("slow down ({:?})", info.reason)))
///         .expect("valid response")
/// });
/// assert!(matches!(custom, Rejection::Custom(_)));
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum Rejection {
    /// A one-line `text/plain` body (the default).
    #[default]
    Text,
    /// `application/json`: `{"error": "...", "message": "...", "retry_after": 3, "policies": [...]}`.
    Json,
    /// RFC 9457 `application/problem+json`, with the problem types of
    /// [draft-ietf-httpapi-ratelimit-headers-11] §5 (see [`ProblemType`]):
    ///
    /// ```json
    /// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
    ///  "title":"Quota Exceeded","status":429,"detail":"rate limit exceeded",
    ///  "retry_after":30,"violated-policies":["api"]}
    /// ```
    ///
    /// `#abnormal-usage-detected` when a denying policy has the key blocked (a
    /// penalty or an operator's block), `#temporary-reduced-capacity` for a store
    /// failure under [`FailMode::Closed`](crate::layer::FailMode::Closed) (503) and for a
    /// full [`max_held`](crate::RateLimitLayer::max_held), `about:blank` for a
    /// [`deny`](crate::RateLimitLayer::deny)ed request or a missing key. `retry_after`
    /// (whole seconds, or `null`) is this crate's extension member, beside the
    /// `Retry-After` header.
    ///
    /// [draft-ietf-httpapi-ratelimit-headers-11]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
    /// [`ProblemType`]: crate::layer::ProblemType
    Problem,
    /// Your own response.
    Custom(Arc<CustomFn>),
}

impl Rejection {
    /// A rejection built by `build`.
    pub fn custom<F>(build: F) -> Self
    where
        F: Fn(&RejectionInfo) -> Response<Bytes> + Send + Sync + 'static,
    {
        Self::Custom(Arc::new(build))
    }

    /// The response the layer would send for `info`, with `Retry-After` (the
    /// rate-limit headers are the layer's to add): for a handler that checks a
    /// [`Limiter`](crate::Limiter) itself and answers a denial as the layer does. With
    /// the `axum` feature, [`Rejected`] is an `IntoResponse`.
    ///
    /// ```
    /// use tollgate::layer::{Rejection, RejectionInfo};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("export", tollgate::Quota::per_hour(1))?).build()?;
    /// # let caller = tollgate::Key::from("alice");
    /// # limiter.check("export", &caller, 1).await?;
    /// let decision = limiter.check("export", &caller, 1).await?;
    /// if !decision.allowed {
    ///     let rejected = Rejection::Problem.reject(&RejectionInfo::rate_limited(vec![decision]));
    ///     let response = http::Response::from(rejected);
    ///     assert_eq!(response.status(), http::StatusCode::TOO_MANY_REQUESTS);
    ///     assert!(response.headers().contains_key(http::header::RETRY_AFTER));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reject(&self, info: &RejectionInfo) -> Rejected {
        Rejected(self.http_response(info))
    }

    /// The HTTP response for `info`; rate-limit headers are added by the caller.
    pub(crate) fn http_response(&self, info: &RejectionInfo) -> Response<Bytes> {
        let retry = info.retry_after.map(|d| ceil_secs(d).max(1));
        let (content_type, body) = match self {
            Self::Custom(build) => {
                let mut response = build(info);
                add_retry_after(response.headers_mut(), info);
                return response;
            }
            Self::Text => {
                let message = info.reason.message(info.retry_after);
                let body = match retry {
                    // Cut from the thread's header buffer: no allocation of its own.
                    Some(secs) => header_bytes::cut(message.len() + digits(secs) + 17, |body| {
                        body.extend_from_slice(message.as_bytes());
                        body.extend_from_slice(b": retry after ");
                        body.extend_from_slice(itoa::Buffer::new().format(secs).as_bytes());
                        body.extend_from_slice(b" s\n");
                    }),
                    None => Bytes::from_static(info.reason.line(info.retry_after).as_bytes()),
                };
                (TEXT_PLAIN, body)
            }
            Self::Json => {
                let mut body = format!(
                    r#"{{"error":"{}","message":"{}","retry_after":{},"policies":"#,
                    info.reason.code(),
                    info.reason.message(info.retry_after),
                    retry.map_or_else(|| "null".to_string(), |s| s.to_string()),
                );
                problem::push_json_array(&mut body, info.denied_by());
                body.push('}');
                (APPLICATION_JSON, Bytes::from(body))
            }
            Self::Problem => {
                let body = problem::body(info, info.reason.status(), retry);
                (APPLICATION_PROBLEM_JSON, Bytes::from(body))
            }
        };
        let mut response = Response::new(body);
        *response.status_mut() = info.reason.status();
        response.headers_mut().insert(CONTENT_TYPE, content_type);
        add_retry_after(response.headers_mut(), info);
        response
    }
}

/// A rejection's HTTP response, made by [`Rejection::reject`]: an
/// `http::Response<Bytes>` (through `From`), and with the `axum` feature an
/// `axum::response::IntoResponse`, so that a handler can return
/// `Result<_, Rejected>`.
///
/// ```
/// use tollgate::layer::{RejectReason, Rejection, RejectionInfo};
/// let rejected = Rejection::Json.reject(&RejectionInfo::rate_limited(Vec::new()));
/// let response: http::Response<bytes::Bytes> = rejected.into();
/// assert_eq!(response.headers()["content-type"], "application/json");
/// ```
#[derive(Debug)]
pub struct Rejected(pub(crate) Response<Bytes>);

impl From<Rejected> for Response<Bytes> {
    fn from(rejected: Rejected) -> Self {
        rejected.0
    }
}

impl fmt::Debug for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Text => "Rejection::Text",
            Self::Json => "Rejection::Json",
            Self::Problem => "Rejection::Problem",
            Self::Custom(_) => "Rejection::Custom(..)",
        })
    }
}

impl<F> From<F> for Rejection
where
    F: Fn(&RejectionInfo) -> Response<Bytes> + Send + Sync + 'static,
{
    fn from(build: F) -> Self {
        Self::custom(build)
    }
}

fn add_retry_after(headers: &mut HeaderMap, info: &RejectionInfo) {
    if let Some(retry) = info.retry_after
        && !headers.contains_key(RETRY_AFTER)
    {
        write_retry_after(headers, retry);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::RejectReason;

    #[test]
    fn text_bodies_are_exact_size() {
        let info = super::RejectionInfo::without_decisions(
            RejectReason::RateLimited,
            Some(Duration::from_millis(86_399_500)),
        );
        let response = super::Rejection::Text.http_response(&info);
        assert_eq!(
            response.body(),
            "rate limit exceeded: retry after 86400 s\n"
        );
    }

    #[test]
    fn lines_are_the_messages_with_a_newline() {
        for reason in [
            RejectReason::RateLimited,
            RejectReason::MissingKey,
            RejectReason::Denied,
            RejectReason::StoreUnavailable,
            RejectReason::QueueFull,
            RejectReason::InFlight,
        ] {
            for retry in [None, Some(Duration::from_secs(1))] {
                assert_eq!(reason.line(retry), format!("{}\n", reason.message(retry)));
            }
        }
    }
}
