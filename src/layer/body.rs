//! [`RateLimitBody`]: the response body of a rate-limited service, either the inner
//! service's body or a short rejection body.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::layer::grpc::grpc_http_status;
use crate::layer::headers::GRPC_STATUS;

/// Called with the HTTP equivalent of a gRPC response's final status, once its
/// trailers arrive (`count_when` refunds for gRPC). Dropped uncalled when the body
/// ends without one, or is dropped: it also holds the request's in-flight slots,
/// which go back then.
pub(crate) type OnGrpcStatus = Box<dyn FnOnce(StatusCode) + Send>;

pin_project! {
    /// The body of a response that went through [`RateLimit`](crate::layer::RateLimit): the
    /// inner service's body, or the layer's own rejection body.
    ///
    /// ```
    /// use http_body::Body;
    /// let body = tollgate::layer::RateLimitBody::<http_body_util_like::Empty>::rejection("slow down");
    /// assert_eq!(body.size_hint().exact(), Some(9));
    /// # mod http_body_util_like {
    /// #     use std::{pin::Pin, task::{Context, Poll}};
    /// #     pub struct Empty;
    /// #     impl http_body::Body for Empty {
    /// #         type Data = bytes::Bytes;
    /// #         type Error = std::convert::Infallible;
    /// #         fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> { Poll::Ready(None) }
    /// #     }
    /// # }
    /// ```
    // pin-project-lite takes no attributes on variant fields; the variants say what
    // their fields are.
    #[allow(missing_docs)]
    #[project = BodyProj]
    pub enum RateLimitBody<B> {
        /// The inner service's body (`body`).
        Inner { #[pin] body: B, on_status: Option<OnGrpcStatus> },
        /// A rejection written by the layer (`bytes`: what is left to send).
        Rejection { bytes: Option<Bytes> },
    }
}

impl<B> RateLimitBody<B> {
    /// Wraps the inner service's body.
    pub(crate) fn inner(body: B) -> Self {
        Self::Inner {
            body,
            on_status: None,
        }
    }

    /// Wraps a gRPC body whose final status decides refunds.
    pub(crate) fn watching(body: B, on_status: OnGrpcStatus) -> Self {
        Self::Inner {
            body,
            on_status: Some(on_status),
        }
    }

    /// A rejection body of `bytes` (empty for gRPC).
    pub fn rejection(bytes: impl Into<Bytes>) -> Self {
        let bytes = bytes.into();
        Self::Rejection {
            bytes: (!bytes.is_empty()).then_some(bytes),
        }
    }
}

impl<B> Body for RateLimitBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project() {
            BodyProj::Inner {
                mut body,
                on_status,
            } => {
                let frame = body.as_mut().poll_frame(cx);
                if on_status.is_none() {
                    return frame;
                }
                let ended = match &frame {
                    Poll::Ready(Some(Ok(frame))) => {
                        if let Some(status) = frame.trailers_ref().and_then(|t| t.get(GRPC_STATUS))
                            && let Some(on_status) = on_status.take()
                        {
                            on_status(grpc_http_status(status.as_bytes()));
                        }
                        body.is_end_stream()
                    }
                    Poll::Ready(None | Some(Err(_))) => true,
                    Poll::Pending => false,
                };
                if ended {
                    // The body's end gives the request's in-flight slots back at once,
                    // rather than whenever the server gets round to dropping it.
                    drop(on_status.take());
                }
                frame
            }
            BodyProj::Rejection { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Inner { body, .. } => body.is_end_stream(),
            Self::Rejection { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Inner { body, .. } => body.size_hint(),
            Self::Rejection { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for RateLimitBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inner { .. } => f.write_str("RateLimitBody::Inner"),
            Self::Rejection { bytes } => f
                .debug_struct("RateLimitBody::Rejection")
                .field("len", &bytes.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}
