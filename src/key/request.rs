//! Keys from the request itself: a header ([`header`]), an extension put there by an
//! earlier layer ([`extension`]), the matched route ([`matched_path`]).

use http::HeaderName;

use super::{Extractor, Key};
use crate::ConfigError;

/// The value of the header `name` (an API key, a tenant id), hashed into a [`Key`].
///
/// The key is `Key::from(value_bytes)`: any bytes, UTF-8 or not, of any length, give a
/// 16-byte key, and the raw value is neither kept nor printed. A request without the
/// header, or with an empty value, has no key (its policy's
/// [`MissingKey`](crate::layer::MissingKey) applies). Several lines of the header are keyed
/// together, in order.
///
/// `name` is a `&str`, `String` or [`HeaderName`]; one that is not a valid header
/// name fails here, with a [`ConfigError`] quoting it, never at request time. Names
/// are case-insensitive.
///
/// A header key is whatever the caller sends: pair it with a policy keyed by
/// [`client_ip`](super::client_ip), or key by an authenticated identity with
/// [`extension`], to limit callers who invent a new key per request.
///
/// ```
/// use tollgate::{Key, key};
///
/// let api_key = key::header("X-Api-Key")?;
/// let (parts, _) = http::Request::get("/").header("x-api-key", "sk_live_123").body(())?.into_parts();
/// assert_eq!(api_key.extract(&parts), Some(Key::from("sk_live_123")));
///
/// let (empty, _) = http::Request::get("/").header("x-api-key", "").body(())?.into_parts();
/// assert_eq!(api_key.extract(&empty), None);
/// assert!(key::header("not a header").is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn header(name: impl AsRef<str>) -> Result<Extractor, ConfigError> {
    let raw = name.as_ref();
    let name = HeaderName::from_bytes(raw.as_bytes()).map_err(|_| {
        ConfigError::new(format!(
            "invalid header name \"{}\": expected a token such as \"x-api-key\"",
            raw.escape_debug()
        ))
    })?;
    Ok(Extractor::named("header", move |parts| {
        let mut key: Option<Key> = None;
        for value in parts.headers.get_all(&name) {
            let bytes = value.as_bytes();
            if bytes.is_empty() {
                continue;
            }
            let line = Key::from(bytes);
            key = Some(key.map_or(line, |earlier| earlier.and(&line)));
        }
        key
    }))
}

/// The request extension of type `T`, converted into a [`Key`]: for an identity an
/// earlier layer established, e.g. the user id an authentication middleware inserted.
///
/// `T` converts with `Into<Key>`: `String`, `u64`, `IpAddr` and `Key` itself work as
/// they are; for your own type, implement `From<YourType> for Key`. The value is
/// cloned for each request (cheap for ids; a `String` is copied). A request without
/// the extension has no key.
///
/// Layer order matters: the layer inserting `T` must run before the rate limit layer
/// (in axum, be added after it with `.layer`, since the last added runs first).
///
/// ```
/// use tollgate::{Key, key};
///
/// #[derive(Clone)]
/// struct UserId(u64);
/// impl From<UserId> for Key {
///     fn from(id: UserId) -> Key {
///         Key::from(id.0)
///     }
/// }
///
/// let per_user = key::extension::<UserId>();
/// let mut request = http::Request::get("/").body(())?;
/// request.extensions_mut().insert(UserId(42));
/// let (parts, _) = request.into_parts();
/// assert_eq!(per_user.extract(&parts), Some(Key::from(42_u64)));
///
/// let (anonymous, _) = http::Request::get("/").body(())?.into_parts();
/// assert_eq!(per_user.extract(&anonymous), None);
/// # Ok::<(), http::Error>(())
/// ```
pub fn extension<T>() -> Extractor
where
    T: Clone + Into<Key> + Send + Sync + 'static,
{
    Extractor::named("extension", |parts| {
        parts.extensions.get::<T>().cloned().map(Into::into)
    })
}

/// The route template axum matched (`/users/{id}`, not `/users/42`), from its
/// `MatchedPath` extension: one key per route, e.g. with
/// [`and`](Extractor::and) for "per user, per route".
///
/// Needs the `axum` feature and a layer added where axum has matched the route
/// (`Router::layer` or `route_layer`). Without either, requests have no key. The raw
/// request path is deliberately not used as a fallback: it is chosen by the caller,
/// and one key per distinct path would let anyone mint unlimited keys.
///
/// ```
/// use tollgate::key;
/// let (parts, _) = http::Request::get("/users/42").body(())?.into_parts();
/// // No route was matched (no axum router ran): no key, not the raw path.
/// assert_eq!(key::matched_path().extract(&parts), None);
/// # Ok::<(), http::Error>(())
/// ```
pub fn matched_path() -> Extractor {
    Extractor::named("matched_path", |parts| {
        #[cfg(feature = "axum")]
        {
            parts
                .extensions
                .get::<axum::extract::MatchedPath>()
                .map(|path| Key::from(path.as_str()))
        }
        #[cfg(not(feature = "axum"))]
        {
            let _ = parts;
            None
        }
    })
}
