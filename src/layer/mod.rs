//! The Tower layer: everything that knows HTTP (feature `layer`, on by default).
//!
//! [`RateLimitLayer`] wraps any Tower service over `http` requests (axum routers, tonic
//! servers, hyper stacks) in a [`RateLimit`] service. For each request the service
//! finds, per [`Policy`], the caller's key and the request's cost, asks the
//! [`Limiter`](crate::Limiter) for the decisions of all of them at once, and either
//! calls the inner service (after a leaky-bucket delay, if any; its
//! [`ResponseFuture`] writes the rate-limit headers) or answers itself with a
//! rejection (429, or gRPC `RESOURCE_EXHAUSTED`). The response body is a
//! [`RateLimitBody`], which for gRPC also reads the status in the trailers so that
//! `count_when` can refund what should not count.
//!
//! The files follow the request: `policy/`, `costs.rs` and `routes.rs` (what a
//! request is charged; `policy/` has one file per group of rules: `metering.rs`,
//! `rollout.rs`, `in_flight.rs` and `limit.rs`), `rollout.rs` (which callers a policy
//! enforces), `layer.rs`, `shared.rs` and `fail_mode.rs` (options),
//! `service.rs` (the call), `future.rs` (awaiting the store, the hold, the inner
//! service), `context/` (what becomes of the request once decided, and of its
//! response: `answers.rs`, the layer's own answers, and `finish.rs`, the response's
//! refunds, settles and headers), `refunds.rs`, `few.rs` (a request's checks, inline for one policy),
//! `account.rs` (what a request was charged, per policy: every give-back goes through
//! it, so each charge comes back at most once) and `settles.rs` (the store calls behind
//! its give-backs), `rejection.rs`, `problem.rs` and `grpc.rs` (the layer's own answers, HTTP, RFC 9457
//! problem details and gRPC), `headers.rs` (what every response says), `decisions.rs`,
//! `extract.rs` (axum's extractor and responses) and `body.rs`. Metered policies:
//! `meter.rs` (the [`Meter`] a handler reports the actual cost to); bytes as the unit:
//! `unit.rs`, `bytes.rs` (the [`MeterBytes`] layer), `metered_body.rs` and
//! `byte_account.rs`. `pending_outcomes/`: `count_when` under concurrency (a request
//! kept out only by charges awaiting their outcome waits for them instead of being
//! refused as an offence).

mod account;
mod body;
mod builder;
mod byte_account;
mod bytes;
mod context;
mod costs;
mod decisions;
#[cfg(feature = "axum")]
mod extract;
mod fail_mode;
mod few;
mod future;
mod grpc;
mod header_bytes;
pub mod headers;
mod hooks;
mod in_flight_entry;
#[allow(clippy::module_inception)]
mod layer;
mod limiter_calls;
mod meter;
mod metered_body;
mod partition_key;
mod pending_outcomes;
mod policy;
mod problem;
mod refunds;
mod rejection;
mod rollout;
mod routes;
mod scope;
mod service;
mod settles;
mod shared;
mod slot_lines;
mod unit;

pub use body::RateLimitBody;
pub use builder::LayerBuilder;
pub use bytes::{MapRequestBody, MeterBytes, MeteredBytes, MeteredBytesFuture, Unchanged};
pub use costs::Costs;
pub use decisions::Decisions;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use extract::MissingDecisions;
pub use fail_mode::FailMode;
pub use future::ResponseFuture;
pub use headers::{HeaderStyle, ResetFormat};
pub use layer::RateLimitLayer;
pub use meter::Meter;
pub use metered_body::{BytesRateLimited, MeteredBody, MeteredBodyError};
pub use policy::{MissingKey, Policy};
pub use problem::ProblemType;
pub use rejection::{RejectReason, Rejected, Rejection, RejectionInfo};
pub use rollout::Rollout;
pub use service::RateLimit;
pub use unit::Unit;
