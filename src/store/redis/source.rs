//! Where the store's connections come from: the user's pool (standalone or
//! cluster), and one multiplexed connection taken out of it for the store's use
//! alone, whose bounds are left to the store's deadline (see `connection.rs` for how
//! the shared connection is kept and replaced).

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::{
    AsyncConnectionConfig, Cmd, FromRedisValue, RedisError, ScriptInvocation,
};
use deadpool_redis::{Manager, Pool, Runtime};
use std::time::Duration;

use super::errors::{cluster_pool_error, pool_error};
use crate::StoreError;

/// The response timeout of the connection the store takes: none that could end a
/// call before the store's deadline does (tokio sets no timer at all for a duration
/// this long).
const NO_RESPONSE_TIMEOUT: Duration = Duration::MAX;

/// A pool for the standalone server at `url`, whose connections leave every bound to
/// the store: redis-rs 1 would otherwise end a connect after 1 s and a call after
/// 500 ms on its own, racing [`CONNECT_TIMEOUT`](super::connection::CONNECT_TIMEOUT) and the store's deadline.
pub(super) fn pool_for_url(url: &str) -> Result<Pool, String> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None);
    let manager = Manager::new_with_config(url, config).map_err(|e| e.to_string())?;
    Pool::builder(manager)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| e.to_string())
}

/// Where connections come from.
pub(super) enum Source {
    Standalone(deadpool_redis::Pool),
    Cluster(deadpool_redis::cluster::Pool),
}

impl Source {
    pub(super) async fn connect(&self) -> Result<Conn, StoreError> {
        Ok(match self {
            Self::Standalone(pool) => {
                let object = pool.get().await.map_err(pool_error)?;
                let mut conn = deadpool_redis::Connection::take(object);
                // The store's deadline bounds its calls and decides when a slow
                // connection is dropped (see `connection.rs`). A user's pool gives its
                // connections redis-rs 1's 500 ms response timeout unless built
                // otherwise; this connection left the pool for the store's use alone.
                conn.set_response_timeout(NO_RESPONSE_TIMEOUT);
                Conn::Standalone(conn)
            }
            Self::Cluster(pool) => {
                let object = pool.get().await.map_err(cluster_pool_error)?;
                Conn::Cluster(deadpool_redis::cluster::Connection::take(object))
            }
        })
    }
}

/// A connection to a standalone server or to a cluster; clones share the socket(s).
#[derive(Clone)]
pub(super) enum Conn {
    Standalone(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Sends one command.
    pub(super) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        match self {
            Self::Standalone(c) => cmd.query_async(c).await,
            Self::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// Runs a script by `EVALSHA`, loading it after a `NOSCRIPT`.
    pub(super) async fn invoke<T: FromRedisValue>(
        &mut self,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<T, RedisError> {
        match self {
            Self::Standalone(c) => invocation.invoke_async(c).await,
            Self::Cluster(c) => invocation.invoke_async(c).await,
        }
    }
}
