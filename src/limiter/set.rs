//! [`Set`]: the limits (and the layer's policies) a limiter decides with, validated
//! whole, and replaced whole by a reload.

#[cfg(feature = "layer")]
use crate::Policy;
use crate::store::Store;
use crate::{ConfigError, Limit};

/// One set of limits, swapped atomically by [`Limiter::reload`](super::Limiter::reload):
/// a check loads the current set once and decides every one of its limits under it,
/// so no request sees half of one set and half of another.
#[derive(Debug)]
pub(crate) struct Set {
    pub(crate) limits: Vec<Limit>,
    /// The layer's request rules, one per limit (a limit added on its own has the
    /// default rules).
    #[cfg(feature = "layer")]
    pub(crate) policies: Vec<Policy>,
}

impl Set {
    /// Validates a set for `store`: at least one limit, unique names, every quota
    /// suited to its algorithm and to the store; with the layer, headers of a
    /// bounded size.
    pub(crate) fn new(
        limits: Vec<Limit>,
        #[cfg(feature = "layer")] policies: Vec<Policy>,
        store: &dyn Store,
    ) -> Result<Self, ConfigError> {
        if limits.is_empty() {
            return Err(ConfigError::new(
                "a limiter needs at least one policy: add one with LimiterBuilder::limit or LimiterBuilder::policy",
            ));
        }
        for (i, limit) in limits.iter().enumerate() {
            limit.validate()?;
            if limits[..i].iter().any(|l| l.name() == limit.name()) {
                return Err(ConfigError::new(format!(
                    "duplicate policy name \"{}\": names must be unique within a limiter",
                    limit.name()
                )));
            }
        }
        #[cfg(feature = "layer")]
        {
            for policy in &policies {
                policy.validate()?;
            }
            // Every policy is one member of each header the layer writes.
            crate::layer::headers::check_size(&policies)?;
            if let Some(policy) = policies.iter().find(|p| p.get_in_flight().is_some())
                && !store.supports_in_flight()
            {
                return Err(ConfigError::new(format!(
                    "policy \"{}\" has an in-flight limit, and the limiter's store keeps no \
                     in-flight slots (Store::supports_in_flight is false)",
                    policy.name()
                )));
            }
        }
        for limit in &limits {
            store.validate(limit)?;
        }
        Ok(Self {
            limits,
            #[cfg(feature = "layer")]
            policies,
        })
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
