//! axum's conventions (feature `axum`): [`Decisions`] as an extractor, with
//! [`MissingDecisions`] its rejection, and [`Rejected`] as a response.

use std::convert::Infallible;
use std::fmt;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;

use crate::layer::{Decisions, Rejected};

/// Why the [`Decisions`] extractor failed: the request carries none, so no
/// [`RateLimitLayer`](crate::RateLimitLayer) is in front of the handler, or it was built
/// with [`decisions_extension(false)`](crate::RateLimitLayer::decisions_extension).
/// Either is a mistake in how the app is put together, not in the request: the
/// response is a 500 whose body says which.
///
/// ```
/// use axum::response::IntoResponse;
/// use tollgate::layer::MissingDecisions;
/// let response = MissingDecisions.into_response();
/// assert_eq!(response.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
/// assert!(MissingDecisions.to_string().contains("RateLimitLayer"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MissingDecisions;

impl fmt::Display for MissingDecisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the request carries no tollgate::layer::Decisions: put a tollgate \
             RateLimitLayer in front of this handler (Router::layer or route_layer), \
             and leave its decisions_extension on",
        )
    }
}

impl std::error::Error for MissingDecisions {}

impl IntoResponse for MissingDecisions {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, self.to_string()).into_response()
    }
}

/// `decisions: Decisions` as a handler argument: a copy of the request's
/// [`Decisions`], or a 500 ([`MissingDecisions`]) when it has none.
impl<S: Send + Sync> FromRequestParts<S> for Decisions {
    type Rejection = MissingDecisions;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Decisions>()
            .cloned()
            .ok_or(MissingDecisions)
    }
}

/// `decisions: Option<Decisions>` as a handler argument: `None` instead of a 500 when
/// the request carries none.
impl<S: Send + Sync> OptionalFromRequestParts<S> for Decisions {
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Decisions>().cloned())
    }
}

/// The rejection's response as it is: status, `Retry-After`, content type and body.
impl IntoResponse for Rejected {
    fn into_response(self) -> Response {
        let (parts, body) = self.0.into_parts();
        (parts, body).into_response()
    }
}
