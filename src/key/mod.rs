//! Keys: who a limit applies to, and how a request's key is found.
//!
//! A [`Key`] is an opaque, fixed-size fingerprint of the caller's identity (an IP, an
//! API key, a user id). Fixed size keeps memory per key constant and store keys
//! bounded, whatever the caller sends. An [`Extractor`] finds a request's key from its
//! head; the functions here build the common ones:
//!
//! | extractor | key |
//! |---|---|
//! | [`global()`] | one key for all requests |
//! | [`peer_ip()`] | the TCP peer's address (IPv6 by /64) |
//! | [`client_ip`]`(`[`TrustedProxies`]`)` | the client behind your proxies: rightmost untrusted forwarding hop |
//! | [`header`]`(name)` | a header's value, hashed (API keys) |
//! | [`extension::<T>()`](extension) | an identity an earlier layer put in the extensions |
//! | [`matched_path()`] | the route template axum matched |
//! | any `Fn(&Parts) -> Option<Key>` | yours |
//!
//! Combine them with [`Extractor::or`] (fallback) and [`Extractor::and`] (composite).
//!
//! ```
//! use std::net::SocketAddr;
//! use tollgate::{Key, key};
//! use tollgate::key::TrustedProxies;
//!
//! // An API key when there is one, else the client's address.
//! let caller = key::header("x-api-key")?.or(key::client_ip(TrustedProxies::none()));
//! let mut request = http::Request::get("/").body(())?;
//! request.extensions_mut().insert("198.51.100.4:5000".parse::<SocketAddr>()?);
//! let (anonymous, _) = request.into_parts();
//! assert_eq!(caller.extract(&anonymous), Some(Key::from("198.51.100.4".parse::<std::net::IpAddr>()?)));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "layer")]
mod extractor;
mod fingerprint;
#[cfg(feature = "layer")]
mod forwarded;
#[cfg(feature = "layer")]
mod ip;
#[cfg(feature = "layer")]
mod request;

#[cfg(feature = "layer")]
pub use extractor::{Extractor, global};
pub use fingerprint::Key;
#[cfg(feature = "layer")]
pub use forwarded::ProxyHeader;
#[cfg(feature = "layer")]
pub use ip::{TrustedProxies, client_ip, peer_ip, peer_ip_with_ipv6_prefix};
#[cfg(feature = "layer")]
pub use request::{extension, header, matched_path};
