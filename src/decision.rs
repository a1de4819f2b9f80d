//! [`Decision`]: the one result shape every algorithm on every store returns, and the
//! [`Receipt`] of what it charged (and, in `settled.rs`, of what a settle leaves
//! standing).

mod settled;

use std::num::NonZeroU64;
use std::time::Duration;

use crate::Quota;
pub(crate) use settled::{ExtraAt, Settlement};

/// Whether a request may pass under one limit, and where its key stands.
///
/// Durations are rounded up to whole microseconds. For a multi-limit
/// [`check_all`](crate::Limiter::check_all) that another limit denied, `allowed` is this
/// limit's own answer but nothing was charged, so `remaining` is the current value.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Key, Limiter, MemoryStore, Limit, Quota};
/// use tollgate::clock::ManualClock;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// let limiter = Limiter::builder()
///     .limit(Limit::new("api", Quota::per_second(2))?)
///     .store(MemoryStore::with_clock(clock))
///     .build()?;
/// let key = Key::from("alice");
/// let first = limiter.check("api", &key, 1).await?;
/// assert!(first.allowed);
/// assert_eq!((first.capacity, first.remaining), (2, 1));
/// limiter.check("api", &key, 1).await?;
/// let third = limiter.check("api", &key, 1).await?;
/// assert!(!third.allowed);
/// assert_eq!(third.retry_after, Some(Duration::from_millis(500)));
/// assert_eq!(third.limit, "api");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Two decisions are equal when everything they say is equal: the [`Receipt`] of an
/// admitted request is bookkeeping, not part of the answer, so a decision from one
/// store equals the same decision from another (or through a
/// [`Fallback`](crate::store::Fallback)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request is admitted (and, for an admitted request, charged).
    pub allowed: bool,
    /// The key's capacity: the quota's limit for window algorithms, its burst for the
    /// token bucket, GCRA and leaky bucket. `remaining` never exceeds it.
    pub capacity: u64,
    /// Capacity left after this request (for a rejection: the current value).
    pub remaining: u64,
    /// Time until, with nothing else arriving, `remaining` is back to `capacity`.
    pub reset_after: Duration,
    /// For a rejection that could pass later: the shortest wait after which the same
    /// request would be admitted. `None` when admitted or when the cost exceeds the
    /// capacity (it can never fit).
    pub retry_after: Option<Duration>,
    /// How long to hold an admitted request before serving it (leaky bucket only).
    pub delay: Duration,
    /// The name of the limit that made this decision.
    pub limit: &'static str,
    /// The quota it was decided under: the limit's own, or the caller's when one was
    /// given ([`Limiter::check_with`](crate::Limiter::check_with), a policy's
    /// `quota_from`). Response headers state this one.
    pub quota: Quota,
    /// For a blocked key (by [`Limiter::block`](crate::Limiter::block) or a tripped
    /// [`Penalty`](crate::Penalty)): the time until the block ends, which is also
    /// `retry_after` and `reset_after`; `None` when the key is not blocked. A blocked
    /// key denies every request, even a cost-0 check (a peek says `allowed: false`).
    pub blocked_for: Option<Duration>,
    /// The trips in a row of the limit's [`Penalty`](crate::Penalty) that the key's
    /// record remembers ([`Penalty::remember`](crate::Penalty::remember)), this
    /// decision's own trip included: the next trip's block is
    /// [`Penalty::next_block`](crate::Penalty::next_block) of it (or ask
    /// [`Limiter::offences`](crate::Limiter::offences)). 0 when the penalty remembers
    /// none, and in a decision made without reading the key's record (spent from a
    /// [`LeasedStore`](crate::store::LeasedStore)'s lease, or one a limit of a
    /// [`check_all`](crate::Limiter::check_all) was not evaluated for).
    pub trips: u32,
    /// What this decision charged, for taking it back later; `None` when it charged
    /// nothing.
    pub(crate) receipt: Option<Receipt>,
}

