//! Helpers shared by tollgate's test binaries, as a crate of their own so that every
//! binary reaches them by name (`use support::redis_server::shared_server;`), without
//! `#[path]` attributes or copies.
//!
//! The tests are grouped by area, one binary per folder (`tests/core/`, `tests/layer/`,
//! `tests/redis/`, `tests/cluster/`; `tests/floods.rs` on its own): `cargo test --test
//! redis store::` runs one module of one binary. A helper that one binary uses lives in
//! that binary's folder; one that several use lives here.
//!
//! The root crate names this one `support` in its dev-dependencies. It depends on
//! tollgate without features, so it uses only what every build has (the limiter, the
//! memory store, the `Store` trait); whatever needs a feature stays in the binaries,
//! behind that feature.
//!
//! # Which server
//!
//! The tests start `redis-server` from `PATH`, or the binary `TOLLGATE_REDIS_SERVER`
//! names (`valkey-server`, an older `redis-server`): `scripts/test` runs the same test
//! binaries on every server of its matrix this way
//! ([`redis_server::server_binary`], [`redis_server::server_version`]).
//!
//! # One server per binary
//!
//! [`redis_server::shared_server`] and [`redis_cluster::shared_cluster`] start one
//! private server (one three-master cluster) the first time a test of a binary asks,
//! and every test of that binary shares it under its own key prefix
//! ([`redis_server::unique_prefix`]), so tests stay independent while running in
//! parallel. Tests that pause, kill, flush or reconfigure a server, fake its clock,
//! fail it over, or count its commands (`INFO commandstats` counts for everyone) start
//! their own.
//!
//! A shared server lives in a `static` and the test harness never drops statics: each
//! server is therefore started under a small `sh` watchdog that holds a pipe from the
//! test process and kills the server as soon as that pipe closes, which the kernel
//! does when the process ends, however it ends (success, a failed test, a panic, a
//! signal). No `unsafe`, no `prctl`, nothing to clean up by hand. Servers a test owns
//! are killed when they are dropped, and by the same watchdog if the test aborts.

pub mod conformance;
pub mod fallback;
pub mod http;
pub mod immediate;
pub mod in_flight;
pub mod leases;
pub mod model;
pub mod plan_walk;
pub mod redis_cluster;
pub mod redis_server;
pub mod reload_penalty;
pub mod rng;
pub mod scenarios;
pub mod settle;
pub mod waiting;

use tollgate::Algorithm;

/// Every algorithm, in [`Algorithm::ALL`]'s order, the sliding window counters with
/// `buckets` sub-windows: the list a test runs over, so that an eighth algorithm
/// reaches every such test by being added to `ALL`.
pub const fn every_algorithm(buckets: u32) -> [Algorithm; 7] {
    let mut all = Algorithm::ALL;
    let mut i = 0;
    while i < all.len() {
        if let Algorithm::SlidingWindowCounters { .. } = all[i] {
            all[i] = Algorithm::SlidingWindowCounters { buckets };
        }
        i += 1;
    }
    all
}
