//! What every clone of the layer and of its service shares: the limiter and the
//! options, and the count of requests held for their turn.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;
use http::request::Parts;

use crate::layer::fail_mode::FailMode;
use crate::layer::headers::{HeaderPlan, HeaderStyle};
use crate::layer::limiter_calls::{LayerCheck, Pending};
use crate::layer::rejection::Rejection;
use crate::layer::slot_lines::SlotLines;
use crate::limiter::Set;
use crate::observe::{Held, Operation, PolicyMetrics, StoreMetrics};
use crate::{Key, Limiter, Policy};

/// A request predicate of `allow` / `deny`.
pub(crate) type Predicate = dyn Fn(&Parts) -> bool + Send + Sync;

/// Everything the service needs, shared by every clone of the layer and the service.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) limiter: Limiter,
    pub(crate) style: HeaderStyle,
    /// Whether draft-11 headers carry each member's partition key (`pk`).
    pub(crate) partition_keys: bool,
    /// The limiter's current limits paired with the layer's request rules (see
    /// [`Paired`]). Shared by every clone of the layer, replaced whole by
    /// [`reload`](crate::RateLimitLayer::reload).
    pub(crate) paired: Arc<ArcSwap<Paired>>,
    /// Held by a reload, so that two reloads of this layer install in one order.
    pub(crate) reloading: Arc<Mutex<()>>,
    /// The view of the current pairing in this layer's style, rebuilt when a reload
    /// replaces the pairing.
    pub(crate) view: Arc<ArcSwap<View>>,
    pub(crate) rejection: Rejection,
    pub(crate) fail_mode: FailMode,
    /// Shadow mode for every policy, whatever its own rollout.
    pub(crate) shadow: bool,
    /// An admitted caller left with less than this share of its capacity counts as
    /// near its limit (`tollgate_near_limit_total`).
    pub(crate) near_limit: f64,
    /// The store's metric handles: call latency, requests let through on failure.
    pub(crate) store_metrics: StoreMetrics,
    /// Whether admitted requests carry their [`Decisions`](crate::layer::Decisions).
    pub(crate) decisions_extension: bool,
    pub(crate) allow: Vec<Arc<Predicate>>,
    pub(crate) deny: Vec<Arc<Predicate>>,
    /// The most requests held at once: for their turn (a leaky-bucket delay, a place
    /// in wait mode) and waiting for an in-flight slot, together.
    pub(crate) max_held: usize,
    /// The layer's wait mode: hold requests that will fit within this long (a
    /// policy's own [`Policy::wait`] overrides it).
    pub(crate) wait: Option<std::time::Duration>,
    /// How many are held now (both kinds), shared by every clone.
    pub(crate) held: Arc<AtomicUsize>,
    /// The most requests held at once for one (policy, key).
    pub(crate) max_held_per_key: usize,
    /// How many are held now per (policy, key), shared by every clone; a key with
    /// none held has no entry, so it never holds more entries than `max_held`.
    pub(crate) held_per_key: Arc<Mutex<HeldPerKey>>,
    /// Requests waiting for an in-flight slot, in line per key (wait mode).
    pub(crate) slot_lines: Arc<SlotLines>,
    /// Rules added in code by policy name, applied again to every reloaded set.
    pub(crate) hooks: super::hooks::Hooks,
    /// `count_when` charges awaiting their outcome, per (policy, key), shared by every
    /// clone (see `pending_outcomes`).
    pub(crate) pending_outcomes: Arc<super::pending_outcomes::PendingOutcomes>,
}

/// Held requests per (policy name, key).
pub(crate) type HeldPerKey = HashMap<Holder, usize, foldhash::fast::RandomState>;

