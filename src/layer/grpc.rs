//! gRPC: which requests are gRPC calls (a `POST` with a gRPC content type), the
//! trailers-only answer a rejected call gets, and the HTTP status a `grpc-status`
//! stands for (for `count_when`).

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};

use crate::layer::headers::{GRPC_MESSAGE, GRPC_RETRY_PUSHBACK_MS, GRPC_STATUS, insert_number};
use crate::layer::{RejectReason, RejectionInfo};

/// A gRPC "trailers-only" rejection: HTTP 200, the status in the headers, no body.
/// The content type is the request's gRPC flavour, so gRPC-Web clients understand it.
pub(crate) fn grpc_response(
    info: &RejectionInfo,
    content_type: GrpcContentType,
) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, content_type.header_value());
    insert_number(headers, GRPC_STATUS, info.reason.grpc_status());
    let message = match info.retry_after {
        Some(retry) => format!(
            "{}, retry after {} ms",
            info.reason.message(info.retry_after),
            retry.as_millis().max(1)
        ),
        None => info.reason.message(info.retry_after).to_string(),
    };
    if let Ok(value) = HeaderValue::try_from(percent_encode(&message)) {
        headers.insert(GRPC_MESSAGE, value);
    }
    match info.retry_after {
        Some(retry) => {
            let millis = u64::try_from(retry.as_millis()).unwrap_or(u64::MAX).max(1);
            insert_number(headers, GRPC_RETRY_PUSHBACK_MS, millis);
        }
        // A negative pushback tells gRPC clients not to retry (gRFC A6).
        None if info.reason == RejectReason::RateLimited => {
            const NEVER: HeaderValue = HeaderValue::from_static("-1");
            headers.insert(GRPC_RETRY_PUSHBACK_MS, NEVER);
        }
        None => {}
    }
    response
}

/// The HTTP status conventionally paired with a gRPC status code, so that
/// `count_when(|status| …)` reads the same for HTTP and gRPC responses. Unknown or
/// malformed codes map to 500.
pub(crate) fn grpc_http_status(code: &[u8]) -> StatusCode {
    let code = std::str::from_utf8(code)
        .ok()
        .and_then(|c| c.trim().parse::<u16>().ok());
    match code {
        Some(0) => StatusCode::OK,
        Some(1) => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Some(3 | 9 | 11) => StatusCode::BAD_REQUEST,
        Some(4) => StatusCode::GATEWAY_TIMEOUT,
        Some(5) => StatusCode::NOT_FOUND,
        Some(6 | 10) => StatusCode::CONFLICT,
        Some(7) => StatusCode::FORBIDDEN,
        Some(8) => StatusCode::TOO_MANY_REQUESTS,
        Some(12) => StatusCode::NOT_IMPLEMENTED,
        Some(14) => StatusCode::SERVICE_UNAVAILABLE,
        Some(16) => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// gRPC's `grpc-message` encoding: bytes outside printable ASCII, and `%`, as `%XX`.
pub(crate) fn percent_encode(message: &str) -> String {
    use std::fmt::Write as _;
    let mut encoded = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

/// The gRPC flavour of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrpcContentType {
    Grpc,
    GrpcWeb,
    GrpcWebText,
}

impl GrpcContentType {
    fn header_value(self) -> HeaderValue {
        const GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
        const GRPC_WEB: HeaderValue = HeaderValue::from_static("application/grpc-web");
        const GRPC_WEB_TEXT: HeaderValue = HeaderValue::from_static("application/grpc-web-text");
        match self {
            Self::Grpc => GRPC,
            Self::GrpcWeb => GRPC_WEB,
            Self::GrpcWebText => GRPC_WEB_TEXT,
        }
    }
}

/// The request's gRPC flavour, when it is a `POST` whose content type starts with
/// `application/grpc` (in any case); `None` for plain HTTP. gRPC calls are always
/// `POST`: any other request claiming gRPC gets plain HTTP answers, so that monitoring
/// and caches never see a rejection as an HTTP 200.
pub(crate) fn grpc_flavour(method: &Method, headers: &HeaderMap) -> Option<GrpcContentType> {
    if method != Method::POST {
        return None;
    }
    let value = headers.get(CONTENT_TYPE)?.as_bytes();
    let starts = |prefix: &[u8]| {
        value.len() >= prefix.len() && value[..prefix.len()].eq_ignore_ascii_case(prefix)
    };
    if starts(b"application/grpc-web-text") {
        Some(GrpcContentType::GrpcWebText)
    } else if starts(b"application/grpc-web") {
        Some(GrpcContentType::GrpcWeb)
    } else if starts(b"application/grpc") {
        Some(GrpcContentType::Grpc)
    } else {
        None
    }
}
