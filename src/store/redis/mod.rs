//! [`RedisStore`]: limiter state in Redis or Redis Cluster, shared by every process.
//!
//! Every process that points at the same server (and prefix) shares one limit. The
//! files, by job: `options.rs` builds the store and `names.rs` names its keys for
//! operators; `decide.rs` is its [`Store`](super::Store) implementation and
//! `operations.rs` the operator's calls (reset, block, penalize, reserve);
//! `cached_denials.rs` answers blocked keys locally. `call.rs` makes one call
//! (connection, deadline, reply), with `script.rs` and `function.rs` the Lua it runs,
//! `coalesce.rs` single decisions sent together while calls are in flight, `slots.rs`
//! a cluster batch across slots and `server_time.rs` the time floor.
//! `connection.rs` keeps the shared connection (`source.rs` makes one, `errors.rs`
//! reads its failures); `in_flight.rs`, `slot records.rs` and `renewal.rs` hold in-flight
//! slots as records renewed while their requests run.
//!
//! # One round trip per decision
//!
//! Each algorithm is Lua (the twin of its Rust file, with identical arithmetic and
//! answers). A single decision calls a Redis Function (`FCALL`) that the store loads
//! once per server; refunds and batches, and servers without functions, run scripts
//! with `EVALSHA` (see [`functions`](RedisStore::functions)). A flush, restart or
//! failover that lost the code makes the store load it again by itself. A multi-limit
//! [`check_all`](crate::Limiter::check_all) is one script that decides every limit
//! and charges all or none. On a cluster, limits whose keys live on different slots
//! are charged in order, and the charged ones are refunded when a later one denies.
//!
//! The calls are lean: a single decision is one `FCALL` whose numbers are packed into
//! one argument and whose verdict comes back packed in one string, and it reads the
//! state with one `GET`: about what a classic GCRA script costs Redis (see
//! BENCHMARKS.md, "Lean decisions").
//!
//! Under concurrency the calls are shared: while [`coalesce`](RedisStore::coalesce)
//! calls (2) are in flight on the server (on a cluster, on the key's hash slot), a
//! single decision waits for the next call, and every decision waiting then goes in
//! that one `FCALL`, each decided as it would be alone, with its own answer, deadline
//! and failure. No timer: a decision that finds fewer calls in flight goes at once,
//! so an idle store adds no latency (see `coalesce.rs`).
//!
//! # Time
//!
//! The server's `TIME` by default, so processes with skewed clocks agree;
//! [`with_clock`](RedisStore::with_clock) injects a clock instead (tests). Time never
//! runs backwards for a key: each key remembers the latest instant it saw, and each
//! store sends the latest server time it has seen (carried forward on its own
//! monotonic clock) as a floor, so a server clock stepped back re-opens no key, not
//! even one idle through the step. A server more than an hour behind that floor is
//! followed instead (a deliberate correction). Clones share the floor.
//!
//! # Keys
//!
//! `<prefix>:<limit>:{<subject>}:<algorithm>:<period µs>` (and `:<buckets>` for the
//! sliding window counters), where the subject is the caller key's fixed-length
//! fingerprint in hex, so it alone picks the cluster slot and caller bytes can neither
//! choose it nor make keys long. A caller's block, penalty count and reservation queue
//! are one record per (limit name, key), `<prefix>:<limit>:{<subject>}:b` (same hash
//! tag), whatever quota, period or algorithm it is decided under: a block through the
//! limit reaches a plan caller, and a reload that changes the algorithm or the period
//! keeps blocks and counts. The decision's call reads it only when the state says it
//! may exist (or, for a plan's other period, always). Every key carries a TTL matching
//! its state's retention, rounded up to the end of a second so that a busy key's
//! writes can keep it.
//!
//! # Failure is normal
//!
//! Every call has a deadline ([`DEFAULT_DEADLINE`](RedisStore::DEFAULT_DEADLINE), see
//! [`deadline`](RedisStore::deadline)); timeouts, lost connections, `LOADING`,
//! `CLUSTERDOWN` and `READONLY` come back as [`StoreError`]s of the matching
//! [`StoreErrorKind`], never as panics. Pair it with [`Fallback`](crate::store::Fallback) to
//! keep limiting from memory while Redis is away.
//!
//! There are no reconnect storms: one connect at a time (calls without a connection
//! wait for it within their deadline), and a connection is replaced only when it
//! breaks or, after a timeout, when it has answered no call for a whole deadline and
//! is at least a second old; a call that is merely slow while others get answers
//! keeps it. A stalled server costs at most one new connection a second, however many
//! calls time out. A cluster connection is kept through timeouts and replaced beside
//! itself (at most once a second, with a fresh slot map), so one stalled node does not
//! stall the others (see `connection.rs`).
//!
//! # Denial cache
//!
//! Once Redis denies a key until T, this process denies the same key (at the same or
//! a higher cost) until T without a round trip, for at most
//! [`denial_cache_max_age`](RedisStore::denial_cache_max_age) (see `cached_denials.rs`
//! for what it answers and when it forgets).

