//! [`Extractor`]: how a policy finds the key of a request, and its combinators.

use std::fmt;
use std::sync::Arc;

use http::request::Parts;

use super::Key;

type ExtractFn = dyn Fn(&Parts) -> Option<Key> + Send + Sync;

/// Finds the [`Key`] of a request from its head (method, URI, headers, extensions).
///
/// `None` means "this request has no key for this policy"; the policy's
/// [`MissingKey`](crate::layer::MissingKey) setting decides what happens then (skip the
/// policy by default). Any `Fn(&Parts) -> Option<Key>` converts into an extractor;
/// [`or`](Extractor::or) and [`and`](Extractor::and) combine them.
///
/// ```
/// use http::Request;
/// use tollgate::{Key, key};
///
/// let tenant = key::Extractor::new(|parts: &http::request::Parts| {
///     parts.headers.get("x-tenant").map(|v| Key::from(v.as_bytes()))
/// });
/// let by_tenant_or_everyone = tenant.clone().or(key::global());
///
/// let (with, _) = Request::builder().header("x-tenant", "acme").body(())?.into_parts();
/// let (without, _) = Request::builder().body(())?.into_parts();
/// assert_eq!(tenant.extract(&with), Some(Key::from("acme")));
/// assert_eq!(tenant.extract(&without), None);
/// assert_eq!(by_tenant_or_everyone.extract(&without), key::global().extract(&without));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Clone)]
pub struct Extractor {
    extract: Arc<ExtractFn>,
    name: &'static str,
}

impl Extractor {
    /// An extractor from a closure.
    ///
    /// ```
    /// let by_method = tollgate::key::Extractor::new(|parts: &http::request::Parts| {
    ///     Some(tollgate::Key::from(parts.method.as_str()))
    /// });
    /// let (parts, _) = http::Request::post("/").body(())?.into_parts();
    /// assert_eq!(by_method.extract(&parts), Some(tollgate::Key::from("POST")));
    /// # Ok::<(), http::Error>(())
    /// ```
    pub fn new<F>(extract: F) -> Self
    where
        F: Fn(&Parts) -> Option<Key> + Send + Sync + 'static,
    {
        Self::named("custom", extract)
    }

    /// An extractor with a name shown by `Debug` (used by the built-in extractors).
    pub(crate) fn named<F>(name: &'static str, extract: F) -> Self
    where
        F: Fn(&Parts) -> Option<Key> + Send + Sync + 'static,
    {
        Self {
            extract: Arc::new(extract),
            name,
        }
    }

    /// The key of a request, if it has one.
    ///
    /// ```
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert!(tollgate::key::global().extract(&parts).is_some());
    /// # Ok::<(), http::Error>(())
    /// ```
    pub fn extract(&self, parts: &Parts) -> Option<Key> {
        (self.extract)(parts)
    }

    /// This extractor's key, or `other`'s when this one finds none (a fallback, e.g. an
    /// API key, else the client IP).
    ///
    /// ```
    /// use tollgate::{Key, key};
    /// let api_key = key::Extractor::new(|p: &http::request::Parts| p.headers.get("x-api-key").map(|v| Key::from(v.as_bytes())));
    /// let fallback = api_key.or(key::Extractor::new(|_: &http::request::Parts| Some(Key::from("anonymous"))));
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(fallback.extract(&parts), Some(Key::from("anonymous")));
    /// # Ok::<(), http::Error>(())
    /// ```
    #[must_use]
    pub fn or(self, other: Extractor) -> Extractor {
        Self::named("or", move |parts| {
            self.extract(parts).or_else(|| other.extract(parts))
        })
    }

    /// A composite key: both extractors must find a key, and the result is keyed by
    /// both (e.g. user *and* route).
    ///
    /// ```
    /// use tollgate::{Key, key};
    /// let method = key::Extractor::new(|p: &http::request::Parts| Some(Key::from(p.method.as_str())));
    /// let path = key::Extractor::new(|p: &http::request::Parts| Some(Key::from(p.uri.path())));
    /// let both = method.and(path);
    /// let (parts, _) = http::Request::get("/a").body(())?.into_parts();
    /// assert_eq!(both.extract(&parts), Some(Key::from("GET").and(&Key::from("/a"))));
    /// # Ok::<(), http::Error>(())
    /// ```
    #[must_use]
    pub fn and(self, other: Extractor) -> Extractor {
        Self::named("and", move |parts| {
            let first = self.extract(parts)?;
            let second = other.extract(parts)?;
            Some(first.and(&second))
        })
    }
}

impl<F> From<F> for Extractor
where
    F: Fn(&Parts) -> Option<Key> + Send + Sync + 'static,
{
    fn from(extract: F) -> Self {
        Self::new(extract)
    }
}

impl fmt::Debug for Extractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Extractor").field(&self.name).finish()
    }
}

/// One key for every request: the policy limits all traffic together.
///
/// ```
/// let (a, _) = http::Request::get("/a").body(())?.into_parts();
/// let (b, _) = http::Request::post("/b").body(())?.into_parts();
/// assert_eq!(tollgate::key::global().extract(&a), tollgate::key::global().extract(&b));
/// # Ok::<(), http::Error>(())
/// ```
pub fn global() -> Extractor {
    // The key is computed once, not per request.
    let everyone = Key::from(&b"\x00tollgate:global"[..]);
    Extractor::named("global", move |_| Some(everyone))
}
