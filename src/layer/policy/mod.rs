//! [`Policy`]: a [`Limit`] plus the rules that find a request's key and cost.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::key::{self, Extractor};
use crate::layer::{Costs, Rollout};
use crate::{ConfigError, Limit, Quota};

mod in_flight;
mod limit;
mod metering;
mod rollout;

use metering::MeterRules;

/// What a policy does with a request its key extractor finds no key for.
///
/// ```
/// use tollgate::{Policy, Quota};
/// use tollgate::layer::MissingKey;
/// let strict = Policy::new("api", Quota::per_second(5))?.on_missing_key(MissingKey::Reject);
/// assert_eq!(strict.missing_key(), MissingKey::Reject);
/// assert_eq!(MissingKey::default(), MissingKey::Skip);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MissingKey {
    /// The policy does not apply to the request (the default).
    #[default]
    Skip,
    /// The request is rejected as if the policy had denied it.
    Reject,
}

type CountWhen = dyn Fn(StatusCode) -> bool + Send + Sync;

/// A [`Limit`] (a named [`Quota`] counted by an [`Algorithm`](crate::Algorithm), default
/// [`Algorithm::Gcra`](crate::Algorithm::Gcra)) and, for the Tower layer, how a request's key and cost are found.
///
/// The name identifies the policy in `check` calls, response headers, logs and Redis
/// keys: 1 to 64 printable ASCII characters. State is kept per (policy, key), and two
/// limiters with an identical policy (same name, quota and algorithm) on one store
/// share that state, just as two processes on one Redis do.
///
/// In the layer, a policy without [`key`](Policy::key) limits all requests together
/// ([`key::global`]), every request costs 1 unless [`costs`](Policy::costs) says
/// otherwise, and every response counts unless [`count_when`](Policy::count_when)
/// says otherwise.
///
/// ```
/// use tollgate::{Algorithm, Policy, Quota};
///
/// let policy = Policy::new("api", Quota::per_minute(100).with_burst(20)?)?
///     .algorithm(Algorithm::TokenBucket);
/// assert_eq!(policy.name(), "api");
/// assert_eq!(policy.quota().burst(), 20);
///
/// assert!(Policy::new("", Quota::per_second(1)).is_err());
/// assert!(Policy::new("tab\there", Quota::per_second(1)).is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Policy {
    limit: Limit,
    pub(super) key: Extractor,
    pub(super) costs: Costs,
    /// Whether `costs` were set on this policy (not taken from the policy it stands
    /// in for, see `scope.rs`).
    pub(super) own_costs: bool,
    missing_key: MissingKey,
    count_when: Option<Arc<CountWhen>>,
    quota_from: Option<Arc<QuotaFrom>>,
    /// At most this many requests of one key at once.
    in_flight: Option<NonZeroU32>,
    /// Whether the quota is charged (not for [`Policy::in_flight_only`]).
    rate: bool,
    /// Hold a request that will fit within this long instead of rejecting it.
    wait: Option<Duration>,
    /// How long a request refused only for charges still awaiting their `count_when`
    /// outcome waits for them (`Policy::wait_for_outcomes`, in `pending_outcomes/`).
    pub(crate) outcome_wait: Duration,
    /// Other processes share the store: how often a request with nothing pending here
    /// looks again before a refusal counts (`Policy::poll_other_processes`).
    pub(crate) outcome_poll: Option<Duration>,
    /// The routes this policy applies to (cost 1 each, 0 elsewhere); `None`: all
    /// (see `scope.rs`).
    pub(super) scope: Option<Costs>,
    /// Whether `scope` was set on this policy (not taken from the policy it stands in
    /// for, see `scope.rs`).
    pub(super) own_routes: bool,
    /// Applies only to requests this extractor finds no key for (see `scope.rs`).
    pub(super) unless_key: Option<Extractor>,
    /// The policy this one stands in for (a file's `fallback_for`), by name: its key,
    /// and its routes and costs where this policy has none of its own, are read again
    /// whenever the set changes (see `scope.rs`).
    pub(super) stands_in_for: Option<&'static str>,
    /// Which callers this policy rejects; the others it only watches.
    rollout: Rollout,
    /// How an admitted request's charge is settled to what it actually cost.
    metering: MeterRules,
}

/// A policy's `quota_from` rule.
type QuotaFrom = dyn Fn(&http::request::Parts) -> Option<Quota> + Send + Sync;