impl Decision {
    /// What this decision charged: `Some` only when the request was admitted *and*
    /// charged (a cost above 0, in a check that every limit admitted), or, for a
    /// decision [`Limiter::settle`](crate::Limiter::settle) returned, what stands of
    /// that charge (`None` once settled to 0). Hand it back with
    /// [`Limiter::refund_charge`](crate::Limiter::refund_charge) or settle it with
    /// [`Limiter::settle`](crate::Limiter::settle), which take the decision itself.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(1))?).build()?;
    /// let key = Key::from("alice");
    /// let admitted = limiter.check("api", &key, 1).await?;
    /// assert_eq!(admitted.receipt().map(|r| r.cost()), Some(1));
    /// assert!(limiter.check("api", &key, 1).await?.receipt().is_none()); // denied
    /// assert!(limiter.check("api", &key, 0).await?.receipt().is_none()); // a peek
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn receipt(&self) -> Option<Receipt> {
        self.receipt
    }

    /// Whether this limit was evaluated for the request. A request that several
    /// limits decide all-or-nothing can be denied, without a round trip, by one
    /// limit's cached denial (the Redis store's denial cache, or a block a
    /// [`Fallback`](crate::store::Fallback) saw on its primary): the other
    /// limits were then not evaluated, nothing was charged to them, and nothing is
    /// known of their keys — their decisions say `allowed`, `capacity` 0 and
    /// `remaining` 0, and the layer leaves them out of the response headers.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(1))?).build()?;
    /// assert!(limiter.check("api", &Key::from("alice"), 1).await?.evaluated());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn evaluated(&self) -> bool {
        self.capacity > 0
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        // Spelled out so that a new public field cannot be left out of the comparison.
        let Self {
            allowed,
            capacity,
            remaining,
            reset_after,
            retry_after,
            delay,
            limit,
            quota,
            blocked_for,
            trips,
            receipt: _,
        } = self;
        *allowed == other.allowed
            && *capacity == other.capacity
            && *remaining == other.remaining
            && *reset_after == other.reset_after
            && *retry_after == other.retry_after
            && *delay == other.delay
            && *limit == other.limit
            && *quota == other.quota
            && *blocked_for == other.blocked_for
            && *trips == other.trips
    }
}

impl Eq for Decision {}

/// Which charge a refund takes back: made by the store when it charges, carried by the
/// [`Decision`], handed back through
/// [`Limiter::refund_charge`](crate::Limiter::refund_charge) (or
/// [`Store::refund_charge`](crate::store::Store::refund_charge)).
///
/// A counter cannot tell one charge from another, so a refund without a receipt can
/// only take back the key's newest charges: a refund that arrives after its charge's
/// window has rolled over would take back a charge of the *new* window. A receipt says
/// when its charge stops counting (the decision's reset instant, on the store's clock)
/// and when it was made, so each algorithm returns only what of that very charge it
/// still counts: nothing once the charge's window has passed or time has repaid it.
/// It also records which store took the charge, through any
/// [`Fallback`](crate::store::Fallback)s, so the refund goes there and nowhere else.
///
/// It names the limit it was charged under too (its name, algorithm with its
/// parameters, and period): a charge whose limit's algorithm or period changed since
/// (a [`reload`](crate::Limiter::reload)) counts in state the limit no longer uses, and
/// gives nothing back.
///
/// Opaque; `Copy`. Each receipt gives back at most once on the memory store and
/// Redis, and through a `Fallback` or a `LeasedStore` of them: a second refund or settle of it (a retry after a timeout whose first try
/// may have run, a decision settled twice) gives nothing back and charges nothing. A
/// settle returns a receipt of its own, for what of the charge stands after it:
/// settle again with that one.
///
/// ```
/// use tollgate::{Key, Limiter, Limit, Quota};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(5))?).build()?;
/// let decision = limiter.check("api", &Key::from("alice"), 3).await?;
/// let receipt = decision.receipt().expect("admitted and charged");
/// assert_eq!(receipt.cost(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy)]
pub struct Receipt {
    /// The instant (µs since the epoch, the deciding store's clock) the store decided
    /// at.
    at_us: u64,
    /// The instant (µs, same clock) from which, with nothing else arriving, the charge
    /// no longer counts: the decision's reset instant. Every algorithm's reset instant
    /// right after a charge names that charge (its window, sub-window, log entry or the
    /// end of its debt), so it identifies the charge on every store alike.
    until_us: u64,
    cost: NonZeroU64,
    /// The [`Fallback`](crate::store::Fallback) legs that led to the store that took the
    /// charge: a stack of bits (1: insurance) under a leading 1, the innermost
    /// `Fallback` lowest; 0 when too deep to record.
    route: u64,
    /// How much of `cost` is counted somewhere this receipt does not name, after a
    /// settle that charged more ([`Receipt::settled`]): never given back by it. At most
    /// `cost`; 0 for a charge as a check made it.
    beyond: u64,
    /// The lease that spent this charge from its slice (a
    /// [`LeasedStore`](crate::store::LeasedStore)'s, numbered once per process); 0 for
    /// a charge a store made itself. Two charges decided in one µs carry the same
    /// instants: this tells a lease's own from another's.
    lease: u64,
    /// This receipt's own number, drawn when it is made (see [`fresh_nonce`]): what a
    /// store records once it gave back by it, so that no copy of the receipt gives back
    /// again. Two charges decided at one instant carry the same instants; never the
    /// same nonce.
    nonce: u64,
    /// The limit the charge was made under ([`Limit::table`](crate::Limit): its name,
    /// algorithm and period), stamped as the decision is made; [`NO_TABLE`] until
    /// then.
    table: u32,
}

