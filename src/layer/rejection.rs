//! Rejections: the responses the layer writes instead of calling the inner service,
//! for HTTP (text, JSON, RFC 9457 problem details, or your own) and for gRPC.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use crate::Decision;
use crate::layer::headers::{digits, write_retry_after};
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
    /// The decisions of every policy checked (empty when none was).
    pub decisions: Vec<Decision>,
    /// When the request may be retried; `None` when waiting will not help (its cost
    /// exceeds a policy's capacity) or does not apply (a deny list).
    pub retry_after: Option<Duration>,
}

impl RejectionInfo {
    /// Names of the policies that denied the request.
    ///
    /// ```
    /// # use tollgate::layer::{RejectionInfo, RejectReason};
    /// # fn show(info: &RejectionInfo) -> String {
    /// info.denied_by().collect::<Vec<_>>().join(", ")
    /// # }
    /// ```
    pub fn denied_by(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.decisions
            .iter()
            .filter(|d| !d.allowed)
            .map(|d| d.limit)
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
    /// RFC 9457 `application/problem+json`.
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
                    // One exact-size allocation for the body (`Bytes` keeps it as is),
                    // none for the text around the number.
                    Some(secs) => {
                        let mut body = Vec::with_capacity(message.len() + digits(secs) + 17);
                        body.extend_from_slice(message.as_bytes());
                        body.extend_from_slice(b": retry after ");
                        body.extend_from_slice(itoa::Buffer::new().format(secs).as_bytes());
                        body.extend_from_slice(b" s\n");
                        Bytes::from(body)
                    }
                    None => Bytes::from_static(info.reason.line(info.retry_after).as_bytes()),
                };
                (TEXT_PLAIN, body)
            }
            Self::Json => {
                let body = format!(
                    r#"{{"error":"{}","message":"{}","retry_after":{},"policies":[{}]}}"#,
                    info.reason.code(),
                    info.reason.message(info.retry_after),
                    retry.map_or_else(|| "null".to_string(), |s| s.to_string()),
                    json_names(info)
                );
                (APPLICATION_JSON, Bytes::from(body))
            }
            Self::Problem => {
                let status = info.reason.status();
                let body = format!(
                    r#"{{"type":"about:blank","title":"{}","status":{},"detail":"{}","retry_after":{},"policies":[{}]}}"#,
                    status.canonical_reason().unwrap_or("Error"),
                    status.as_u16(),
                    info.reason.message(info.retry_after),
                    retry.map_or_else(|| "null".to_string(), |s| s.to_string()),
                    json_names(info)
                );
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

/// Policy names as JSON strings (names are printable ASCII: only `"` and `\` need
/// escaping).
fn json_names(info: &RejectionInfo) -> String {
    info.denied_by()
        .map(|name| format!("\"{}\"", name.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect::<Vec<_>>()
        .join(",")
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
        let info = super::RejectionInfo {
            reason: RejectReason::RateLimited,
            decisions: Vec::new(),
            retry_after: Some(Duration::from_millis(86_399_500)),
        };
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
