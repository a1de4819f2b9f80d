//! [`RedisStore`]: limiter state in Redis or Redis Cluster, shared by every process.

mod call;
mod connection;
mod function;
mod in_flight;
mod keys;
mod script;
mod server_time;
mod slots;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::Runtime;
use tokio::time::Instant;

use self::connection::{Connections, Source};
use self::function::Functions;
use self::in_flight::Leases;
use self::script::Mode;
use self::server_time::ServerTime;
use super::block_cache::BlockCache;
use super::{Charge, InFlightSlot, Store, StoreCall, decision};
use crate::algorithm::Verdict;
use crate::clock::now_micros;
use crate::penalty::micros_up;
use crate::{
    Algorithm, Clock, ConfigError, Decision, Key, Limit, Receipt, StoreError, StoreErrorKind,
    SystemClock,
};

/// Integers in Lua scripts are doubles: exact below 2^53.
const LUA_EXACT: u128 = 1 << 53;

/// The longest block the store writes: [`MAX_DENIAL`](crate::MAX_DENIAL), a century.
/// A block's end, `now + duration` in µs, must stay exact in Lua's doubles (below
/// 2^53, about 285 years after 1970); the memory store clamps at the same bound.
pub(crate) const MAX_BLOCK: Duration = crate::MAX_DENIAL;

/// Limiter state in Redis or Redis Cluster: every process that points at the same
/// server (and prefix) shares one limit.
///
/// - **One round trip per decision.** Each algorithm is Lua (the twin of its Rust
///   file, with identical arithmetic and answers). A single decision calls a Redis
///   Function (`FCALL`) that the store loads once per server; refunds and batches, and
///   servers without functions, run scripts with `EVALSHA` (see
///   [`functions`](RedisStore::functions)). A flush, restart or failover that lost
///   the code makes the store load it again by itself. A multi-policy
///   [`check_all`](crate::Limiter::check_all) is one script that decides every policy
///   and charges all or none. On a cluster, policies whose keys live on different
///   slots are charged in order, and the charged ones are refunded when a later one
///   denies.
/// - **Time:** the server's `TIME` by default, so processes with skewed clocks agree;
///   [`with_clock`](RedisStore::with_clock) injects a clock instead (tests). Time never
///   runs backwards for a key: each key remembers the latest instant it saw, and each
///   store sends the latest server time it has seen (carried forward on its own
///   monotonic clock) as a floor, so a server clock stepped back re-opens no key, not
///   even one idle through the step. A server more than an hour behind that floor is
///   followed instead (a deliberate correction). Clones share the floor.
/// - **Keys:** `<prefix>:<policy>:{<subject>}:<algorithm>:<period µs>` (and
///   `:<buckets>` for the sliding window counters), where the subject is the caller
///   key's fixed-length fingerprint in hex, so it alone picks the cluster slot and
///   caller bytes can neither choose it nor make keys long. A caller's block, penalty
///   count and reservation queue are one record per (limit name, key),
///   `<prefix>:<policy>:{<subject>}:b` (same hash tag), whatever quota, period or
///   algorithm it is decided under: a block through the limit reaches a plan
///   caller, and a reload that changes the algorithm or the period keeps blocks and
///   counts. The decision's call reads it only when the state says it may exist (or,
///   for a plan's other period, always). Every key carries a TTL matching its
///   state's retention, rounded up to the end of a second so that a busy key's
///   writes can keep it.
/// - **Lean calls:** a single decision is one `FCALL` whose numbers are packed into
///   one argument and whose verdict comes back packed in one string, and it reads
///   the state with one `GET`: about what a classic GCRA script costs Redis (see
///   BENCHMARKS.md, "Lean decisions").
/// - **Failure is normal:** every call has a deadline ([`DEFAULT_DEADLINE`](RedisStore::DEFAULT_DEADLINE), see
///   [`deadline`](RedisStore::deadline)); timeouts, lost connections, `LOADING`,
///   `CLUSTERDOWN` and `READONLY` come back as [`StoreError`]s of the matching
///   [`StoreErrorKind`], never as panics. Pair it with
///   [`Fallback`](crate::Fallback) to keep limiting from memory while Redis is away.
/// - **No reconnect storms:** one connect at a time (calls without a connection wait
///   for it within their deadline), and a connection is replaced only when it breaks
///   or, after a timeout, when it has answered no call for a whole deadline and is at
///   least a second old; a call that is merely slow while others get answers keeps
///   it. A stalled server costs at most one new connection a second, however many
///   calls time out. A cluster connection is kept through timeouts and replaced
///   beside itself (at most once a second, with a fresh slot map), so one stalled
///   node does not stall the others.
/// - **Blocked-key cache:** once Redis denies a key until T, this process denies the
///   same key (at the same or a higher cost) until T without a round trip, but for at
///   most [`block_cache_max_age`](RedisStore::block_cache_max_age) (1 s by default),
///   so that a reset, a refund by another process or a corrected server clock reaches
///   this process within it. A batch with any blocked charge is denied locally
///   (all-or-nothing, it could not pass): its other charges were not evaluated, so
///   each reports `allowed: true` (it did not deny the request; nothing was charged
///   to it), `remaining: 0` and `reset_after: 0` (nothing is known of its key, so it
///   promises no capacity), no `retry_after`. On by default, bounded
///   ([`block_cache`](RedisStore::block_cache)). A blocked key ([`Limiter::block`](crate::Limiter::block),
///   a tripped [`Penalty`](crate::Penalty)) is cached for every cost, so a caller
///   hammering a blocked key costs Redis one call per key per max age; the denials of
///   a limit with a penalty box are not cached until it trips (each rejection must
///   reach Redis to be counted). A [`reset`](crate::Limiter::reset) through this
///   process forgets the key at once, and a block through it is cached at once.
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
    cache: Option<Arc<BlockCache>>,
    /// How long a cached denial may answer (kept while the cache is off, for when it
    /// is turned on again).
    cache_max_age: Duration,
    /// Whether and how single charges go to the function library (see
    /// `function.rs`). Shared by clones.
    functions: Arc<Functions>,
    /// This store's in-flight leases (see `in_flight.rs`). Shared by clones.
    leases: Arc<Leases>,
    /// The (algorithm, period) pairs each limit name was decided under here, which
    /// reset and penalize reach (see `keys::Known`). Shared by clones.
    known: Arc<keys::Known>,
}

