//! Limits from a TOML file: each limit's quota and algorithm, and the request rules the
//! layer applies (whose key, what each route costs, which plan a caller is on).
//!
//! [`Limits::from_path`] reads a file into [`Policy`]s for a
//! [`RateLimitLayer`](crate::RateLimitLayer) (their limits alone suit a
//! [`Limiter`](crate::Limiter)), so operators change limits without a new build, and a
//! running server can reload them. Every mistake is a [`ConfigError`] that names the
//! file, the line and the column, and quotes the offending value: syntax, unknown keys
//! (a misspelt key is an error, not a silently ignored line), and everything the
//! builder would refuse (a bad quota, a burst on a window algorithm, a cost no request
//! could ever pay, a duplicate name, a malformed network).
//!
//! ## The file
//!
//! One `[[limit]]` table per limit, in any order:
//!
//! | key | value | default |
//! |---|---|---|
//! | `name` | 1 to 64 printable ASCII characters, unique in the file | required |
//! | `quota` | the [`Quota`](crate::Quota) notation: `"100/min"`, `"10/s"`, `"5000/1h"`, `"20 per 10 seconds"` | required |
//! | `burst` | the most cost at one instant (token bucket, GCRA and leaky bucket only) | the quota's count |
//! | `algorithm` | `"fixed_window"`, `"sliding_window"`, `"sliding_window_counters"`, `"sliding_window_log"`, `"token_bucket"`, `"gcra"`, `"leaky_bucket"` | `"gcra"` |
//! | `buckets` | sub-windows per period, for `sliding_window_counters` (required there, refused elsewhere) | |
//! | `max_delay` | the longest a `leaky_bucket` request is held: `"500ms"`, `"2s"`, `"1min"` | one period |
//! | `key` | whose usage is counted: `"global"`, `"peer_ip"`, `"client_ip"`, `"header:<name>"`, `"matched_path"` (see [`key`](crate::key)) | `"global"` |
//! | `trusted_proxies` | with `key = "client_ip"`: the proxies' addresses and networks, `["10.0.0.0/8", "::1"]` | none |
//! | `proxy_header` | with `key = "client_ip"`: the one forwarding header believed ([`TrustedProxies::header`](crate::key::TrustedProxies::header)), by its name in any case: `"forwarded"`, `"x-forwarded-for"`, `"x-real-ip"`, `"cf-connecting-ip"`, `"true-client-ip"`, `"fly-client-ip"`, `"cloudfront-viewer-address"`, `"x-envoy-external-address"` | the first three, which must agree |
//! | `on_missing_key` | `"skip"` or `"reject"` a request the key finds nothing for ([`MissingKey`](crate::layer::MissingKey)) | `"skip"` |
//! | `[limit.costs]` | `"<METHOD> <route>" = cost` (method `*`: any), and `default = cost` (see [`Costs`](crate::layer::Costs)) | every request costs 1 |
//! | `plan_from` | where a request's plan name is: `"header:<name>"`, or `"extension"` (a [`PlanName`] in the request extensions) | |
//! | `[limit.plans]` | `plan = "quota"`, or `plan = { quota = "…", burst = n }` | |
//! | `routes` | the requests the limit applies to, `["POST /login", "* /admin/{*rest}"]` (see [`Policy::on_route`]); others are not limited, looked at or answered for by it | every request |
//! | `count_when` | the response statuses that count, codes or classes: `[401, 403]`, `["5xx"]` (see [`Policy::count_when`]); the others are given back | every response |
//! | `fallback_for` | the name of another limit: this one applies only to requests that limit's `key` finds nothing for, e.g. a smaller per-IP quota for callers without an API key (see [`Policy::unless_key`]); a request with that key is never this limit's, wherever it goes. It takes that limit's `routes` and `[limit.costs]` unless it has its own | |
//! | `penalty` | a penalty box, `{ after = 5, within = "1min", block_for = "10min" }`; `within` only when `after` > 1 (see [`Penalty`](crate::Penalty)). To block repeat offenders longer: `escalate = ["30min", "2h"]` (the blocks of the 2nd, 3rd, … trips; [`Penalty::escalate`](crate::Penalty::escalate)) and/or `escalate_by = { factor = 2, cap = "1d" }` ([`Penalty::escalate_by`](crate::Penalty::escalate_by)), with `remember = "1d"`, how long a trip is remembered ([`Penalty::remember`](crate::Penalty::remember)) | none |
//! | `in_flight` | at most this many requests of one key at once (see [`Policy::in_flight`]) | none |
//! | `wait` | hold a request that will fit within this long instead of rejecting it, `"2s"` (see [`Policy::wait`]) | reject at once |
//! | `metered` | `true`: settle each request to the actual its handler reports through its [`Meter`](crate::layer::Meter) (see [`Policy::metered`]) | `false` |
//! | `max_actual` | the most one request is settled to, at least 1 (see [`Policy::max_actual`]) | none |
//! | `meter` | bytes as the unit: `"request-bytes"` or `"response-bytes"` (see [`Policy::meter_request_bytes`]) | requests |
//! | `enforce` | the share of callers the limit rejects when over it, from `0` to `1` (`0.1`: a stable one in ten, by key fingerprint; the rest in shadow mode; see [`Policy::enforce`]) | `1` |
//! | `shadow` | `true`: shadow mode for every caller (`enforce = 0`); not with `enforce` | `false` |
//!
//! A request whose plan is listed is counted against that plan's quota (through
//! [`Policy::quota_from`]); a request with no plan, or one the file does not list,
//! gets the limit's own `quota`. A plan's burst defaults to its own count, not to the
//! limit's burst. Usage carries over when a caller's plan changes, and when a reload
//! changes a quota's count or burst.
//!
//! `plan_from = "header:…"` trusts what the caller sends: use it only behind a gateway
//! that sets the header itself (and drops the caller's). With `"extension"`, an
//! authentication layer that runs before the rate limit inserts the caller's
//! [`PlanName`].
//!
//! ```
//! use tollgate::config::{Limits, PlanName};
//! use tollgate::{Algorithm, Quota};
//!
//! let limits = Limits::from_toml(r#"
//! ## Every caller: 100 requests a minute, at most 20 at once.
//! [[limit]]
//! name = "api"
//! quota = "100/min"
//! burst = 20
//! key = "client_ip"
//! trusted_proxies = ["10.0.0.0/8", "192.168.0.0/16"]
//!
//! [limit.costs]
//! "POST /users" = 2
//! "GET /files/{*path}" = 5
//! "* /admin/{*rest}" = 10
//! default = 1
//!
//! ## Per API key; the plan comes from the authentication layer.
//! [[limit]]
//! name = "per-key"
//! quota = "60/min"
//! key = "header:x-api-key"
//! on_missing_key = "reject"
//! plan_from = "extension"
//!
//! [limit.plans]
//! pro = "1000/min"
//! enterprise = { quota = "10000/min", burst = 2000 }
//!
//! ## Uploads: an hour in six sub-windows.
//! [[limit]]
//! name = "uploads"
//! quota = "10/h"
//! algorithm = "sliding_window_counters"
//! buckets = 6
//! key = "peer_ip"
//!
//! ## 5 failed logins a minute block the caller for 10 minutes: the limit counts
//! ## only failures, and the first attempt it rejects trips the box.
//! [[limit]]
//! name = "failed-logins"
//! quota = "5/min"
//! algorithm = "sliding_window_log"
//! key = "client_ip"
//! trusted_proxies = ["10.0.0.0/8"]
//! routes = ["POST /login"]
//! count_when = [401]
//! penalty = { after = 1, block_for = "10min" }
//!
//! ## A queue: requests are held for their turn, at most 2 s.
//! [[limit]]
//! name = "reports"
//! quota = "5/s"
//! algorithm = "leaky_bucket"
//! max_delay = "2s"
//! key = "matched_path"
//!
//! ## A new limit, rolled out: rejects one caller in ten, watches the others.
//! [[limit]]
//! name = "search"
//! quota = "30/min"
//! key = "peer_ip"
//! enforce = 0.1
//! "#)?;
//!
//! let names: Vec<&str> = limits.policies().iter().map(|p| p.name()).collect();
//! assert_eq!(names, ["api", "per-key", "uploads", "failed-logins", "reports", "search"]);
//! assert_eq!(limits.policies()[5].get_rollout().share(), 0.1);
//! let api = &limits.policies()[0];
//! assert_eq!(api.quota(), Quota::per_minute(100).with_burst(20)?);
//! assert_eq!(limits.policies()[2].get_algorithm(), Algorithm::SlidingWindowCounters { buckets: 6 });
//!
//! // Route costs.
//! let (upload, _) = http::Request::get("/files/a/b.txt").body(())?.into_parts();
//! assert_eq!(api.cost_of(&upload), 5);
//!
//! // Plans: the authentication layer put the caller's plan in the extensions.
//! let per_key = &limits.policies()[1];
//! let mut request = http::Request::get("/").header("x-api-key", "k-123").body(())?;
//! request.extensions_mut().insert(PlanName::from("pro"));
//! let (pro, _) = request.into_parts();
//! assert_eq!(per_key.quota_of(&pro), Some(Quota::per_minute(1000)));
//! let (no_plan, _) = http::Request::get("/").header("x-api-key", "k-9").body(())?.into_parts();
//! assert_eq!(per_key.quota_of(&no_plan), None); // the limit's own 60/min
//!
//! // Failed logins: only POST /login, only 401s.
//! let logins = &limits.policies()[3];
//! let (form, _) = http::Request::get("/login").body(())?.into_parts();
//! assert!(!logins.applies_to(&form));
//! assert!(logins.counts(http::StatusCode::UNAUTHORIZED) && !logins.counts(http::StatusCode::OK));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Mistakes say where they are:
//!
//! ```
//! let err = tollgate::config::Limits::from_toml(
//!     "[[limit]]\nname = \"api\"\nquota = \"100/min\"\nenforce = 1.5\n",
//! ).unwrap_err();
//! assert_eq!((err.line(), err.column()), (Some(4), Some(11)));
//! assert!(err.to_string().contains("invalid enforcement share 1.5"), "{err}");
//! ```
//!
//! ```
//! let err = tollgate::config::Limits::from_toml(
//!     "[[limit]]\nname = \"api\"\nquota = \"100/fortnight\"\n",
//! ).unwrap_err();
//! assert_eq!((err.line(), err.column()), (Some(3), Some(9)));
//! assert!(err.to_string().starts_with("line 3, column 9: invalid quota \"100/fortnight\""));
//! ```

