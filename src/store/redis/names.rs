//! The names of a caller's keys in Redis, for operators and tests: its rate state,
//! its record (block, penalty count, reservation queue) and its in-flight slot records. The
//! naming itself (escaping, hash tags, what each name holds) is `keys.rs`.

use super::{RedisStore, keys};
use crate::{Key, Limit};

impl RedisStore {
    /// sliding window log adds a sorted set under this name plus `:log`; a block or a
    /// penalty count lives in the caller's [`record_key`](RedisStore::record_key)).
    ///
    /// ```
    /// use tollgate::{Key, Limit, Quota, RedisStore};
    /// let store = RedisStore::from_url("redis://127.0.0.1:6379")?;
    /// let limit = Limit::new("api", Quota::per_second(5))?;
    /// let name = store.state_key(&limit, &Key::from("alice"));
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

    /// The Redis key (a sorted set of slot records) holding the in-flight slots of `key`
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
}