/// Whom a held request is held for: the policy that holds it and its key.
pub(crate) type Holder = (&'static str, Key);

/// One set of the limiter's limits, each paired with its request rules: what a layer
/// reload installs whole, and what the layer re-pairs (by name, with the rules it
/// had) when the limiter's limits are reloaded on their own. Shared by every clone of
/// the layer, whatever its options.
pub(crate) struct Paired {
    pub(crate) set: Arc<Set>,
    /// One per limit of `set`, in its order.
    pub(crate) policies: Vec<Policy>,
}

impl Paired {
    /// Pairs each limit of `set` with the rules of the policy of its name in `rules`,
    /// or the default rules; `partition_keys` for the size of the headers they make.
    pub(crate) fn new(set: Arc<Set>, rules: &[Policy], partition_keys: bool) -> Self {
        let policies: Vec<Policy> = set
            .limits
            .iter()
            .map(
                |limit| match rules.iter().find(|p| p.name() == limit.name()) {
                    Some(policy) => policy.with_limit(limit.clone()),
                    None => Policy::from(limit.clone()),
                },
            )
            .collect();
        if let Err(error) = crate::layer::headers::check_size(&policies, partition_keys) {
            crate::observe::headers_too_long(&error);
        }
        Self { set, policies }
    }

    /// Whether requests are decided under this pairing while the limiter's current
    /// set is `current`: it is that set, or one a layer reload prepared and is about
    /// to install (a newer generation).
    #[inline]
    fn serves(&self, current: &Set) -> bool {
        std::ptr::eq(Arc::as_ptr(&self.set), current) || self.set.generation > current.generation
    }
}

/// What the layer decides one request with: one [`Paired`] set (a reload while the
/// request runs does not change it) and the headers planned for it in this layer's
/// style.
pub(crate) struct View {
    pub(crate) paired: Arc<Paired>,
    pub(crate) set: Arc<Set>,
    pub(crate) headers: HeaderPlan,
    /// Each policy's metric handles, in the policies' order.
    pub(crate) metrics: Box<[PolicyMetrics]>,
    /// Whether a policy is metered (settled to a reported actual, or counting body
    /// bytes): only then does an admitted request get a meter.
    pub(crate) meters: bool,
}

impl View {
    pub(crate) fn new(style: HeaderStyle, partition_keys: bool, paired: Arc<Paired>) -> Self {
        let headers = HeaderPlan::new(style, &paired.policies, partition_keys);
        let metrics = paired
            .policies
            .iter()
            .map(|policy| PolicyMetrics::new(policy.name()))
            .collect();
        let meters = paired.policies.iter().any(Policy::meters);
        Self {
            set: Arc::clone(&paired.set),
            paired,
            headers,
            metrics,
            meters,
        }
    }

    pub(crate) fn policies(&self) -> &[Policy] {
        &self.paired.policies
    }
}

impl Shared {
    /// How long requests of `policy` may wait for their place, if they wait.
    pub(crate) fn wait_of(&self, policy: &Policy) -> Option<std::time::Duration> {
        policy.get_wait().or(self.wait)
    }

    /// The decision for `checks` under `view`: a reservation when the request is
    /// limited by one policy that waits, else the all-or-nothing check.
    pub(crate) fn decide(&self, view: &View, checks: &[LayerCheck]) -> Pending {
        if let [check] = checks
            && let Some(max_wait) = self.wait_of(&view.policies()[check.index])
        {
            let timer = self.store_metrics.start(Operation::Reserve);
            return self.limiter.decide_waiting(
                &view.set,
                check,
                max_wait,
                (&self.store_metrics, timer),
            );
        }
        self.decide_now(view, checks)
    }

    /// The all-or-nothing decision for `checks` under `view`, never waiting.
    pub(crate) fn decide_now(&self, view: &View, checks: &[LayerCheck]) -> Pending {
        let timer = self.store_metrics.start(Operation::Decide);
        self.limiter
            .decide(&view.set, checks, (&self.store_metrics, timer))
    }

    /// The set to decide a request under, paired with its rules: the layer's
    /// current pairing while the limiter's set is that one, or one the layer has
    /// prepared and is about to install (a newer generation); else the limiter's
    /// limits were reloaded on their own, and they are paired with the rules the layer
    /// had, by name, and published for every clone. One atomic load and a pointer
    /// compare in the common case.
    #[inline]
    pub(crate) fn paired(&self) -> Arc<Paired> {
        let paired = self.paired.load_full();
        if paired.serves(&self.limiter.current()) {
            return paired;
        }
        // Read again, after the limiter's set: a layer reload stores its pairing
        // before it installs the set, so a set installed by one is seen here with its
        // pairing (or a newer one).
        let paired = self.paired.load_full();
        let current_set = self.limiter.snapshot();
        if paired.serves(&current_set) {
            return paired;
        }
        let repaired = Arc::new(Paired::new(
            current_set,
            &paired.policies,
            self.partition_keys,
        ));
        // Only over the pairing it was made from: a layer reload that stored a newer
        // one meanwhile keeps it.
        let _ = self.paired.compare_and_swap(&paired, Arc::clone(&repaired));
        repaired
    }

    /// The view of the current pairing in this layer's style: the cached one while
    /// the pairing is the same, else a new one, planned once per reload and cached for
    /// the requests after it.
    #[inline]
    pub(crate) fn view(&self) -> Arc<View> {
        let cached = self.view.load_full();
        {
            // The common case, without taking a reference to the pairing.
            let paired = self.paired.load();
            if Arc::ptr_eq(&cached.paired, &paired) && paired.serves(&self.limiter.current()) {
                return cached;
            }
        }
        let paired = self.paired();
        if Arc::ptr_eq(&cached.paired, &paired) {
            return cached;
        }
        let view = Arc::new(View::new(self.style, self.partition_keys, paired));
        self.view.store(Arc::clone(&view));
        view
    }
}

/// One of the layer's places for a held request, given back when dropped: when the
/// request is passed on, or when its caller goes away while it waits. The charge
/// made for the request's place stands in the request's account, which gives it
/// back if the request is dropped before its turn (its client left).
pub(crate) struct HeldSlot {
    _count: HeldCount,
    per_key: Arc<Mutex<HeldPerKey>>,
    holder: Holder,
    /// Counts the request in `tollgate_held` while it is held.
    _metrics: Held,
}

impl HeldSlot {
    /// A place for a request of `holder`, if fewer than `shared.max_held` are taken
    /// and fewer than `shared.max_held_per_key` by `holder`.
    pub(crate) fn take(shared: &Shared, holder: Holder, metrics: &PolicyMetrics) -> Option<Self> {
        // The per-key count and the total change together under the map's lock: a
        // held request is rare next to a decision, and waits far longer than this.
        let mut per_key = shared
            .held_per_key
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mine = per_key.get(&holder).copied().unwrap_or(0);
        if mine >= shared.max_held_per_key {
            return None;
        }
        let count = HeldCount::take(&shared.held, shared.max_held)?;
        per_key.insert(holder, mine + 1);
        Some(Self {
            _count: count,
            per_key: shared.held_per_key.clone(),
            holder,
            _metrics: metrics.held(),
        })
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        let mut per_key = self.per_key.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = per_key.get_mut(&self.holder) {
            *count -= 1;
            if *count == 0 {
                per_key.remove(&self.holder);
            }
        }
    }
}

/// One request counted in the layer's one budget of held requests
/// ([`max_held`](crate::RateLimitLayer::max_held), what
/// [`held`](crate::RateLimitLayer::held) reports): a request held for its turn, or
/// waiting in line for an in-flight slot. Given back when dropped.
pub(crate) struct HeldCount(Arc<AtomicUsize>);

impl HeldCount {
    /// A place in `held`, if fewer than `max` are taken.
    pub(crate) fn take(held: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        // Only the count matters, not what other memory it orders: relaxed is enough
        // for a compare-and-swap to never let two requests take the last place.
        held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            (now < max).then_some(now + 1)
        })
        .ok()?;
        Some(Self(Arc::clone(held)))
    }
}

impl Drop for HeldCount {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
