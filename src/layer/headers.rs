//! Rate-limit response headers: every header name the layer writes, in one place,
//! and the styles that write them from decisions.
//!
//! The default style follows [draft-ietf-httpapi-ratelimit-headers-11] (an IETF
//! Internet-Draft of the HTTPAPI working group, not yet an RFC): `RateLimit-Policy` and
//! `RateLimit` are Structured Field Lists ([RFC 9651]) of one member per policy, each
//! named by an SF String, with the draft's parameters `q`, `qu`, `w` (the policy) and
//! `r`, `t` (its state), and `pk` when partition keys are on. The tests read every
//! style back with an independent SF parser (the `sfv` crate).
//!
//! [draft-ietf-httpapi-ratelimit-headers-11]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
//! [RFC 9651]: https://www.rfc-editor.org/rfc/rfc9651

use crate::time::ceil_secs;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::layer::header_bytes;
use crate::layer::in_flight_entry::Claim;
use crate::layer::limiter_calls::LayerCheck;
use crate::layer::partition_key::{PK_LEN, push_pk};
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
    /// [draft-ietf-httpapi-ratelimit-headers-11]: `RateLimit-Policy: "api";q=100;w=60`
    /// and `RateLimit: "api";r=37;t=12`, one list member per policy (RFC 9651
    /// Structured Field Lists). A policy's in-flight bound is a member of
    /// `RateLimit-Policy` of its own, a quota of concurrent requests without a window:
    /// `"uploads";q=4;qu="concurrent-requests"` (it has no `RateLimit` member: `r` is
    /// required, and no store reports how many slots are free). With
    /// [`partition_keys`](crate::layer::LayerBuilder::partition_keys), every member
    /// ends with `;pk=:<the key's fingerprint, base64>:`. Each list is appended as a
    /// field line of its own, so that the lines of a tollgate layer inside this one
    /// read as one list with its members.
    ///
    /// [draft-ietf-httpapi-ratelimit-headers-11]: https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
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

/// What one response's rate-limit headers describe.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Report<'a> {
    /// The rate decisions, each with its policy's index in the limiter, paired in
    /// order with `checks` (empty when the store failed or no rate policy applied).
    pub(crate) decisions: &'a [(usize, Decision)],
    /// The checks the decisions answer: their keys are the partition keys (`pk`).
    pub(crate) checks: &'a [LayerCheck],
    /// The request's in-flight claims: each one's bound is advertised (draft-11) with
    /// `qu="concurrent-requests"`.
    pub(crate) claims: &'a [Claim],
}

impl Report<'_> {
    fn is_empty(&self) -> bool {
        self.decisions.is_empty() && self.claims.is_empty()
    }
}

