//! One shared, multiplexed connection per store, taken from the user's pool.
//!
//! A multiplexed connection pipelines every concurrent call over one socket, so the
//! store keeps one and clones it per call instead of checking a connection out of the
//! pool each time (deadpool pings a connection on every checkout: a second round
//! trip). When the connection breaks, the next call takes a fresh one from the pool.

use std::sync::{Mutex, PoisonError};

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::cluster_async::ClusterConnection;
use deadpool_redis::redis::{Cmd, ErrorKind, FromRedisValue, RedisError, ScriptInvocation};

use crate::{StoreError, StoreErrorKind};

/// Where connections come from.
pub(super) enum Source {
    Standalone(deadpool_redis::Pool),
    Cluster(deadpool_redis::cluster::Pool),
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

pub(super) struct Connections {
    source: Source,
    /// The shared connection and its generation, so a call that saw it fail drops
    /// only that one, not a newer one another call already made.
    current: Mutex<(u64, Option<Conn>)>,
}

impl Connections {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            current: Mutex::new((0, None)),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        matches!(self.source, Source::Cluster(_))
    }

    /// The shared connection, connecting first if there is none.
    pub(super) async fn get(&self) -> Result<(u64, Conn), StoreError> {
        if let (generation, Some(conn)) = &*self.lock() {
            return Ok((*generation, conn.clone()));
        }
        let conn = match &self.source {
            Source::Standalone(pool) => {
                let object = pool.get().await.map_err(pool_error)?;
                Conn::Standalone(deadpool_redis::Connection::take(object))
            }
            Source::Cluster(pool) => {
                let object = pool.get().await.map_err(cluster_pool_error)?;
                Conn::Cluster(deadpool_redis::cluster::Connection::take(object))
            }
        };
        let mut current = self.lock();
        if let (generation, Some(existing)) = &*current {
            // Another call connected meanwhile: share its connection, drop ours.
            return Ok((*generation, existing.clone()));
        }
        current.0 += 1;
        current.1 = Some(conn.clone());
        Ok((current.0, conn))
    }

    /// Forgets connection `generation` after it failed; the next call reconnects.
    pub(super) fn discard(&self, generation: u64) {
        let mut current = self.lock();
        if current.0 == generation {
            current.1 = None;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, Option<Conn>)> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether an error means the connection itself is unusable.
pub(super) fn breaks_connection(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_unrecoverable_error()
        || matches!(
            err.kind(),
            ErrorKind::ClusterConnectionNotFound | ErrorKind::ClusterDown
        )
}

/// Maps a Redis error to a [`StoreError`] of the right kind.
pub(super) fn store_error(err: RedisError) -> StoreError {
    let kind = if err.is_timeout() {
        StoreErrorKind::Timeout
    } else if err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.kind() == ErrorKind::ClusterConnectionNotFound
    {
        StoreErrorKind::Connection
    } else {
        match err.kind() {
            // LOADING, CLUSTERDOWN, READONLY, TRYAGAIN, MASTERDOWN: up but not serving.
            ErrorKind::BusyLoadingError
            | ErrorKind::ClusterDown
            | ErrorKind::ReadOnly
            | ErrorKind::TryAgain
            | ErrorKind::MasterDown => StoreErrorKind::Unavailable,
            // Out of memory (`noeviction`), busy with a long script, refusing writes
            // after a failed save or without enough replicas: up but not serving either.
            _ if matches!(err.code(), Some("OOM" | "BUSY" | "MISCONF" | "NOREPLICAS")) => {
                StoreErrorKind::Unavailable
            }
            _ => StoreErrorKind::Protocol,
        }
    };
    let message = match err.code() {
        Some(code) => format!("redis answered {code}"),
        None => format!("redis call failed ({:?})", err.kind()),
    };
    StoreError::new(kind, message).with_source(err)
}

fn pool_error(err: deadpool_redis::PoolError) -> StoreError {
    match err {
        deadpool_redis::PoolError::Backend(err) => store_error(err),
        deadpool_redis::PoolError::Timeout(_) => StoreError::new(
            StoreErrorKind::Timeout,
            "no redis connection within the pool's timeout",
        ),
        other => {
            StoreError::new(StoreErrorKind::Connection, "no redis connection").with_source(other)
        }
    }
}

fn cluster_pool_error(err: deadpool_redis::cluster::PoolError) -> StoreError {
    match err {
        deadpool_redis::cluster::PoolError::Backend(err) => store_error(err),
        deadpool_redis::cluster::PoolError::Timeout(_) => StoreError::new(
            StoreErrorKind::Timeout,
            "no redis cluster connection within the pool's timeout",
        ),
        other => StoreError::new(StoreErrorKind::Connection, "no redis cluster connection")
            .with_source(other),
    }
}
