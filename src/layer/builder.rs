//! [`LayerBuilder`]: the layer's policies (limits with their request rules) and the
//! store, and the checks that refuse a bad set at build time.

use std::sync::Arc;

use super::hooks::Hooks;
use crate::layer::headers::check_size;
use crate::store::Store;
use crate::{ConfigError, LimiterBuilder, Policy, RateLimitLayer};

/// Builds a [`RateLimitLayer`] and its [`Limiter`](crate::Limiter); see
/// [`RateLimitLayer::builder`].
///
/// ```
/// use tollgate::{MemoryStore, Policy, Quota, RateLimitLayer, key};
/// let layer = RateLimitLayer::builder()
///     .policy(Policy::new("api", Quota::per_minute(100))?.key(key::header("x-api-key")?))
///     .store(MemoryStore::new().max_keys(100_000)?)
///     .build()?;
/// assert!(layer.limiter().limit("api").is_some());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Default)]
#[must_use]
pub struct LayerBuilder {
    policies: Vec<Policy>,
    limiter: LimiterBuilder,
    hooks: Hooks,
    partition_keys: bool,
}

impl LayerBuilder {
    /// Adds a policy: its [`Limit`](crate::Limit), and the rules by which the layer
    /// finds a request's key and cost under it. Names must be unique.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let layer = RateLimitLayer::builder().policy(Policy::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(layer.policies().len(), 1);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Adds every policy of `policies`, in order (e.g. those of a
    /// [`config::Limits`](crate::config) file).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let layer = RateLimitLayer::builder()
    ///     .policies([Policy::new("a", Quota::per_second(5))?, Policy::new("b", Quota::per_minute(5))?])
    ///     .build()?;
    /// assert_eq!(layer.policies().len(), 2);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn policies(mut self, policies: impl IntoIterator<Item = Policy>) -> Self {
        self.policies.extend(policies);
        self
    }

    /// Adds rules in code to the policy named `policy`, whatever brings it: `hook`
    /// is applied to it when the layer is built and again to every set a
    /// [`reload`](RateLimitLayer::reload) brings, so that a closure a file cannot
    /// hold (a plan lookup, a key from your authentication layer) survives reloads
    /// of the file. A hook whose policy is missing from the set, or that renames it,
    /// fails the build or the reload (which then keeps the set in force). A hook runs
    /// on each new set, so it should set rules (`key`, `quota_from`, `count_when`),
    /// not add to them twice.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer, key};
    /// // The policies would come from a file (`config::Limits`); a key from the
    /// // request extensions is a closure no file can hold.
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::new("api", Quota::per_minute(100))?)
    ///     .hook("api", |policy| policy.key(key::extension::<u64>()))
    ///     .build()?;
    /// // The file reloaded, with a new quota: the hook's key rule is kept.
    /// layer.reload([Policy::new("api", Quota::per_minute(200))?])?;
    /// let (mut parts, _) = http::Request::get("/").body(())?.into_parts();
    /// parts.extensions.insert(7_u64);
    /// let api = layer.policy("api").expect("api");
    /// assert_eq!(api.quota(), Quota::per_minute(200));
    /// assert_eq!(api.key_of(&parts), key::extension::<u64>().extract(&parts));
    /// assert!(api.key_of(&parts).is_some());
    /// // A set without the hooked policy is refused whole: the rule is never dropped.
    /// assert!(layer.reload([Policy::new("other", Quota::per_minute(5))?]).is_err());
    /// assert!(layer.policy("api").is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn hook<F>(mut self, policy: &str, hook: F) -> Self
    where
        F: Fn(Policy) -> Policy + Send + Sync + 'static,
    {
        self.hooks.add(policy, Arc::new(hook));
        self
    }

    /// Keeps state in `store` (default: a new [`MemoryStore`](crate::MemoryStore)).
    ///
    /// ```
    /// use tollgate::{MemoryStore, Policy, Quota, RateLimitLayer};
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::new("api", Quota::per_second(5))?)
    ///     .store(MemoryStore::new().max_keys(1_000)?)
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn store<S: Store>(mut self, store: S) -> Self {
        self.limiter = self.limiter.store(store);
        self
    }

    /// Adds each member's partition key to the draft-11 headers (default: off), the
    /// `pk` parameter of [draft-ietf-httpapi-ratelimit-headers-11] §3.1.4 and §4.1.3:
    /// `RateLimit: "api";r=37;t=12;pk=:hJ5rSFpNOtcyGSx+lxuNag==:`, and the same on the
    /// member's `RateLimit-Policy` entry.
    ///
    /// The value is the caller's [`Key`](crate::Key) fingerprint (16 bytes, a
    /// Structured Field Byte Sequence, RFC 9651 §3.3.5), never the raw key: the
    /// SipHash-2-4 of the API key, user or address the key was made from. It tells a
    /// client which quota partition a response counted (two API keys of one client
    /// get two partitions), and is the same in every process, as the state it names
    /// is. A fingerprint cannot be turned back into a long secret such as an API
    /// token; one of a small space, such as an IPv4 address, can be found by trying
    /// each address, so with keys from client addresses `pk` tells whoever reads the
    /// response (the client, and anything logging responses on the way) no more than
    /// the client's address. Each `pk` adds 30 bytes per member, counted in
    /// [`MAX_HEADERS_LEN`](crate::layer::headers::MAX_HEADERS_LEN). The other
    /// [`HeaderStyle`](crate::layer::HeaderStyle)s have no `pk`.
    ///
    /// [draft-ietf-httpapi-ratelimit-headers-11]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer, key};
    /// let layer = RateLimitLayer::builder()
    ///     .policy(Policy::new("api", Quota::per_minute(100))?.key(key::header("x-api-key")?))
    ///     .partition_keys(true)
    ///     .build()?;
    /// assert!(layer.get_partition_keys());
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn partition_keys(mut self, on: bool) -> Self {
        self.partition_keys = on;
        self
    }

    /// Checks every policy and builds the limiter and the layer.
    ///
    /// Fails as [`LimiterBuilder::build`](crate::LimiterBuilder::build) does for the
    /// limits (none, a name twice, a quota its algorithm or the store cannot count),
    /// and when a route's cost exceeds its policy's burst, an in-flight policy meets a
    /// store that keeps no slots, or the policies' rate-limit headers could outgrow a
    /// proxy's buffer ([`MAX_HEADERS_LEN`](crate::layer::headers::MAX_HEADERS_LEN)).
    /// Each message names the policy.
    ///
    /// ```
    /// use tollgate::{Policy, Quota, RateLimitLayer};
    /// let twice = RateLimitLayer::builder()
    ///     .policy(Policy::new("api", Quota::per_second(5))?)
    ///     .policy(Policy::new("api", Quota::per_minute(5))?)
    ///     .build();
    /// assert!(twice.unwrap_err().to_string().contains("\"api\""));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        let policies = self.hooks.apply(self.policies)?;
        let limits = policies.iter().map(|p| p.limit().clone());
        let limiter = self.limiter.limits(limits).build()?;
        validate(&policies, &**limiter.store(), self.partition_keys)?;
        crate::observe::policies_installed(&policies);
        Ok(
            RateLimitLayer::with_rules(limiter, &policies, self.partition_keys)
                .with_hooks(self.hooks),
        )
    }
}

/// The layer's own checks of `policies` for `store`: each policy's rules, the size of
/// the headers they make, and slots for the in-flight ones. (The limiter checks the
/// limits.)
pub(super) fn validate(
    policies: &[Policy],
    store: &dyn Store,
    partition_keys: bool,
) -> Result<(), ConfigError> {
    for policy in policies {
        policy.validate()?;
    }
    // Every policy is one member of each header the layer writes.
    check_size(policies, partition_keys)?;
    if let Some(policy) = policies.iter().find(|p| p.get_in_flight().is_some())
        && !store.supports_in_flight()
    {
        return Err(ConfigError::new(format!(
            "policy \"{}\" has an in-flight limit, and the store keeps no in-flight slots \
             (Store::supports_in_flight is false)",
            policy.name()
        )));
    }
    Ok(())
}
