//! [`Decision`]: the one result shape every algorithm on every store returns.

use std::time::Duration;

/// Whether a request may pass under one policy, and where its key stands.
///
/// Durations are rounded up to whole microseconds. For a multi-policy
/// [`check_all`](crate::Limiter::check_all) that another policy denied, `allowed` is this
/// policy's own answer but nothing was charged, so `remaining` is the current value.
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Key, Limiter, ManualClock, MemoryStore, Policy, Quota};
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let clock = ManualClock::new(Duration::from_secs(1_700_000_000));
/// let limiter = Limiter::builder()
///     .policy(Policy::new("api", Quota::per_second(2))?)
///     .store(MemoryStore::with_clock(clock))
///     .build()?;
/// let key = Key::from("alice");
/// let first = limiter.check("api", &key, 1).await?;
/// assert!(first.allowed);
/// assert_eq!((first.limit, first.remaining), (2, 1));
/// limiter.check("api", &key, 1).await?;
/// let third = limiter.check("api", &key, 1).await?;
/// assert!(!third.allowed);
/// assert_eq!(third.retry_after, Some(Duration::from_millis(500)));
/// assert_eq!(third.policy, "api");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request is admitted (and, for an admitted request, charged).
    pub allowed: bool,
    /// The key's capacity: the quota's limit for window algorithms, its burst for the
    /// token bucket, GCRA and leaky bucket. `remaining` never exceeds it.
    pub limit: u64,
    /// Capacity left after this request (for a rejection: the current value).
    pub remaining: u64,
    /// Time until, with nothing else arriving, `remaining` is back to `limit`.
    pub reset_after: Duration,
    /// For a rejection that could pass later: the shortest wait after which the same
    /// request would be admitted. `None` when admitted or when the cost exceeds the
    /// capacity (it can never fit).
    pub retry_after: Option<Duration>,
    /// How long to hold an admitted request before serving it (leaky bucket only).
    pub delay: Duration,
    /// The name of the policy that made this decision.
    pub policy: &'static str,
}
