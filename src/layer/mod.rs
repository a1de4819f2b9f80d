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
//! The files follow the request: `policy.rs`, `costs.rs` and `routes.rs` (what a
//! request is charged), `rollout.rs` (which callers a policy enforces), `layer.rs`, `shared.rs` and `fail_mode.rs` (options),
//! `service.rs` (the call), `future.rs` (awaiting the store, the hold, the inner
//! service), `context.rs` (what becomes of the request once decided, and of its
//! response), `refunds.rs`, `few.rs` (a request's checks, inline for one policy),
//! `rejection.rs` and `grpc.rs` (the layer's own answers, HTTP and gRPC), `headers.rs`
//! (what every response says), `decisions.rs` and `body.rs`. Metered policies:
//! `meter.rs` (the [`Meter`] a handler reports the actual cost to) and `settles.rs`
//! (settling it); bytes as the unit: `unit.rs`, `bytes.rs` (the [`MeterBytes`] layer),
//! `metered_body.rs` and `byte_account.rs`.

mod body;
mod builder;
mod byte_account;
mod bytes;
mod context;
mod costs;
mod decisions;
mod fail_mode;
mod few;
mod future;
mod grpc;
pub mod headers;
mod hooks;
mod in_flight_entry;
#[allow(clippy::module_inception)]
mod layer;
mod limiter_calls;
mod meter;
mod metered_body;
mod policy;
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
pub use fail_mode::FailMode;
pub use future::ResponseFuture;
pub use headers::{HeaderStyle, ResetFormat};
pub use layer::RateLimitLayer;
pub use meter::Meter;
pub use metered_body::{BytesRateLimited, MeteredBody, MeteredBodyError};
pub use policy::{MissingKey, Policy};
pub use rejection::{RejectReason, Rejection, RejectionInfo};
pub use rollout::Rollout;
pub use service::RateLimit;
pub use unit::Unit;
