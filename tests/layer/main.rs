//! The Tower layer: over real TCP in a real axum server, a real tonic server and a
//! plain `tower` + hyper stack, each with a real client; cost tables and key
//! extractors over request heads; per-caller quotas from plans (`quota_from`);
//! escalating penalties (`escalation`); the
//! edges a hostile caller or a failing store reaches (a few of them on a Redis store:
//! one private `redis-server` for this binary, started by the first test that needs
//! it); reloads of the layer and of its limiter under requests.
//!
//! One test binary: `cargo test --test layer`, or one module of it, e.g.
//! `cargo test --test layer grpc::`. Helpers only these tests use live here
//! ([`broken_store`], [`grpc_server`], [`outage_store`], `shared_redis`); shared ones in `tests/support/`.

mod account;
mod axum_conventions;
mod broken_store;
mod bytes;
mod cancel;
mod client_ip_sources;
#[cfg(feature = "config")]
mod config;
mod costs;
mod count_when;
mod escalation;
#[cfg(feature = "redis")]
mod failover;
mod grpc;
mod grpc_server;
mod hardening;
#[cfg(feature = "redis")]
mod honest_headers;
mod http;
mod in_flight;
mod key_extractors;
mod metered;
mod operations;
mod outage_store;
mod outbound;
mod plans;
#[cfg(feature = "config")]
mod recipes;
mod reload;
mod rollout;
#[cfg(feature = "redis")]
mod shared_redis;
mod standards;
mod streaming;
mod tower_stack;
