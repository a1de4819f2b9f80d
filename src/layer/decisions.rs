//! [`Decisions`]: every policy's decision, in the request extensions for handlers.

use std::fmt;
use std::ops::Deref;

use crate::Decision;
use crate::layer::few::Decided;

/// The decisions of every policy checked for a request, in limiter order; put in the
/// request extensions for handlers (unless the layer was built with
/// [`decisions_extension(false)`](crate::RateLimitLayer::decisions_extension)).
///
/// Every request the layer passes on carries one: empty when no policy was checked
/// (an [`allow`](crate::RateLimitLayer::allow)ed request, every policy skipped or free,
/// only in-flight limits, a store that failed open). Behind two tollgate layers (a
/// per-route layer inside a router-wide one), the inner layer's decisions follow the
/// outer's in the same `Decisions`.
///
/// With the `axum` feature (on by default) it is an extractor: a handler takes
/// `decisions: Decisions` as an argument, and a request without them (no layer in front
/// of the handler, or the extension turned off) gets a 500 saying so; take
/// `Option<Decisions>` to handle that case yourself. Any other stack reads it from the
/// request extensions.
///
/// ```
/// use axum::{Router, routing::get};
/// use tollgate::layer::Decisions;
/// use tollgate::{Policy, Quota, RateLimitLayer};
///
/// async fn handler(decisions: Decisions) -> String {
///     decisions
///         .iter()
///         .map(|d| format!("{}: {} left", d.limit, d.remaining))
///         .collect::<Vec<_>>()
///         .join(", ")
/// }
///
/// let layer = RateLimitLayer::builder().policy(Policy::new("api", Quota::per_minute(100))?).build()?;
/// let app: Router = Router::new().route("/", get(handler)).layer(layer);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Decisions(pub(crate) Decided);

impl Decisions {
    /// Puts `decisions` in `extensions`: after those of an outer tollgate layer when the
    /// request already carries some, else as the request's `Decisions`. Inserted
    /// first (one lookup in the extensions map on the common path, where there are
    /// none yet); an outer layer's, found in their place, are put back in front.
    pub(crate) fn record(extensions: &mut http::Extensions, decisions: Decided) {
        if let Some(earlier) = extensions.insert(Decisions(decisions))
            && !earlier.0.is_empty()
            && let Some(now) = extensions.get_mut::<Decisions>()
        {
            let mine = std::mem::replace(&mut now.0, earlier.0);
            now.0.extend(mine);
        }
    }

    /// Marks a request the layer passes on without checking any policy: empty
    /// `Decisions`, unless it carries some already.
    pub(crate) fn record_none(extensions: &mut http::Extensions) {
        if extensions.get::<Decisions>().is_none() {
            extensions.insert(Decisions::default());
        }
    }
}

impl Decisions {
    /// The decision of the policy named `policy`, if it was checked.
    ///
    /// ```
    /// let decisions = tollgate::layer::Decisions::default();
    /// assert!(decisions.get("api").is_none());
    /// ```
    pub fn get(&self, policy: &str) -> Option<&Decision> {
        self.0.iter().find(|d| d.limit == policy)
    }
}

/// As a list, however the decisions are kept (one is kept inline).
impl fmt::Debug for Decisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Decisions").field(&&*self.0).finish()
    }
}

impl Deref for Decisions {
    type Target = [Decision];

    fn deref(&self) -> &[Decision] {
        &self.0
    }
}
