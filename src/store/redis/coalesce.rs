//! Coalesced calls: single decisions made while the store's calls are in flight go to
//! Redis together, one `FCALL` of the library's batch function (`lua/fcall_batch.lua`)
//! carrying all of them.
//!
//! A decision costs Redis about as much to receive, parse, dispatch and answer as to
//! decide; under concurrency, one command for many decisions pays that once. There
//! is no timer and no wait when the store is idle: a decision that finds fewer than
//! [`max_in_flight`](RedisStore::coalesce) calls in flight on its lane is sent at
//! once, alone, exactly as without coalescing. One that finds them all in flight
//! queues, and when a call in flight comes back, everything queued on the lane
//! goes out as the next call (up to [`MOST`] decisions). So the batches are as large
//! as the load makes them: one decision each at one task, about `tasks /
//! max_in_flight` at many.
//!
//! **Lanes.** A standalone server has one. On a cluster each hash slot is a lane: a
//! call's keys must share a slot (a node refuses a call across slots, and redis-rs
//! routes a call by its first key), so only decisions on one slot can share a call.
//!
//! **Each decision as alone.** A batched decision is the same packed charge its
//! single call sends, decided by the same code (`lean.lua`'s `lean_decide`), with its
//! own clock (its own floor, or the injected clock's reading) and its own reply; one
//! whose code fails answers its own error and the others their verdicts. Decisions in
//! one batch are decided one after the other at one reading of the server's `TIME`,
//! as concurrent calls arriving within a microsecond would be.
//!
//! **Deadlines.** Every decision keeps its own: one whose deadline passes while it
//! is queued or in flight answers a timeout at its deadline, and is not sent if its
//! batch has not left yet (nor is one whose caller gave up). A batch is bounded by the
//! latest deadline among its decisions; when it fails (a lost connection, an error
//! reply, a timeout), each of its decisions answers that failure, and no other
//! decision does.
//!
//! **Who sends.** A caller sends its own single call. When it comes back and
//! decisions are queued, a task takes over its turn and sends batches until the lane
//! is empty, so that no caller waits for other callers' decisions. A turn is given
//! back however it ends: a caller dropped mid-call hands the queue to a task, and a
//! task dropped with its runtime fails what is queued (its callers' runtime is gone
//! too) rather than leave the lane taken for ever.
//!
//! What is batched: [`Store::decide`](crate::store::Store::decide) of one charge
//! (`Limiter::check` of one limit, the common case) on a server with the function
//! library. Multi-limit checks, refunds, settles, reservations and operators' calls
//! keep their own calls, and so does everything on a server without functions.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use redis::RedisError;
use redis::cluster_routing::Slot;
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout_at};

use super::RedisStore;
use super::connection::store_error;
use super::function::LIBRARY;
use super::script::batch::{self, BatchReply};
use super::script::{Call, Mode, Reply};
use crate::algorithm::Verdict;
use crate::store::Charge;
use crate::{StoreError, StoreErrorKind};

/// The most decisions one batch carries: Redis runs a call whole before anything
/// else, so a batch of `MOST` (about half a millisecond of Lua) bounds what it adds
/// to other clients' latency; more stay queued for the next call.
pub(super) const MOST: usize = 256;

/// Where decisions may share a call: the server, or one hash slot of a cluster.
type Lane = Option<Slot>;

/// What one decision's caller gets back: its reply's integers, or its failure.
type Answer = Result<Vec<i64>, StoreError>;

/// A decision waiting for a batch.
struct Queued {
    call: Call,
    deadline: Instant,
    answer: oneshot::Sender<Answer>,
}

/// One lane's calls in flight and the decisions waiting for the next.
#[derive(Default)]
struct LaneState {
    in_flight: usize,
    queue: Vec<Queued>,
}

