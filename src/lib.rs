//! # tollgate
//!
//! Exact, fast rate limiting for Tower services, jobs and anything else that must say
//! "not now" to a caller: seven algorithms, one result shape, state in memory or in
//! Redis, standard rate-limit headers on every response.
//!
//! A [`Limiter`] holds named [`Limit`]s (a [`Quota`] counted by an [`Algorithm`]) over
//! a store ([`MemoryStore`] by default). For each request it returns a [`Decision`]:
//! whether the request passes, how much capacity is left, when it resets and, for a
//! rejection, when to retry. Checks over several limits are all-or-nothing: a request
//! denied by one limit is charged to none.
//!
//! ```
//! use tollgate::{Algorithm, Key, Limit, Limiter, Quota};
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let limiter = Limiter::builder()
//!     .limit(Limit::new("api", "10/s".parse::<Quota>()?.with_burst(3)?)?.algorithm(Algorithm::Gcra))
//!     .build()?;
//! let caller = Key::from("203.0.113.9".parse::<std::net::IpAddr>()?);
//! let mut passed = 0;
//! for _ in 0..5 {
//!     let decision = limiter.check("api", &caller, 1).await?;
//!     if decision.allowed {
//!         passed += 1;
//!     } else {
//!         assert!(decision.retry_after.is_some());
//!     }
//! }
//! assert_eq!(passed, 3); // the burst
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## In a Tower stack
//!
//! [`RateLimitLayer`] puts [`Policy`]s (limits with the rules that find each request's
//! key and cost) in front of any Tower service over `http` requests: axum routers,
//! tonic servers, hyper stacks. Its [`limiter`](RateLimitLayer::limiter) is the
//! [`Limiter`] of their limits, for handlers and operators.
//!
//! ```
//! use axum::{Router, routing::get};
//! use tollgate::key::{self, TrustedProxies};
//! use tollgate::{Policy, Quota, RateLimitLayer};
//!
//! let layer = RateLimitLayer::builder()
//!     .policy(Policy::new("api", Quota::per_minute(100).with_burst(20)?)?.key(key::client_ip(TrustedProxies::none())))
//!     .build()?;
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(layer);
//! # Ok::<(), tollgate::ConfigError>(())
//! ```
//!
//! ## Operating limits
//!
//! [`Limiter::peek`] reads a key's state, [`Limiter::reset`] makes it idle (and
//! unblocked), [`Limiter::block`] denies it for a while, [`Limiter::penalize`] charges
//! it whether or not the charge fits; a [`Penalty`] on a limit blocks a key whose
//! rejections pile up. On Redis each is one round trip and every process sees it (a
//! process that cached a key as blocked, within its
//! [`denial_cache_max_age`](crate::RedisStore::denial_cache_max_age)).
//!
//! Exposing these over HTTP (`examples/admin.rs`) gives whoever can call them the
//! power to unblock themselves and block anyone: **admin routes need your
//! application's own authentication and authorization**, and belong where the callers
//! they limit cannot reach them.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Key, Limit, Limiter, Penalty, Quota};
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! let limiter = Limiter::builder()
//!     .limit(Limit::new("login", Quota::per_minute(3))?.penalty(
//!         Penalty::after(2).within(Duration::from_secs(60)).block_for(Duration::from_secs(900)),
//!     ))
//!     .build()?;
//! let caller = Key::from("mallory");
//! for _ in 0..5 {
//!     limiter.check("login", &caller, 1).await?; // 3 admitted, then 2 rejections
//! }
//! assert!(limiter.peek("login", &caller).await?.blocked_for.is_some());
//! limiter.reset("login", &caller).await?; // an operator forgives
//! assert!(limiter.check("login", &caller, 1).await?.allowed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Guarantees
//!
//! - Every algorithm is exact: integer microsecond arithmetic (nanoseconds inside GCRA
//!   and the leaky bucket), rounding in the limiter's favour, and each algorithm's
//!   admission bound stated on its [`Algorithm`] variant and checked by property tests.
//! - Rejected requests consume nothing; a clock that steps backwards never adds quota.
//! - The memory store is sharded (no global lock), bounded by `max_keys`, and drops
//!   idle state by itself.
//! - [`Key`]s are fixed-size fingerprints: raw API keys and IPs are never stored or
//!   printed.
//!
//! ## Glossary
//!
//! Each word means one thing, in the code as in the docs.
//!
//! - **limit**: a [`Limit`], a name with a quota and an algorithm; what the core
//!   ([`Limiter`], the stores) counts under.
//! - **policy**: the layer's [`Policy`], a limit plus the request rules that find each
//!   request's key and cost. Only the Tower layer speaks of policies.
//! - **key**: who a limit applies to, a [`Key`] (a fingerprint of an IP, an API key, a
//!   user id).
//! - **cost**: how much one request spends (1 by default; 0 peeks).
//! - **quota**: a [`Quota`], how much cost a key may spend per period, with its burst.
//! - **capacity**: the most cost a key can hold at once under a limit
//!   ([`Decision::capacity`]); `remaining` never exceeds it.
//! - **charge**: one limit's share of a request, cost for a key under a limit
//!   ([`store::Charge`]); charging is what an admitted request does to a key's state.
//! - **decision**: the answer for one limit, a [`Decision`]: admitted or not, what is
//!   left, when it resets, when to retry.
//! - **receipt**: what an admitted decision charged ([`store::Receipt`]), handed back to
//!   refund exactly that charge, or to **settle** it: move it from the estimate it was
//!   checked with to what the work actually cost ([`Limiter::settle`]).
//! - **store**: where state lives, a [`store::Store`] ([`MemoryStore`], `RedisStore`);
//!   each of its operations answers a **store call** ([`store::StoreCall`]), ready at
//!   once or a future.
//! - **block**: a denial of every request of a key under a limit for a while, set by an
//!   operator ([`Limiter::block`]) or by a penalty.
//! - **penalty**: a [`Penalty`], the rule that blocks a key whose rejections pile up;
//!   each time it does is a **trip**, and trips it remembers make the next block
//!   longer (escalation).
//! - **denial cache**: the Redis store's local memory of recent denials
//!   (`RedisStore::denial_cache`), which answers a key known to be denied without a
//!   round trip; it caches any denial, not only blocks.
//! - **in-flight slot**: a place among the requests of a key allowed to run at once
//!   ([`store::InFlightSlot`], [`Policy::in_flight`](crate::Policy::in_flight)).
//! - **lease**: a slice of quota a [`store::LeasedStore`] takes from its store ahead of
//!   time and spends locally; nothing else is called a lease.
//! - **reservation** (or **wait**): a place taken in a key's future
//!   ([`Limiter::reserve`], [`Limiter::until_ready`]): the request proceeds when its
//!   instant comes, instead of being rejected now.
//!
//! The verbs form one ladder: the public `check` asks a store to `decide`, and the store
//! has the algorithm's pure rule `evaluate` the key's state.
//!
//! ## Names
//!
//! Options are builder-style setters named after the option (`Limit::algorithm`,
//! `RedisStore::deadline`, `MemoryStore::max_keys`); where a configured value can be
//! read back, its getter is `get_` and the option's name (`get_algorithm`,
//! `get_deadline`, `get_max_keys`), as `std::process::Command` does. Values that are not
//! options read back under their own name (`name`, `quota`, `capacity`, `len`).
//!
//! Which algorithm to pick, measured by the accuracy lab (the workspace crate `tollgate-lab`):
//! `docs/choosing-an-algorithm.md`.

// docs.rs builds with `--cfg docsrs` on nightly (see `[package.metadata.docs.rs]`): there
// every item behind a feature carries a badge naming it. Stable builds never see this.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The README's Rust blocks, compiled and run as doc tests so that they cannot drift
// from the API. With every feature (`full`): they use Redis, the limits file and
// tower_governor's layer beside ours. A block that must not run (a server) is `no_run`.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod algorithm;
pub mod clock;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;
mod decision;
mod error;
pub mod key;
#[cfg(feature = "layer")]
pub mod layer;
mod limit;
pub mod limiter;
pub mod observe;
mod penalty;
mod quota;
pub mod store;
mod time;

pub use algorithm::Algorithm;
pub use decision::Decision;
pub use error::{ConfigError, StoreError, StoreErrorKind};
pub use key::Key;
pub use limit::Limit;
pub use limiter::{Limiter, LimiterBuilder};
pub use penalty::Penalty;
pub use quota::Quota;
pub use store::MemoryStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use store::RedisStore;

#[cfg(feature = "layer")]
pub use layer::{Policy, RateLimitLayer};
