//! One shared, multiplexed connection per store, made from a URL or the user's pool,
//! or the user's own `ConnectionManager` or cluster connection (see `source.rs`).
//!
//! A multiplexed connection pipelines every concurrent call over one socket, so the
//! store keeps one and clones it per call instead of checking a connection out of the
//! pool each time (deadpool pings a connection on every checkout: a second round
//! trip).
//!
//! Replacing it is the delicate part: under an overloaded or stalled Redis every call
//! times out at once, and a store that dropped the connection on every timeout and let
//! every caller reconnect would open a connection per timed-out call against the
//! server least able to take them (a reconnect storm). So:
//!
//! - **One connect at a time.** A call that finds no connection starts a connect in a
//!   task of its own, or waits for the one under way; it gives up at its own deadline
//!   without cancelling the connect, which goes on (for at most [`CONNECT_TIMEOUT`])
//!   for the calls after it. A connect that fails fails the calls waiting for it at
//!   once; the next call tries again.
//! - **Only a dead or silent connection is dropped.** An error that breaks the socket
//!   drops it at once. A timeout drops it only when the connection has answered no
//!   call since the timed-out one was sent (silent for a whole deadline: a network
//!   partition never closes the socket, a stopped server never answers) and it is at
//!   least [`MIN_AGE`] old; a call that is merely slow while others get answers keeps
//!   it. So a stalled server costs at most one new connection per [`MIN_AGE`], however
//!   many calls time out.
//! - **A connection dies with the runtime that made it.** redis-rs drives a
//!   connection from a task on the runtime that connected it; once that runtime
//!   ends (a test's, a `block_on` in a CLI, the in-flight renewer's thread), every
//!   call on it would fail with "broken pipe". A watcher task on the same runtime
//!   drops the connection when the runtime drops the watcher, so the next call, on
//!   any runtime, connects anew instead of failing.
//! - **A cluster connection is replaced beside the old one.** It serves every node,
//!   and one silent node must not take the others down with it: a timeout keeps it
//!   and starts a replacement (at most one per [`MIN_AGE`]), which takes over once it
//!   is made, with a fresh slot map (a partitioned master's replica may have taken
//!   its slots, and redis-rs, hearing no error, would never look). Errors that break
//!   it still drop it at once.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

pub(super) use super::errors::{breaks_connection, error_reply, store_error};
pub(super) use super::source::{Conn, Source};
use crate::{StoreError, StoreErrorKind};

/// How long one connect may take before the next call starts another.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a connection is kept, at least, before silence can drop it.
pub(super) const MIN_AGE: Duration = Duration::from_secs(1);

/// What is known of one connection's liveness; shared by the calls using it.
#[derive(Debug)]
struct Health {
    /// Answers received on it so far.
    replies: AtomicU64,
    made: Instant,
}

/// A call's use of the shared connection.
pub(super) struct Checkout {
    pub(super) conn: Conn,
    generation: u64,
    health: Arc<Health>,
    /// `health.replies` when the call was sent.
    replies_before: u64,
}

impl Checkout {
    /// The server answered this call (a reply, even an error reply): the connection
    /// is alive.
    pub(super) fn answered(&self) {
        self.health.replies.fetch_add(1, Relaxed);
    }

    /// Whether the connection answered nothing since this call was sent.
    fn silent(&self) -> bool {
        self.health.replies.load(Relaxed) == self.replies_before
    }
}

/// The shared connection and the connect under way.
struct Current {
    /// Counts connections made, so a call that saw one fail drops only that one, not
    /// a newer one another call already made.
    generation: u64,
    conn: Option<(Conn, Arc<Health>)>,
    /// Ends the current connection's runtime watcher when the connection is dropped
    /// (see [`RuntimeWatch`]).
    watch: Option<oneshot::Sender<()>>,
    /// Connect attempts started; the latest is under way while `connecting`.
    attempts: u64,
    connecting: bool,
    /// The latest attempt's failure, for the calls that waited for it.
    failed: Option<(u64, Arc<StoreError>)>,
    /// When the latest attempt started: a cluster connection is replaced at most once
    /// per `MIN_AGE`.
    last_attempt: Option<Instant>,
}

pub(super) struct Connections {
    source: Source,
    current: Mutex<Current>,
    /// Wakes the calls waiting for a connect when it ends.
    connect_ended: Notify,
}

