//! Rate-limit response headers: every header name the layer writes, in one place,
//! and the styles that write them from decisions.

use crate::time::ceil_secs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::{ConfigError, Decision, Policy, Quota};

/// `RateLimit-Policy` (draft-11 and draft-06).
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft-11).
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Limit` (draft-06).
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining` (draft-06).
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset` (draft-06).
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// `X-RateLimit-Limit` (legacy).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy).
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `grpc-status` (gRPC rejections).
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message` (gRPC rejections).
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-retry-pushback-ms` (gRPC rejections): when a client may retry.
pub const GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// The most bytes the draft-11 `RateLimit-Policy` and `RateLimit` header lines (name,
/// `: `, value and CRLF) may take together, with every policy checked and every number
/// at its longest: 2048, half of 4 KB.
///
/// A proxy keeps a response's whole header block in one buffer: nginx's
/// `proxy_buffer_size` is one memory page by default, 4 KB on most systems, and a
/// response whose headers outgrow it fails with 502. Half is left for the
/// application's own headers. Every policy of a layer is one member of each header,
/// so [`LayerBuilder::build`](crate::layer::LayerBuilder::build) (and
/// [`RateLimitLayer::reload`](crate::RateLimitLayer::reload)) refuses a set of policies
/// whose headers could take more. The other [`HeaderStyle`]s write less.
///
/// ```
/// use tollgate::{Policy, Quota, RateLimitLayer};
/// let mut builder = RateLimitLayer::builder();
/// for i in 0..40 {
///     let name = format!("{i:0>64}"); // 40 policies with 64-character names
///     builder = builder.policy(Policy::new(&name, Quota::per_minute(100))?);
/// }
/// let err = builder.build().unwrap_err();
/// assert!(err.to_string().contains("2048"), "{err}");
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub const MAX_HEADERS_LEN: usize = 2048;

/// Which rate-limit headers the layer writes on limited responses, allowed or not.
///
/// ```
/// use tollgate::layer::{HeaderStyle, ResetFormat};
/// assert_eq!(HeaderStyle::default(), HeaderStyle::Draft11);
/// let legacy = HeaderStyle::Legacy(ResetFormat::UnixEpoch);
/// assert_ne!(legacy, HeaderStyle::None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// draft-ietf-httpapi-ratelimit-headers-11: `RateLimit-Policy: "api";q=100;w=60`
    /// and `RateLimit: "api";r=37;t=12`, one list member per policy.
    #[default]
    Draft11,
    /// draft-06: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` for the
    /// most constrained policy, and `RateLimit-Policy: 100;w=60, 1000;w=1`.
    Draft06,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` for the most
    /// constrained policy, the reset in the given format.
    Legacy(ResetFormat),
    /// No rate-limit headers (rejections still carry `Retry-After`).
    None,
}

/// How the legacy `X-RateLimit-Reset` header expresses the reset.
///
/// ```
/// let format = tollgate::layer::ResetFormat::Seconds;
/// assert_ne!(format, tollgate::layer::ResetFormat::UnixEpoch);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResetFormat {
    /// Seconds from now until the reset, rounded up.
    Seconds,
    /// The reset as a Unix timestamp in whole seconds, rounded up.
    UnixEpoch,
}

/// The reset a header reports: for a policy that denied the request, the wait until
/// the request would fit (its `retry_after`), so that `Retry-After` is never earlier
/// than `t`; otherwise the time until the quota is whole again.
fn until_quota(d: &Decision) -> Duration {
    match (d.allowed, d.retry_after) {
        (false, Some(retry)) => retry,
        _ => d.reset_after,
    }
}

/// A policy's name as a Structured Field string: quoted, `\` and `"` escaped.
fn sf_string(name: &str) -> String {
    let mut quoted = String::with_capacity(name.len() + 2);
    quoted.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted
}

/// The per-limiter parts of the headers, computed once when the layer is built.
#[derive(Debug, Clone)]
pub(crate) struct HeaderPlan {
    style: HeaderStyle,
    /// Per policy: its Structured-Field name (draft-11), in limiter order.
    names: Vec<String>,
    /// Per policy: its `RateLimit-Policy` list member.
    policy_members: Vec<String>,
    /// Per policy: the quota of that member; a caller with a quota of its own
    /// (`quota_from`) gets a member written for its quota instead.
    quotas: Vec<Quota>,
    /// `RateLimit-Policy` when every policy was checked (the common case), built once.
    all_policies: Option<HeaderValue>,
    /// Per policy: its `qu` parameter, if its unit is not requests.
    units: Vec<&'static str>,
}

