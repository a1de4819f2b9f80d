//! A policy's rollout: which callers it enforces, and which it only watches (shadow
//! mode).

use crate::layer::{Policy, Rollout};
use crate::{ConfigError, Key};

impl Policy {
    /// Shadow mode for this policy alone (`true`), or enforcement for every caller
    /// (`false`, the default): see [`enforce`](Policy::enforce) for what shadow mode
    /// decides, charges and reports.
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let trial = Policy::new("search", Quota::per_minute(30))?.shadow(true);
    /// assert_eq!(trial.get_rollout().share(), 0.0);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn shadow(self, shadow: bool) -> Self {
        self.rollout(if shadow {
            Rollout::SHADOW
        } else {
            Rollout::ENFORCED
        })
    }

    /// Enforces this policy for a stable `share` of its callers (`0.1`: one in ten,
    /// picked by their key's fingerprint, so each caller always sees one behaviour;
    /// see [`Rollout`]), and runs it in shadow mode for the rest. A share outside
    /// `[0, 1]` is a [`ConfigError`] quoting it.
    ///
    /// **Shadow mode** decides every request as enforcement would, charges what
    /// enforcement would charge, writes the same rate-limit headers, logs and counts
    /// the denials (outcome `shadow_rejected`), and never rejects: a request it would
    /// have rejected is served. What is charged, exactly:
    ///
    /// - A request every policy admits is charged to every policy, shadowed or not.
    /// - A request a shadowed policy would reject is charged nothing by that policy,
    ///   as under enforcement (rejected requests consume nothing). So its usage, its
    ///   `remaining` and its headers are what enforcement would show, and switching
    ///   enforcement on shows no jump: the first enforced request sees the state the
    ///   shadowed ones left.
    /// - The request's enforced policies still count it, as if the shadowed policy
    ///   were not there: it is served, so it spends their quota (a second, all-or-nothing
    ///   store call for them alone, made only in this case). A request an enforced
    ///   policy rejects is rejected, and charges nothing anywhere.
    /// - A shadowed penalty box counts the shadowed denials and trips as it would; the
    ///   block it sets is only watched too, until the policy is enforced.
    /// - A shadowed in-flight limit takes a free slot as it would, and lets a request
    ///   that finds none run without one (it never holds a request for a slot).
    /// - A request without a key, under `on_missing_key(Reject)`, is rejected only by
    ///   a policy that enforces every caller.
    ///
    /// The layer-wide [`RateLimitLayer::shadow`](crate::RateLimitLayer::shadow)
    /// overrides this: while it is on, no policy rejects. Reload the policies
    /// ([`RateLimitLayer::reload`](crate::RateLimitLayer::reload), or the `enforce`
    /// key of a [`config`](crate::config) file) to move the share.
    ///
    /// ```
    /// use tollgate::{Key, Policy, Quota};
    /// let api = Policy::new("api", Quota::per_minute(100))?.enforce(0.1)?;
    /// assert_eq!(api.get_rollout().share(), 0.1);
    /// let alice = Key::from("alice");
    /// assert_eq!(api.enforces(&alice), api.enforces(&alice)); // stable
    /// let err = Policy::new("api", Quota::per_minute(100))?.enforce(2.0).unwrap_err();
    /// assert!(err.to_string().contains("policy \"api\": invalid enforcement share 2"), "{err}");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn enforce(self, share: f64) -> Result<Self, ConfigError> {
        let rollout = Rollout::enforce(share).map_err(|e| {
            ConfigError::new(format!("policy \"{}\": {}", self.name(), e.message()))
        })?;
        Ok(self.rollout(rollout))
    }

    /// Sets which callers this policy enforces (see [`enforce`](Policy::enforce)).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, layer::Rollout};
    /// let p = Policy::new("api", Quota::per_second(5))?.rollout(Rollout::enforce(0.5)?);
    /// assert_eq!(p.get_rollout(), Rollout::enforce(0.5)?);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[must_use]
    pub fn rollout(mut self, rollout: Rollout) -> Self {
        self.rollout = rollout;
        self
    }

    /// Which callers this policy enforces ([`Rollout::ENFORCED`] unless set).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, layer::Rollout};
    /// assert_eq!(Policy::new("api", Quota::per_second(5))?.get_rollout(), Rollout::ENFORCED);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_rollout(&self) -> Rollout {
        self.rollout
    }

    /// Whether this policy rejects the caller with `key`'s requests when they are over
    /// its limit (else it only watches them): see [`Rollout::enforces`].
    ///
    /// ```
    /// use tollgate::{Key, Policy, Quota};
    /// let p = Policy::new("api", Quota::per_second(5))?;
    /// assert!(p.enforces(&Key::from("anyone")));
    /// assert!(!p.shadow(true).enforces(&Key::from("anyone")));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn enforces(&self, key: &Key) -> bool {
        self.rollout.enforces(key)
    }
}