/// A store's coalescing, shared by its clones: how many calls each lane may have in
/// flight (0: coalescing off) and the lanes with calls in flight.
pub(super) struct Coalescer {
    max_in_flight: usize,
    lanes: Mutex<HashMap<Lane, LaneState>>,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

/// How a decision goes to Redis.
enum Turn {
    /// Alone, now: the lane had room for another call.
    Send(Call),
    /// In a batch: its answer comes here.
    Queued(oneshot::Receiver<Answer>),
}

impl Coalescer {
    pub(super) fn new(max_in_flight: usize) -> Self {
        Self {
            max_in_flight,
            lanes: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Lane, LaneState>> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a call's place on `lane` for `call`, or queues it.
    fn join(&self, lane: Lane, call: Call, deadline: Instant) -> Turn {
        let mut lanes = self.lock();
        let state = lanes.entry(lane).or_default();
        if state.in_flight < self.max_in_flight {
            state.in_flight += 1;
            return Turn::Send(call);
        }
        let (answer, receiver) = oneshot::channel();
        state.queue.push(Queued {
            call,
            deadline,
            answer,
        });
        Turn::Queued(receiver)
    }

    /// The next batch of `lane`: up to [`MOST`] queued decisions whose callers still
    /// wait and whose deadlines have not passed; empty when none is left, and then the
    /// caller's turn is given back.
    fn next_batch(&self, lane: Lane) -> Vec<Queued> {
        let now = Instant::now();
        let mut lanes = self.lock();
        let Some(state) = lanes.get_mut(&lane) else {
            return Vec::new();
        };
        // Dropped unsent: their callers answered a timeout or went away (a dropped
        // sender tells a caller still waiting that its deadline passed).
        state
            .queue
            .retain(|q| q.deadline > now && !q.answer.is_closed());
        let take = state.queue.len().min(MOST);
        let batch: Vec<Queued> = state.queue.drain(..take).collect();
        if batch.is_empty() {
            release(&mut lanes, lane);
        }
        batch
    }

    /// Gives back a turn that ended with decisions queued and no task to send them:
    /// the queue is failed (its callers see their answer dropped).
    fn abandon(&self, lane: Lane) {
        let mut lanes = self.lock();
        if let Some(state) = lanes.get_mut(&lane) {
            state.queue.clear();
        }
        release(&mut lanes, lane);
    }

    /// Whether `lane` has decisions queued (its turn is then kept, for a task).
    fn has_queue(&self, lane: Lane) -> bool {
        let mut lanes = self.lock();
        let queued = lanes.get(&lane).is_some_and(|s| !s.queue.is_empty());
        if !queued {
            release(&mut lanes, lane);
        }
        queued
    }
}

/// One call fewer in flight on `lane`; an idle lane is forgotten.
fn release(lanes: &mut HashMap<Lane, LaneState>, lane: Lane) {
    if let Some(state) = lanes.get_mut(&lane) {
        state.in_flight = state.in_flight.saturating_sub(1);
        if state.in_flight == 0 && state.queue.is_empty() {
            lanes.remove(&lane);
        }
    }
}

/// A caller's turn on a lane, sending its own call; handed to a task when it ends with
/// decisions queued (see the module's doc).
struct CallerTurn<'a> {
    store: &'a RedisStore,
    lane: Lane,
}

impl Drop for CallerTurn<'_> {
    fn drop(&mut self) {
        if !self.store.coalescer.has_queue(self.lane) {
            return;
        }
        let task = TaskTurn {
            store: self.store.clone(),
            lane: self.lane,
            given_back: false,
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(task.send_batches())),
            // Dropped outside a runtime: nothing can send; `task` fails the queue.
            Err(_) => drop(task),
        }
    }
}

/// A task's turn on a lane: sends its batches until none is left. Dropped before
/// that (its runtime shut down), it fails what is queued.
struct TaskTurn {
    store: RedisStore,
    lane: Lane,
    /// Set once `next_batch` found the lane empty and gave the turn back.
    given_back: bool,
}

impl TaskTurn {
    async fn send_batches(mut self) {
        loop {
            let batch = self.store.coalescer.next_batch(self.lane);
            if batch.is_empty() {
                self.given_back = true;
                return;
            }
            self.store.send_batch(batch).await;
        }
    }
}

impl Drop for TaskTurn {
    fn drop(&mut self) {
        if !self.given_back {
            self.store.coalescer.abandon(self.lane);
        }
    }
}

