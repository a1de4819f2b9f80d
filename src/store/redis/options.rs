//! Building a [`RedisStore`]: where its connections come from (a URL, a cluster's
//! seed nodes, your `ConnectionManager` or cluster connection, a deadpool pool) and its settings (clock, prefix, deadline, denial cache,
//! functions, coalescing, in-flight slot record TTL), each with its getter.
//!
//! Settings are `#[must_use]` setters returning the store; those that can be wrong
//! return `Result<Self, ConfigError>` and quote the input. A setting that replaces
//! shared state (the cache, the function switch, the slot records) gives the store a fresh
//! one: clones made before the call keep the old.

use std::sync::Arc;
use std::time::Duration;

use super::coalesce::Coalescer;
use super::connection::Connections;
use super::function::Functions;
use super::slot_records::SlotRecords;
use super::source::Source;
use super::{RedisStore, keys};
use crate::ConfigError;
use crate::clock::Clock;
use crate::store::denial_cache::DenialCache;

impl RedisStore {
    /// The default deadline of one store call: 50 ms.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);
    /// The default bound on the denial cache: 10 000 keys.
    pub const DEFAULT_DENIAL_CACHE_KEYS: usize = 10_000;
    /// The default bound on how long a cached denial answers: 1 s.
    pub const DEFAULT_BLOCK_CACHE_MAX_AGE: Duration = Duration::from_secs(1);
    /// The default key prefix: `tollgate`.
    pub const DEFAULT_PREFIX: &'static str = "tollgate";
    /// The default lifetime of an in-flight slot record: 10 s.
    pub const DEFAULT_IN_FLIGHT_TTL: Duration = Duration::from_secs(10);
    /// The default bound on coalesced calls in flight at once, per server (per hash
    /// slot on a cluster): 2.
    pub const DEFAULT_COALESCE: usize = 2;

    fn new(source: Source) -> Self {
        Self {
            connections: Arc::new(Connections::new(source)),
            clock: None,
            server_time: Arc::default(),
            prefix: Arc::from(Self::DEFAULT_PREFIX),
            deadline: Self::DEFAULT_DEADLINE,
            cache: Some(Arc::new(DenialCache::new(
                Self::DEFAULT_DENIAL_CACHE_KEYS,
                crate::time::micros_up(Self::DEFAULT_BLOCK_CACHE_MAX_AGE),
            ))),
            cache_max_age: Self::DEFAULT_BLOCK_CACHE_MAX_AGE,
            functions: Arc::new(Functions::new(true)),
            records: Arc::new(SlotRecords::new(Self::DEFAULT_IN_FLIGHT_TTL)),
            known: Arc::default(),
            coalescer: Arc::new(Coalescer::new(Self::DEFAULT_COALESCE)),
        }
    }

