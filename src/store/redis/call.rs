//! One call to Redis: a connection from the shared one (reconnecting, one connect at
//! a time), the function library or the script, a deadline over all of it, the
//! verdicts read back, and what a failure says about the connection.

use redis::RedisError;
use tokio::time::{Instant, timeout_at};

use super::RedisStore;
use super::connection::{Conn, breaks_connection, store_error};
use super::keys;
use super::script::{self, At, Call, Mode, Reads};
use crate::StoreError;
use crate::algorithm::Verdict;
use crate::decision::Receipt;
use crate::store::Charge;

impl RedisStore {
    /// Runs one script call before `deadline`.
    pub(super) async fn run(
        &self,
        deadline: Instant,
        now: Option<u64>,
        mode: Mode,
        charges: &[&Charge<'_>],
    ) -> Result<Vec<Verdict>, StoreError> {
        self.run_call(deadline, now, mode, charges, &[]).await
    }

    /// Runs one script call before `deadline`: `charges` in `mode`, or, with
    /// [`Mode::RefundCharges`], the refunds of the charges `receipts` name (one each),
    /// or, with [`Mode::Settle`], the settle of one charge by its receipt (its verdict
    /// carrying the receipt of the extra it charged).
    pub(super) async fn run_call(
        &self,
        deadline: Instant,
        now: Option<u64>,
        mode: Mode,
        charges: &[&Charge<'_>],
        receipts: &[Receipt],
    ) -> Result<Vec<Verdict>, StoreError> {
        let at = self.at(now);
        let request = self.request(at, mode, charges, receipts);
        self.send(deadline, at, mode, charges, &request).await
    }

    /// The clock a call made now decides on: the injected clock's reading `now`, or
    /// the server's `TIME` with this store's floor.
    pub(super) fn at(&self, now: Option<u64>) -> At {
        match now {
            Some(now) => At::Client(now),
            None => At::Server {
                floor: self.server_time.floor(),
            },
        }
    }

    /// The call of `charges` in `mode` at `at` (see [`run_call`](Self::run_call)).
    pub(super) fn request(
        &self,
        at: At,
        mode: Mode,
        charges: &[&Charge<'_>],
        receipts: &[Receipt],
    ) -> Call {
        match (mode, charges, receipts) {
            (Mode::RefundCharges, ..) => Call::refunds(&self.prefix, at, charges, receipts),
            (Mode::Settle(give_back), [charge], [receipt]) => {
                Call::settle(&self.prefix, at, charge, *receipt, give_back)
            }
            _ => Call::new(&self.prefix, at, mode, charges, |c| self.reads(mode, c)),
        }
    }

    /// Sends `request`, the call of `charges` in `mode` at `at`, before `deadline`:
    /// one charge decided to the function library, anything else (and everything on a
    /// server without functions) as a script.
    pub(super) async fn send(
        &self,
        deadline: Instant,
        at: At,
        mode: Mode,
        charges: &[&Charge<'_>],
        request: &Call,
    ) -> Result<Vec<Verdict>, StoreError> {
        let single = charges.len() == 1 && mode.in_library();
        let script::Reply(reply) = self
            .exchange(deadline, |mut conn| async move {
                if single
                    && self.functions.enabled()
                    && let Some(reply) = self.functions.call(&mut conn, request).await
                {
                    return reply;
                }
                conn.invoke(&request.invocation()).await
            })
            .await?;
        self.read_reply(at, mode, charges, &reply)
    }

    /// The verdicts of the call of `charges` in `mode` at `at` from its reply's
    /// integers; the store's time floor learns the instant it was decided at.
    pub(super) fn read_reply(
        &self,
        at: At,
        mode: Mode,
        charges: &[&Charge<'_>],
        reply: &[i64],
    ) -> Result<Vec<Verdict>, StoreError> {
        let count = if mode.decides() { charges.len() } else { 0 };
        let (mut verdicts, decided_at) = script::verdicts(reply, count)?;
        if let At::Server { floor } = at {
            self.server_time.observe(decided_at, floor);
        }
        if matches!(mode, Mode::Acquire | Mode::Reserve(_)) {
            give_receipts(&mut verdicts, charges, decided_at);
        }
        if let (Mode::Settle(_), [charge], [verdict]) = (mode, charges, verdicts.as_mut_slice()) {
            // The settle's extra was charged at `decided_at` and its state's reset instant
            // names it, as a check's charge (its verdict is the state's, whatever the
            // key's block says).
            let until = decided_at.saturating_add(verdict.reset_after_us);
            verdict.receipt = Receipt::new(decided_at, until, charge.cost);
        }
        Ok(verdicts)
    }

    /// When `charge`'s decision in `mode` reads the caller's record; remembers the
    /// charge's (algorithm, period) under its limit's name (see [`keys::Known`]).
    /// Operators' calls (reset, block, penalty) name every known pair themselves, and
    /// refunds read no record.
    fn reads(&self, mode: Mode, charge: &Charge<'_>) -> Reads {
        let reloaded = self.known.note(charge.limit);
        if !matches!(mode, Mode::Acquire | Mode::DryRun | Mode::Reserve(_)) {
            Reads::ByMark
        } else if !keys::is_base(charge.limit) {
            Reads::AlwaysMarkingBase
        } else if reloaded {
            Reads::Always
        } else {
            Reads::ByMark
        }
    }

    /// Runs `call` on the shared connection before `deadline`, and learns from its
    /// outcome whether the connection is alive (see `connection.rs`).
    pub(super) async fn exchange<T, F, Fut>(
        &self,
        deadline: Instant,
        call: F,
    ) -> Result<T, StoreError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let checkout = timeout_at(deadline, self.connections.get())
            .await
            .map_err(|_| self.timeout_error())??;
        match timeout_at(deadline, call(checkout.conn.clone())).await {
            Ok(Ok(reply)) => {
                checkout.answered();
                Ok(reply)
            }
            Ok(Err(err)) => {
                if breaks_connection(&err) {
                    self.connections.discard(&checkout);
                } else {
                    // An error reply is a reply: the connection is alive.
                    checkout.answered();
                }
                Err(store_error(err))
            }
            Err(_) => {
                // Dropped only if silent: a partition never closes the socket, but a
                // call that is merely slow must not cost everyone a reconnect.
                self.connections.timed_out(&checkout);
                Err(self.timeout_error())
            }
        }
    }
}

/// Gives each charge of an admitted batch its receipt: the script charges a batch
/// whole or not at all, and right after a charge its decision's reset instant, the
/// instant decided at plus the reported reset, names it (see [`Receipt`]).
fn give_receipts(verdicts: &mut [Verdict], charges: &[&Charge<'_>], decided_at: u64) {
    if !verdicts.iter().all(|v| v.allowed) {
        return;
    }
    for (verdict, charge) in verdicts.iter_mut().zip(charges) {
        let until = decided_at.saturating_add(verdict.reset_after_us);
        verdict.receipt = Receipt::new(decided_at, until, charge.cost);
    }
}
