//! [`Policy`]: a [`Limit`] plus the rules that find a request's key and cost.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::key::{self, Extractor};
use crate::layer::{Costs, Rollout, Unit};
use crate::{Algorithm, ConfigError, Key, Limit, Quota};

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

/// A [`Limit`] (a named [`Quota`] counted by an [`Algorithm`], default
/// [`Algorithm::Gcra`]) and, for the Tower layer, how a request's key and cost are found.
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
    costs: Costs,
    missing_key: MissingKey,
    count_when: Option<Arc<CountWhen>>,
    quota_from: Option<Arc<QuotaFrom>>,
    /// At most this many requests of one key at once.
    in_flight: Option<NonZeroU32>,
    /// Whether the quota is charged (not for [`Policy::in_flight_only`]).
    rate: bool,
    /// Hold a request that will fit within this long instead of rejecting it.
    wait: Option<Duration>,
    /// The routes this policy applies to (cost 1 each, 0 elsewhere); `None`: all
    /// (see `scope.rs`).
    pub(super) scope: Option<Costs>,
    /// Applies only to requests this extractor finds no key for (see `scope.rs`).
    pub(super) unless_key: Option<Extractor>,
    /// The policy this one stands in for (a file's `fallback_for`), by name: its key
    /// and routes are read again whenever the set changes (see `scope.rs`).
    pub(super) stands_in_for: Option<&'static str>,
    /// Which callers this policy rejects; the others it only watches.
    rollout: Rollout,
    /// How an admitted request's charge is settled to what it actually cost.
    metering: MeterRules,
}

/// How a policy's charges are settled to what requests actually cost.
#[derive(Clone, Default)]
struct MeterRules {
    /// Whether an admitted request's charge is settled to the actual the inner
    /// service reports through its [`Meter`](crate::layer::Meter).
    metered: bool,
    /// Reads the actual from the response head (`settle_from_response`).
    from_response: Option<Arc<FromResponse>>,
    /// The most a request of this policy is settled to.
    max_actual: Option<u64>,
    /// Counts request body bytes as they stream.
    request_bytes: bool,
    /// Counts response body bytes as they stream.
    response_bytes: bool,
}

/// A policy's `quota_from` rule.
type QuotaFrom = dyn Fn(&http::request::Parts) -> Option<Quota> + Send + Sync;