impl RedisStore {
    /// Whether `decide` of one charge goes through the coalescer now.
    pub(super) fn coalesces(&self) -> bool {
        self.coalescer.max_in_flight() > 0 && self.functions.enabled()
    }

    /// Decides one charge before `deadline`: alone when its lane has room for another
    /// call, else in the lane's next batch.
    pub(super) async fn decide_coalesced(
        &self,
        deadline: Instant,
        now: Option<u64>,
        charge: &Charge<'_>,
    ) -> Result<Vec<Verdict>, StoreError> {
        let at = self.at(now);
        let charges = [charge];
        let call = self.request(at, Mode::Acquire, &charges, &[]);
        let lane = self.is_cluster().then(|| Slot::for_key(call.first_key()));
        match self.coalescer.join(lane, call, deadline) {
            Turn::Send(call) => {
                let _turn = CallerTurn { store: self, lane };
                self.send(deadline, at, Mode::Acquire, &charges, &call)
                    .await
            }
            Turn::Queued(answer) => match timeout_at(deadline, answer).await {
                Ok(Ok(Ok(reply))) => self.read_reply(at, Mode::Acquire, &charges, &reply),
                Ok(Ok(Err(error))) => Err(error),
                // Dropped unsent: past its deadline, or its lane's task was dropped.
                Ok(Err(_)) if Instant::now() >= deadline => Err(self.timeout_error()),
                Ok(Err(_)) => Err(StoreError::new(
                    StoreErrorKind::Connection,
                    "the batch this decision waited for was dropped (its runtime shut down)",
                )),
                Err(_) => Err(self.timeout_error()),
            },
        }
    }

    /// Sends one batch and answers each of its decisions.
    async fn send_batch(&self, batch: Vec<Queued>) {
        let deadline = batch
            .iter()
            .map(|q| q.deadline)
            .max()
            .unwrap_or_else(Instant::now);
        let calls: Vec<&Call> = batch.iter().map(|q| &q.call).collect();
        let fcall = batch::fcall(&LIBRARY.batch, &calls);
        let result = self
            .exchange(deadline, |mut conn| {
                let (calls, fcall) = (&calls, &fcall);
                async move {
                    if let Some(reply) = self.functions.query::<BatchReply>(&mut conn, fcall).await
                    {
                        return reply.map(|BatchReply(replies)| replies);
                    }
                    // The server refused functions just now: each as a script, and the
                    // next decisions skip the coalescer.
                    let mut replies = Vec::with_capacity(calls.len());
                    for call in calls {
                        let reply: Result<Reply, RedisError> =
                            conn.invoke(&call.invocation()).await;
                        replies.push(reply.map(|Reply(words)| words));
                    }
                    Ok(replies)
                }
            })
            .await;
        match result {
            Ok(replies) if replies.len() == batch.len() => {
                for (queued, reply) in batch.into_iter().zip(replies) {
                    let _ = queued.answer.send(reply.map_err(store_error));
                }
            }
            Ok(replies) => {
                let message = format!(
                    "the batch function answered {} of {} decisions",
                    replies.len(),
                    batch.len()
                );
                for queued in batch {
                    let error = StoreError::new(StoreErrorKind::Protocol, message.clone());
                    let _ = queued.answer.send(Err(error));
                }
            }
            Err(error) => {
                let source = std::sync::Arc::new(error);
                for queued in batch {
                    let _ = queued.answer.send(Err(self.as_own(&source)));
                }
            }
        }
    }

    /// A batch's failure as one of its decisions answers it: what its own call would
    /// have answered (the same kind, the same message), the batch's error its source.
    fn as_own(&self, error: &std::sync::Arc<StoreError>) -> StoreError {
        let redis =
            std::error::Error::source(&**error).and_then(|e| e.downcast_ref::<RedisError>());
        if let Some(redis) = redis {
            return store_error(redis.clone());
        }
        if error.kind() == StoreErrorKind::Timeout {
            return self.timeout_error();
        }
        StoreError::new(error.kind(), error.message()).with_source(error.clone())
    }
}
