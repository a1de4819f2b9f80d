//! [`MeterBytes`]: the layer that counts body bytes for byte-metered policies
//! ([`Policy::meter_request_bytes`](crate::Policy::meter_request_bytes),
//! [`Policy::meter_response_bytes`](crate::Policy::meter_response_bytes)). It goes
//! inside the `RateLimitLayer`, next to the service: counting a body means wrapping it,
//! which changes its type, and the `RateLimitLayer` hands its inner service the
//! request body it was given.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::layer::MeteredBody;
use crate::layer::byte_account::{ByteMeters, ByteMetersExtension, Direction};

/// Counts request and response body bytes for the byte-metered policies of the
/// `RateLimitLayer` around it. Place it inside that layer; it does nothing for a
/// request no such policy admitted (the body goes through as a plain
/// [`MeteredBody`]).
///
/// - **Admission.** A byte-metered policy admits a request as any policy does, on its
///   [`costs`](crate::Policy::costs) (default 1: one byte), which count as bytes paid
///   in advance: a caller whose bytes are spent, beyond the policy's wait, gets the
///   layer's 429 before the inner service sees the request or any of its body. Price
///   requests by their `content-length` to pay more in advance (fewer store calls);
///   what the body does not use is given back when it ends.
/// - **Frames.** Each data frame, beyond the advance, is charged as it streams, in
///   charges of at most the policy's capacity (its burst under the caller's quota)
///   each; the frame is held until its bytes have their place
///   ([`Limiter::reserve`](crate::Limiter::reserve)), which must come within the
///   policy's wait ([`Policy::wait`](crate::Policy::wait), or the layer's; one period
///   of the quota when neither is set). So the body streams at the policy's rate.
/// - **Too slow.** A frame whose place is further away is not charged and ends the
///   body with [`MeteredBodyError::RateLimited`](crate::layer::MeteredBodyError): the
///   inner service's read of the request body fails with it (and if it then answers,
///   the response is replaced by the layer's 429, with `Retry-After`); a response
///   body ends with it (hyper then closes the stream: the client sees a truncated
///   body, never a clean end).
/// - **Other policies, other failures.** A shadowed policy charges what fits, and
///   never holds or ends a body. A store failure follows the layer's
///   [`FailMode`](crate::layer::FailMode): open lets the bytes through uncounted,
///   closed ends the body with [`MeteredBodyError::Store`](crate::layer::MeteredBodyError).
///   A client that goes away while a frame waits gives back what was charged for it.
/// - **Headers.** The policy's `RateLimit-Policy` member says
///   `qu="content-bytes"`; `RateLimit` shows the bytes left after the admission.
///
/// Request bodies change type: the inner service gets a `MeteredBody<B>`, or, with
/// [`map_request_body`](MeterBytes::map_request_body), what a function makes of it (for
/// axum's `Router::layer`, `axum::body::Body::new`). Response bodies come back as
/// `MeteredBody<B>`.
///
/// ```
/// use std::convert::Infallible;
/// use http_body_util::{BodyExt, Full};
/// use tollgate::{Policy, Quota, RateLimitLayer};
/// use tollgate::layer::{MeterBytes, MeteredBody};
/// use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
/// # tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?.block_on(async {
/// let upload = Policy::new("upload", Quota::per_second(1_024))?.meter_request_bytes();
/// let layer = RateLimitLayer::builder().policy(upload).build()?;
/// let mut service = ServiceBuilder::new()
///     .layer(layer)
///     .layer(MeterBytes::new())
///     .service(service_fn(|request: http::Request<MeteredBody<Full<bytes::Bytes>>>| async move {
///         let body = request.into_body().collect().await?.to_bytes();
///         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(http::Response::new(format!("{} bytes", body.len())))
///     }));
/// let request = http::Request::new(Full::new(bytes::Bytes::from(vec![0_u8; 512])));
/// let response = service.ready().await?.call(request).await?;
/// assert_eq!(response.headers()["ratelimit-policy"], r#""upload";q=1024;w=1;qu="content-bytes""#);
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MeterBytes<M = Unchanged> {
    map: M,
}

/// What [`MeterBytes`] hands the inner service as the request body: a
/// [`MeteredBody`] as it is ([`Unchanged`]), or whatever a function makes of it.
///
/// ```
/// use tollgate::layer::{MapRequestBody, MeteredBody, Unchanged};
/// let body = MeteredBody::new(String::from("hi"));
/// let same: MeteredBody<String> = Unchanged.map(body);
/// # let _ = same;
/// ```
pub trait MapRequestBody<B> {
    /// The body the inner service gets.
    type Body;

