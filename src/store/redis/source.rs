//! Where the store's connections come from: a URL (the store connects by itself), a
//! connection the user already has (redis-rs's `ConnectionManager` or cluster
//! connection), or the user's deadpool pool (feature `deadpool`). `connection.rs`
//! keeps the one shared connection and decides when to ask for another.
//!
//! What "another" means differs by source. From a URL or a pool the store makes a new
//! multiplexed connection whose bounds are left to its deadline. A `ConnectionManager`
//! or a cluster connection the user handed over is the connection: the store clones
//! its handle again, and the reconnecting is the handle's own (redis-rs reconnects a
//! manager when its socket breaks, and a cluster connection node by node), under the
//! timeouts the user built it with.

use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, FromRedisValue, RedisError, ScriptInvocation};

use super::errors::store_error;
#[cfg(feature = "deadpool")]
use super::errors::{cluster_pool_error, pool_error};
use crate::StoreError;

/// The response timeout of a connection the store makes: none that could end a call
/// before the store's deadline does (tokio sets no timer at all for a duration this
/// long).
#[cfg(feature = "deadpool")]
const NO_RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::MAX;

/// How the store connects to the standalone server of a URL: redis-rs 1 would
/// otherwise end a connect after 1 s and a call after 500 ms on its own, racing
/// [`CONNECT_TIMEOUT`](super::connection::CONNECT_TIMEOUT) and the store's deadline.
fn unbounded() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(None)
        .set_response_timeout(None)
}

/// Where connections come from.
pub(super) enum Source {
    /// A standalone server's URL: the store makes its connections.
    Url(Client),
    /// The user's `ConnectionManager`, which reconnects by itself.
    Manager(ConnectionManager),
    /// A cluster's seed nodes: the store makes its connections. (Boxed: a client is
    /// large, and a `Source` lives as long as its store.)
    ClusterUrls(Box<ClusterClient>),
    /// The user's cluster connection, which reconnects by itself.
    Cluster(ClusterConnection),
    #[cfg(feature = "deadpool")]
    Pool(deadpool_redis::Pool),
    #[cfg(feature = "deadpool")]
    ClusterPool(deadpool_redis::cluster::Pool),
}

impl Source {
    pub(super) fn is_cluster(&self) -> bool {
        match self {
            Self::ClusterUrls(_) | Self::Cluster(_) => true,
            #[cfg(feature = "deadpool")]
            Self::ClusterPool(_) => true,
            _ => false,
        }
    }

    /// Whether the source can make a new connection, rather than hand over the one
    /// it is: a replacement made beside a silent cluster connection (see
    /// `connection.rs`) is worth making only then.
    pub(super) fn makes_connections(&self) -> bool {
        !matches!(self, Self::Manager(_) | Self::Cluster(_))
    }

    pub(super) async fn connect(&self) -> Result<Conn, StoreError> {
        Ok(match self {
            Self::Url(client) => Conn::Standalone(
                client
                    .get_multiplexed_async_connection_with_config(&unbounded())
                    .await
                    .map_err(store_error)?,
            ),
            Self::Manager(manager) => Conn::Manager(manager.clone()),
            Self::ClusterUrls(client) => {
                Conn::Cluster(client.get_async_connection().await.map_err(store_error)?)
            }
            Self::Cluster(connection) => Conn::Cluster(connection.clone()),
            #[cfg(feature = "deadpool")]
            Self::Pool(pool) => {
                let object = pool.get().await.map_err(pool_error)?;
                let mut conn = deadpool_redis::Connection::take(object);
                // The store's deadline bounds its calls and decides when a slow
                // connection is dropped (see `connection.rs`). A user's pool gives its
                // connections redis-rs 1's 500 ms response timeout unless built
                // otherwise; this connection left the pool for the store's use alone.
                conn.set_response_timeout(NO_RESPONSE_TIMEOUT);
                Conn::Standalone(conn)
            }
            #[cfg(feature = "deadpool")]
            Self::ClusterPool(pool) => {
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
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Sends one command.
    pub(super) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        match self {
            Self::Standalone(c) => cmd.query_async(c).await,
            Self::Manager(c) => cmd.query_async(c).await,
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
            Self::Manager(c) => invocation.invoke_async(c).await,
            Self::Cluster(c) => invocation.invoke_async(c).await,
        }
    }
}
