//! [`Set`]: the limits a limiter decides with, validated whole, and replaced whole by
//! a reload.

use crate::store::Store;
use crate::{ConfigError, Limit};

/// One set of limits, swapped atomically by [`Limiter::reload`](super::Limiter::reload):
/// a check loads the current set once and decides every one of its limits under it,
/// so no request sees half of one set and half of another.
#[derive(Debug)]
pub(crate) struct Set {
    pub(crate) limits: Vec<Limit>,
    /// When the set was made, in the order sets are made in this process: the layer
    /// tells a set it prepared (and installs right after) from an older one.
    pub(crate) generation: u64,
}

/// The generation of the next set made.
static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Set {
    /// Validates a set for `store`: at least one limit, unique names, every quota
    /// suited to its algorithm and to the store.
    pub(crate) fn new(limits: Vec<Limit>, store: &dyn Store) -> Result<Self, ConfigError> {
        if limits.is_empty() {
            return Err(ConfigError::new(
                "a limiter needs at least one limit: add one with LimiterBuilder::limit (or, for the layer, RateLimitLayer::builder().policy)",
            ));
        }
        for (i, limit) in limits.iter().enumerate() {
            limit.validate()?;
            if limits[..i].iter().any(|l| l.name() == limit.name()) {
                return Err(ConfigError::new(format!(
                    "duplicate limit name \"{}\": names must be unique within a limiter",
                    limit.name()
                )));
            }
        }
        for limit in &limits {
            store.validate(limit)?;
        }
        let generation = NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { limits, generation })
    }

    /// The index of the limit named `name`.
    pub(crate) fn index_of(&self, name: &str) -> Option<usize> {
        self.limits
            .iter()
            .position(|l| super::names_match(l.name(), name))
    }

    /// The limit named `name`.
    #[inline]
    pub(crate) fn find(&self, name: &str) -> Option<&Limit> {
        self.limits
            .iter()
            .find(|l| super::names_match(l.name(), name))
    }
}
