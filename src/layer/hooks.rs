//! Rules added in code to policies that come from elsewhere (a configuration file), by
//! policy name, and added again to every set a reload brings: a closure (a plan
//! lookup, a key from an authentication extension) is never dropped by a reload of
//! the file.

use std::fmt;
use std::sync::Arc;

use crate::{ConfigError, Policy};

/// What a hook does to its policy.
type Hook = dyn Fn(Policy) -> Policy + Send + Sync;

/// The hooks of a layer, by policy name, in the order they were added.
#[derive(Clone, Default)]
pub(crate) struct Hooks(Vec<(Box<str>, Arc<Hook>)>);

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(name, _)| name))
            .finish()
    }
}

impl Hooks {
    /// Adds `hook` for the policy named `name`.
    pub(crate) fn add(&mut self, name: &str, hook: Arc<Hook>) {
        self.0.push((name.into(), hook));
    }

    /// `policies` with every hook applied to its policy; an error when a hook names a
    /// policy the set does not have (its rule would otherwise be dropped unseen).
    pub(crate) fn apply(&self, mut policies: Vec<Policy>) -> Result<Vec<Policy>, ConfigError> {
        for (name, hook) in &self.0 {
            let Some(policy) = policies.iter_mut().find(|p| p.name() == &**name) else {
                return Err(ConfigError::new(format!(
                    "a hook is attached to policy \"{}\", and this set of policies has none of \
                     that name: keep the policy (in the file), or build the layer without the hook",
                    name.escape_debug()
                )));
            };
            let unhooked = policy.clone();
            *policy = hook(unhooked);
            if policy.name() != &**name {
                return Err(ConfigError::new(format!(
                    "the hook of policy \"{}\" renamed it to \"{}\": a hook may add rules, not \
                     change which policy it is",
                    name.escape_debug(),
                    policy.name().escape_debug()
                )));
            }
        }
        // A fallback follows its main policy's rules as the hooks left them.
        super::scope::resolve_fallbacks(policies)
    }
}