impl Connections {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            current: Mutex::new(Current {
                generation: 0,
                conn: None,
                watch: None,
                attempts: 0,
                connecting: false,
                failed: None,
                last_attempt: None,
            }),
            connect_ended: Notify::new(),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        self.source.is_cluster()
    }

    /// The shared connection; without one, waits for a connect (starting one if none
    /// is under way). The caller bounds the wait by its deadline.
    ///
    /// A call that joined a connect started before it came (by a call in a worse
    /// moment: the server may have come back since) and sees that connect fail starts
    /// one of its own, once; a call whose own connect failed fails at once. So a
    /// server that is down costs at most two connects per wave of calls.
    pub(super) async fn get(self: &Arc<Self>) -> Result<Checkout, StoreError> {
        let mut waited_for = None;
        let mut may_retry = false;
        loop {
            // Registered before the state is read, so the end of a connect between the
            // two is not missed.
            let ended = self.connect_ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let mut current = self.lock();
                if let Some((conn, health)) = &current.conn {
                    return Ok(Checkout {
                        conn: conn.clone(),
                        generation: current.generation,
                        replies_before: health.replies.load(Relaxed),
                        health: health.clone(),
                    });
                }
                if let (Some(attempt), Some((failed, error))) = (waited_for, &current.failed)
                    && attempt == *failed
                {
                    if !std::mem::take(&mut may_retry) {
                        return Err(StoreError::new(
                            error.kind(),
                            "no redis connection: the connect this call waited for failed",
                        )
                        .with_source(error.clone()));
                    }
                } else if waited_for.is_none() {
                    // The first look: a connect under way was started by someone else.
                    may_retry = current.connecting;
                }
                if !current.connecting {
                    self.start_connect(&mut current);
                }
                waited_for = Some(current.attempts);
            }
            ended.await;
        }
    }

    fn start_connect(self: &Arc<Self>, current: &mut Current) {
        current.connecting = true;
        current.attempts += 1;
        current.last_attempt = Some(Instant::now());
        tokio::spawn(self.clone().connect(current.attempts));
    }

    /// One connect attempt, run in a task of its own so that the callers' deadlines
    /// do not cancel it.
    async fn connect(self: Arc<Self>, attempt: u64) {
        let mut ending = ConnectEnd {
            connections: &self,
            attempt,
            result: None,
        };
        ending.result = Some(
            match tokio::time::timeout(CONNECT_TIMEOUT, self.source.connect()).await {
                Ok(result) => result.map(|conn| (conn, watch_runtime(&self))),
                Err(_) => Err(StoreError::new(
                    StoreErrorKind::Timeout,
                    format!("no redis connection within {CONNECT_TIMEOUT:?}"),
                )),
            },
        );
    }

    /// Records how connect `attempt` ended and wakes the calls waiting for it.
    fn finish_connect(&self, attempt: u64, result: Result<(Conn, Watched), StoreError>) {
        {
            let mut current = self.lock();
            current.connecting = false;
            match result {
                Ok((conn, (watch, made_on))) => {
                    current.generation += 1;
                    let health = Arc::new(Health {
                        replies: AtomicU64::new(0),
                        made: Instant::now(),
                    });
                    current.conn = Some((conn, health));
                    current.watch = Some(watch);
                    current.failed = None;
                    // Names the connection the watcher may drop, now that its
                    // generation is known. A watcher already gone went with its
                    // runtime, and so did this connection's driver.
                    if made_on.send(current.generation).is_err() {
                        current.conn = None;
                        current.watch = None;
                    }
                }
                Err(error) => current.failed = Some((attempt, Arc::new(error))),
            }
        }
        self.connect_ended.notify_waiters();
    }

    /// Drops the checkout's connection after an error that broke it; the next call
    /// reconnects.
    pub(super) fn discard(&self, checkout: &Checkout) {
        self.discard_generation(checkout.generation);
    }

    /// Drops connection `generation` if it is still the current one.
    fn discard_generation(&self, generation: u64) {
        let mut current = self.lock();
        if current.generation == generation {
            current.conn = None;
            current.watch = None;
        }
    }

    /// After the checkout's call timed out (see the module's doc): a standalone
    /// connection is dropped only if it is silent; a cluster connection is kept and a
    /// replacement made beside it.
    pub(super) fn timed_out(self: &Arc<Self>, checkout: &Checkout) {
        if checkout.health.made.elapsed() < MIN_AGE {
            return;
        }
        if !self.is_cluster() {
            if checkout.silent() {
                self.discard(checkout);
            }
            return;
        }
        let mut current = self.lock();
        let recent = current
            .last_attempt
            .is_some_and(|at| at.elapsed() < MIN_AGE);
        if current.generation == checkout.generation
            && !current.connecting
            && !recent
            && self.source.makes_connections()
        {
            self.start_connect(&mut current);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ends a connect attempt however its task ends: with its result, or, when the task
/// is dropped first (its runtime shut down), as a failure, so that the next call on
/// another runtime starts a connect of its own instead of waiting for this one.
struct ConnectEnd<'a> {
    connections: &'a Connections,
    attempt: u64,
    result: Option<Result<(Conn, Watched), StoreError>>,
}

/// A new connection's end of its runtime watcher: the sender that ends the watcher
/// when the connection is dropped, and the one that tells it the connection's
/// generation.
type Watched = (oneshot::Sender<()>, oneshot::Sender<u64>);

/// Starts the watcher of a connection made on the current runtime (see the module's
/// doc): a task that waits until the connection is dropped, and, if its runtime drops
/// it first, drops the connection.
fn watch_runtime(connections: &Arc<Connections>) -> Watched {
    let (watch, dropped) = oneshot::channel::<()>();
    let (made_on, generation) = oneshot::channel::<u64>();
    let watcher = RuntimeWatch {
        connections: Arc::downgrade(connections),
        generation: None,
    };
    tokio::spawn(async move {
        let mut watcher = watcher;
        if let Ok(generation) = generation.await {
            watcher.generation = Some(generation);
            // Resolves when the connection is dropped or replaced: nothing to do then.
            let _ = dropped.await;
        }
        watcher.generation = None;
    });
    (watch, made_on)
}

/// Drops its connection when dropped with a generation set: the watcher task was
/// dropped before the connection was, so its runtime is shutting down and takes the
/// connection's driver with it.
struct RuntimeWatch {
    connections: std::sync::Weak<Connections>,
    generation: Option<u64>,
}

impl Drop for RuntimeWatch {
    fn drop(&mut self) {
        if let (Some(generation), Some(connections)) = (self.generation, self.connections.upgrade())
        {
            connections.discard_generation(generation);
        }
    }
}

impl Drop for ConnectEnd<'_> {
    fn drop(&mut self) {
        let result = self.result.take().unwrap_or_else(|| {
            Err(StoreError::new(
                StoreErrorKind::Connection,
                "the redis connect was cancelled (its runtime shut down)",
            ))
        });
        self.connections.finish_connect(self.attempt, result);
    }
}
