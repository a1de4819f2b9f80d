//! Two store decorators for the model test (`tests/model/`): [`Ledger`], which books
//! every charge a store made and every give-back asked of it, receipt by receipt, so
//! that "a request never gets back more than it paid" is checked where every give-back
//! has to pass; and [`Flaky`], a store that fails every call while a switch is on (a
//! flapping primary under `Fallback`). Both pass every call on unchanged, keeping an
//! answer made at once an answer made at once (`StoreCall::map`), so that the layer
//! behaves over them as over the bare store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate::store::{Charge, InFlightSlot, Receipt, Store, StoreCall};
use tollgate::{ConfigError, Decision, Key, Limit, StoreError, StoreErrorKind};

/// Whose charge: the limit's name and the key's fingerprint.
type Caller = (&'static str, [u8; 16]);

/// What one receipt (or several equal ones: two charges of one cost decided in the
/// same microsecond look alike) charged and what was given back against it.
#[derive(Debug, Default, Clone, Copy)]
struct Account {
    charged: u64,
    given: u64,
}

/// Every charge and give-back a [`Ledger`] saw, and what broke the rule.
#[derive(Debug, Default)]
pub struct Book {
    receipts: HashMap<(Caller, Receipt), Account>,
    /// Per caller: units charged (checks, reservations, penalties) and units given
    /// back (by receipt or not).
    totals: HashMap<Caller, Account>,
    /// Give-backs that broke "never more than it charged", described.
    pub violations: Vec<String>,
    /// Store calls answered, whatever their result.
    pub calls: u64,
}

impl Book {
    fn charge(&mut self, caller: Caller, receipt: Option<Receipt>, units: u64) {
        self.totals.entry(caller).or_default().charged += units;
        if let Some(receipt) = receipt {
            self.receipts.entry((caller, receipt)).or_default().charged += receipt.cost();
        }
    }

    /// `units` given back against `receipt` (or against the caller as a whole).
    fn give_back(&mut self, caller: Caller, receipt: Option<Receipt>, units: u64, how: &str) {
        if units == 0 {
            return;
        }
        let total = self.totals.entry(caller).or_default();
        total.given += units;
        if total.given > total.charged {
            let total = *total;
            self.violations.push(format!(
                "{how}: limit {:?} gave back {} units in all where {} were charged",
                caller.0, total.given, total.charged
            ));
        }
        let Some(receipt) = receipt else { return };
        let account = self.receipts.entry((caller, receipt)).or_default();
        account.given += units;
        if account.given > account.charged {
            let account = *account;
            self.violations.push(format!(
                "{how}: limit {:?}, receipt {receipt:?}: {} units given back against {} charged",
                caller.0, account.given, account.charged
            ));
        }
    }
}

/// Books every call of the store it wraps (see [`Book`]); cloned, it shares its book.
#[derive(Debug, Clone)]
pub struct Ledger {
    inner: Arc<dyn Store>,
    book: Arc<Mutex<Book>>,
    busy: Arc<AtomicUsize>,
}

/// Counts a call from its making until it is answered or dropped.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn new(busy: &Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::SeqCst);
        Self(busy.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn caller(limit: &Limit, key: &Key) -> Caller {
    (limit.name(), key.fingerprint())
}

impl Ledger {
    /// Wraps `inner`, with an empty book.
    pub fn new(inner: impl Store) -> Self {
        Self {
            inner: Arc::new(inner),
            book: Arc::default(),
            busy: Arc::default(),
        }
    }

    /// The violations booked so far.
    pub fn violations(&self) -> Vec<String> {
        self.book.lock().expect("the book").violations.clone()
    }

    /// Store calls answered so far.
    pub fn calls(&self) -> u64 {
        self.book.lock().expect("the book").calls
    }

    /// Calls made and not yet answered (nor dropped): 0 once background settles and
    /// refunds have landed.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// Waits until no call is outstanding for `quiet` in a row, at most `bound`.
    pub async fn settled(&self, quiet: Duration, bound: Duration) {
        let start = tokio::time::Instant::now();
        let mut idle_since = None;
        while start.elapsed() < bound {
            if self.busy() == 0 {
                let since = *idle_since.get_or_insert_with(tokio::time::Instant::now);
                if since.elapsed() >= quiet {
                    return;
                }
            } else {
                idle_since = None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn book<'a, T: Send + 'a>(
        &'a self,
        call: StoreCall<'a, T>,
        record: impl FnOnce(&mut Book, &T) + Send + 'a,
    ) -> StoreCall<'a, T> {
        let busy = Busy::new(&self.busy);
        let book = self.book.clone();
        call.map(move |answer| {
            let mut book = book.lock().expect("the book");
            book.calls += 1;
            if let Ok(value) = &answer {
                record(&mut book, value);
            }
            drop(busy);
            answer
        })
    }
}

impl Store for Ledger {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.book(self.inner.decide(charges), move |book, decisions| {
            for (charge, decision) in charges.iter().zip(decisions) {
                if decision.allowed
                    && let Some(receipt) = decision.receipt()
                {
                    book.charge(
                        caller(charge.limit, charge.key),
                        Some(receipt),
                        receipt.cost(),
                    );
                }
            }
        })
    }

    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.book(self.inner.decide_one(charge), move |book, decision| {
            if decision.allowed
                && let Some(receipt) = decision.receipt()
            {
                book.charge(
                    caller(charge.limit, charge.key),
                    Some(receipt),
                    receipt.cost(),
                );
            }
        })
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.book(self.inner.refund(charge), move |book, ()| {
            book.give_back(
                caller(charge.limit, charge.key),
                None,
                charge.cost,
                "refund",
            );
        })
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.book(
            self.inner.refund_charge(charge, receipt),
            move |book, ()| {
                let units = charge.cost.min(receipt.cost());
                book.give_back(
                    caller(charge.limit, charge.key),
                    Some(receipt),
                    units,
                    "refund_charge",
                );
            },
        )
    }

    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        self.book(self.inner.settle(charge, receipt), move |book, settled| {
            let who = caller(charge.limit, charge.key);
            // The receipt is spent: what it does not give back moves to the settled
            // decision's receipt, which later give-backs name.
            let back = receipt.cost().saturating_sub(charge.cost);
            book.give_back(who, Some(receipt), back, "settle");
            let moved = receipt.cost() - back;
            if let Some(account) = book.receipts.get_mut(&(who, receipt)) {
                account.given += moved;
            }
            book.totals.entry(who).or_default().given += moved;
            let standing = settled.receipt();
            book.charge(who, standing, standing.map_or(0, |r| r.cost()));
        })
    }

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.book(self.inner.peek(limit, key), |_, _| {})
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        // Idle again: what was charged before is forgotten, not given back; a later
        // give-back of an older charge takes nothing from the idle key, and is still
        // booked against its receipt.
        self.book(self.inner.reset(limit, key), |_, ()| {})
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        self.book(self.inner.block(limit, key, duration), |_, _| {})
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.book(self.inner.penalize(charge), move |book, _| {
            book.charge(caller(charge.limit, charge.key), None, charge.cost);
        })
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        self.book(
            self.inner.reserve(charge, max_wait),
            move |book, decision| {
                if decision.allowed
                    && let Some(receipt) = decision.receipt()
                {
                    book.charge(
                        caller(charge.limit, charge.key),
                        Some(receipt),
                        receipt.cost(),
                    );
                }
            },
        )
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.validate(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.validate_quota(limit)
    }

    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        self.book(self.inner.acquire_in_flight(limit, key, max), |_, _| {})
    }

    fn supports_in_flight(&self) -> bool {
        self.inner.supports_in_flight()
    }
}

