//! [`RateLimitLayer`]: the Tower layer and its options.

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use tower_layer::Layer;

use crate::layer::RateLimit;
use crate::layer::fail_mode::FailMode;
use arc_swap::ArcSwap;

use crate::layer::builder::{LayerBuilder, validate};
use crate::layer::shared::Shared;
use crate::layer::shared::{Paired, View};
use crate::layer::{HeaderStyle, Rejection};
use crate::observe::StoreMetrics;
use crate::{ConfigError, Limiter, Policy};

/// Rate limiting for any Tower service over `http` requests: axum routers, tonic
/// servers, hyper stacks.
///
/// For each request, every policy of the layer finds the request's key and cost;
/// the policies are checked all-or-nothing. Admitted requests reach the inner service
/// (leaky-bucket decisions after their delay) with their [`Decisions`](crate::layer::Decisions)
/// in the request extensions; rejected ones get a 429 (gRPC: `RESOURCE_EXHAUSTED`)
/// without their body being read. Every limited response carries rate-limit headers.
///
/// Clones of the layer, and of the services it builds, share one [`Limiter`] and one set
/// of policies: a clone never gets fresh quota. The layer adds no error type:
/// `RateLimit<S>::Error` is `S::Error`, so it drops into an axum `Router` without
/// `HandleErrorLayer`.
///
/// ```
/// use tollgate::{Policy, Quota, RateLimitLayer};
/// use tollgate::layer::{HeaderStyle, FailMode, Rejection};
/// let layer = RateLimitLayer::builder()
///     .policy(Policy::new("api", Quota::per_minute(100))?)
///     .build()?
///     .headers(HeaderStyle::Draft11)
///     .rejection(Rejection::Problem)
///     .on_store_error(FailMode::Open)
///     .allow(|parts: &http::request::Parts| parts.uri.path() == "/health");
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// # Per-route limits
///
/// A layer limits whatever it wraps. For one route alone, wrap that route: axum's
/// `route_layer` (on a `MethodRouter`, or on a `Router` for the routes added before
/// it) runs the layer only for requests that matched, so a 404 costs nothing. Under a
/// router-wide layer, both count the route's requests: the outer layer decides first
/// (and has charged a request the inner one then rejects), the handler's
/// [`Decisions`](crate::layer::Decisions) hold the outer layer's decisions then the
/// inner's, and the response's draft-11 headers list both.
///
/// ```
/// use axum::{Router, routing::get};
/// use tollgate::{Policy, Quota, RateLimitLayer, key};
///
/// let everyone = RateLimitLayer::builder()
///     .policy(Policy::new("api", Quota::per_minute(100))?.key(key::peer_ip()))
///     .build()?;
/// let exports = RateLimitLayer::builder()
///     .policy(Policy::new("export", Quota::per_hour(10))?.key(key::peer_ip()))
///     .build()?;
/// let app: Router = Router::new()
///     .route("/export", get(|| async { "exported" }).route_layer(exports)) // this route only
///     .route("/", get(|| async { "hello" }))
///     .layer(everyone); // every route
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// `examples/per_handler.rs` runs this, with a handler that checks a
/// [`Limiter`] of its own once it knows the cost, and answers a denial with
/// [`Rejection::reject`](crate::layer::Rejection::reject).
///
/// # Deployment caveat
///
/// Keys are only as trustworthy as their source. Behind a proxy, use
/// [`key::client_ip`](crate::key) with the proxies you trust, not `peer_ip`, or every
/// client shares the proxy's quota; never trust forwarding headers from the open
/// internet.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl RateLimitLayer {
    /// The default of [`max_held`](RateLimitLayer::max_held): 1024, the default limit on
    /// open files of a Linux process (`ulimit -n`). Each held request keeps its
    /// connection open; a server that held more than that would run out of
    /// descriptors for new connections before it reached the cap.
    ///
    /// ```
    /// assert_eq!(tollgate::RateLimitLayer::DEFAULT_MAX_HELD, 1024);
    /// ```
    pub const DEFAULT_MAX_HELD: usize = 1024;

    /// The default of [`max_held_per_key`](RateLimitLayer::max_held_per_key): 128, an
    /// eighth of [`DEFAULT_MAX_HELD`](RateLimitLayer::DEFAULT_MAX_HELD), so that it
    /// takes at least eight callers to fill the layer's places.
    ///
    /// ```
    /// assert_eq!(tollgate::RateLimitLayer::DEFAULT_MAX_HELD_PER_KEY, 128);
    /// ```
    pub const DEFAULT_MAX_HELD_PER_KEY: usize = Self::DEFAULT_MAX_HELD / 8;

    /// The default of [`near_limit`](RateLimitLayer::near_limit): 0.1, a caller left
    /// with less than a tenth of its capacity.
    ///
    /// ```
    /// assert_eq!(tollgate::RateLimitLayer::DEFAULT_NEAR_LIMIT, 0.1);
    /// ```
    pub const DEFAULT_NEAR_LIMIT: f64 = 0.1;

    /// A layer whose policies are built with `policy`, over a store given with
    /// [`store`](LayerBuilder::store) (default: a new [`MemoryStore`](crate::MemoryStore)):
    /// the usual way in. The layer's [`limiter`](RateLimitLayer::limiter) holds their
    /// limits, for handlers and operators.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer, key};
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::new("api", Quota::per_minute(100))?.key(key::header("x-api-key")?))
    ///     .policy(Policy::new("global", Quota::per_second(1000))?.key(key::global()))
    ///     .build()?;
    /// assert_eq!(layer.policies().len(), 2);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn builder() -> LayerBuilder {
        LayerBuilder::default()
    }

    /// A layer deciding with `limiter`, every limit with the default request rules
    /// (each request keyed by its peer IP, cost 1), writing draft-11 headers, rejecting
    /// with a text 429, failing open. For rules of your own, use
    /// [`builder`](RateLimitLayer::builder) or [`reload`](RateLimitLayer::reload).
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota, RateLimitLayer};
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(10))?).build()?;
    /// let layer = RateLimitLayer::new(limiter);
    /// assert_eq!(layer.policies()[0].name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(limiter: Limiter) -> Self {
        Self::with_rules(limiter, &[], false)
    }

    /// A layer over `limiter` whose limits take their request rules from `rules` by
    /// name (checked by the caller); `partition_keys` as
    /// [`LayerBuilder::partition_keys`].
    pub(super) fn with_rules(limiter: Limiter, rules: &[Policy], partition_keys: bool) -> Self {
        let style = HeaderStyle::default();
        let paired = Arc::new(Paired::new(limiter.snapshot(), rules, partition_keys));
        let view = View::new(style, partition_keys, Arc::clone(&paired));
        let store_metrics = StoreMetrics::new(&**limiter.store());
        Self {
            shared: Arc::new(Shared {
                limiter,
                near_limit: Self::DEFAULT_NEAR_LIMIT,
                store_metrics,
                style,
                partition_keys,
                paired: Arc::new(ArcSwap::new(paired)),
                reloading: Arc::default(),
                view: Arc::new(ArcSwap::from_pointee(view)),
                rejection: Rejection::default(),
                fail_mode: FailMode::default(),
                shadow: false,
                decisions_extension: true,
                allow: Vec::new(),
                deny: Vec::new(),
                max_held: Self::DEFAULT_MAX_HELD,
                wait: None,
                held: Arc::default(),
                max_held_per_key: Self::DEFAULT_MAX_HELD_PER_KEY,
                held_per_key: Arc::default(),
                slot_lines: Arc::default(),
                hooks: super::hooks::Hooks::default(),
                pending_outcomes: Arc::default(),
            }),
        }
    }

    /// This layer, applying `hooks` to every set [`reload`](Self::reload) brings.
    pub(super) fn with_hooks(mut self, hooks: super::hooks::Hooks) -> Self {
        self.shared().hooks = hooks;
        self
    }

    /// The layer's policies now: each limit of its limiter with its request rules, in
    /// the limiter's order (after a reload, the new set's).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let layer = RateLimitLayer::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(layer.policies()[0].name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn policies(&self) -> Vec<Policy> {
        self.shared.view().policies().to_vec()
    }

    /// The policy named `name`.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let layer = RateLimitLayer::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert!(layer.policy("api").is_some());
    /// assert!(layer.policy("other").is_none());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn policy(&self, name: &str) -> Option<Policy> {
        self.shared
            .view()
            .policies()
            .iter()
            .find(|p| p.name() == name)
            .cloned()
    }

    /// Replaces the layer's policies (their limits in the limiter, and their request
    /// rules) with `policies`, atomically: each request is decided under one set, old
    /// or new, never a limit of one with the rules of the other. Usage carries over as
    /// for [`Limiter::reload`]; an invalid set is refused whole, with the errors of
    /// [`LayerBuilder::build`], and the old one stays. Shared by every clone of the
    /// layer.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer, key};
    /// let layer = RateLimitLayer::builder().policy(Policy::new("api", Quota::per_minute(100))?).build()?;
    /// layer.reload([
    ///     Policy::new("api", Quota::per_minute(1000))?.key(key::header("x-api-key")?),
    /// ])?;
    /// assert_eq!(layer.policy("api").map(|p| p.quota()), Some(Quota::per_minute(1000)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn reload(&self, policies: impl IntoIterator<Item = Policy>) -> Result<(), ConfigError> {
        let policies = self.shared.hooks.apply(policies.into_iter().collect())?;
        validate(
            &policies,
            &**self.shared.limiter.store(),
            self.shared.partition_keys,
        )?;
        let shared = &self.shared;
        let _one_at_a_time = shared
            .reloading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let limits = policies.iter().map(|p| p.limit().clone()).collect();
        let set = shared.limiter.prepare(limits)?;
        // The pairing first, the limiter's set after: in between, requests find the
        // pairing's set newer than the limiter's and decide under the pairing, whole
        // (see `Shared::paired`); operators' calls see the old set until the install.
        shared.paired.store(Arc::new(Paired::new(
            Arc::clone(&set),
            &policies,
            shared.partition_keys,
        )));
        shared.limiter.install(&set);
        crate::observe::policies_installed(&policies);
        Ok(())
    }

    /// Whether the draft-11 headers carry partition keys (see
    /// [`LayerBuilder::partition_keys`]).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let layer = RateLimitLayer::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert!(!layer.get_partition_keys());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_partition_keys(&self) -> bool {
        self.shared.partition_keys
    }

    fn shared(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.shared)
    }

    /// Which rate-limit headers to write (default [`HeaderStyle::Draft11`]).
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).headers(tollgate::layer::HeaderStyle::None);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        let shared = self.shared();
        shared.style = style;
        shared.view = Arc::new(ArcSwap::from_pointee(View::new(
            style,
            shared.partition_keys,
            shared.paired(),
        )));
        self
    }

    /// How HTTP rejections look (default: a short text 429). Accepts a
    /// [`Rejection`] or a closure building the response.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).rejection(tollgate::layer::Rejection::Json);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn rejection(mut self, rejection: impl Into<Rejection>) -> Self {
        self.shared().rejection = rejection.into();
        self
    }

    /// What to do when the store fails (default [`FailMode::Open`]).
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).on_store_error(tollgate::layer::FailMode::Closed);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn on_store_error(mut self, mode: FailMode) -> Self {
        self.shared().fail_mode = mode;
        self
    }

    /// Shadow mode for every policy: decide, charge, log, count and write headers, but
    /// never reject. For trying limits on production traffic before enforcing them.
    ///
    /// A switch over the policies' own rollout: while it is on, no policy rejects,
    /// whatever its [`Policy::enforce`](crate::Policy::enforce) share; while it is off
    /// (the default), each policy enforces the callers its rollout says. What shadow
    /// mode charges (exactly what enforcement would, so that turning it off shows no
    /// jump) is told at [`Policy::enforce`](crate::Policy::enforce).
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).shadow(true);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shared().shadow = shadow;
        self
    }

    /// Counts an admitted request in `tollgate_near_limit_total` when it leaves its
    /// caller with less than `share` of the policy's capacity (default
    /// [`DEFAULT_NEAR_LIMIT`](RateLimitLayer::DEFAULT_NEAR_LIMIT), a tenth): the
    /// callers about to be rejected, before they are. A share outside `[0, 1]` is a
    /// [`ConfigError`] quoting it. Feature `metrics`.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).near_limit(0.2)?;
    /// assert!(layer.clone().near_limit(1.5).unwrap_err().to_string().contains("1.5"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn near_limit(mut self, share: f64) -> Result<Self, ConfigError> {
        if !(0.0..=1.0).contains(&share) {
            return Err(ConfigError::new(format!(
                "invalid near-limit share {share}: expected a fraction of capacity from 0 to 1, \
                 e.g. 0.1 for callers with less than a tenth left"
            )));
        }
        self.shared().near_limit = share;
        Ok(self)
    }

    /// Whether admitted requests carry their [`Decisions`](crate::layer::Decisions) in the
    /// request extensions (default `true`). Turning it off saves every admitted request
    /// a copy of its decisions and an insertion into (and later removal from) the
    /// extensions map, for services whose handlers never read them. Headers, rejections
    /// and `count_when` refunds do not depend on it.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).decisions_extension(false);
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn decisions_extension(mut self, insert: bool) -> Self {
        self.shared().decisions_extension = insert;
        self
    }

    /// The most requests the layer holds at once for their leaky-bucket turn, across
    /// every clone of the layer and every key (default
    /// [`DEFAULT_MAX_HELD`](RateLimitLayer::DEFAULT_MAX_HELD)).
    ///
    /// Each policy bounds how long one key's queue waits
    /// ([`Policy::max_delay`](crate::Policy::max_delay)), but callers choose their
    /// keys: with keys from client addresses, `B` places per key and a hundred
    /// thousand addresses, the queues could hold millions of requests, each with its
    /// connection and unread body. Past this cap, a request the store admitted with a
    /// delay is rejected at once with 429 (gRPC `RESOURCE_EXHAUSTED`), `Retry-After` its
    /// delay, and its charge refunded; a request admitted without a delay is never
    /// affected. When only shadowed policies asked for the delay, those give their
    /// places back and the request is passed on at once; the enforced policies keep
    /// their charges. 0 holds nothing: only requests served at once pass. One budget
    /// for every request the layer holds: requests waiting in wait mode for an
    /// in-flight slot count in it too.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).max_held(100);
    /// assert_eq!(layer.held(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_held(mut self, max: usize) -> Self {
        self.shared().max_held = max;
        self
    }

    /// The most requests the layer holds at once for one caller: one key of the
    /// policy that holds them (default
    /// [`DEFAULT_MAX_HELD_PER_KEY`](RateLimitLayer::DEFAULT_MAX_HELD_PER_KEY)), within
    /// [`max_held`](RateLimitLayer::max_held) for all.
    ///
    /// [`max_held`](RateLimitLayer::max_held) is one budget for every key: without
    /// this bound one caller in wait mode (10/s held for 2 min: 1 200 requests) would
    /// take every place, and every other caller's delayed requests would be 429s. Past
    /// it, that caller's next delayed request is rejected as past `max_held` is (429,
    /// `Retry-After` its delay, its charge given back); other callers still find
    /// places. A request held by several policies counts for the one whose delay holds
    /// it longest. A client layer whose one key (one upstream host) should hold more
    /// raises it, up to `max_held`.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).max_held(1_000).max_held_per_key(10);
    /// assert_eq!(layer.held(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_held_per_key(mut self, max: usize) -> Self {
        self.shared().max_held_per_key = max;
        self
    }

    /// Wait mode: every policy holds a request that will fit within `max_wait`
    /// instead of rejecting it (a policy's own [`Policy::wait`](crate::Policy::wait)
    /// overrides this). The request's place is reserved at once, behind the key's
    /// earlier waiters, in one store call; it is served when its place comes; beyond
    /// `max_wait` it is rejected at once and charged nothing. Held requests count toward
    /// [`max_held`](RateLimitLayer::max_held) and
    /// [`max_held_per_key`](RateLimitLayer::max_held_per_key); a caller that goes away
    /// while held gives its place back, the layer's and the queue's: the charge made
    /// for it is given back by its receipt, also when the caller left while the
    /// reservation was still on its way to the store. On a client, this keeps outgoing calls under an upstream's limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter).wait(Duration::from_secs(2));
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn wait(mut self, max_wait: std::time::Duration) -> Self {
        self.shared().wait = Some(max_wait);
        self
    }

    /// How many requests the layer (with its clones) holds now: for their turn (a
    /// leaky-bucket delay, a place in wait mode) or waiting for an in-flight slot;
    /// at most [`max_held`](RateLimitLayer::max_held).
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter);
    /// assert_eq!(layer.held(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn held(&self) -> usize {
        self.shared.held.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many callers (policy, key) of `count_when` policies have, in this process,
    /// a request being decided or charges awaiting their outcome (see
    /// [`Policy::wait_for_outcomes`](crate::Policy::wait_for_outcomes)); bounded.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// assert_eq!(tollgate::RateLimitLayer::new(limiter).awaiting_outcomes(), 0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn awaiting_outcomes(&self) -> usize {
        self.shared.pending_outcomes.tracked()
    }

    /// The layer's limiter, shared with every clone of the layer and its services: for
    /// the operations that act on it while the server runs (peeks, resets, blocks,
    /// refunds, [`Limiter::reload`]). A reload of the limiter alone keeps each limit's
    /// request rules, by name (a new name gets the default rules); to replace the rules
    /// too, use the layer's [`reload`](RateLimitLayer::reload).
    ///
    /// ```
    /// use tollgate::{Limit, Policy, Quota, RateLimitLayer};
    /// use tollgate::layer::Costs;
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::new("api", Quota::per_second(10))?.costs(Costs::new().default(2)))
    ///     .build()?;
    /// layer.limiter().reload([Limit::new("api", Quota::per_second(20))?])?;
    /// let api = layer.policy("api").expect("still there");
    /// assert_eq!(api.quota(), Quota::per_second(20));
    /// let (parts, ()) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(api.cost_of(&parts), 2, "its cost rule stays");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &Limiter {
        &self.shared.limiter
    }

    /// Requests matching `predicate` skip every policy (health checks, internal
    /// callers). Checked after [`deny`](RateLimitLayer::deny).
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter)
    ///     .allow(|parts: &http::request::Parts| parts.uri.path() == "/health");
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn allow<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.shared().allow.push(Arc::new(predicate));
        self
    }

    /// Requests matching `predicate` are rejected with 403 (gRPC `PERMISSION_DENIED`)
    /// before any policy is checked.
    ///
    /// ```
    /// # let limiter = tollgate::Limiter::builder().limit(tollgate::Limit::new("api", tollgate::Quota::per_second(10))?).build()?;
    /// let layer = tollgate::RateLimitLayer::new(limiter)
    ///     .deny(|parts: &http::request::Parts| parts.headers.contains_key("x-banned"));
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn deny<F>(mut self, predicate: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.shared().deny.push(Arc::new(predicate));
        self
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::with_shared(inner, self.shared.clone())
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.shared.limiter)
            .field("rejection", &self.shared.rejection)
            .field("fail_mode", &self.shared.fail_mode)
            .field("shadow", &self.shared.shadow)
            .field("near_limit", &self.shared.near_limit)
            .field("decisions_extension", &self.shared.decisions_extension)
            .field("partition_keys", &self.shared.partition_keys)
            .field("max_held", &self.shared.max_held)
            .field("max_held_per_key", &self.shared.max_held_per_key)
            .finish_non_exhaustive()
    }
}