    /// Makes it from the metered body.
    fn map(&self, body: MeteredBody<B>) -> Self::Body;
}

/// Hands the inner service the [`MeteredBody`] itself (the default of [`MeterBytes`]).
///
/// ```
/// let _layer = tollgate::layer::MeterBytes::<tollgate::layer::Unchanged>::default();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Unchanged;

impl<B> MapRequestBody<B> for Unchanged {
    type Body = MeteredBody<B>;

    fn map(&self, body: MeteredBody<B>) -> MeteredBody<B> {
        body
    }
}

impl<B, F, T> MapRequestBody<B> for F
where
    F: Fn(MeteredBody<B>) -> T,
{
    type Body = T;

    fn map(&self, body: MeteredBody<B>) -> T {
        self(body)
    }
}

impl MeterBytes {
    /// The layer, handing the inner service `MeteredBody<B>` request bodies.
    ///
    /// ```
    /// let _layer = tollgate::layer::MeterBytes::new();
    /// ```
    pub fn new() -> Self {
        Self { map: Unchanged }
    }
}

impl<M> MeterBytes<M> {
    /// Hands the inner service `map(body)` instead of the metered body: with axum,
    /// `map_request_body(axum::body::Body::new)` lets this layer go under
    /// `Router::layer`, which gives its routes axum's own body type.
    ///
    /// ```
    /// use tollgate::layer::{MeterBytes, MeteredBody};
    /// let _boxed = MeterBytes::new().map_request_body(|body: MeteredBody<String>| Box::new(body));
    /// ```
    pub fn map_request_body<F>(self, map: F) -> MeterBytes<F> {
        MeterBytes { map }
    }
}

impl<S, M: Clone> Layer<S> for MeterBytes<M> {
    type Service = MeteredBytes<S, M>;

    fn layer(&self, inner: S) -> Self::Service {
        MeteredBytes {
            inner,
            map: self.map.clone(),
        }
    }
}

/// The service [`MeterBytes`] wraps around yours.
///
/// ```
/// use tower::Layer;
/// let service = tollgate::layer::MeterBytes::new().layer(tower::service_fn(|_: http::Request<tollgate::layer::MeteredBody<String>>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// # let _ = service;
/// ```
#[derive(Clone)]
pub struct MeteredBytes<S, M = Unchanged> {
    inner: S,
    map: M,
}

impl<S: fmt::Debug, M> fmt::Debug for MeteredBytes<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeteredBytes")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, M, B, ResBody> Service<Request<B>> for MeteredBytes<S, M>
where
    M: MapRequestBody<B>,
    S: Service<Request<M::Body>, Response = Response<ResBody>>,
    ResBody: Body<Data = Bytes>,
{
    type Response = Response<MeteredBody<ResBody>>;
    type Error = S::Error;
    type Future = MeteredBytesFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let meters = parts
            .extensions
            .remove::<ByteMetersExtension>()
            .map(|ByteMetersExtension(meters)| meters);
        let body = match &meters {
            Some(meters) => {
                meters.attach();
                MeteredBody::metered(body, meters.clone(), Direction::Request)
            }
            None => MeteredBody::new(body),
        };
        let request = Request::from_parts(parts, self.map.map(body));
        MeteredBytesFuture {
            future: self.inner.call(request),
            meters,
        }
    }
}

pin_project! {
    /// The response future of [`MeteredBytes`].
    pub struct MeteredBytesFuture<F> {
        #[pin]
        future: F,
        meters: Option<Arc<ByteMeters>>,
    }
}

impl<F> fmt::Debug for MeteredBytesFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MeteredBytesFuture").finish_non_exhaustive()
    }
}

impl<F, ResBody, E> Future for MeteredBytesFuture<F>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
{
    type Output = Result<Response<MeteredBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.future.poll(cx))?;
        let Some(meters) = this.meters.take() else {
            return Poll::Ready(Ok(response.map(MeteredBody::new)));
        };
        // A request body a policy cut off: whatever the inner service made of the
        // failed read, the answer is the layer's 429.
        if let Some(rejection) = meters.rejection() {
            return Poll::Ready(Ok(rejection.map(MeteredBody::rejection)));
        }
        Poll::Ready(Ok(response.map(|body| {
            MeteredBody::metered(body, meters, Direction::Response)
        })))
    }
}