/// The store it wraps while `up`; every call fails with a connection error while the
/// switch is off. Cloned, it shares its switch.
#[derive(Debug, Clone)]
pub struct Flaky<S> {
    inner: S,
    down: Arc<AtomicBool>,
}

impl<S: Store> Flaky<S> {
    /// Wraps `inner`, up.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            down: Arc::default(),
        }
    }

    /// Fails every call from now on (`true`), or answers again (`false`).
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    fn or_fail<'a, T>(&self, call: impl FnOnce() -> StoreCall<'a, T>) -> StoreCall<'a, T> {
        if self.down.load(Ordering::SeqCst) {
            StoreCall::ready(Err(StoreError::new(
                StoreErrorKind::Connection,
                "the primary is down for the model",
            )))
        } else {
            call()
        }
    }
}

impl<S: Store> Store for Flaky<S> {
    fn decide<'a>(&'a self, charges: &'a [Charge<'a>]) -> StoreCall<'a, Vec<Decision>> {
        self.or_fail(|| self.inner.decide(charges))
    }

    fn decide_one<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.or_fail(|| self.inner.decide_one(charge))
    }

    fn refund<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, ()> {
        self.or_fail(|| self.inner.refund(charge))
    }

    fn refund_charge<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, ()> {
        self.or_fail(|| self.inner.refund_charge(charge, receipt))
    }

    fn settle<'a>(&'a self, charge: Charge<'a>, receipt: Receipt) -> StoreCall<'a, Decision> {
        self.or_fail(|| self.inner.settle(charge, receipt))
    }

    fn peek<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, Decision> {
        self.or_fail(|| self.inner.peek(limit, key))
    }

    fn reset<'a>(&'a self, limit: &'a Limit, key: &'a Key) -> StoreCall<'a, ()> {
        self.or_fail(|| self.inner.reset(limit, key))
    }

    fn block<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        duration: Duration,
    ) -> StoreCall<'a, Decision> {
        self.or_fail(|| self.inner.block(limit, key, duration))
    }

    fn penalize<'a>(&'a self, charge: Charge<'a>) -> StoreCall<'a, Decision> {
        self.or_fail(|| self.inner.penalize(charge))
    }

    fn reserve<'a>(&'a self, charge: Charge<'a>, max_wait: Duration) -> StoreCall<'a, Decision> {
        self.or_fail(|| self.inner.reserve(charge, max_wait))
    }

    fn validate(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.validate(limit)
    }

    fn validate_quota(&self, limit: &Limit) -> Result<(), ConfigError> {
        self.inner.validate_quota(limit)
    }

    fn acquire_in_flight<'a>(
        &'a self,
        limit: &'a Limit,
        key: &'a Key,
        max: u32,
    ) -> StoreCall<'a, Option<InFlightSlot>> {
        self.or_fail(|| self.inner.acquire_in_flight(limit, key, max))
    }

    fn supports_in_flight(&self) -> bool {
        self.inner.supports_in_flight()
    }
}
