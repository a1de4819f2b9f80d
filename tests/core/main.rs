//! The core, without HTTP and without Redis: quotas, keys, the limiter, every algorithm
//! on the memory store (hand-computed scenario tables, property-tested bounds, clock
//! faults, concurrency), escalating penalties through the decorators, and what floods
//! of keys can make the store forget.
//!
//! One test binary: `cargo test --test core`, or one module of it, e.g.
//! `cargo test --test core eviction::`.

mod bounds;
mod cancel;
mod clock_faults;
mod concurrency;
mod conformance;
mod escalation;
mod eviction;
mod extremes;
mod fallback;
mod key;
mod leases;
mod limiter;
mod memory_store;
mod operations;
mod quota;
mod quota_changes;
mod records;
mod settle;
mod waiting;