/// A policy's `RateLimit-Policy` list member in `style`; `name` is its
/// Structured-Field name.
fn policy_member(style: HeaderStyle, name: &str, quota: Quota) -> String {
    let window = ceil_secs(quota.period()).max(1);
    match style {
        HeaderStyle::Draft06 => format!("{};w={window}", quota.limit()),
        _ => format!("{name};q={};w={window}", quota.limit()),
    }
}

/// The draft-11 `qu` parameter of a policy whose quota does not count requests
/// (`;qu="content-bytes"`), or nothing.
fn unit_parameter(style: HeaderStyle, policy: &Policy) -> &'static str {
    match (style, policy.get_unit()) {
        (HeaderStyle::Draft11, crate::layer::Unit::ContentBytes) => ";qu=\"content-bytes\"",
        _ => "",
    }
}

/// The longest the draft-11 header lines of `policies` can be, in bytes: the
/// `RateLimit-Policy` line exactly, the `RateLimit` line with `r` and `t` at the most
/// digits a `u64` takes.
fn longest_headers(policies: &[Policy]) -> usize {
    const LINE: usize = ": \r\n".len();
    const U64_DIGITS: usize = 20;
    let separators = 2 * policies.len().saturating_sub(1);
    let (mut policy_len, mut state_len) = (separators, separators);
    for policy in policies {
        let name = sf_string(policy.name());
        policy_len += policy_member(HeaderStyle::Draft11, &name, policy.quota()).len()
            + unit_parameter(HeaderStyle::Draft11, policy).len();
        if policy.has_quota_from() {
            // A caller's own quota may state `q` and `w` with up to a u64's digits.
            policy_len += 2 * U64_DIGITS;
        }
        state_len += name.len() + ";r=;t=".len() + 2 * U64_DIGITS;
    }
    RATELIMIT_POLICY.as_str().len()
        + LINE
        + policy_len
        + RATELIMIT.as_str().len()
        + LINE
        + state_len
}

/// Refuses `policies` whose headers could take more than [`MAX_HEADERS_LEN`] bytes,
/// naming them and the size.
pub(crate) fn check_size(policies: &[Policy]) -> Result<(), ConfigError> {
    let len = longest_headers(policies);
    if len <= MAX_HEADERS_LEN {
        return Ok(());
    }
    let names: Vec<String> = policies
        .iter()
        .map(|p| format!("\"{}\"", p.name().escape_debug()))
        .collect();
    Err(ConfigError::new(format!(
        "the RateLimit-Policy and RateLimit headers of policies {} could take {len} bytes, \
         more than {MAX_HEADERS_LEN} (tollgate::headers::MAX_HEADERS_LEN): a proxy's \
         header buffer may not hold them; use fewer policies or shorter names",
        names.join(", ")
    )))
}

impl HeaderPlan {
    pub(crate) fn new(style: HeaderStyle, policies: &[Policy]) -> Self {
        let names: Vec<String> = policies.iter().map(|p| sf_string(p.name())).collect();
        let units: Vec<&'static str> = policies.iter().map(|p| unit_parameter(style, p)).collect();
        let policy_members: Vec<String> = policies
            .iter()
            .zip(&names)
            .zip(&units)
            .map(|((p, name), unit)| policy_member(style, name, p.quota()) + unit)
            .collect();
        let all_policies = HeaderValue::try_from(policy_members.join(", ")).ok();
        Self {
            style,
            names,
            policy_members,
            quotas: policies.iter().map(Policy::quota).collect(),
            all_policies,
            units,
        }
    }

    /// The `RateLimit-Policy` value for `decisions`.
    fn policy_header(&self, decisions: &[(usize, Decision)]) -> Option<HeaderValue> {
        if decisions
            .iter()
            .any(|(index, d)| d.quota != self.quotas[*index])
        {
            // A caller's own quota: its members are written for it.
            let members: Vec<String> = decisions
                .iter()
                .map(|(index, d)| {
                    policy_member(self.style, &self.names[*index], d.quota) + self.units[*index]
                })
                .collect();
            return HeaderValue::try_from(members.join(", ")).ok();
        }
        let everyone = decisions.len() == self.policy_members.len()
            && decisions
                .iter()
                .enumerate()
                .all(|(i, (index, _))| i == *index);
        if everyone {
            return self.all_policies.clone();
        }
        let members: Vec<&str> = decisions
            .iter()
            .map(|(index, _)| self.policy_members[*index].as_str())
            .collect();
        HeaderValue::try_from(members.join(", ")).ok()
    }