impl RedisStore {
    /// The default deadline of one store call: 50 ms.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);
    /// The default bound on the blocked-key cache: 10 000 keys.
    pub const DEFAULT_BLOCK_CACHE_KEYS: usize = 10_000;
    /// The default bound on how long a cached denial answers: 1 s.
    pub const DEFAULT_BLOCK_CACHE_MAX_AGE: Duration = Duration::from_secs(1);
    /// The default key prefix: `tollgate`.
    pub const DEFAULT_PREFIX: &'static str = "tollgate";
    /// The default lifetime of an in-flight lease: 10 s.
    pub const DEFAULT_IN_FLIGHT_TTL: Duration = Duration::from_secs(10);

    fn new(source: Source) -> Self {
        Self {
            connections: Arc::new(Connections::new(source)),
            clock: None,
            server_time: Arc::default(),
            prefix: Arc::from(Self::DEFAULT_PREFIX),
            deadline: Self::DEFAULT_DEADLINE,
            cache: Some(Arc::new(BlockCache::new(
                Self::DEFAULT_BLOCK_CACHE_KEYS,
                duration_us(Self::DEFAULT_BLOCK_CACHE_MAX_AGE),
            ))),
            cache_max_age: Self::DEFAULT_BLOCK_CACHE_MAX_AGE,
            functions: Arc::new(Functions::new(true)),
            leases: Arc::new(Leases::new(Self::DEFAULT_IN_FLIGHT_TTL)),
            known: Arc::default(),
        }
    }

