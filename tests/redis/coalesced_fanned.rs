//! A store that asks every question of several copies of one `RedisStore` at once
//! (each under its own prefix, so on keys of its own), requires every copy to answer
//! alike, and answers with theirs: the scenario tables, run through it, have their
//! decisions in flight together, so all but the first go out in coalesced batches,
//! and every batched answer is held to the table.
//!
//! Used by `tests/redis/coalesced.rs` and `tests/cluster/coalesced.rs`.

use std::fmt::Debug;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use support::redis_server::unique_prefix;
use tollgate::clock::ManualClock;
use tollgate::store::{Charge, Receipt, Store, StoreCall};
use tollgate::{ConfigError, Decision, Key, Limit, RedisStore, StoreError};

/// How many copies answer each question: many more than the calls a lane may have in
/// flight (`RedisStore::DEFAULT_COALESCE`), so most go in batches.
pub(crate) const WIDTH: usize = 12;

/// `WIDTH` copies of `base` on `clock`, sharing its connection and its coalescing.
#[derive(Debug)]
pub(crate) struct Fanned {
    copies: Vec<RedisStore>,
}

impl Fanned {
    pub(crate) fn new(base: &RedisStore, clock: ManualClock) -> Self {
        let copy = |clock| {
            base.clone()
                .prefix(&unique_prefix("fanned"))
                .with_clock(clock)
        };
        let mut copies: Vec<RedisStore> = (1..WIDTH).map(|_| copy(clock.clone())).collect();
        copies.push(copy(clock));
        Self { copies }
    }

    /// Asks every copy at once with `ask`; every answer must be the first's.
    fn fan<'a, T: Debug + Send + 'a>(
        &'a self,
        ask: impl Fn(&'a RedisStore) -> StoreCall<'a, T> + Send + 'a,
    ) -> StoreCall<'a, T> {
        let calls: Vec<StoreCall<'a, T>> = self.copies.iter().map(ask).collect();
        StoreCall::future(async move {
            let mut answers = together(calls).await.into_iter();
            let first = answers.next().expect("copies");
            for (copy, answer) in answers.enumerate() {
                match (&first, &answer) {
                    (Ok(a), Ok(b)) => assert_eq!(
                        format!("{a:?}"),
                        format!("{b:?}"),
                        "copy {} answered otherwise than the first",
                        copy + 1
                    ),
                    (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind(), "{a} / {b}"),
                    _ => panic!("copy {} answered {answer:?}, the first {first:?}", copy + 1),
                }
            }
            first
        })
    }
}

/// Polls every call together, so that all are in flight at once; their answers in
/// order.
async fn together<T>(calls: Vec<StoreCall<'_, T>>) -> Vec<Result<T, StoreError>> {
    let mut pending: Vec<Option<StoreCall<'_, T>>> = calls.into_iter().map(Some).collect();
    let mut answers: Vec<Option<Result<T, StoreError>>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (slot, answer) in pending.iter_mut().zip(answers.iter_mut()) {
            if let Some(call) = slot
                && let Poll::Ready(result) = Pin::new(call).poll(cx)
            {
                *answer = Some(result);
                *slot = None;
            }
        }
        if pending.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    answers.into_iter().map(|a| a.expect("answered")).collect()
}

impl Store for Fanned {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.fan(move |s| s.decide(charges))
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.fan(move |s| s.refund(charge))
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.fan(move |s| s.refund_charge(charge, receipt))
    }

    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        self.fan(move |s| s.settle(charge, receipt))
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        self.fan(move |s| s.reset(limit, key))
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        self.fan(move |s| s.block(limit, key, duration))
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.fan(move |s| s.penalize(charge))
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        self.fan(move |s| s.reserve(charge, max_wait))
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.copies[0].validate(limit)
    }
}
