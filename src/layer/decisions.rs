//! [`Decisions`]: every policy's decision, in the request extensions for handlers.

use std::ops::Deref;

use crate::Decision;

/// The decisions of every policy checked for a request, in limiter order; put in the
/// request extensions for handlers (unless the layer was built with
/// [`decisions_extension(false)`](crate::RateLimitLayer::decisions_extension)).
///
/// ```
/// use tollgate::layer::Decisions;
/// async fn handler(decisions: Option<axum_like::Extension<Decisions>>) {
///     if let Some(axum_like::Extension(decisions)) = decisions {
///         for d in decisions.iter() {
///             println!("{}: {} left", d.limit, d.remaining);
///         }
///     }
/// }
/// # mod axum_like { #[derive(Clone)] pub struct Extension<T>(pub T); }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions(pub(crate) Vec<Decision>);

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

impl Deref for Decisions {
    type Target = [Decision];

    fn deref(&self) -> &[Decision] {
        &self.0
    }
}
