//! `RedisStore` on real `redis-server` processes: the same answers as the memory store,
//! faults, the function library, the server's own clock jumping, the denial
//! cache, exactness under contention (with and without quota leases), in-flight leases,
//! the leaky bucket's bound on delays, refunds, settles and the scenario tables; every
//! way to build the store (URL, `ConnectionManager`, deadpool pool), and the store as
//! an ACL user allowed only what it needs.
//!
//! One test binary: `cargo test --all-features --test redis`, or one module of it,
//! e.g. `cargo test --all-features --test redis faults::`. Tests that need a plain
//! server share one, started by the first of them; tests whose twin runs on a Redis
//! Cluster share one three-master cluster (everything else about clusters is in
//! `tests/cluster/`). Tests that pause, kill, flush or reconfigure a server, fake its
//! clock or count its commands start their own.
//!
//! `refunds` is kept whole here although some of its tests need no Redis: most run one
//! body on memory, Redis and the cluster in turn, and the rest share its helpers. Its
//! memory and HTTP tests also run in builds without the `redis` feature.

mod acl;
mod cancel;
mod clock_faults;
mod coalesced;
mod conformance;
mod connections;
mod denial_cache;
mod escalation;
mod exactness;
mod fallback;
mod faults;
mod functions;
mod in_flight;
mod lease_pass;
mod leases;
mod max_delay;
mod operations;
mod records;
mod refunds;
mod reload;
mod reservations;
mod settle;
mod store;