mod build;
mod place;
mod rules;
mod schema;

use std::path::Path;

use crate::{ConfigError, Policy};

use place::Text;

/// The limits a configuration file describes, as [`Policy`]s in file order.
///
/// Give them to a layer's builder,
/// [`RateLimitLayer::builder().policies(limits.into_policies())`](crate::layer::LayerBuilder::policies),
/// or all at once to a running layer's [`reload`](crate::RateLimitLayer::reload).
///
/// ```
/// use tollgate::{RateLimitLayer, config::Limits};
///
/// let limits = Limits::from_toml("[[limit]]\nname = \"api\"\nquota = \"10/s\"\n")?;
/// let layer = RateLimitLayer::builder().policies(limits.into_policies()).build()?;
/// let edited = Limits::from_toml("[[limit]]\nname = \"api\"\nquota = \"20/s\"\n")?;
/// layer.reload(edited)?;
/// assert_eq!(layer.limiter().limit("api").map(|l| l.capacity()), Some(20));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Limits {
    policies: Vec<Policy>,
}

impl Limits {
    /// Reads limits from TOML text (see the [module docs](self) for the format).
    ///
    /// A mistake is a [`ConfigError`] with its [`line`](ConfigError::line) and
    /// [`column`](ConfigError::column), quoting the value. A text without any
    /// `[[limit]]` is a mistake too: a truncated or emptied file must not lift every
    /// limit.
    ///
    /// ```
    /// use tollgate::config::Limits;
    /// let limits = Limits::from_toml("[[limit]]\nname = \"login\"\nquota = \"5/min\"\nkey = \"peer_ip\"\n")?;
    /// assert_eq!(limits.policies()[0].quota().limit(), 5);
    ///
    /// let err = Limits::from_toml("[[limit]]\nname = \"login\"\nqouta = \"5/min\"\n").unwrap_err();
    /// assert_eq!(err.line(), Some(3));
    /// assert!(err.to_string().contains("unknown field `qouta`"));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        // A byte-order mark is not part of the first line: left in, toml would skip
        // it, and every column on that line would be one too far.
        let text = Text(text.strip_prefix('\u{feff}').unwrap_or(text));
        let file: schema::File = toml::from_str(text.0).map_err(|e| text.toml_error(&e))?;
        if file.limit.is_empty() {
            return Err(text.place(
                ConfigError::new("no [[limit]] table: the file describes no limit"),
                &(0..0),
            ));
        }
        let policies = build::policies(&text, &file.limit)?;
        Ok(Self { policies })
    }

    /// Reads limits from the TOML file at `path`; every error names the file.
    ///
    /// Replace the file atomically (write a temporary file beside it, then rename it
    /// over), as editors and configuration managers do: a file read while another
    /// program writes it in place may be cut anywhere. Cut inside a value or a table
    /// header, it is refused whole; cut at a line or table boundary, it is a valid,
    /// shorter file (`burst = 2000` read as `burst = 2`, a later `[[limit]]` missing)
    /// that no parser can tell from the one meant. `examples/config.rs` also reloads
    /// only a file that reads the same twice, 50 ms apart.
    ///
    /// ```
    /// use tollgate::config::Limits;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("limits.toml");
    ///
    /// std::fs::write(&path, "[[limit]]\nname = \"api\"\nquota = \"100/min\"\n")?;
    /// assert_eq!(Limits::from_path(&path)?.policies().len(), 1);
    ///
    /// std::fs::write(&path, "[[limit]]\nname = \"api\"\nquota = \"100/min\"\nburst = 0\n")?;
    /// let err = Limits::from_path(&path).unwrap_err();
    /// assert_eq!(err.file(), Some(path.as_path()));
    /// assert_eq!((err.line(), err.column()), (Some(4), Some(9)));
    /// assert!(err.to_string().starts_with(&format!("{}:4:9: invalid burst 0", path.display())));
    ///
    /// assert!(Limits::from_path(dir.path().join("missing.toml")).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(format!("cannot read the file: {e}")).in_file(path))?;
        Self::from_toml(&text).map_err(|e| e.in_file(path))
    }

    /// The policies, in file order.
    ///
    /// ```
    /// let limits = tollgate::config::Limits::from_toml(
    ///     "[[limit]]\nname = \"a\"\nquota = \"1/s\"\n[[limit]]\nname = \"b\"\nquota = \"2/s\"\n",
    /// )?;
    /// assert_eq!(limits.policies()[1].name(), "b");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The policies, in file order, owned.
    ///
    /// ```
    /// let limits = tollgate::config::Limits::from_toml("[[limit]]\nname = \"a\"\nquota = \"1/s\"\n")?;
    /// let policies: Vec<tollgate::Policy> = limits.into_policies();
    /// assert_eq!(policies.len(), 1);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn into_policies(self) -> Vec<Policy> {
        self.policies
    }
}