    /// The `RateLimit` members of `decisions` (at least one). Sized first: the value is
    /// then one exact-size allocation, which the header keeps as it is.
    fn draft11_members(&self, decisions: &[(usize, Decision)]) -> Vec<u8> {
        let members = decisions.iter().map(|(index, d)| {
            let name = self.names[*index].as_bytes();
            (name, d.remaining, ceil_secs(until_quota(d)))
        });
        let len = members
            .clone()
            .map(|(name, r, t)| name.len() + digits(r) + digits(t) + 8)
            .sum::<usize>()
            - 2;
        let mut state = Vec::with_capacity(len);
        for (name, r, t) in members {
            if !state.is_empty() {
                state.extend_from_slice(b", ");
            }
            state.extend_from_slice(name);
            state.extend_from_slice(b";r=");
            state.extend_from_slice(itoa::Buffer::new().format(r).as_bytes());
            state.extend_from_slice(b";t=");
            state.extend_from_slice(itoa::Buffer::new().format(t).as_bytes());
        }
        debug_assert_eq!(state.len(), len);
        state
    }

    /// Writes the style's headers for `decisions`, each paired with the index of its
    /// policy in the limiter. A limit that was not evaluated (a cached denial of
    /// another decided the request, see [`Decision::evaluated`]) is left out: nothing
    /// is known of where its key stands, and `r=0` would read as exhausted.
    pub(crate) fn write(&self, decisions: &[(usize, Decision)], headers: &mut HeaderMap) {
        if decisions.iter().any(|(_, d)| !d.evaluated()) {
            let evaluated: Vec<(usize, Decision)> = decisions
                .iter()
                .filter(|(_, d)| d.evaluated())
                .cloned()
                .collect();
            return self.write(&evaluated, headers);
        }
        if decisions.is_empty() {
            return;
        }
        match self.style {
            HeaderStyle::None => {}
            HeaderStyle::Draft11 => {
                let state = self.draft11_members(decisions);
                if let Some(policy) = self.policy_header(decisions) {
                    headers.insert(RATELIMIT_POLICY, policy);
                }
                // Names are printable ASCII and the rest are digits and separators, so
                // this cannot fail; if it ever did, leaving the header out is the safe
                // answer.
                if let Ok(state) = HeaderValue::from_maybe_shared(Bytes::from(state)) {
                    headers.insert(RATELIMIT, state);
                }
            }
            HeaderStyle::Draft06 => {
                let tightest = tightest(decisions);
                insert_number(headers, RATELIMIT_LIMIT, tightest.capacity);
                insert_number(headers, RATELIMIT_REMAINING, tightest.remaining);
                insert_number(headers, RATELIMIT_RESET, ceil_secs(until_quota(tightest)));
                if let Some(policy) = self.policy_header(decisions) {
                    headers.insert(RATELIMIT_POLICY, policy);
                }
            }
            HeaderStyle::Legacy(format) => {
                let tightest = tightest(decisions);
                let reset = match format {
                    ResetFormat::Seconds => ceil_secs(until_quota(tightest)),
                    ResetFormat::UnixEpoch => {
                        let now = SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .unwrap_or(Duration::ZERO);
                        ceil_secs(now + until_quota(tightest))
                    }
                };
                insert_number(headers, X_RATELIMIT_LIMIT, tightest.capacity);
                insert_number(headers, X_RATELIMIT_REMAINING, tightest.remaining);
                insert_number(headers, X_RATELIMIT_RESET, reset);
            }
        }
    }
}

/// The decision closest to its limit: a denial first, then the fewest remaining, then
/// the latest reset.
fn tightest(decisions: &[(usize, Decision)]) -> &Decision {
    decisions
        .iter()
        .map(|(_, d)| d)
        .min_by_key(|d| (d.allowed, d.remaining, std::cmp::Reverse(d.reset_after)))
        .unwrap_or(&decisions[0].1)
}

/// `Retry-After` for a rejection: whole seconds rounded up, at least 1.
pub(crate) fn write_retry_after(headers: &mut HeaderMap, retry_after: Duration) {
    insert_number(headers, RETRY_AFTER, ceil_secs(retry_after).max(1));
}

/// A number as a header value: one allocation (the value's own bytes), where
/// `HeaderValue::from(u64)` makes two.
pub(crate) fn insert_number(headers: &mut HeaderMap, name: HeaderName, value: u64) {
    let digits = itoa::Buffer::new().format(value).as_bytes().to_vec();
    if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(digits)) {
        headers.insert(name, value);
    }
}

/// How many decimal digits `n` takes.
pub(crate) fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::digits;

    #[test]
    fn digits_counts_decimal_digits() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            86_400,
            999_999_999,
            1_000_000_000,
            u64::MAX,
        ] {
            assert_eq!(digits(n), n.to_string().len(), "{n}");
        }
    }
}
