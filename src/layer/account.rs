//! [`Account`]: what one request was charged, per checked policy, and the one way any
//! of it comes back.
//!
//! Every give-back the layer makes for a request — a `count_when` refund, a `Meter`
//! or byte settle, a hold-cap rejection, the shadowed policy that would have held it
//! past the cap, a client gone before its turn — goes through the request's account.
//! A charge's standing (its receipt and quota) is neither `Clone` nor `Copy`, and a
//! give-back takes it out of the charge: a second give-back of one charge finds
//! nothing to give, and a settle replaces the standing with what the store says now
//! stands. So each charge comes back at most once, and never more than it charged,
//! however many paths reach it (a failed request whose byte advance is also settled,
//! a metered request refunded at the hold cap whose body then ends).
//!
//! A request limited by one policy keeps its account inline (no allocation); the
//! account is shared ([`Ledger::share`]) only when something outlives the request's
//! future with a claim on it: a [`Meter`](crate::layer::Meter), the byte meters, a
//! gRPC status that arrives in the trailers.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::decision::Receipt;
use crate::layer::few::Few;
use crate::layer::limiter_calls::LayerCheck;
use crate::layer::settles::{Settled, When, refund, refund_shown, settle};
use crate::layer::shared::{Shared, View};
use crate::{Decision, Key, Quota};

/// What stands of one charge: the receipt that names it in the store, and the quota
/// it was decided under. Deliberately neither `Clone` nor `Copy`: whoever gives it
/// back has to take it out of its [`Charge`].
struct Standing {
    receipt: Receipt,
    quota: Quota,
}

impl Standing {
    fn of(decision: &Decision) -> Option<Self> {
        decision.receipt.map(|receipt| Self {
            receipt,
            quota: decision.quota,
        })
    }

    fn parts(&self) -> (Receipt, Quota) {
        (self.receipt, self.quota)
    }
}

/// One checked policy's charge for the request.
pub(crate) struct Charge {
    /// The policy's index in the request's view (the set it was charged under).
    index: usize,
    key: Key,
    /// Whether the policy enforces its limit on this caller (else shadow mode).
    enforced: bool,
    /// What the charge stands at: what was charged, then each settle's actual; 0
    /// once given back.
    cost: u64,
    /// `None` when nothing was charged (a denial, the store failed open), once given
    /// back, or once settled in the background (its new receipt comes back to nobody).
    standing: Option<Standing>,
}

impl Charge {
    fn new(check: &LayerCheck, decision: Option<&Decision>) -> Self {
        let standing = decision.and_then(Standing::of);
        Self {
            index: check.index,
            key: check.key,
            enforced: check.enforced,
            cost: standing.as_ref().map_or(0, |s| s.receipt.cost()),
            standing,
        }
    }

    /// The policy's index in the request's view.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// What the charge stands at (0 once given back, or when nothing was charged).
    pub(crate) fn cost(&self) -> u64 {
        self.cost
    }

    /// Gives the whole charge back, once (the request will not be served, or a
    /// shadowed place it will not use).
    pub(crate) fn give_back(&mut self, shared: &Shared, view: &View) {
        if let Some(standing) = self.take(shared, view) {
            refund(shared, view, (self.index, self.key), standing.parts());
        }
    }

    /// Gives the whole charge back, once, for a response whose headers show it
    /// (a `count_when` refund). Returns where the caller stands after it when the
    /// store answered at once.
    pub(crate) fn give_back_shown(&mut self, shared: &Shared, view: &View) -> Option<Decision> {
        let standing = self.take(shared, view)?;
        refund_shown(shared, view, (self.index, self.key), standing.parts())
    }

    /// Takes the standing out of the charge, to give it back: `None` when nothing
    /// stands, or when the limit changed since (then nothing comes back either).
    fn take(&mut self, shared: &Shared, view: &View) -> Option<Standing> {
        let standing = self.standing.take()?;
        self.cost = 0;
        limit_unchanged(shared, view, self.index).then_some(standing)
    }

    /// Moves the charge to `actual`: less gives back (by receipt, never more than
    /// stands), more charges the extra. Returns the settled decision when the store
    /// answered at once. A failure is logged and counted, never returned; the charge
    /// then stands as it was and is settled no more.
    pub(crate) fn settle(
        &mut self,
        shared: &Shared,
        view: &View,
        actual: u64,
        when: When,
    ) -> Option<Decision> {
        if actual == self.cost {
            return None;
        }
        let standing = self.standing.take()?;
        // A limit whose algorithm or period changed since keeps no state this
        // receipt names: nothing comes back (an extra is still charged).
        if actual < self.cost && !limit_unchanged(shared, view, self.index) {
            self.cost = 0;
            return None;
        }
        match settle(
            shared,
            view,
            (self.index, self.key),
            standing.parts(),
            actual,
            when,
        ) {
            Settled::Now(decision) => {
                self.standing = Standing::of(&decision);
                self.cost = actual;
                Some(decision)
            }
            Settled::Sent => {
                self.cost = actual;
                None
            }
            Settled::NotSent => {
                self.standing = Some(standing);
                None
            }
            Settled::Failed => None,
        }
    }
}