/// Two receipts are equal when they say the same of the same charge: the nonce, which
/// only tells one receipt's give-back from another's, is left out (two stores' receipts
/// for the same charge compare equal).
impl PartialEq for Receipt {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Receipt {}

/// As equality: the nonce is left out, so that copies of one answer print alike.
impl std::fmt::Debug for Receipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receipt")
            .field("at_us", &self.at_us)
            .field("until_us", &self.until_us)
            .field("cost", &self.cost)
            .field("route", &self.route)
            .field("beyond", &self.beyond)
            .field("lease", &self.lease)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl std::hash::Hash for Receipt {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

/// A receipt not stamped with its limit yet.
const NO_TABLE: u32 = u32::MAX;

/// A number no other receipt of this process (nor, with overwhelming probability, of
/// another process sharing a Redis) carries: a per-thread counter started at a random
/// point. No lock, no shared atomic: made on every admitted charge.
#[inline]
fn fresh_nonce() -> u64 {
    let nonce = NEXT_NONCE.get();
    if nonce == 0 {
        return first_nonce();
    }
    NEXT_NONCE.set(nonce.wrapping_add(1).max(1));
    nonce
}

thread_local! {
    /// The next nonce of this thread's receipts; 0 until its first.
    static NEXT_NONCE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A thread's first nonce, at a random point: kept out of line, so that the common
/// case is a read and a write of the thread's counter.
#[cold]
#[inline(never)]
fn first_nonce() -> u64 {
    let nonce = fastrand::u64(1..);
    NEXT_NONCE.set(nonce.wrapping_add(1).max(1));
    nonce
}

/// An empty route: no `Fallback` on the way.
const NO_ROUTE: u64 = 1;

impl Receipt {
    /// The receipt of a charge of `cost` decided at `at_us` that counts until
    /// `until_us`; `None` for a cost of 0 (nothing was charged).
    #[inline]
    pub(crate) fn new(at_us: u64, until_us: u64, cost: u64) -> Option<Self> {
        Some(Self {
            at_us,
            until_us,
            cost: NonZeroU64::new(cost)?,
            route: NO_ROUTE,
            beyond: 0,
            lease: 0,
            nonce: fresh_nonce(),
            table: NO_TABLE,
        })
    }

    /// The same receipt, naming the limit (by [`Limit::table`](crate::Limit)) its charge
    /// was made under.
    #[inline]
    pub(crate) fn under(self, table: u32) -> Self {
        Self { table, ..self }
    }

    /// Whether the charge was made under the limit whose table is `table`: the same
    /// name, algorithm (with its parameters) and period. A charge made under another
    /// counts in state that limit does not use, and gives nothing back under it.
    pub(crate) fn charged_under(&self, table: u32) -> bool {
        self.table == table
    }

    /// Until when (µs, the store's clock) a give-back by this receipt may still find
    /// something of its charge, under a limit of period `period_us`: one period past
    /// its reset instant. The reset instant names the charge where it was decided,
    /// which may be later than [`at_us`](Receipt::at_us) on a clock that stepped back;
    /// the window algorithms keep counting a charge a while after it (the sliding
    /// window's previous window, a sub-window, a log entry), never a period longer.
    /// How long a store remembers that it gave back by it.
    pub(crate) fn counts_until(&self, period_us: u64) -> u64 {
        self.until_us.saturating_add(period_us)
    }

    /// What equality compares: everything but the nonce.
    fn parts(&self) -> (u64, u64, NonZeroU64, u64, u64, u64, u32) {
        let Self {
            at_us,
            until_us,
            cost,
            route,
            beyond,
            lease,
            nonce: _,
            table,
        } = *self;
        (at_us, until_us, cost, route, beyond, lease, table)
    }

    /// The receipt's own number: what a store records once it gave back by it.
    pub(crate) fn nonce(&self) -> u64 {
        self.nonce
    }

    /// What was charged.
    ///
    /// ```
    /// use tollgate::{Key, Limiter, Limit, Quota};
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_minute(5))?).build()?;
    /// let decision = limiter.check("api", &Key::from("alice"), 2).await?;
    /// assert_eq!(decision.receipt().map(|r| r.cost()), Some(2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost(&self) -> u64 {
        self.cost.get()
    }

