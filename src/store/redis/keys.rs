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
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

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

/// How many (algorithm, period) pairs the store remembers per limit name.
pub(super) const MAX_PAIRS: usize = 16;

/// The (algorithm, period) pairs this process has decided each limit name under: the
/// limit's own, a plan's other periods, the pairs of before a reload. A reset
/// deletes the key's state under each of them and a penalty charges each, so that
/// they reach plan callers; a name decided under more than one base pair (a reload
/// changed its algorithm or period) has its record read on every decision, since its
/// older states were not marked by the records written since.
///
/// Bounded: at most [`MAX_PAIRS`] per name, the oldest forgotten first. Read without
/// a lock on every decision (one atomic load and a scan of at most 16 numbers);
/// written, copied whole, only when a pair is new.
#[derive(Default)]
pub(super) struct Known {
    /// Indexed by [`Limit::record`]: the limits seen under that name, one per pair.
    by_record: ArcSwap<Vec<Option<Arc<Pairs>>>>,
    writing: Mutex<()>,
}

/// One name's pairs, oldest first, each as the first limit seen with it (its quota
/// is what a penalty charges that state under).
#[derive(Default)]
struct Pairs {
    limits: Vec<Limit>,
    /// Whether more than one of `limits` is a base pair (its own period, not a plan's).
    reloaded: bool,
}

/// Whether `limit` is decided under the period of the limit it was derived from.
pub(super) fn is_base(limit: &Limit) -> bool {
    limit.params().period_us == limit.base_period_us()
}

impl Known {
    /// Remembers `limit`'s pair; returns whether its name was decided under more than
    /// one base pair.
    pub(super) fn note(&self, limit: &Limit) -> bool {
        let all = self.by_record.load();
        if let Some(Some(pairs)) = all.get(limit.record() as usize)
            && pairs.limits.iter().any(|l| l.table() == limit.table())
        {
            return pairs.reloaded;
        }
        self.insert(limit)
    }

    #[cold]
    fn insert(&self, limit: &Limit) -> bool {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let all = self.by_record.load_full();
        let index = limit.record() as usize;
        let mut limits = match all.get(index) {
            Some(Some(pairs)) => {
                if pairs.limits.iter().any(|l| l.table() == limit.table()) {
                    return pairs.reloaded;
                }
                pairs.limits.clone()
            }
            _ => Vec::new(),
        };
        if limits.len() >= MAX_PAIRS {
            limits.remove(0);
        }
        limits.push(limit.clone());
        let reloaded = limits.iter().filter(|l| is_base(l)).count() > 1;
        let mut next = Vec::clone(&all);
        if next.len() <= index {
            next.resize(index + 1, None);
        }
        next[index] = Some(Arc::new(Pairs { limits, reloaded }));
        self.by_record.store(Arc::new(next));
        reloaded
    }

    /// `limit` first, then every other pair known under its name (another period,
    /// algorithm or bucket count than `limit`'s).
    pub(super) fn with_others(&self, limit: &Limit) -> Vec<Limit> {
        let mut out = vec![limit.clone()];
        if let Some(Some(pairs)) = self.by_record.load().get(limit.record() as usize) {
            out.extend(
                pairs
                    .limits
                    .iter()
                    .filter(|l| l.table() != limit.table())
                    .cloned(),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quota;

    #[test]
    fn known_pairs_are_bounded_per_name_and_a_second_base_pair_marks_a_reload() {
        let known = Known::default();
        let api = Limit::new("known-api", Quota::per_minute(100)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!known.note(&api));
        // A plan's other period is not a reload.
        let plan = api.with_quota(Quota::per_hour(10_000));
        assert!(!known.note(&plan));
        let names = |limits: Vec<Limit>| limits.iter().map(Limit::table).collect::<Vec<_>>();
        assert_eq!(
            names(known.with_others(&api)),
            vec![api.table(), plan.table()]
        );
        assert_eq!(
            names(known.with_others(&plan)),
            vec![plan.table(), api.table()]
        );
        // A reload to another algorithm: a second base pair, and both report it.
        let reloaded = api.clone().algorithm(Algorithm::FixedWindow);
        assert!(known.note(&reloaded));
        assert!(known.note(&api));
        // Another name is its own.
        let other =
            Limit::new("known-other", Quota::per_minute(1)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!known.note(&other));
        assert_eq!(known.with_others(&other).len(), 1);
        // At most MAX_PAIRS per name, the oldest forgotten first.
        for minutes in 2..40 {
            let period = std::time::Duration::from_secs(60 * minutes);
            known.note(&api.with_quota(Quota::new(1, period).unwrap_or_else(|e| panic!("{e}"))));
        }
        // The pairs first seen (api, the plan, the reload) were forgotten: the limit
        // itself, then the 16 newest.
        let kept = known.with_others(&reloaded);
        assert_eq!(kept.len(), 1 + MAX_PAIRS);
        let old = [api.table(), plan.table(), reloaded.table()];
        assert!(!kept.iter().skip(1).any(|l| old.contains(&l.table())));
    }

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