    /// A store on the standalone Redis at `url` (`redis://[user:password@]host[:port][/db]`,
    /// `rediss://` with redis-rs's TLS features). Nothing connects until the first
    /// call. A wildcard host (`0.0.0.0`, `::`) is refused: name the server's own
    /// address.
    ///
    /// The store makes one multiplexed connection and shares it among all calls
    /// (concurrent calls are pipelined on it); it makes another, one connect at a
    /// time, when that one breaks or goes silent. Its
    /// [`deadline`](RedisStore::deadline) alone bounds each call.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert!(!store.is_cluster());
    /// assert!(tollgate::RedisStore::from_url("http://nope").is_err());
    /// assert!(tollgate::RedisStore::from_url("redis://0.0.0.0:6379").is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let client = redis::Client::open(url).map_err(|e| {
            // The URL may hold a password: say what is wrong, not what was given.
            ConfigError::new(format!("invalid redis url: {e}"))
        })?;
        Ok(Self::new(Source::Url(client)))
    }

    /// A store on the connection manager you already use: redis-rs's
    /// [`ConnectionManager`](redis::aio::ConnectionManager), a multiplexed connection
    /// that reconnects by itself. The store shares it (every call is pipelined on it,
    /// beside yours) and leaves its reconnecting to it: when its socket breaks, the
    /// manager reconnects with the retries and backoff it was built with.
    ///
    /// Each call is still bounded by the store's [`deadline`](RedisStore::deadline).
    /// The manager's own response timeout (redis-rs's default: 500 ms) applies too,
    /// so a deadline longer than it is cut short by it; build the manager with
    /// `ConnectionManagerConfig::set_response_timeout(None)` to leave the bound to
    /// the store. A connection that goes silent without breaking (a network
    /// partition) is the manager's to notice: the store, which did not make it,
    /// makes no other.
    ///
    /// ```no_run
    /// use redis::aio::ConnectionManager;
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let manager = ConnectionManager::new(client).await?;
    /// let store = tollgate::RedisStore::from_connection_manager(manager);
    /// assert!(!store.is_cluster());
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_connection_manager(manager: redis::aio::ConnectionManager) -> Self {
        Self::new(Source::Manager(manager))
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
        let client = redis::cluster::ClusterClient::new(urls)
            .map_err(|e| ConfigError::new(format!("invalid redis cluster url: {e}")))?;
        Ok(Self::new(Source::ClusterUrls(Box::new(client))))
    }

    /// A store on the cluster connection you already use: redis-rs's
    /// [`ClusterConnection`](redis::cluster_async::ClusterConnection). The store shares
    /// it and leaves its reconnecting and slot refreshes to redis-rs (each node's
    /// connection is made again when it breaks, and a `MOVED` refreshes the slot
    /// map). Each call is bounded by the store's [`deadline`](RedisStore::deadline),
    /// and by the connection's own response timeout if shorter. A store built
    /// [`from_cluster_urls`](RedisStore::from_cluster_urls) does one thing more: after
    /// a node goes silent it makes a new connection beside the old, with a fresh slot
    /// map; with your connection it cannot.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::cluster::ClusterClient::new(vec!["redis://127.0.0.1:7000"])?;
    /// let connection = client.get_async_connection().await?;
    /// let store = tollgate::RedisStore::from_cluster_connection(connection);
    /// assert!(store.is_cluster());
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_cluster_connection(connection: redis::cluster_async::ClusterConnection) -> Self {
        Self::new(Source::Cluster(connection))
    }

    /// A store on a standalone Redis reached through a deadpool-redis `pool`
    /// (feature `deadpool`).
    ///
    /// The store takes one multiplexed connection from the pool and shares it among
    /// all calls; it takes another, one connect at a time, when that one breaks or
    /// goes silent. The store's [`deadline`](RedisStore::deadline) bounds each call:
    /// the response timeout that redis-rs gives the pool's connections (500 ms by
    /// default) is lifted on the connection the store takes, which no longer goes
    /// back to the pool.
    ///
    /// ```no_run
    /// use deadpool_redis::{Config, Runtime};
    /// let pool = Config::from_url("redis://127.0.0.1:6379").create_pool(Some(Runtime::Tokio1))?;
    /// let store = tollgate::RedisStore::from_pool(pool);
    /// assert!(!store.is_cluster());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "deadpool")]
    #[cfg_attr(docsrs, doc(cfg(feature = "deadpool")))]
    pub fn from_pool(pool: deadpool_redis::Pool) -> Self {
        Self::new(Source::Pool(pool))
    }

    /// A store on a Redis Cluster reached through a deadpool-redis `pool` (feature
    /// `deadpool`).
    ///
    /// ```no_run
    /// use deadpool_redis::{Runtime, cluster::Config};
    /// let urls = vec!["redis://127.0.0.1:7000".to_owned(), "redis://127.0.0.1:7001".to_owned()];
    /// let pool = Config::from_urls(urls).create_pool(Some(Runtime::Tokio1))?;
    /// let store = tollgate::RedisStore::from_cluster_pool(pool);
    /// assert!(store.is_cluster());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "deadpool")]
    #[cfg_attr(docsrs, doc(cfg(feature = "deadpool")))]
    pub fn from_cluster_pool(pool: deadpool_redis::cluster::Pool) -> Self {
        Self::new(Source::ClusterPool(pool))
    }

    /// Reads time from `clock` instead of the server's `TIME` (tests, conformance,
    /// simulations). Every process sharing the state must then agree on time.
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::clock::ManualClock::new(Duration::from_secs(1_700_000_000));
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
    /// let limit = Limit::new("api", Quota::per_second(5))?;
    /// assert!(store.state_key(&limit, &Key::from("alice")).starts_with("shop%7Beu%7D:api:{"));
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
            .map(|cache| Arc::new(DenialCache::new(cache.max_keys(), cache.max_age_us())));
        // Likewise the pairs its limits were decided under.
        self.known = Arc::default();
        self
    }

    /// Bounds every store call (connecting, loading the script, running it) to
    /// `deadline` (default [`DEFAULT_DEADLINE`](RedisStore::DEFAULT_DEADLINE), 50 ms); a call that takes longer
    /// fails with [`StoreErrorKind::Timeout`](crate::StoreErrorKind::Timeout). Zero is a [`ConfigError`].
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

    /// Remembers up to `max_keys` denied keys (default [`DEFAULT_DENIAL_CACHE_KEYS`](RedisStore::DEFAULT_DENIAL_CACHE_KEYS));
    /// 0 turns the denial cache off, so every call goes to Redis.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.denial_cache(0);
    /// assert_eq!(store.get_denial_cache(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn denial_cache(mut self, max_keys: usize) -> Self {
        let max_age_us = crate::time::micros_up(self.cache_max_age);
        self.cache = (max_keys > 0).then(|| Arc::new(DenialCache::new(max_keys, max_age_us)));
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
    /// [`ConfigError`]: [`denial_cache(0)`](RedisStore::denial_cache) turns the cache off.
    ///
    /// ```
    /// use std::time::Duration;
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?
    ///     .denial_cache_max_age(Duration::from_millis(250))?;
    /// assert_eq!(store.get_denial_cache_max_age(), Duration::from_millis(250));
    /// let err = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?
    ///     .denial_cache_max_age(Duration::ZERO)
    ///     .expect_err("zero");
    /// assert!(err.to_string().contains("0ns"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn denial_cache_max_age(mut self, max_age: Duration) -> Result<Self, ConfigError> {
        if max_age.is_zero() {
            return Err(ConfigError::new(format!(
                "invalid denial cache max age {max_age:?}: a cached denial needs some time \
                 to answer; use denial_cache(0) to turn the cache off"
            )));
        }
        self.cache_max_age = max_age;
        self.cache = self.cache.as_ref().map(|cache| {
            Arc::new(DenialCache::new(
                cache.max_keys(),
                crate::time::micros_up(max_age),
            ))
        });
        Ok(self)
    }

    /// How long a cached denial answers at most.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(
    ///     store.get_denial_cache_max_age(),
    ///     tollgate::RedisStore::DEFAULT_BLOCK_CACHE_MAX_AGE
    /// );
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_denial_cache_max_age(&self) -> Duration {
        self.cache_max_age
    }

    /// The bound on the denial cache (0: off).
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.get_denial_cache(), tollgate::RedisStore::DEFAULT_DENIAL_CACHE_KEYS);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_denial_cache(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.max_keys())
    }

    /// How many keys the denial cache holds now.
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
    /// multi-limit batches are always scripts. Same answers either way.
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

    /// Coalesces single decisions: with `max_in_flight` calls in flight on the server
    /// (per hash slot on a cluster), a decision waits for the next call instead of
    /// sending its own, and every decision waiting then goes in that one call (up to
    /// 256); 0 sends every decision on its own. Default
    /// [`DEFAULT_COALESCE`](RedisStore::DEFAULT_COALESCE), 2.
    ///
    /// A decision costs Redis about as much to receive, parse and answer as to
    /// decide; under concurrency one call for many decisions pays that once (see
    /// BENCHMARKS.md). There is no timer: a decision that finds fewer than
    /// `max_in_flight` calls in flight goes at once, alone, so an idle or lightly used
    /// store adds no latency. Each decision in a call is decided as it would be alone
    /// (same code, same clock, its own answer) and keeps its own
    /// [`deadline`](RedisStore::deadline); a call that fails fails only the decisions in
    /// it, each into its limit's fail mode. Batched: a check of one limit (the common
    /// case), on a server with the function library
    /// ([`functions`](RedisStore::functions)); multi-limit checks, refunds, settles,
    /// reservations and operators' calls keep their own calls. Clones made after this
    /// call share its coalescing; call it before use.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.get_coalesce(), tollgate::RedisStore::DEFAULT_COALESCE);
    /// let alone = store.coalesce(0);
    /// assert_eq!(alone.get_coalesce(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn coalesce(mut self, max_in_flight: usize) -> Self {
        self.coalescer = Arc::new(Coalescer::new(max_in_flight));
        self
    }

    /// How many coalesced calls may be in flight at once per server (per hash slot on
    /// a cluster); 0: every decision is sent on its own.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?.coalesce(4);
    /// assert_eq!(store.get_coalesce(), 4);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_coalesce(&self) -> usize {
        self.coalescer.max_in_flight()
    }

    /// How long an in-flight slot ([`Policy::in_flight`](crate::Policy::in_flight))
    /// lives in Redis unless renewed (default
    /// [`DEFAULT_IN_FLIGHT_TTL`](RedisStore::DEFAULT_IN_FLIGHT_TTL), 10 s; whole
    /// milliseconds, at least 3 ms).
    ///
    /// Each slot is a record that the store renews every `ttl / 3` while its request
    /// runs (on a thread of the store's own, in batched, pipelined rounds: 100,000
    /// running keys per process stay renewed at the default TTL), and gives back when
    /// the request ends. A process that dies holding slots renews them no more: they
    /// are free again within `ttl`. A process paused longer than `ttl` (a stopped
    /// container, a suspended VM, a debugger), or cut off from Redis that long, finds
    /// its slot records expired when it resumes: its requests ran uncounted meanwhile, and
    /// other processes may have taken their places. Its next renewal adds each slot record
    /// back if the key has room, or else counts it lost
    /// ([`in_flight_slots_lost`](RedisStore::in_flight_slots_lost)) and that request
    /// runs on uncounted; either way the slot's
    /// [`ran_uncounted`](crate::store::InFlightSlot::ran_uncounted) says so. Shorter frees a
    /// dead process's slots sooner and renews more often; keep it well above the
    /// store's [`deadline`](RedisStore::deadline) and above the pauses your processes
    /// may take. Clones made after this call share its slot records; call it before use.
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
                "invalid in-flight ttl {ttl:?}: a slot record renewed every ttl/3 needs at least 3ms"
            )));
        }
        self.records = Arc::new(SlotRecords::new(ttl));
        Ok(self)
    }

    /// How long an in-flight slot record lives unless renewed.
    ///
    /// ```
    /// let store = tollgate::RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// assert_eq!(store.get_in_flight_ttl(), tollgate::RedisStore::DEFAULT_IN_FLIGHT_TTL);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_in_flight_ttl(&self) -> Duration {
        self.records.ttl()
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