/// A policy's `settle_from_response` rule.
type FromResponse = dyn Fn(&http::response::Parts) -> Option<u64> + Send + Sync;

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

    /// Shadow mode for this policy alone (`true`), or enforcement for every caller
    /// (`false`, the default): see [`enforce`](Policy::enforce) for what shadow mode
    /// decides, charges and reports.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let trial = Policy::new("search", Quota::per_minute(30))?.shadow(true);
    /// assert_eq!(trial.get_rollout().share(), 0.0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn shadow(self, shadow: bool) -> Self {
        self.rollout(if shadow {
            Rollout::SHADOW
        } else {
            Rollout::ENFORCED
        })
    }

    /// Enforces this policy for a stable `share` of its callers (`0.1`: one in ten,
    /// picked by their key's fingerprint, so each caller always sees one behaviour;
    /// see [`Rollout`]), and runs it in shadow mode for the rest. A share outside
    /// `[0, 1]` is a [`ConfigError`] quoting it.
    ///
    /// **Shadow mode** decides every request as enforcement would, charges what
    /// enforcement would charge, writes the same rate-limit headers, logs and counts
    /// the denials (outcome `shadow_rejected`), and never rejects: a request it would
    /// have rejected is served. What is charged, exactly:
    ///
    /// - A request every policy admits is charged to every policy, shadowed or not.
    /// - A request a shadowed policy would reject is charged nothing by that policy,
    ///   as under enforcement (rejected requests consume nothing). So its usage, its
    ///   `remaining` and its headers are what enforcement would show, and switching
    ///   enforcement on shows no jump: the first enforced request sees the state the
    ///   shadowed ones left.
    /// - The request's enforced policies still count it, as if the shadowed policy
    ///   were not there: it is served, so it spends their quota (a second, all-or-nothing
    ///   store call for them alone, made only in this case). A request an enforced
    ///   policy rejects is rejected, and charges nothing anywhere.
    /// - A shadowed penalty box counts the shadowed denials and trips as it would; the
    ///   block it sets is only watched too, until the policy is enforced.
    /// - A shadowed in-flight limit takes a free slot as it would, and lets a request
    ///   that finds none run without one (it never holds a request for a slot).
    /// - A request without a key, under `on_missing_key(Reject)`, is rejected only by
    ///   a policy that enforces every caller.
    ///
    /// The layer-wide [`RateLimitLayer::shadow`](crate::RateLimitLayer::shadow)
    /// overrides this: while it is on, no policy rejects. Reload the policies
    /// ([`RateLimitLayer::reload`](crate::RateLimitLayer::reload), or the `enforce`
    /// key of a [`config`](crate::config) file) to move the share.
    ///
    /// ```
    /// use tollgate::{Key, Policy, Quota};
    /// let api = Policy::new("api", Quota::per_minute(100))?.enforce(0.1)?;
    /// assert_eq!(api.get_rollout().share(), 0.1);
    /// let alice = Key::from("alice");
    /// assert_eq!(api.enforces(&alice), api.enforces(&alice)); // stable
    /// let err = Policy::new("api", Quota::per_minute(100))?.enforce(2.0).unwrap_err();
    /// assert!(err.to_string().contains("policy \"api\": invalid enforcement share 2"), "{err}");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn enforce(self, share: f64) -> Result<Self, ConfigError> {
        let rollout = Rollout::enforce(share).map_err(|e| {
            ConfigError::new(format!("policy \"{}\": {}", self.name(), e.message()))
        })?;
        Ok(self.rollout(rollout))
    }

    /// Sets which callers this policy enforces (see [`enforce`](Policy::enforce)).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, layer::Rollout};
    /// let p = Policy::new("api", Quota::per_second(5))?.rollout(Rollout::enforce(0.5)?);
    /// assert_eq!(p.get_rollout(), Rollout::enforce(0.5)?);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn rollout(mut self, rollout: Rollout) -> Self {
        self.rollout = rollout;
        self
    }

    /// Which callers this policy enforces ([`Rollout::ENFORCED`] unless set).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, layer::Rollout};
    /// assert_eq!(Policy::new("api", Quota::per_second(5))?.get_rollout(), Rollout::ENFORCED);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_rollout(&self) -> Rollout {
        self.rollout
    }

    /// Whether this policy rejects the caller with `key`'s requests when they are over
    /// its limit (else it only watches them): see [`Rollout::enforces`].
    ///
    /// ```
    /// use tollgate::{Key, Policy, Quota};
    /// let p = Policy::new("api", Quota::per_second(5))?;
    /// assert!(p.enforces(&Key::from("anyone")));
    /// assert!(!p.shadow(true).enforces(&Key::from("anyone")));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn enforces(&self, key: &Key) -> bool {
        self.rollout.enforces(key)
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

    /// Counts this policy with `algorithm`. Invalid combinations (a custom burst on a
    /// window algorithm, buckets that do not divide the period) are reported by
    /// [`LimiterBuilder::build`](crate::LimiterBuilder::build), naming the policy.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// let policy = Policy::new("search", Quota::per_minute(60))?.algorithm(Algorithm::SlidingWindowLog);
    /// assert_eq!(policy.get_algorithm(), Algorithm::SlidingWindowLog);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.limit = self.limit.algorithm(algorithm);
        self
    }

    /// The longest a [`LeakyBucket`](Algorithm::LeakyBucket) request of this policy
    /// may be held for its turn: see [`Limit::max_delay`].
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate::Policy::new("queue", tollgate::Quota::per_second(1))?
    ///     .algorithm(tollgate::Algorithm::LeakyBucket)
    ///     .max_delay(Duration::from_secs(2));
    /// assert_eq!(policy.get_max_delay(), Duration::from_secs(2));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.limit = self.limit.max_delay(max_delay);
        self
    }

    /// Puts this policy's keys in a penalty box: see [`Limit::penalty`] and
    /// [`Penalty`](crate::Penalty).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Penalty, Policy, Quota};
    /// let penalty = Penalty::after(5).within(Duration::from_secs(60)).block_for(Duration::from_secs(900));
    /// let policy = Policy::new("login", Quota::per_minute(10))?.penalty(penalty);
    /// assert_eq!(policy.limit().get_penalty(), Some(penalty));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn penalty(mut self, penalty: crate::Penalty) -> Self {
        self.limit = self.limit.penalty(penalty);
        self
    }

    /// The longest a leaky-bucket request of this policy may be held (see
    /// [`Limit::max_delay`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_minute(10))?;
    /// assert_eq!(policy.get_max_delay(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_max_delay(&self) -> Duration {
        self.limit.get_max_delay()
    }

    /// The policy's name.
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.name(), "api");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn name(&self) -> &'static str {
        self.limit.name()
    }

    /// The policy's quota.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// assert_eq!(Policy::new("api", Quota::per_second(3))?.quota(), Quota::per_second(3));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.limit.quota()
    }

    /// The algorithm counting this policy.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// assert_eq!(Policy::new("api", Quota::per_second(3))?.get_algorithm(), Algorithm::Gcra);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_algorithm(&self) -> Algorithm {
        self.limit.get_algorithm()
    }

    /// The most cost one request can ever be admitted with: the burst for the token
    /// bucket, GCRA and leaky bucket, the limit otherwise.
    ///
    /// ```
    /// use tollgate::{Algorithm, Policy, Quota};
    /// let p = Policy::new("api", Quota::per_second(10).with_burst(3)?)?;
    /// assert_eq!(p.capacity(), 3);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.limit.capacity()
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

    /// Refuses metering rules that cannot work together: a reported actual and a
    /// count of bytes (two figures for one charge), a cap with nothing to cap, and
    /// metering on a policy that charges no quota.
    fn validate_metering(&self) -> Result<(), ConfigError> {
        let bytes = self.metering.request_bytes || self.metering.response_bytes;
        let problem = if self.metering.metered && bytes {
            "counts body bytes and also settles to a reported actual: choose one"
        } else if self.metering.max_actual.is_some() && !self.metering.metered {
            "has max_actual but is not metered (Policy::metered or settle_from_response)"
        } else if (self.metering.metered || bytes) && !self.rate {
            "is metered but charges no quota (in_flight_only)"
        } else {
            return Ok(());
        };
        Err(ConfigError::new(format!(
            "invalid policy \"{}\": it {problem}",
            self.name()
        )))
    }

    /// Settles each admitted request's charge to the actual cost the inner service
    /// reports through the request's [`Meter`](crate::layer::Meter) (in the request
    /// extensions): the request is admitted on an estimate, its
    /// [`costs`](Policy::costs) (e.g. a closure reading the request's `max_tokens`),
    /// and charged what the work used once that is known. See
    /// [`Meter`](crate::layer::Meter) for when the settle happens, what the response
    /// headers show, and the bound a caller reaches by under-estimating;
    /// [`max_actual`](Policy::max_actual) caps a report, and
    /// [`in_flight`](Policy::in_flight) how many under-estimated requests one caller
    /// runs at once.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, key};
    /// use tollgate::layer::Costs;
    /// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?
    ///     .key(key::header("x-api-key")?)
    ///     .costs(Costs::from_fn(|parts: &http::request::Parts| {
    ///         // the estimate: the caller's max_tokens, read by a layer in front
    ///         parts.headers.get("x-max-tokens")
    ///             .and_then(|v| v.to_str().ok()?.parse().ok())
    ///             .unwrap_or(1_000)
    ///     }))
    ///     .metered();
    /// assert!(tokens.is_metered());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn metered(mut self) -> Self {
        self.metering.metered = true;
        self
    }

    /// Whether this policy settles its requests' charges to their actual cost
    /// ([`metered`](Policy::metered) or [`settle_from_response`](Policy::settle_from_response)).
    ///
    /// ```
    /// assert!(!tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.is_metered());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn is_metered(&self) -> bool {
        self.metering.metered
    }

    /// Reads a request's actual cost from its response head (an upstream's usage
    /// header, say) and settles the charge to it as soon as the head arrives, before
    /// the headers are written: on the memory store the response's rate-limit headers
    /// then show where the caller stands after the settle. `None` leaves the actual
    /// to the request's [`Meter`](crate::layer::Meter) (the policy is
    /// [`metered`](Policy::metered)); a figure read here is final, and later reports
    /// to the meter do not change it.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?
    ///     .settle_from_response(|parts: &http::response::Parts| {
    ///         parts.headers.get("x-usage-tokens")?.to_str().ok()?.parse().ok()
    ///     });
    /// let (head, _) = http::Response::builder().header("x-usage-tokens", "240").body(())?.into_parts();
    /// assert_eq!(tokens.actual_from_response(&head), Some(240));
    /// assert!(tokens.is_metered());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn settle_from_response<F>(mut self, actual: F) -> Self
    where
        F: Fn(&http::response::Parts) -> Option<u64> + Send + Sync + 'static,
    {
        self.metering.from_response = Some(Arc::new(actual));
        self.metering.metered = true;
        self
    }

    /// The actual cost [`settle_from_response`](Policy::settle_from_response) reads
    /// from `head`, if it was set and finds one (not capped by
    /// [`max_actual`](Policy::max_actual)).
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (head, _) = http::Response::new(()).into_parts();
    /// assert_eq!(policy.actual_from_response(&head), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn actual_from_response(&self, head: &http::response::Parts) -> Option<u64> {
        self.metering
            .from_response
            .as_ref()
            .and_then(|actual| actual(head))
    }

    /// Whether the policy reads actuals from response heads.
    pub(crate) fn reads_response(&self) -> bool {
        self.metering.from_response.is_some()
    }

    /// The most one request of this [`metered`](Policy::metered) policy is settled to:
    /// a larger report is charged as `max`. It bounds the debt one report can make (a
    /// buggy or hostile inner figure, `u64::MAX`), and with an
    /// [`in_flight`](Policy::in_flight) limit of `n` it bounds what a caller who
    /// under-estimates gets beyond its quota to `n × (max − its estimate)`: make the
    /// work itself stop at `max` too (clamp the caller's `max_tokens` to it), or the
    /// work past `max` is done and not charged. Without it, any `u64` is settled (see
    /// [`Limiter::settle`](crate::Limiter::settle) for the most one settle charges).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?.metered().max_actual(4_096);
    /// assert_eq!(tokens.get_max_actual(), Some(4_096));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn max_actual(mut self, max: u64) -> Self {
        self.metering.max_actual = Some(max);
        self
    }

    /// The cap on a request's actual, if set (see [`max_actual`](Policy::max_actual)).
    ///
    /// ```
    /// assert_eq!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.get_max_actual(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_max_actual(&self) -> Option<u64> {
        self.metering.max_actual
    }

    /// Counts the bytes of request bodies, per key, as the inner service reads them:
    /// the policy's quota is in bytes (`Quota::per_second(1 << 20)`: 1 MiB/s), and
    /// its headers say so (`qu="content-bytes"`). Needs the
    /// [`MeterBytes`](crate::layer::MeterBytes) layer inside the
    /// `RateLimitLayer`, which wraps the body; see there for how frames are held to
    /// the rate, what a body that would wait too long gets, and how the request's
    /// admission charge (its [`costs`](Policy::costs), default 1: one byte) counts as
    /// bytes paid in advance.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, key, layer::Unit};
    /// let upload = Policy::new("upload", Quota::per_second(1 << 20))?
    ///     .key(key::header("x-api-key")?)
    ///     .meter_request_bytes();
    /// assert!(upload.meters_request_bytes());
    /// assert_eq!(upload.get_unit(), Unit::ContentBytes);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn meter_request_bytes(mut self) -> Self {
        self.metering.request_bytes = true;
        self
    }

    /// Counts the bytes of response bodies, per key, as they are sent: as
    /// [`meter_request_bytes`](Policy::meter_request_bytes), for downloads. Both may
    /// be set: the policy then counts both directions in one quota.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let download = Policy::new("download", Quota::per_second(1 << 20))?.meter_response_bytes();
    /// assert!(download.meters_response_bytes());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn meter_response_bytes(mut self) -> Self {
        self.metering.response_bytes = true;
        self
    }

    /// Whether this policy counts request body bytes.
    ///
    /// ```
    /// assert!(!tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.meters_request_bytes());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn meters_request_bytes(&self) -> bool {
        self.metering.request_bytes
    }

    /// Whether this policy counts response body bytes.
    ///
    /// ```
    /// assert!(!tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.meters_response_bytes());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn meters_response_bytes(&self) -> bool {
        self.metering.response_bytes
    }

    /// What this policy's quota counts: [`Unit::ContentBytes`] when it meters body
    /// bytes, else [`Unit::Requests`].
    ///
    /// ```
    /// use tollgate::{Policy, Quota, layer::Unit};
    /// assert_eq!(Policy::new("api", Quota::per_second(1))?.get_unit(), Unit::Requests);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_unit(&self) -> Unit {
        if self.metering.request_bytes || self.metering.response_bytes {
            Unit::ContentBytes
        } else {
            Unit::Requests
        }
    }

    /// Whether requests under this policy need the layer's metering: a meter, or a
    /// count of body bytes.
    #[inline]
    pub(crate) fn meters(&self) -> bool {
        self.metering.metered || self.metering.request_bytes || self.metering.response_bytes
    }

    /// At most `max` requests of one key (this policy's [`key`](Policy::key)) run at
    /// once; the next gets 429 with `Retry-After: 1` (gRPC `RESOURCE_EXHAUSTED`, retry
    /// pushback 1000 ms) until one of them ends. 0 is a [`ConfigError`].
    ///
    /// - **When a slot is taken:** before the rate decision, for every request with a
    ///   key (whatever its cost). A request refused here is never charged to any rate
    ///   policy; a request that a rate policy then denies (or that the layer cannot
    ///   hold for its leaky-bucket turn) gives its slot back at once.
    /// - **When it is given back:** when the response body ends, or is dropped before
    ///   it ends: the client went away, the inner service failed or panicked, the
    ///   request was cancelled. A request held for its leaky-bucket turn holds its slot
    ///   meanwhile.
    /// - **Headers:** the limit has no member in `RateLimit` / `RateLimit-Policy`:
    ///   those describe a quota that refills over a window, and a count of running
    ///   requests has neither. Its rejection says `Retry-After: 1` and names the
    ///   policy in [`RejectionInfo`](crate::layer::RejectionInfo) (reason
    ///   [`RejectReason::InFlight`](crate::layer::RejectReason::InFlight)).
    /// - **Stores:** counted per (policy name, key) on the limiter's store: in memory,
    ///   or as slot records in Redis that expire when a crashed process stops renewing them
    ///   (`RedisStore::in_flight_ttl`). A store failure follows the
    ///   layer's [`FailMode`](crate::layer::FailMode); shadow mode passes a refused request.
    /// - In wait mode ([`wait`](Policy::wait), or the layer's), a request that finds no
    ///   slot free waits for one instead, asking again with a backoff of 1 to 25 ms, and
    ///   gets the 429 only once its wait is over.
    ///
    /// The policy keeps its quota too; for a concurrency limit alone, see
    /// [`in_flight_only`](Policy::in_flight_only).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let reports = Policy::new("reports", Quota::per_minute(60))?.in_flight(2)?;
    /// assert_eq!(reports.get_in_flight(), Some(2));
    /// assert!(Policy::new("reports", Quota::per_minute(60))?.in_flight(0).is_err());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight(mut self, max: u32) -> Result<Self, ConfigError> {
        let max = NonZeroU32::new(max).ok_or_else(|| {
            ConfigError::new(format!(
                "policy \"{}\": invalid in_flight 0: at least one request must be able to run",
                self.name()
            ))
        })?;
        self.in_flight = Some(max);
        Ok(self)
    }

    /// A policy that only bounds how many requests of one key run at once: `max`, as
    /// [`in_flight`](Policy::in_flight) does, with no rate quota. It writes no
    /// rate-limit header and charges nothing; its [`quota`](Policy::quota) is a
    /// stand-in ([`Quota::MAX_COUNT`] per second) that the layer never checks. Its
    /// [`costs`](Policy::costs) do not apply. Name and `max` are checked as by
    /// [`Policy::new`] and [`in_flight`](Policy::in_flight).
    ///
    /// ```
    /// use tollgate::{Limiter, Policy, RateLimitLayer, key};
    /// let uploads = Policy::in_flight_only("uploads", 4)?.key(key::header("x-api-key")?);
    /// assert_eq!(uploads.get_in_flight(), Some(4));
    /// assert!(!uploads.has_rate());
    /// let layer = RateLimitLayer::builder().policy(uploads).build()?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn in_flight_only(name: impl AsRef<str>, max: u32) -> Result<Self, ConfigError> {
        let mut policy = Self::new(name, Quota::per_second(Quota::MAX_COUNT))?.in_flight(max)?;
        policy.rate = false;
        Ok(policy)
    }

    /// How many requests of one key may run at once, if bounded.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// assert_eq!(policy.get_in_flight(), None);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_in_flight(&self) -> Option<u32> {
        self.in_flight.map(NonZeroU32::get)
    }

    /// Whether the layer charges this policy's quota: `false` only for
    /// [`in_flight_only`](Policy::in_flight_only).
    ///
    /// ```
    /// assert!(tollgate::Policy::new("api", tollgate::Quota::per_second(1))?.has_rate());
    /// assert!(!tollgate::Policy::in_flight_only("api", 1)?.has_rate());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn has_rate(&self) -> bool {
        self.rate
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
            missing_key: MissingKey::Skip,
            count_when: None,
            quota_from: None,
            in_flight: None,
            rate: true,
            wait: None,
            scope: None,
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
