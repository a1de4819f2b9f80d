//! Redis key names: `<prefix>:<policy>:{<subject>}:<algorithm>:<period>`.
//!
//! The subject is the caller key's fingerprint in hex: fixed length, and the only text
//! between braces, so it alone picks the Redis Cluster slot. Braces (and `%`) in the
//! prefix or the policy name are percent-escaped, so neither can open a hash tag of
//! its own. The algorithm and the period (and the sliding window counters' buckets)
//! end the name: a policy whose period or algorithm changes starts from fresh state
//! instead of misreading the old one, as in the memory store. The count and the burst
//! are not in the name: a key whose quota changes (a plan, a reload) keeps its usage,
//! which each state records in units the scripts convert (see the GCRA and token
//! bucket scripts).

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::algorithm::Params;
use crate::{Algorithm, Key, Limit};

/// Percent-escapes the characters that would change which part of a key Redis Cluster
/// hashes.
pub(super) fn escape(text: &str) -> Cow<'_, str> {
    if !text.contains(['%', '{', '}']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            other => out.push(other),
        }
    }
    Cow::Owned(out)
}

/// The key of `policy`'s state for `key`; `prefix` is already escaped.
pub(super) fn state_key(prefix: &str, policy: &Limit, key: &Key) -> String {
    let p: &Params = policy.params();
    let mut out = String::with_capacity(prefix.len() + policy.name().len() + 96);
    let _ = write!(
        out,
        "{prefix}:{}:{{{key:x}}}:{}:{}",
        escape(policy.name()),
        p.algorithm.name(),
        p.period_us,
    );
    if let Algorithm::SlidingWindowCounters { buckets } = p.algorithm {
        let _ = write!(out, ":{buckets}");
    }
    out
}

/// The key of the block record (a block, a penalty count) beside `state_key`; same
/// hash tag, so a script that decides also reads it without a cross-slot call.
pub(super) fn block_key(state_key: &str) -> String {
    format!("{state_key}:b")
}

/// The second key of the sliding window log (its sorted set); same hash tag.
pub(super) fn log_key(state_key: &str) -> String {
    format!("{state_key}:log")
}

/// The sorted set of `policy`'s in-flight leases for `key`, with the same hash tag as
/// its rate state (`<prefix>:<policy>:{<subject>}:inflight`). It names no quota or
/// algorithm: the leases are counted against whatever bound the caller passes, so a
/// changed bound applies to the requests already running.
pub(super) fn in_flight_key(prefix: &str, policy: &Limit, key: &Key) -> String {
    format!(
        "{prefix}:{}:{{{}}}:inflight",
        escape(policy.name()),
        key.to_hex()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;

    #[test]
    fn braces_in_names_cannot_open_a_hash_tag() {
        let policy = Limit::new("a{b}c", Quota::per_second(1)).unwrap_or_else(|e| panic!("{e}"));
        let key = state_key(&escape("pre{x}"), &policy, &Key::from("k"));
        let open = key.find('{').unwrap_or_default();
        let close = key.find('}').unwrap_or_default();
        assert_eq!(&key[open + 1..close], Key::from("k").to_hex());
        assert!(key.starts_with("pre%7Bx%7D:a%7Bb%7Dc:{"));
    }
}