    /// A store on a standalone Redis reached through `pool`.
    ///
    /// The store takes one multiplexed connection from the pool and shares it among
    /// all calls (concurrent calls are pipelined on it); it takes another, one connect
    /// at a time, when that one breaks or goes silent. The store's
    /// [`deadline`](RedisStore::deadline) bounds each call: the response timeout that
    /// redis-rs gives the pool's connections (500 ms by default) is lifted on the
    /// connection the store takes, which no longer goes back to the pool.
    ///
    /// ```no_run
    /// use deadpool_redis::{Config, Runtime};
    /// let pool = Config::from_url("redis://127.0.0.1:6379").create_pool(Some(Runtime::Tokio1))?;
    /// let store = tollgate::RedisStore::from_pool(pool);
    /// assert!(!store.is_cluster());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_pool(pool: deadpool_redis::Pool) -> Self {
        Self::new(Source::Standalone(pool))
    }

    /// A store on the standalone Redis at `url` (`redis://[user:password@]host[:port][/db]`).
    /// Nothing connects until the first call. A wildcard host (`0.0.0.0`, `::`) is
    /// refused: name the server's own address.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert!(!store.is_cluster());
    /// assert!(tollgate::RedisStore::from_url("http://nope").is_err());
    /// assert!(tollgate::RedisStore::from_url("redis://0.0.0.0:6379").is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let pool = connection::pool_for_url(url).map_err(|e| {
            // The URL may hold a password: say what is wrong, not what was given.
            ConfigError::new(format!("invalid redis url: {e}"))
        })?;
        Ok(Self::from_pool(pool))
    }

    /// A store on a Redis Cluster reached through `pool`.
    ///
    /// ```no_run
    /// use deadpool_redis::{Runtime, cluster::Config};
    /// let urls = vec!["redis://127.0.0.1:7000".to_owned(), "redis://127.0.0.1:7001".to_owned()];
    /// let pool = Config::from_urls(urls).create_pool(Some(Runtime::Tokio1))?;
    /// let store = tollgate::RedisStore::from_cluster_pool(pool);
    /// assert!(store.is_cluster());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_cluster_pool(pool: deadpool_redis::cluster::Pool) -> Self {
        Self::new(Source::Cluster(pool))
    }

    /// A store on the Redis Cluster with these seed nodes (any subset of the cluster's
    /// nodes; the rest are discovered). Nothing connects until the first call.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_cluster_urls(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"])?;
    /// assert!(store.is_cluster());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn from_cluster_urls<I, S>(urls: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let urls: Vec<String> = urls.into_iter().map(Into::into).collect();
        if urls.is_empty() {
            return Err(ConfigError::new(
                "a redis cluster store needs at least one node url",
            ));
        }
        let pool = deadpool_redis::cluster::Config::from_urls(urls)
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| ConfigError::new(format!("invalid redis cluster url: {e}")))?;
        Ok(Self::from_cluster_pool(pool))
    }

    /// Reads time from `clock` instead of the server's `TIME` (tests, conformance,
    /// simulations). Every process sharing the state must then agree on time.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::ManualClock::new(Duration::from_secs(1_700_000_000));
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.with_clock(clock);
    /// # let _ = store;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Starts every key with `prefix` (default [`DEFAULT_PREFIX`](RedisStore::DEFAULT_PREFIX)); braces and `%`
    /// are escaped so the prefix can never become a hash tag.
    ///
    /// ```
    /// use tollgate::{Key, Limit, Quota, RedisStore};
    /// let store = RedisStore::from_url("redis://127.0.0.1:6379")?.prefix("shop{eu}");
    /// let policy = Limit::new("api", Quota::per_second(5))?;
    /// assert!(store.state_key(&policy, &Key::from("alice")).starts_with("shop%7Beu%7D:api:{"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = Arc::from(keys::escape(prefix).as_ref());
        // Denials cached for one key space must not answer for another: a store with
        // its own prefix gets its own cache (clones with the same prefix share one).
        self.cache = self
            .cache
            .as_ref()
            .map(|cache| Arc::new(BlockCache::new(cache.max_keys(), cache.max_age_us())));
        // Likewise the pairs its limits were decided under.
        self.known = Arc::default();
        self
    }

    /// Bounds every store call (connecting, loading the script, running it) to
    /// `deadline` (default [`DEFAULT_DEADLINE`](RedisStore::DEFAULT_DEADLINE), 50 ms); a call that takes longer
    /// fails with [`StoreErrorKind::Timeout`]. Zero is a [`ConfigError`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.deadline(Duration::from_millis(20))?;
    /// assert_eq!(store.get_deadline(), Duration::from_millis(20));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Result<Self, ConfigError> {
        if deadline.is_zero() {
            return Err(ConfigError::new(
                "invalid redis deadline 0: a store call needs some time to answer",
            ));
        }
        self.deadline = deadline;
        Ok(self)
    }

    /// The deadline of one store call.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.get_deadline(), tollgate::RedisStore::DEFAULT_DEADLINE);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_deadline(&self) -> Duration {
        self.deadline
    }

    /// Remembers up to `max_keys` blocked keys (default [`DEFAULT_BLOCK_CACHE_KEYS`](RedisStore::DEFAULT_BLOCK_CACHE_KEYS));
    /// 0 turns the blocked-key cache off, so every call goes to Redis.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.block_cache(0);
    /// assert_eq!(store.get_block_cache(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn block_cache(mut self, max_keys: usize) -> Self {
        let max_age_us = duration_us(self.cache_max_age);
        self.cache = (max_keys > 0).then(|| Arc::new(BlockCache::new(max_keys, max_age_us)));
        self
    }

    /// Bounds how long a cached denial answers for its key (default
    /// [`DEFAULT_BLOCK_CACHE_MAX_AGE`](RedisStore::DEFAULT_BLOCK_CACHE_MAX_AGE), 1 s),
    /// whatever the denial's own retry time: Redis's state can change under a cached
    /// denial (another process resets or refunds the key, an operator deletes it, the
    /// server's clock is corrected after a jump), and this process sees the change
    /// within `max_age`. Longer keeps more of a blocked caller's traffic off Redis
    /// (one round trip per key per `max_age`); shorter sees changes sooner. The age is
    /// measured on the store's clock (the injected one, if any), from when the denied
    /// request was sent, and rounded up to whole microseconds. Zero is a
    /// [`ConfigError`]: [`block_cache(0)`](RedisStore::block_cache) turns the cache off.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?
    ///     .block_cache_max_age(Duration::from_millis(250))?;
    /// assert_eq!(store.get_block_cache_max_age(), Duration::from_millis(250));
    /// let err = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?
    ///     .block_cache_max_age(Duration::ZERO)
    ///     .expect_err("zero");
    /// assert!(err.to_string().contains("0ns"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn block_cache_max_age(mut self, max_age: Duration) -> Result<Self, ConfigError> {
        if max_age.is_zero() {
            return Err(ConfigError::new(format!(
                "invalid block cache max age {max_age:?}: a cached denial needs some time \
                 to answer; use block_cache(0) to turn the cache off"
            )));
        }
        self.cache_max_age = max_age;
        self.cache = self
            .cache
            .as_ref()
            .map(|cache| Arc::new(BlockCache::new(cache.max_keys(), duration_us(max_age))));
        Ok(self)
    }

    /// How long a cached denial answers at most.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(
    ///     store.get_block_cache_max_age(),
    ///     tollgate::RedisStore::DEFAULT_BLOCK_CACHE_MAX_AGE
    /// );
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_block_cache_max_age(&self) -> Duration {
        self.cache_max_age
    }

    /// The bound on the blocked-key cache (0: off).
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.get_block_cache(), tollgate::RedisStore::DEFAULT_BLOCK_CACHE_KEYS);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_block_cache(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.max_keys())
    }

    /// How many keys the blocked-key cache holds now.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.blocked_keys(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn blocked_keys(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.len())
    }

    /// Whether single decisions run as a Redis Function (`FCALL`, the default) or as a
    /// script (`EVALSHA`). A function library is loaded once per server and each call
    /// runs only its entry point, where a script's whole body runs on every call:
    /// 5–15% less Redis time per decision (see BENCHMARKS.md). The store loads
    /// the library by itself (again after `FUNCTION FLUSH` or on a new node) and goes
    /// back to scripts by itself where functions are unavailable (Redis 6, an ACL
    /// without `FUNCTION`); `false` keeps it on scripts from the start. Refunds and
    /// multi-policy batches are always scripts. Same answers either way.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.functions(false);
    /// assert!(!store.get_functions());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn functions(mut self, enabled: bool) -> Self {
        self.functions = Arc::new(Functions::new(enabled));
        self
    }

    /// Whether single decisions go to the function library: `false` when turned off
    /// or after the server refused to load it.
    ///
    /// ```
    /// assert!(tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.get_functions());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_functions(&self) -> bool {
        self.functions.enabled()
    }

    /// How long an in-flight slot ([`Policy::in_flight`](crate::Policy::in_flight))
    /// lives in Redis unless renewed (default
    /// [`DEFAULT_IN_FLIGHT_TTL`](RedisStore::DEFAULT_IN_FLIGHT_TTL), 10 s; whole
    /// milliseconds, at least 3 ms).
    ///
    /// Each slot is a lease that the store renews every `ttl / 3` while its request
    /// runs (on a thread of the store's own, in batched, pipelined rounds: 100,000
    /// running keys per process stay renewed at the default TTL), and gives back when
    /// the request ends. A process that dies holding slots renews them no more: they
    /// are free again within `ttl`. A process paused longer than `ttl` (a stopped
    /// container, a suspended VM, a debugger), or cut off from Redis that long, finds
    /// its leases expired when it resumes: its requests ran uncounted meanwhile, and
    /// other processes may have taken their places. Its next renewal adds each lease
    /// back if the key has room, or else counts it lost
    /// ([`in_flight_leases_lost`](RedisStore::in_flight_leases_lost)) and that request
    /// runs on uncounted; either way the slot's
    /// [`ran_uncounted`](crate::InFlightSlot::ran_uncounted) says so. Shorter frees a
    /// dead process's slots sooner and renews more often; keep it well above the
    /// store's [`deadline`](RedisStore::deadline) and above the pauses your processes
    /// may take. Clones made after this call share its leases; call it before use.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?
    ///     .in_flight_ttl(Duration::from_secs(30))?;
    /// assert_eq!(store.get_in_flight_ttl(), Duration::from_secs(30));
    /// assert!(store.in_flight_ttl(Duration::from_millis(2)).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_ttl(mut self, ttl: Duration) -> Result<Self, ConfigError> {
        let ttl = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        if ttl < Duration::from_millis(3) {
            return Err(ConfigError::new(format!(
                "invalid in-flight ttl {ttl:?}: a lease renewed every ttl/3 needs at least 3ms"
            )));
        }
        self.leases = Arc::new(Leases::new(ttl));
        Ok(self)
    }

    /// How long an in-flight lease lives unless renewed.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.get_in_flight_ttl(), tollgate::RedisStore::DEFAULT_IN_FLIGHT_TTL);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_in_flight_ttl(&self) -> Duration {
        self.leases.ttl()
    }

    /// The Redis key (a sorted set of leases) holding the in-flight slots of `key`
    /// under `limit`: the same hash tag as its rate state (for operators and tests).
    ///
    /// ```
    /// use tollgate::{Key, Limit, Quota, RedisStore};
    /// let store = RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// let limit = Limit::new("api", Quota::per_second(5))?;
    /// let name = store.in_flight_key(&limit, &Key::from("alice"));
    /// assert!(name.starts_with("tollgate:api:{") && name.ends_with("}:inflight"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_key(&self, limit: impl AsRef<Limit>, key: &Key) -> String {
        keys::in_flight_key(&self.prefix, limit.as_ref(), key)
    }

    /// Whether the store talks to a Redis Cluster.
    ///
    /// ```
    /// assert!(!tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.is_cluster());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn is_cluster(&self) -> bool {
        self.connections.is_cluster()
    }

    /// The Redis key holding `policy`'s state for `key` (for operators and tests; the
    /// sliding window log adds a sorted set under this name plus `:log`; a block or a
    /// penalty count lives in the caller's [`record_key`](RedisStore::record_key)).
    ///
    /// ```
    /// use tollgate::{Key, Limit, Quota, RedisStore};
    /// let store = RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// let policy = Limit::new("api", Quota::per_second(5))?;
    /// let name = store.state_key(&policy, &Key::from("alice"));
    /// assert!(name.starts_with("tollgate:api:{"));
    /// assert!(name.ends_with("}:gcra:1000000"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn state_key(&self, limit: impl AsRef<Limit>, key: &Key) -> String {
        keys::state_key(&self.prefix, limit.as_ref(), key)
    }

    /// The Redis key holding the caller's record under `limit`: its block, penalty
    /// count and reservation queue's tail, one per (limit name, key) whatever quota,
    /// period or algorithm the key is decided under; the same hash tag as its states
    /// (for operators and tests).
    ///
    /// ```
    /// use tollgate::{Key, Limit, Quota, RedisStore};
    /// let store = RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// let limit = Limit::new("api", Quota::per_second(5))?;
    /// let record = store.record_key(&limit, &Key::from("alice"));
    /// assert!(record.starts_with("tollgate:api:{") && record.ends_with("}:b"));
    /// // A plan's quota over another period: another state, the same record.
    /// let plan = limit.with_quota(Quota::per_hour(10_000));
    /// assert_eq!(store.record_key(&plan, &Key::from("alice")), record);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn record_key(&self, limit: impl AsRef<Limit>, key: &Key) -> String {
        keys::record_key(&self.prefix, limit.as_ref(), key)
    }

    /// The injected clock's reading, or `None` for the server's clock.
    fn clock_now(&self) -> Option<u64> {
        self.clock.as_deref().map(now_micros)
    }

    /// The local clock of the blocked-key cache.
    fn local_now(&self) -> u64 {
        self.clock_now().unwrap_or_else(|| now_micros(&SystemClock))
    }

    fn timeout_error(&self) -> StoreError {
        StoreError::new(
            StoreErrorKind::Timeout,
            format!("no answer from redis within {:?}", self.deadline),
        )
    }

    async fn acquire_remote(&self, charges: &[Charge<'_>]) -> Result<Vec<Verdict>, StoreError> {
        let deadline = Instant::now() + self.deadline;
        let now = self.clock_now();
        let all: Vec<&Charge<'_>> = charges.iter().collect();
        if !self.is_cluster() || charges.iter().all(|c| c.key == charges[0].key) {
            // One server, or one hash tag: one script decides and charges everything.
            return self.run(deadline, now, Mode::Acquire, &all).await;
        }
        let mut verdicts = self.acquire_across_slots(deadline, now, charges).await?;
        if !verdicts.iter().all(|v| v.allowed) {
            // The slots charged before the denial were refunded: nothing is charged,
            // so nothing may be refunded again.
            for verdict in &mut verdicts {
                verdict.receipt = None;
            }
        }
        Ok(verdicts)
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("cluster", &self.is_cluster())
            .field("prefix", &self.prefix)
            .field("deadline", &self.deadline)
            .field("clock", &self.clock)
            .field("block_cache", &self.get_block_cache())
            .field("block_cache_max_age", &self.cache_max_age)
            .field("functions", &self.get_functions())
            .field("in_flight_ttl", &self.leases.ttl())
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

/// `d` in whole microseconds, rounded up (a positive age never becomes 0).
fn duration_us(d: Duration) -> u64 {
    let us = d.as_micros() + u128::from(!d.subsec_nanos().is_multiple_of(1_000));
    u64::try_from(us).unwrap_or(u64::MAX)
}

impl Store for RedisStore {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        StoreCall::future(async move {
            if charges.is_empty() {
                return Ok(Vec::new());
            }
            // The blocked-key cache's clock, read only when there is a cache.
            let sent = self.cache.as_ref().map(|_| self.local_now());
            if let (Some(cache), Some(sent)) = (&self.cache, sent) {
                // One blocked charge denies the whole all-or-nothing batch: no round
                // trip (see `BlockCache::check` for what the others report).
                if let Some(decisions) = cache.check(charges, sent) {
                    return Ok(decisions);
                }
            }
            let verdicts = self.acquire_remote(charges).await?;
            let decisions: Vec<Decision> = charges
                .iter()
                .zip(verdicts)
                .map(|(c, v)| decision(c.limit, v))
                .collect();
            if let (Some(cache), Some(sent)) = (&self.cache, sent) {
                for (charge, decision) in charges.iter().zip(&decisions) {
                    // A limit with a penalty box must see its rejections to count them:
                    // only its blocks are answered locally.
                    let counted = charge.limit.get_penalty().is_some();
                    if !decision.allowed && (decision.blocked_for.is_some() || !counted) {
                        cache.record(charge, sent, decision);
                    }
                }
            }
            Ok(decisions)
        })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            // Even a refund of 0 goes to Redis: it records the instant, as the memory
            // store's refund does. An operator's refund (the only caller) frees the
            // key under every quota it is cached under: a plan caller's denial too.
            if let Some(cache) = &self.cache {
                cache.forget_key(&charge);
            }
            let deadline = Instant::now() + self.deadline;
            self.run(deadline, self.clock_now(), Mode::Refund, &[&charge])
                .await
                .map(drop)
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            if let Some(cache) = &self.cache {
                cache.forget(&charge);
            }
            let charge = Charge {
                cost: charge.cost.min(receipt.cost()),
                ..charge
            };
            let deadline = Instant::now() + self.deadline;
            self.run_call(
                deadline,
                self.clock_now(),
                Mode::RefundCharges,
                &[&charge],
                &[receipt],
            )
            .await
            .map(drop)
        })
    }

    /// Takes a lease in one script call, within the store's deadline (see
    /// [`in_flight_ttl`](RedisStore::in_flight_ttl)).
    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        StoreCall::future(self.enter(limit, key, max))
    }

    fn supports_in_flight(&self) -> bool {
        true
    }

    /// One script call (`Mode::Reset`): deletes the caller's record (block, penalty
    /// count, reservations) and the key's state (and log) under the limit and under
    /// every other (algorithm, period) this store has decided the limit's name under
    /// (a plan's period, the limit before a reload; up to 16 per name). State under a
    /// period only another process has used is not reached (its block is: the record
    /// is one per name and key). This process's blocked-key cache forgets the key at
    /// once; other processes' caches, within their max age.
    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        StoreCall::future(async move {
            let limits = self.known.with_others(limit);
            let charges: Vec<Charge<'_>> = limits
                .iter()
                .map(|limit| Charge {
                    limit,
                    key,
                    cost: 0,
                })
                .collect();
            let charge = charges[0];
            if let Some(cache) = &self.cache {
                cache.forget_key(&charge);
            }
            let deadline = Instant::now() + self.deadline;
            let all: Vec<&Charge<'_>> = charges.iter().collect();
            self.run(deadline, self.clock_now(), Mode::Reset, &all)
                .await?;
            // A denial recorded while the reset was on its way is stale too.
            if let Some(cache) = &self.cache {
                cache.forget_key(&charge);
            }
            Ok(())
        })
    }

    /// One script call (`Mode::Block`): writes the caller's record, replacing its
    /// block and count, and marks the key's state under every (algorithm, period)
    /// this store knows for the limit's name, so that their decisions read it. A
    /// duration beyond a century (of 365-day years) blocks for a century, which Lua's
    /// doubles count exactly (and so does the memory store). This process caches the block at once.
    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            let cost = micros_up(duration.min(MAX_BLOCK));
            let limits = self.known.with_others(limit);
            let charges: Vec<Charge<'_>> = limits
                .iter()
                .map(|limit| Charge { limit, key, cost })
                .collect();
            let charge = charges[0];
            let sent = self.local_now();
            let deadline = Instant::now() + self.deadline;
            let all: Vec<&Charge<'_>> = charges.iter().collect();
            let verdict = self
                .run(deadline, self.clock_now(), Mode::Block, &all)
                .await?
                .into_iter()
                .next()
                .ok_or_else(missing_verdict)?;
            let decision = decision(limit, verdict);
            if let Some(cache) = &self.cache {
                cache.forget_key(&charge);
                if decision.blocked_for.is_some() {
                    cache.record(&Charge { cost: 1, ..charge }, sent, &decision);
                }
            }
            Ok(decision)
        })
    }

    /// One script call (`Mode::Penalize`): the algorithm's own decision, charging even
    /// what does not fit, under the limit and under every other (algorithm, period)
    /// this store knows for its name (a plan caller is penalised too; each such state
    /// is charged under the first quota seen with that period). Each charge is
    /// clamped to the most its algorithm counts exactly (GCRA and the leaky bucket: a
    /// century of debt; the token bucket: 2^52 units; the sliding window: `cost ×
    /// period` below 2^53). Answers the limit's own decision.
    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            let limits = self.known.with_others(charge.limit);
            let charges: Vec<Charge<'_>> = std::iter::once(charge.limit)
                .chain(limits.iter().skip(1))
                .map(|limit| Charge {
                    limit,
                    key: charge.key,
                    cost: charge
                        .cost
                        .min(crate::algorithm::max_penalty(limit.params())),
                })
                .collect();
            let deadline = Instant::now() + self.deadline;
            let all: Vec<&Charge<'_>> = charges.iter().collect();
            let verdict = self
                .run(deadline, self.clock_now(), Mode::Penalize, &all)
                .await?
                .into_iter()
                .next()
                .ok_or_else(missing_verdict)?;
            Ok(decision(charge.limit, verdict))
        })
    }

    /// One script call (`Mode::Reserve`): the place is found and charged where the
    /// state lives, so processes sharing the key queue behind each other. Not answered
    /// from the blocked-key cache: a reservation asks how long, not whether.
    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        StoreCall::future(async move {
            let deadline = Instant::now() + self.deadline;
            let mode = Mode::Reserve(micros_up(max_wait));
            let verdict = self
                .run(deadline, self.clock_now(), mode, &[&charge])
                .await?
                .pop()
                .ok_or_else(missing_verdict)?;
            Ok(decision(charge.limit, verdict))
        })
    }

    /// Rejects policies whose arithmetic would leave the integers Lua holds exactly
    /// (below 2^53): a sliding window multiplies counts by the period, so `limit ×
    /// period in µs` must stay below 2^53 (e.g. at most 104 days at a limit of 1000).
    fn validate(&self, policy: &Limit) -> Result<(), ConfigError> {
        policy.validate()?;
        let p = policy.params();
        if p.algorithm == Algorithm::SlidingWindow
            && u128::from(p.limit) * u128::from(p.period_us) >= LUA_EXACT
        {
            return Err(ConfigError::new(format!(
                "invalid policy \"{}\" for the redis store: sliding_window computes \
                 limit × period ({} × {} µs), which must stay below 2^53 to be exact in \
                 Lua; use a smaller limit, a shorter period or sliding_window_counters",
                policy.name(),
                p.limit,
                p.period_us
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_address_is_refused_when_the_store_is_built() {
        // redis-rs 1 refuses to connect to 0.0.0.0 or ::, which Linux would have
        // taken for this host: the mistake shows when the store is built.
        for url in ["redis://0.0.0.0:6379", "redis://[::]:6379"] {
            let err = RedisStore::from_url(url).expect_err(url);
            assert!(err.to_string().contains("wildcard"), "{url}: {err}");
            let err = RedisStore::from_cluster_urls([url]).expect_err(url);
            assert!(err.to_string().contains("wildcard"), "{url}: {err}");
        }
    }
}