impl IntoIterator for Limits {
    type Item = Policy;
    type IntoIter = std::vec::IntoIter<Policy>;

    fn into_iter(self) -> Self::IntoIter {
        self.policies.into_iter()
    }
}

/// The caller's plan name, put in the request extensions by an authentication layer,
/// for limits with `plan_from = "extension"`.
///
/// The name is looked up in the limit's `[limit.plans]` as it is (case-sensitive); a
/// name the file does not list gets the limit's own quota. The authentication layer
/// must run before the rate limit (in axum: be added with `.layer` after it).
///
/// ```
/// use tollgate::config::{Limits, PlanName};
/// use tollgate::Quota;
///
/// let limits = Limits::from_toml(r#"
/// [[limit]]
/// name = "api"
/// quota = "100/min"
/// plan_from = "extension"
/// plans = { pro = "1000/min" }
/// "#)?;
/// let mut request = http::Request::get("/").body(())?;
/// // What an authentication middleware does once it knows the caller:
/// request.extensions_mut().insert(PlanName::from("pro"));
/// let (parts, _) = request.into_parts();
/// assert_eq!(limits.policies()[0].quota_of(&parts), Some(Quota::per_minute(1000)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlanName(pub String);

impl From<&str> for PlanName {
    fn from(name: &str) -> Self {
        Self(name.to_owned())
    }
}

impl From<String> for PlanName {
    fn from(name: String) -> Self {
        Self(name)
    }
}
