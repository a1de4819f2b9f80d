//! `RedisStore` on a real local Redis Cluster of three masters: batches across slots,
//! hash tags, the function library on every node, a stalled master and a failover,
//! in-flight slot records, settles, the scenario tables, and every way to build the
//! store (seed URLs, a cluster connection, a deadpool pool).
//!
//! One test binary: `cargo test --all-features --test cluster`. Its tests share one
//! cluster, started by the first of them; a test that stalls a master or fails one
//! over starts its own.

mod coalesced;
mod conformance;
mod connections;
mod fallback;
mod in_flight;
mod records;
mod settle;
mod store;