/// Whether the limit at `index` of the request's set still has the algorithm and
/// period it had when the request was charged: a give-back to a limit reloaded to
/// another would take from state its receipt does not name.
fn limit_unchanged(shared: &Shared, view: &View, index: usize) -> bool {
    let current = shared.limiter.current();
    let current: &crate::limiter::Set = &current;
    if std::ptr::eq(current, Arc::as_ptr(&view.set)) {
        return true;
    }
    let charged = &view.set.limits[index];
    current.find(charged.name()).is_some_and(|now| {
        now.get_algorithm() == charged.get_algorithm()
            && now.quota().period() == charged.quota().period()
    })
}

/// A request's charges, one per checked policy, in check order.
#[derive(Default)]
pub(crate) struct Account {
    charges: Few<Charge>,
}

impl Account {
    /// The account of a request whose `checks` were decided as `decisions` (in the
    /// same order): each admitted and charged decision's receipt stands.
    pub(crate) fn open(checks: &[LayerCheck], decisions: &[Decision]) -> Self {
        let charges = match (checks, decisions) {
            // One policy: inline, as the checks are.
            ([check], [decision]) => Few::One([Charge::new(check, Some(decision))]),
            _ => checks
                .iter()
                .enumerate()
                .map(|(i, check)| Charge::new(check, decisions.get(i)))
                .collect(),
        };
        Self { charges }
    }

    /// Whether anything of the request's charges still stands.
    pub(crate) fn stands(&self) -> bool {
        self.charges.iter().any(|charge| charge.standing.is_some())
    }

    /// The charge of the policy at `index` of the request's view.
    pub(crate) fn charge(&mut self, index: usize) -> Option<&mut Charge> {
        self.charges.iter_mut().find(|charge| charge.index == index)
    }

    /// The charges, in check order.
    pub(crate) fn charges(&mut self) -> impl Iterator<Item = &mut Charge> {
        self.charges.iter_mut()
    }

    /// Gives back every charge that still stands: the request will not be served.
    pub(crate) fn give_back_all(&mut self, shared: &Shared, view: &View) {
        for charge in self.charges.iter_mut() {
            charge.give_back(shared, view);
        }
    }

    /// Gives back the charges of the shadowed policies at the positions `which`
    /// picks (in check order): past the hold cap, the shadowed policies whose delay
    /// would have held the request. The enforced ones keep their charges.
    pub(crate) fn give_back_shadowed(
        &mut self,
        shared: &Shared,
        view: &View,
        which: impl Fn(usize) -> bool,
    ) {
        for (position, charge) in self.charges.iter_mut().enumerate() {
            if !charge.enforced && which(position) {
                charge.give_back(shared, view);
            }
        }
    }
}

/// A request's account: its own while only its future uses it; shared once
/// something else with a claim on it outlives that (a meter, byte meters, a gRPC
/// status awaited in the trailers).
pub(crate) enum Ledger {
    Own(Account),
    Shared(SharedAccount),
}

/// An account shared by the request's future, its meters and its response body.
#[derive(Clone)]
pub(crate) struct SharedAccount(Arc<Mutex<Account>>);

impl SharedAccount {
    /// The account, locked. Never held across an await; a store call made under it
    /// answers at once or is sent to the background.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Account> {
        // A give-back takes the standing out before the store call: a panic cannot
        // leave a charge to be given back twice.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for Ledger {
    fn default() -> Self {
        Self::Own(Account::default())
    }
}

impl Ledger {
    /// Runs `f` on the account.
    pub(crate) fn with<R>(&mut self, f: impl FnOnce(&mut Account) -> R) -> R {
        match self {
            Self::Own(account) => f(account),
            Self::Shared(shared) => f(&mut shared.lock()),
        }
    }

    /// The account, shared from now on (one allocation, the first time).
    pub(crate) fn share(&mut self) -> SharedAccount {
        match self {
            Self::Shared(shared) => shared.clone(),
            Self::Own(account) => {
                let shared = SharedAccount(Arc::new(Mutex::new(std::mem::take(account))));
                *self = Self::Shared(shared.clone());
                shared
            }
        }
    }
}