mod cached_denials;
mod call;
mod coalesce;
mod connection;
mod decide;
mod errors;
mod function;
mod in_flight;
mod keys;
mod names;
mod operations;
mod options;
mod renewal;
mod script;
mod server_time;
mod slot_records;
mod slots;
mod source;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use self::coalesce::Coalescer;
use self::connection::Connections;
use self::function::Functions;
use self::server_time::ServerTime;
use self::slot_records::SlotRecords;
use super::denial_cache::DenialCache;
use crate::clock::now_micros;
use crate::clock::{Clock, SystemClock};
use crate::{StoreError, StoreErrorKind};

/// Integers in Lua scripts are doubles: exact below 2^53.
const LUA_EXACT: u128 = 1 << 53;

/// The longest block the store writes: [`MAX_DENIAL`](crate::Penalty::MAX_DENIAL), a century.
/// A block's end, `now + duration` in µs, must stay exact in Lua's doubles (below
/// 2^53, about 285 years after 1970); the memory store clamps at the same bound.
pub(crate) const MAX_BLOCK: Duration = crate::Penalty::MAX_DENIAL;

/// Limiter state in Redis or Redis Cluster: every process that points at the same
/// server (and prefix) shares one limit.
///
/// Each decision is one round trip (a Redis Function or script, all-or-nothing
/// across limits), timed by the server's clock with a floor that never runs back.
/// Every call has a [`deadline`](RedisStore::deadline) and fails as a [`StoreError`],
/// never a panic (pair it with [`Fallback`](crate::store::Fallback)); connections are
/// replaced one at a time, and denials are answered locally for up to
/// [`denial_cache_max_age`](RedisStore::denial_cache_max_age).
///
/// Build it from a URL ([`from_url`](RedisStore::from_url),
/// [`from_cluster_urls`](RedisStore::from_cluster_urls)), from the redis-rs connection
/// you already have ([`from_connection_manager`](RedisStore::from_connection_manager),
/// [`from_cluster_connection`](RedisStore::from_cluster_connection)) or, with the
/// `deadpool` feature, from a deadpool-redis pool (`from_pool`, `from_cluster_pool`).
/// It runs on Redis 6.2 and later and on Valkey (on Redis 6.2, without functions,
/// every call is a script); the README lists the servers tested and the ACL rules
/// the store needs. Tune it with
/// [`prefix`](RedisStore::prefix), [`deadline`](RedisStore::deadline),
/// [`denial_cache`](RedisStore::denial_cache), [`functions`](RedisStore::functions),
/// [`coalesce`](RedisStore::coalesce) and
/// [`in_flight_ttl`](RedisStore::in_flight_ttl); find a caller's keys with
/// [`state_key`](RedisStore::state_key) and [`record_key`](RedisStore::record_key).
/// Each method's doc says what it bounds; the module docs of `src/store/redis/` tell
/// the whole story (keys and TTLs, time, clusters, failures, the denial cache).
///
/// Clones share the connection, the cache and the time floor.
///
/// ```no_run
/// use tollgate::{Key, Limiter, Limit, Quota, RedisStore};
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisStore::from_url("redis://127.0.0.1:6379")?.prefix("myapp");
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_minute(100))?)
///     .store(store)
///     .build()?;
/// let decision = limiter.check("api", &Key::from("alice"), 1).await?;
/// assert!(decision.allowed);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub struct RedisStore {
    connections: Arc<Connections>,
    clock: Option<Arc<dyn Clock>>,
    server_time: Arc<ServerTime>,
    prefix: Arc<str>,
    deadline: Duration,
    cache: Option<Arc<DenialCache>>,
    /// How long a cached denial may answer (kept while the cache is off, for when it
    /// is turned on again).
    cache_max_age: Duration,
    /// Whether and how single charges go to the function library (see
    /// `function.rs`). Shared by clones.
    functions: Arc<Functions>,
    /// This store's in-flight slot records (see `slot records.rs`). Shared by clones.
    records: Arc<SlotRecords>,
    /// The (algorithm, period) pairs each limit name was decided under here, which
    /// reset and penalize reach (see `keys::Known`). Shared by clones.
    known: Arc<keys::Known>,
    /// Single decisions sent together while calls are in flight (see `coalesce.rs`).
    /// Shared by clones.
    coalescer: Arc<Coalescer>,
}

impl RedisStore {
    /// The injected clock's reading, or `None` for the server's clock.
    fn clock_now(&self) -> Option<u64> {
        self.clock.as_deref().map(now_micros)
    }

    /// The local clock of the denial cache.
    fn local_now(&self) -> u64 {
        self.clock_now().unwrap_or_else(|| now_micros(&SystemClock))
    }

    fn timeout_error(&self) -> StoreError {
        StoreError::new(
            StoreErrorKind::Timeout,
            format!("no answer from redis within {:?}", self.deadline),
        )
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.is_cluster())
            .field("prefix", &self.prefix)
            .field("deadline", &self.deadline)
            .field("clock", &self.clock)
            .field("denial_cache", &self.get_denial_cache())
            .field("denial_cache_max_age", &self.cache_max_age)
            .field("functions", &self.get_functions())
            .field("in_flight_ttl", &self.records.ttl())
            .field("coalesce", &self.coalescer.max_in_flight())
            .finish_non_exhaustive()
    }
}

/// A reply without the verdict its call asked for.
fn missing_verdict() -> StoreError {
    StoreError::new(
        StoreErrorKind::Protocol,
        "the rate-limit script returned no verdict",
    )
}