/// The per-limiter parts of the headers, computed once when the layer is built.
#[derive(Debug, Clone)]
pub(crate) struct HeaderPlan {
    style: HeaderStyle,
    /// Whether draft-11 members carry `pk` (never in the other styles).
    partition_keys: bool,
    /// Per policy: its Structured-Field name (draft-11), in limiter order.
    names: Vec<String>,
    /// Per policy: its `RateLimit-Policy` list member for its quota.
    policy_members: Vec<String>,
    /// Per policy: its in-flight member, `"name";q=<max>;qu="concurrent-requests"`
    /// (draft-11, policies with an in-flight bound).
    in_flight_members: Vec<Option<String>>,
    /// Per policy: the quota of that member; a caller with a quota of its own
    /// (`quota_from`) gets a member written for its quota instead.
    quotas: Vec<Quota>,
    /// The policies that charge a quota, and those with an in-flight member, in order.
    rate_policies: Vec<usize>,
    in_flight_policies: Vec<usize>,
    /// `RateLimit-Policy` when every policy was checked (the common case), built once;
    /// `None` with partition keys, which differ per request.
    all_policies: Option<HeaderValue>,
    /// Per policy: its `qu` parameter, if its unit is not requests.
    units: Vec<&'static str>,
    /// The one policy with a quota, when no policy has an in-flight member: a
    /// response it decided carries `all_policies` (checked first, without the general
    /// comparison).
    lone_rate: Option<usize>,
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

/// A policy's in-flight bound as a draft-11 `RateLimit-Policy` member: a quota of
/// concurrent requests, which has no window.
fn in_flight_member(name: &str, max: u32) -> String {
    format!("{name};q={max};qu=\"concurrent-requests\"")
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
/// `RateLimit-Policy` line exactly (`pk` included when on), the `RateLimit` line with
/// `r` and `t` at the most digits a `u64` takes.
fn longest_headers(policies: &[Policy], partition_keys: bool) -> usize {
    const LINE: usize = ": \r\n".len();
    const U64_DIGITS: usize = 20;
    let pk = if partition_keys { PK_LEN } else { 0 };
    let (mut policy_len, mut state_len) = (0, 0);
    let (mut policy_members, mut state_members) = (0_usize, 0_usize);
    for policy in policies {
        let name = sf_string(policy.name());
        if policy.has_rate() {
            policy_len += policy_member(HeaderStyle::Draft11, &name, policy.quota()).len()
                + unit_parameter(HeaderStyle::Draft11, policy).len()
                + pk;
            if policy.has_quota_from() {
                // A caller's own quota may state `q` and `w` with up to a u64's digits.
                policy_len += 2 * U64_DIGITS;
            }
            state_len += name.len() + ";r=;t=".len() + 2 * U64_DIGITS + pk;
            policy_members += 1;
            state_members += 1;
        }
        if let Some(max) = policy.get_in_flight() {
            policy_len += in_flight_member(&name, max).len() + pk;
            policy_members += 1;
        }
    }
    policy_len += 2 * policy_members.saturating_sub(1);
    state_len += 2 * state_members.saturating_sub(1);
    RATELIMIT_POLICY.as_str().len()
        + LINE
        + policy_len
        + RATELIMIT.as_str().len()
        + LINE
        + state_len
}

/// Refuses `policies` whose headers could take more than [`MAX_HEADERS_LEN`] bytes,
/// naming them and the size.
pub(crate) fn check_size(policies: &[Policy], partition_keys: bool) -> Result<(), ConfigError> {
    let len = longest_headers(policies, partition_keys);
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

/// `", "` before every list member but the first.
fn separate(value: &mut Vec<u8>) {
    if !value.is_empty() {
        value.extend_from_slice(b", ");
    }
}

impl HeaderPlan {
    pub(crate) fn new(style: HeaderStyle, policies: &[Policy], partition_keys: bool) -> Self {
        let draft11 = style == HeaderStyle::Draft11;
        let names: Vec<String> = policies.iter().map(|p| sf_string(p.name())).collect();
        let units: Vec<&'static str> = policies.iter().map(|p| unit_parameter(style, p)).collect();
        let policy_members: Vec<String> = policies
            .iter()
            .zip(&names)
            .zip(&units)
            .map(|((p, name), unit)| policy_member(style, name, p.quota()) + unit)
            .collect();
        let in_flight_members: Vec<Option<String>> = policies
            .iter()
            .zip(&names)
            .map(|(p, name)| {
                p.get_in_flight()
                    .filter(|_| draft11)
                    .map(|max| in_flight_member(name, max))
            })
            .collect();
        let rate_policies: Vec<usize> = (0..policies.len())
            .filter(|&i| policies[i].has_rate())
            .collect();
        let in_flight_policies: Vec<usize> = (0..policies.len())
            .filter(|&i| in_flight_members[i].is_some())
            .collect();
        let partition_keys = partition_keys && draft11;
        let all_policies = if partition_keys {
            None
        } else {
            let members: Vec<&str> = rate_policies
                .iter()
                .map(|&i| policy_members[i].as_str())
                .chain(in_flight_members.iter().flatten().map(String::as_str))
                .collect();
            HeaderValue::try_from(members.join(", ")).ok()
        };
        Self {
            style,
            partition_keys,
            names,
            policy_members,
            in_flight_members,
            quotas: policies.iter().map(Policy::quota).collect(),
            all_policies,
            units,
            lone_rate: match (rate_policies.as_slice(), in_flight_policies.is_empty()) {
                ([lone], true) => Some(*lone),
                _ => None,
            },
            rate_policies,
            in_flight_policies,
        }
    }

    /// The `RateLimit-Policy` value for `report`: a member per rate decision (for the
    /// caller's own quota when it has one), then one per in-flight bound (draft-11).
    fn policy_header(&self, report: Report<'_>) -> Option<HeaderValue> {
        let Report {
            decisions,
            checks,
            claims,
        } = report;
        // The common case: the layer's one rate policy decided the request, for its
        // own quota, and no policy advertises an in-flight bound.
        if let (Some(all), Some(lone), [(index, d)], []) =
            (&self.all_policies, self.lone_rate, decisions, claims)
            && *index == lone
            && d.quota == self.quotas[lone]
        {
            return Some(all.clone());
        }
        let own_quota = decisions
            .iter()
            .any(|(index, d)| d.quota != self.quotas[*index]);
        let in_flight = || {
            claims
                .iter()
                .filter(|claim| self.in_flight_members[claim.index].is_some())
        };
        let everyone = !own_quota
            && decisions
                .iter()
                .map(|(index, _)| *index)
                .eq(self.rate_policies.iter().copied())
            && in_flight()
                .map(|claim| claim.index)
                .eq(self.in_flight_policies.iter().copied());
        if everyone && let Some(all) = &self.all_policies {
            return Some(all.clone());
        }
        let mut value = Vec::with_capacity(64 * (decisions.len() + claims.len()));
        for (n, (index, d)) in decisions.iter().enumerate() {
            separate(&mut value);
            if d.quota == self.quotas[*index] {
                value.extend_from_slice(self.policy_members[*index].as_bytes());
            } else {
                // A caller's own quota: its member is written for it.
                let member = policy_member(self.style, &self.names[*index], d.quota);
                value.extend_from_slice(member.as_bytes());
                value.extend_from_slice(self.units[*index].as_bytes());
            }
            if self.partition_keys
                && let Some(check) = checks.get(n)
            {
                push_pk(&mut value, &check.key);
            }
        }
        for claim in in_flight() {
            if let Some(member) = &self.in_flight_members[claim.index] {
                separate(&mut value);
                value.extend_from_slice(member.as_bytes());
                if self.partition_keys {
                    push_pk(&mut value, &claim.key);
                }
            }
        }
        if value.is_empty() {
            return None;
        }
        HeaderValue::from_maybe_shared(Bytes::from(value)).ok()
    }

    /// The `RateLimit` members of `report`'s decisions (at least one), cut from the
    /// thread's header buffer (no allocation of its own). Sized first, so that the
    /// buffer has room for all of it.
    fn draft11_members(&self, report: Report<'_>) -> Bytes {
        if let [(index, d)] = report.decisions
            && !self.partition_keys
        {
            // One member, the common case: each number formatted once.
            let (mut r, mut t) = (itoa::Buffer::new(), itoa::Buffer::new());
            let parts: [&[u8]; 5] = [
                self.names[*index].as_bytes(),
                b";r=",
                r.format(d.remaining).as_bytes(),
                b";t=",
                t.format(ceil_secs(until_quota(d))).as_bytes(),
            ];
            let len = parts.iter().map(|part| part.len()).sum();
            // Put together on the stack first: one copy into the buffer, not five.
            let mut line = [0_u8; 96];
            if len <= line.len() {
                let mut at = 0;
                for part in parts {
                    line[at..at + part.len()].copy_from_slice(part);
                    at += part.len();
                }
                return header_bytes::cut(len, |state| state.extend_from_slice(&line[..len]));
            }
            return header_bytes::cut(len, |state| {
                for part in parts {
                    state.extend_from_slice(part);
                }
            });
        }
        let pk = if self.partition_keys { PK_LEN } else { 0 };
        let members = report.decisions.iter().map(|(index, d)| {
            let name = self.names[*index].as_bytes();
            (name, d.remaining, ceil_secs(until_quota(d)))
        });
        let len = members
            .clone()
            .map(|(name, r, t)| name.len() + digits(r) + digits(t) + 8 + pk)
            .sum::<usize>()
            - 2;
        header_bytes::cut(len, |state| {
            for (n, (name, r, t)) in members.enumerate() {
                if n > 0 {
                    state.extend_from_slice(b", ");
                }
                state.extend_from_slice(name);
                state.extend_from_slice(b";r=");
                state.extend_from_slice(itoa::Buffer::new().format(r).as_bytes());
                state.extend_from_slice(b";t=");
                state.extend_from_slice(itoa::Buffer::new().format(t).as_bytes());
                if self.partition_keys {
                    // Always one check per decision; a pk short of one leaves `len`
                    // unmet, never the header wrong.
                    if let Some(check) = report.checks.get(n) {
                        push_pk(state, &check.key);
                    }
                }
            }
            debug_assert!(state.len() <= len);
        })
    }

    /// Writes the style's headers for `report`. The draft-11 lists are appended as
    /// field lines of their own (RFC 9651 §3.1: a List may be split over several
    /// lines), so that a tollgate layer around another (a router-wide layer outside a
    /// per-route one) adds its members to the inner one's instead of replacing them.
    /// A limit that was not evaluated (a cached denial of another decided the
    /// request, see [`Decision::evaluated`]) is left out: nothing is known of where
    /// its key stands, and `r=0` would read as exhausted.
    pub(crate) fn write(&self, report: Report<'_>, headers: &mut HeaderMap) {
        if report.decisions.iter().any(|(_, d)| !d.evaluated()) {
            let paired = report.checks.len() == report.decisions.len();
            let (mut decisions, mut checks) = (Vec::new(), Vec::new());
            for (i, (index, decision)) in report.decisions.iter().enumerate() {
                if decision.evaluated() {
                    decisions.push((*index, decision.clone()));
                    if paired {
                        checks.push(report.checks[i]);
                    }
                }
            }
            let evaluated = Report {
                decisions: &decisions,
                checks: if paired { &checks } else { report.checks },
                claims: report.claims,
            };
            return self.write(evaluated, headers);
        }
        if report.is_empty() {
            return;
        }
        let decisions = report.decisions;
        match self.style {
            HeaderStyle::Draft11 => {
                if let Some(policy) = self.policy_header(report) {
                    headers.append(RATELIMIT_POLICY, policy);
                }
                if decisions.is_empty() {
                    // Only in-flight bounds: the stores do not say how many slots are
                    // free, and `r` is required, so there is no `RateLimit` member.
                    return;
                }
                let state = self.draft11_members(report);
                // Names are printable ASCII and the rest are digits, separators and
                // base64, so this cannot fail; if it ever did, leaving the header out is
                // the safe answer.
                if let Ok(state) = HeaderValue::from_maybe_shared(state) {
                    headers.append(RATELIMIT, state);
                }
            }
            HeaderStyle::Draft06 if !decisions.is_empty() => {
                let tightest = tightest(decisions);
                insert_number(headers, RATELIMIT_LIMIT, tightest.capacity);
                insert_number(headers, RATELIMIT_REMAINING, tightest.remaining);
                insert_number(headers, RATELIMIT_RESET, ceil_secs(until_quota(tightest)));
                if let Some(policy) = self.policy_header(report) {
                    headers.insert(RATELIMIT_POLICY, policy);
                }
            }
            HeaderStyle::Legacy(format) if !decisions.is_empty() => {
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
            // Draft-06 and legacy headers describe rate decisions only.
            HeaderStyle::Draft06 | HeaderStyle::Legacy(_) | HeaderStyle::None => {}
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

/// A number as a header value, cut from the thread's header buffer: no allocation of
/// its own, where `HeaderValue::from(u64)` makes two.
pub(crate) fn insert_number(headers: &mut HeaderMap, name: HeaderName, value: u64) {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(value).as_bytes();
    let bytes = header_bytes::cut(digits.len(), |buffer| buffer.extend_from_slice(digits));
    if let Ok(value) = HeaderValue::from_maybe_shared(bytes) {
        headers.insert(name, value);
    }
}

/// How many decimal digits `n` takes.
pub(crate) fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::HeaderMap;

    use super::{HeaderPlan, HeaderStyle, RATELIMIT, RATELIMIT_POLICY, Report, digits};
    use crate::{Decision, Policy, Quota};

    /// The `RateLimit` line of one decision of a policy named `name`.
    fn state_line(name: &str, remaining: u64, reset: Duration) -> String {
        let quota = Quota::per_minute(100);
        let policy = Policy::new(name, quota).expect("policy");
        let plan = HeaderPlan::new(HeaderStyle::Draft11, &[policy], false);
        let decision = Decision {
            allowed: true,
            capacity: 100,
            remaining,
            reset_after: reset,
            retry_after: None,
            delay: Duration::ZERO,
            limit: "ignored",
            quota,
            blocked_for: None,
            trips: 0,
            receipt: None,
        };
        let decisions = [(0, decision)];
        let report = Report {
            decisions: &decisions,
            ..Report::default()
        };
        let mut headers = HeaderMap::new();
        plan.write(report, &mut headers);
        assert!(headers.contains_key(RATELIMIT_POLICY));
        headers[RATELIMIT].to_str().expect("ASCII").to_string()
    }

    #[test]
    fn one_member_is_written_whole_for_short_and_long_names() {
        // Short: put together on the stack; long (past its 96 bytes): part by part.
        assert_eq!(
            state_line("api", 37, Duration::from_millis(11_200)),
            "\"api\";r=37;t=12"
        );
        let long = "n".repeat(64); // the longest name: 112 bytes with two 20-digit numbers
        assert_eq!(
            state_line(&long, u64::MAX, Duration::from_secs(u64::MAX / 2)),
            format!("\"{long}\";r={};t={}", u64::MAX, u64::MAX / 2)
        );
    }

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
