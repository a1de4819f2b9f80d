//! Limits derived for callers' own quotas (plans): derived once per (limit, quota),
//! checked as the builder checks limits, and cached in a bounded map replaced whole
//! on a miss and dropped by a reload.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::{Limiter, Set, unknown_limit};
use crate::{Limit, Quota, StoreError, StoreErrorKind};

/// A derived limit's identity: the base limit's table (its name, algorithm and
/// period), delay setting and penalty box (all a derived limit takes from it), and the
/// caller's quota. Numbers only: hashed and compared without touching the name's
/// bytes. The penalty is part of it so that a reload that adds, changes or removes a
/// box reaches plan callers at once (their next check derives the limit anew); by
/// its 16-byte fingerprint, not its ~150 bytes.
pub(super) type CallerKey = (u32, Option<Duration>, Option<crate::Key>, Quota);
pub(super) type CallerLimits = HashMap<CallerKey, Arc<Limit>, foldhash::fast::RandomState>;

/// The most derived limits a limiter keeps (plans are few; a quota computed per
/// caller would otherwise grow the cache without bound).
pub(super) const MAX_CALLER_LIMITS: usize = 1024;

/// A limit as a check sees it: the limit itself, or the limit under a caller's quota.
pub(crate) enum Resolved<'s> {
    Own(&'s Limit),
    Caller(Arc<Limit>),
}

impl std::ops::Deref for Resolved<'_> {
    type Target = Limit;

    #[inline]
    fn deref(&self) -> &Limit {
        match self {
            Self::Own(limit) => limit,
            Self::Caller(limit) => limit,
        }
    }
}

impl Limiter {
    /// The limit `name` of `set` under `quota` when one is given: the limit itself when
    /// the quota is its own, else the limit under the caller's quota, checked as the
    /// builder checks limits (a quota the algorithm or the store cannot count exactly
    /// is refused, naming it).
    pub(crate) fn resolve<'s>(
        &self,
        set: &'s Set,
        name: &str,
        quota: Option<Quota>,
    ) -> Result<Resolved<'s>, StoreError> {
        let limit = set.find(name).ok_or_else(|| unknown_limit(name))?;
        self.with_quota(limit, quota)
    }

    /// `limit` under `quota` (see [`resolve`](Limiter::resolve)).
    #[inline]
    pub(crate) fn with_quota<'s>(
        &self,
        limit: &'s Limit,
        quota: Option<Quota>,
    ) -> Result<Resolved<'s>, StoreError> {
        match quota {
            Some(quota) if quota != limit.quota() => {
                self.caller_limit(limit, quota).map(Resolved::Caller)
            }
            _ => Ok(Resolved::Own(limit)),
        }
    }

    /// `limit` under a caller's own `quota`, checked as the builder checks limits:
    /// from the cache of derived limits, or derived and remembered.
    pub(crate) fn caller_limit(
        &self,
        limit: &Limit,
        quota: Quota,
    ) -> Result<Arc<Limit>, StoreError> {
        let key = (
            limit.table(),
            limit.max_delay_setting(),
            limit.penalty_print(),
            quota,
        );
        if let Some(known) = self.inner.callers.load().get(&key) {
            return Ok(Arc::clone(known));
        }
        let own = Arc::new(self.derive_caller_limit(limit, quota)?);
        let known = self.inner.callers.load();
        if known.len() < MAX_CALLER_LIMITS {
            // Copied and replaced whole: misses are rare once a plan has been seen, and
            // readers never wait. Two threads missing at once may lose one insert; it is
            // derived again on its next miss.
            let mut next = CallerLimits::clone(&known);
            next.insert(key, Arc::clone(&own));
            self.inner.callers.store(Arc::new(next));
        }
        Ok(own)
    }

    /// Derives `limit` under `quota` and checks it.
    #[cold]
    fn derive_caller_limit(&self, limit: &Limit, quota: Quota) -> Result<Limit, StoreError> {
        let own = limit.with_quota(quota);
        let checked = own
            .validate()
            .and_then(|()| self.inner.store.validate_quota(&own));
        match checked {
            Ok(()) => Ok(own),
            Err(error) => Err(StoreError::new(
                StoreErrorKind::InvalidQuota,
                format!("caller's quota \"{quota}\" refused: {error}"),
            )),
        }
    }
}