    /// The same charge, for `cost` units of it: a lease hands each request it admits
    /// its slice's receipt for that request's cost. `None` for a cost of 0. A receipt
    /// of its own (a fresh nonce): each request's part gives back once.
    pub(crate) fn with_cost(self, cost: u64) -> Option<Self> {
        Some(Self {
            cost: NonZeroU64::new(cost)?,
            beyond: self.beyond.min(cost),
            nonce: fresh_nonce(),
            ..self
        })
    }

    /// Whether `other` names the same charge, whatever cost either gives back.
    pub(crate) fn same_charge(&self, other: &Self) -> bool {
        (self.at_us, self.until_us, self.route) == (other.at_us, other.until_us, other.route)
    }

    /// The same receipt, for units spent from lease number `lease`.
    pub(crate) fn spent_from_lease(self, lease: u64) -> Self {
        Self { lease, ..self }
    }

    /// The lease whose units this receipt's charge spent; 0 for none.
    pub(crate) fn lease(&self) -> u64 {
        self.lease
    }

    pub(crate) fn at_us(&self) -> u64 {
        self.at_us
    }

    pub(crate) fn until_us(&self) -> u64 {
        self.until_us
    }

    /// The same receipt, one `Fallback` further out: `insurance` says which of its two
    /// stores took the charge.
    pub(crate) fn routed(self, insurance: bool) -> Self {
        let route = if self.route == 0 || self.route.leading_zeros() == 0 {
            // Too deep to record (63 nested `Fallback`s): unroutable, so dropped.
            0
        } else {
            (self.route << 1) | u64::from(insurance)
        };
        Self { route, ..self }
    }

    /// The outermost `Fallback` leg (`true`: insurance) and the receipt as the store
    /// behind it gave it; `None` when the receipt records no such leg.
    pub(crate) fn unrouted(self) -> Option<(bool, Self)> {
        if self.route <= NO_ROUTE {
            return None;
        }
        let rest = Self {
            route: self.route >> 1,
            ..self
        };
        Some((self.route & 1 == 1, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::Receipt;

    #[test]
    fn routes_unwind_in_the_order_they_were_recorded() {
        let made = Receipt::new(1, 2, 3).expect("a charge");
        // An inner Fallback's insurance took it, under an outer Fallback's primary.
        let routed = made.routed(true).routed(false);
        let (outer, rest) = routed.unrouted().expect("outer leg");
        assert!(!outer);
        let (inner, rest) = rest.unrouted().expect("inner leg");
        assert!(inner);
        assert_eq!(rest, made);
        assert_eq!(rest.unrouted(), None);
    }

    #[test]
    fn a_route_too_deep_to_record_is_unroutable() {
        let mut receipt = Receipt::new(1, 2, 3).expect("a charge");
        for _ in 0..64 {
            receipt = receipt.routed(true);
        }
        assert_eq!(receipt.unrouted(), None);
    }

    #[test]
    fn a_decision_is_no_larger_for_its_trips() {
        // `trips` sits in the padding beside `allowed`: a decision as it was before
        // it, field by field, is as large (decisions are made and moved on every
        // request).
        #[allow(dead_code)]
        struct Before {
            allowed: bool,
            capacity: u64,
            remaining: u64,
            reset_after: std::time::Duration,
            retry_after: Option<std::time::Duration>,
            delay: std::time::Duration,
            limit: &'static str,
            quota: crate::Quota,
            blocked_for: Option<std::time::Duration>,
            receipt: Option<Receipt>,
        }
        assert_eq!(
            std::mem::size_of::<super::Decision>(),
            std::mem::size_of::<Before>()
        );
    }

    #[test]
    fn nothing_charged_has_no_receipt() {
        assert_eq!(Receipt::new(1, 2, 0), None);
    }
}