impl Policy {
    /// A policy named `name` allowing `quota`, counted with GCRA until
    /// [`algorithm`](Policy::algorithm) says otherwise.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("login", "5/min".parse()?)?;
    /// assert_eq!(policy.quota().limit(), 5);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(name: impl AsRef<str>, quota: Quota) -> Result<Self, ConfigError> {
        Limit::new(name, quota).map(Self::from)
    }

    /// The limit this policy counts.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(5))?;
    /// assert_eq!(policy.limit().name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// Finds each request's key with `extractor` (default: [`key::global`], one key
    /// for all requests).
    ///
    /// ```
    /// use tollgate::{Key, Policy, Quota};
    /// let per_user = Policy::new("per-user", Quota::per_minute(60))?
    ///     .key(|parts: &http::request::Parts| parts.headers.get("x-user").map(|v| Key::from(v.as_bytes())));
    /// let (parts, _) = http::Request::get("/").header("x-user", "42").body(())?.into_parts();
    /// assert_eq!(per_user.key_of(&parts), Some(Key::from("42")));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn key(mut self, extractor: impl Into<Extractor>) -> Self {
        self.key = extractor.into();
        self
    }

    /// Prices requests with `costs` (default: 1 each). A cost above the policy's
    /// capacity is reported by [`LimiterBuilder::build`](crate::LimiterBuilder::build).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// use tollgate::layer::Costs;
    /// let policy = Policy::new("api", Quota::per_minute(60))?
    ///     .costs(|parts: &http::request::Parts| if parts.method == http::Method::GET { 1 } else { 2 });
    /// let (post, _) = http::Request::post("/").body(())?.into_parts();
    /// assert_eq!(policy.cost_of(&post), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn costs(mut self, costs: impl Into<Costs>) -> Self {
        self.costs = costs.into();
        self.own_costs = true;
        self
    }

    /// What to do with requests that have no key for this policy (default: skip).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// use tollgate::layer::MissingKey;
    /// let p = Policy::new("api", Quota::per_second(1))?.on_missing_key(MissingKey::Reject);
    /// assert_eq!(p.missing_key(), MissingKey::Reject);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn on_missing_key(mut self, missing_key: MissingKey) -> Self {
        self.missing_key = missing_key;
        self
    }

    /// Counts only responses whose status satisfies `predicate`; the cost of the
    /// others is refunded (e.g. count only failed logins).
    ///
    /// For gRPC, whose responses are all HTTP 200, the predicate sees the HTTP status
    /// conventionally paired with the call's `grpc-status` (`UNAUTHENTICATED` → 401,
    /// `PERMISSION_DENIED` → 403, `NOT_FOUND` → 404, `RESOURCE_EXHAUSTED` → 429, `OK` →
    /// 200, …), read from the headers or, at the end of the body, from the trailers.
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::{Policy, Quota};
    /// let failed_logins = Policy::new("login", Quota::per_hour(5))?
    ///     .count_when(|status| status == StatusCode::UNAUTHORIZED);
    /// assert!(failed_logins.counts(StatusCode::UNAUTHORIZED));
    /// assert!(!failed_logins.counts(StatusCode::OK));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn count_when<F>(mut self, predicate: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.count_when = Some(Arc::new(predicate));
        self
    }

    /// Counts each request with the quota `quota_from` finds for it (its caller's
    /// plan), `None` meaning the limit's own. The idiomatic pairing is an
    /// authentication layer in front that puts the caller's plan in the request
    /// extensions. A caller's usage carries over when its quota changes (see
    /// [`Limiter::check_with`](crate::Limiter::check_with)), and its response headers
    /// state its own quota (`RateLimit-Policy: "api";q=10000;w=60`).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// #[derive(Clone, Copy)]
    /// enum Plan { Free, Pro }
    /// let api = Policy::new("api", Quota::per_minute(100))?.quota_from(|parts: &http::request::Parts| {
    ///     match parts.extensions.get::<Plan>()? {
    ///         Plan::Free => None, // the limit's own quota
    ///         Plan::Pro => Some(Quota::per_minute(10_000)),
    ///     }
    /// });
    /// let (mut parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(api.quota_of(&parts), None);
    /// parts.extensions.insert(Plan::Pro);
    /// assert_eq!(api.quota_of(&parts), Some(Quota::per_minute(10_000)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn quota_from<F>(mut self, quota: F) -> Self
    where
        F: Fn(&http::request::Parts) -> Option<Quota> + Send + Sync + 'static,
    {
        self.quota_from = Some(Arc::new(quota));
        self
    }

    /// The caller's own quota for a request, if [`quota_from`](Policy::quota_from)
    /// finds one; `None` means the limit's own quota.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(policy.quota_of(&parts), None);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn quota_of(&self, parts: &http::request::Parts) -> Option<Quota> {
        self.quota_from.as_ref().and_then(|quota| quota(parts))
    }

    /// Whether callers may have quotas of their own (their headers may be longer).
    pub(crate) fn has_quota_from(&self) -> bool {
        self.quota_from.is_some()
    }

    /// Waits instead of rejecting: a request this policy would deny, but whose place
    /// (behind the key's earlier waiters) is at most `max_wait` away, is held until
    /// then and served, instead of getting a 429 (see
    /// [`Limiter::reserve`](crate::Limiter::reserve)). Beyond `max_wait` it is rejected
    /// at once and charged nothing. Overrides the layer's
    /// [`RateLimitLayer::wait`](crate::RateLimitLayer::wait). Held requests count
    /// toward the layer's [`max_held`](crate::RateLimitLayer::max_held) and, per key,
    /// [`max_held_per_key`](crate::RateLimitLayer::max_held_per_key); a caller that
    /// goes away while held, or while its reservation is on its way to the store,
    /// gives back the charge made for its place, by its receipt. Applies to requests
    /// this policy limits alone (a request several policies limit is decided
    /// all-or-nothing, now).
    ///
    /// With an [`in_flight`](Policy::in_flight) limit, a request that finds no slot
    /// free waits for one, up to `max_wait`: within one process, the requests
    /// waiting for one key's slots get them in the order they came; across
    /// processes sharing a store, a freed slot goes to whichever asks first (each
    /// waiter asks again within 25 ms), so a waiter can be overtaken by other
    /// processes' requests, at most until its `max_wait` runs out (then a 429).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Policy, Quota};
    /// let upstream = Policy::new("upstream", Quota::per_second(10))?.wait(Duration::from_secs(5));
    /// assert_eq!(upstream.get_wait(), Some(Duration::from_secs(5)));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn wait(mut self, max_wait: Duration) -> Self {
        self.wait = Some(max_wait);
        self
    }

    /// How long this policy holds a request instead of rejecting it, if it does (see
    /// [`wait`](Policy::wait)).
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.get_wait(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_wait(&self) -> Option<std::time::Duration> {
        self.wait
    }

    /// This policy's request rules over another limit (a reload that changes only
    /// the limits keeps each policy's rules).
    pub(crate) fn with_limit(&self, limit: Limit) -> Self {
        Self {
            limit,
            ..self.clone()
        }
    }

    /// The key of a request under this policy, if it has one.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(policy.key_of(&parts), tollgate::key::global().extract(&parts));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_of(&self, parts: &http::request::Parts) -> Option<crate::Key> {
        self.key.extract(parts)
    }

    /// What a request costs under this policy: what its [`costs`](Policy::costs) say,
    /// and at least 1 for a policy that is [`metered`](Policy::metered) or counts body
    /// bytes: a cost of 0 is not sent to the store, and a request admitted without a
    /// charge could not be settled (an estimate of 0 would buy any work for nothing).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(policy.cost_of(&parts), 1);
    /// let free = policy.costs(|_: &http::request::Parts| 0);
    /// assert_eq!(free.cost_of(&parts), 0);
    /// assert_eq!(free.metered().cost_of(&parts), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn cost_of(&self, parts: &http::request::Parts) -> u32 {
        let cost = self.costs.cost(parts);
        if self.meters() { cost.max(1) } else { cost }
    }

    /// What this policy does with requests that have no key.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// assert_eq!(policy.missing_key(), tollgate::layer::MissingKey::Skip);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn missing_key(&self) -> MissingKey {
        self.missing_key
    }

    /// Whether a response with `status` counts against this policy (always, unless
    /// [`count_when`](Policy::count_when) was set).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// assert!(policy.counts(http::StatusCode::INTERNAL_SERVER_ERROR));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn counts(&self, status: StatusCode) -> bool {
        self.count_when.as_ref().is_none_or(|counts| counts(status))
    }

    /// Whether some responses may be refunded (a `count_when` predicate is set).
    pub(crate) fn refunds_some_responses(&self) -> bool {
        self.count_when.is_some()
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.limit.validate()?;
        self.validate_metering()?;
        if !self.rate {
            // Costs price the quota, which this policy never charges.
            return Ok(());
        }
        self.costs.validate(self.name(), self.capacity())
    }
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Policy")
            .field("limit", &self.limit)
            .field("key", &self.key)
            .field("costs", &self.costs)
            .field("missing_key", &self.missing_key)
            .field("count_when", &self.count_when.is_some())
            .field("quota_from", &self.quota_from.is_some())
            .field("in_flight", &self.in_flight)
            .field("rate", &self.rate)
            .field("wait", &self.wait)
            .field("outcome_wait", &self.outcome_wait)
            .field("outcome_poll", &self.outcome_poll)
            .field("rollout", &self.rollout)
            .field("metered", &self.metering.metered)
            .field(
                "settle_from_response",
                &self.metering.from_response.is_some(),
            )
            .field("max_actual", &self.metering.max_actual)
            .field("request_bytes", &self.metering.request_bytes)
            .field("response_bytes", &self.metering.response_bytes)
            .finish_non_exhaustive()
    }
}

impl From<Limit> for Policy {
    /// The limit with the layer's default rules: one key for all requests, every
    /// request costing 1, every response counting.
    fn from(limit: Limit) -> Self {
        Self {
            limit,
            key: key::global(),
            costs: Costs::new(),
            own_costs: false,
            missing_key: MissingKey::Skip,
            count_when: None,
            quota_from: None,
            in_flight: None,
            rate: true,
            wait: None,
            outcome_wait: crate::layer::pending_outcomes::DEFAULT_OUTCOME_WAIT,
            outcome_poll: None,
            scope: None,
            own_routes: false,
            unless_key: None,
            stands_in_for: None,
            rollout: Rollout::ENFORCED,
            metering: MeterRules::default(),
        }
    }
}

impl AsRef<Limit> for Policy {
    fn as_ref(&self) -> &Limit {
        &self.limit
    }
}
