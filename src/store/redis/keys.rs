//! Redis key names: `<prefix>:<limit>:{<subject>}:<algorithm>:<period>` for rate
//! state, `<prefix>:<limit>:{<subject>}:b` for the caller's record.
//!
//! The subject is the caller key's fingerprint in hex: fixed length, and the only text
//! between braces, so it alone picks the Redis Cluster slot. Braces (and `%`) in the
//! prefix or the limit name are percent-escaped, so neither can open a hash tag of
//! its own. The algorithm and the period (and the sliding window counters' buckets)
//! end the name: a limit whose period or algorithm changes starts from fresh state
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

/// The key of `limit`'s state for `key`; `prefix` is already escaped.
pub(super) fn state_key(prefix: &str, limit: &Limit, key: &Key) -> String {
    state_key_at(prefix, limit, key, limit.params().period_us)
}

/// The key of `limit`'s state for `key` under the same algorithm but `period_us`:
/// with the limit's base period, the state that an operator's block marks, which a
/// charge under another period (a plan) marks too when it writes the record.
pub(super) fn state_key_at(prefix: &str, limit: &Limit, key: &Key, period_us: u64) -> String {
    let p: &Params = limit.params();
    let mut out = String::with_capacity(prefix.len() + limit.name().len() + 96);
    let _ = write!(
        out,
        "{prefix}:{}:{{{key:x}}}:{}:{period_us}",
        escape(limit.name()),
        p.algorithm.name(),
    );
    if let Algorithm::SlidingWindowCounters { buckets } = p.algorithm {
        let _ = write!(out, ":{buckets}");
    }
    out
}

/// The key of the caller's record (its block, penalty count and reservation queue's
/// tail): one per (limit name, caller key), whatever quota, period or algorithm the
/// caller is decided under, so an operator's block through the limit reaches a plan
/// caller, and a reload that changes the algorithm or the period keeps it. Same hash
/// tag as every state of the key, so a script that decides also reads it without a
/// cross-slot call.
pub(super) fn record_key(prefix: &str, limit: &Limit, key: &Key) -> String {
    format!("{prefix}:{}:{{{key:x}}}:b", escape(limit.name()))
}

/// The key recording that the receipt numbered `nonce` gave back to `key` under
/// `limit` (a refund by receipt or a settle), so that it gives back once: it lives as
/// long as the receipt's charge counts. Same hash tag as the key's state and record.
pub(super) fn given_key(prefix: &str, limit: &Limit, key: &Key, nonce: u64) -> String {
    format!("{prefix}:{}:{{{key:x}}}:g:{nonce:x}", escape(limit.name()))
}

/// The second key of the sliding window log (its sorted set); same hash tag.
pub(super) fn log_key(state_key: &str) -> String {
    format!("{state_key}:log")
}

/// The sorted set of `limit`'s in-flight slot records for `key`, with the same hash tag as
/// its rate state (`<prefix>:<limit>:{<subject>}:inflight`). It names no quota or
/// algorithm: the slot records are counted against whatever bound the caller passes, so a
/// changed bound applies to the requests already running.
pub(super) fn in_flight_key(prefix: &str, limit: &Limit, key: &Key) -> String {
    format!(
        "{prefix}:{}:{{{}}}:inflight",
        escape(limit.name()),
        key.to_hex()
    )
}

pub(super) use crate::store::known::{Known, is_base};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;

    #[test]
    fn braces_in_names_cannot_open_a_hash_tag() {
        let limit = Limit::new("a{b}c", Quota::per_second(1)).unwrap_or_else(|e| panic!("{e}"));
        let key = state_key(&escape("pre{x}"), &limit, &Key::from("k"));
        let open = key.find('{').unwrap_or_default();
        let close = key.find('}').unwrap_or_default();
        assert_eq!(&key[open + 1..close], Key::from("k").to_hex());
        assert!(key.starts_with("pre%7Bx%7D:a%7Bb%7Dc:{"));
    }
}
