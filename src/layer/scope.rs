//! The requests a policy applies to at all: its routes, and for a fallback, the
//! requests another key finds nothing for. A request outside them is not this
//! policy's business — no key is looked for, nothing is charged, no slot is taken and
//! no header speaks for it — unlike a cost of 0, which still finds the key and may
//! reject a request that has none.

use http::Method;
use http::request::Parts;

use super::{Costs, Policy};
use crate::ConfigError;
use crate::key::Extractor;
use crate::observe::Miss;

impl Policy {
    /// Applies this policy only to requests with `method` whose route matches
    /// `template` (and to those of any other [`on_route`](Policy::on_route) or
    /// [`on_route_any`](Policy::on_route_any) call). Templates and matching are those
    /// of [`Costs::route`]: axum's matched route when there is one, else the path.
    /// A policy with no route applies to every request.
    ///
    /// ```
    /// use http::Method;
    /// use tollgate::{Policy, Quota};
    /// let login = Policy::new("login", Quota::per_minute(5))?.on_route(Method::POST, "/login")?;
    /// let (post, _) = http::Request::post("/login").body(())?.into_parts();
    /// let (get, _) = http::Request::get("/login").body(())?.into_parts();
    /// assert!(login.applies_to(&post));
    /// assert!(!login.applies_to(&get));
    /// let bad = Policy::new("x", Quota::per_minute(5))?.on_route(Method::GET, "/users/:id");
    /// assert!(bad.unwrap_err().to_string().starts_with("policy \"x\": invalid route \"/users/:id\""));
    /// let twice = Policy::new("x", Quota::per_minute(5))?.on_route(Method::GET, "/a/{x}")?.on_route(Method::GET, "/a/{y}");
    /// assert!(twice.unwrap_err().to_string().contains("invalid route \"GET /a/{y}\": it matches exactly"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A malformed template, or one that matches exactly what an earlier route of this
    /// policy matches.
    pub fn on_route(self, method: Method, template: impl AsRef<str>) -> Result<Self, ConfigError> {
        self.scoped(Some(method), template.as_ref())
    }

    /// Applies this policy only to requests whose route matches `template`, with any
    /// method (and to those of its other routes): see [`on_route`](Policy::on_route).
    ///
    /// ```
    /// use tollgate::{Policy, Quota};
    /// let admin = Policy::new("admin", Quota::per_minute(30))?.on_route_any("/admin/{*rest}")?;
    /// let (parts, _) = http::Request::delete("/admin/users/7").body(())?.into_parts();
    /// assert!(admin.applies_to(&parts));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`on_route`](Policy::on_route).
    pub fn on_route_any(self, template: impl AsRef<str>) -> Result<Self, ConfigError> {
        self.scoped(None, template.as_ref())
    }

    /// Applies this policy only to requests `extractor` finds no key for: a fallback
    /// with its own quota and key for callers without the main policy's key (e.g. a
    /// smaller per-IP limit for requests without an API key). Each caller is counted
    /// by exactly one of the two where both apply to the route: this policy keeps its
    /// own routes and costs (a file's `fallback_for` takes the main limit's, unless
    /// it has its own).
    ///
    /// ```
    /// use tollgate::{Policy, Quota, key};
    /// let per_key = Policy::new("per-key", Quota::per_minute(1000))?.key(key::header("x-api-key")?);
    /// let anonymous = Policy::new("anonymous", Quota::per_minute(60))?
    ///     .key(key::peer_ip())
    ///     .unless_key(key::header("x-api-key")?);
    /// let (with_key, _) = http::Request::get("/").header("x-api-key", "k1").body(())?.into_parts();
    /// let (without, _) = http::Request::get("/").body(())?.into_parts();
    /// assert!(per_key.applies_to(&with_key) && !anonymous.applies_to(&with_key));
    /// assert!(anonymous.applies_to(&without));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn unless_key(mut self, extractor: impl Into<Extractor>) -> Self {
        self.unless_key = Some(extractor.into());
        self
    }

    /// Whether this policy applies to a request: it has no routes or one matches, and
    /// its [`unless_key`](Policy::unless_key) extractor, if any, finds no key.
    ///
    /// ```
    /// let policy = tollgate::Policy::new("api", tollgate::Quota::per_second(1))?;
    /// let (parts, _) = http::Request::get("/anything").body(())?.into_parts();
    /// assert!(policy.applies_to(&parts));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn applies_to(&self, parts: &Parts) -> bool {
        self.scope
            .as_ref()
            .is_none_or(|scope| scope.cost(parts) > 0)
            && self
                .unless_key
                .as_ref()
                .is_none_or(|other| other.extract(parts).is_none())
    }

    /// Makes this policy stand in for `main` (a file's `fallback_for`): it applies
    /// exactly to the requests without `main`'s key, on `main`'s routes and priced by
    /// `main`'s costs unless this policy has routes or costs of its own. A request
    /// with `main`'s key is `main`'s business wherever it goes, even where `main` is
    /// scoped away from its route: the fallback never charges it. Refused when
    /// `main` could leave no request to it, would reject those requests itself, or
    /// prices a request above this policy's capacity.
    pub(crate) fn fallback_for(mut self, main: &Policy) -> Result<Self, ConfigError> {
        let refuse = |why: &str| {
            Err(ConfigError::new(format!(
                "policy \"{}\" stands in for \"{}\", which {why}: it would never apply",
                self.name(),
                main.name()
            )))
        };
        if main.missing_key() == super::MissingKey::Reject {
            return refuse(
                "rejects every request it finds no key for (on_missing_key = \"reject\")",
            );
        }
        let (bare, ()) = http::Request::new(()).into_parts();
        if main.key_of(&bare).is_some() {
            return refuse(
                "finds a key for every request, even one with no header (e.g. key = \"global\")",
            );
        }
        self.stands_in_for = Some(main.name());
        self.unless_key = Some(main.key.clone());
        if !self.own_routes {
            self.scope.clone_from(&main.scope);
        }
        if !self.own_costs {
            self.costs = main.costs.clone();
            if self.has_rate() {
                self.costs
                    .validate(self.name(), self.capacity())
                    .map_err(|error| {
                        ConfigError::new(format!(
                            "{}; it takes the costs of \"{}\", the policy it stands in for: \
                             give it costs of its own ([limit.costs] in a file)",
                            error.message(),
                            main.name()
                        ))
                    })?;
            }
        }
        Ok(self)
    }

    /// The routes this policy applies to, as written (`POST /login, /admin/{*rest}
    /// (any method)`), or `every route`: what the layer logs at build and reload.
    #[cfg(feature = "tracing")]
    pub(crate) fn describe_scope(&self) -> String {
        self.scope.as_ref().map_or_else(
            || "every route".to_owned(),
            |scope| scope.describe_routes().join(", "),
        )
    }

    /// The key extractor, as its name (`Extractor("peer_ip")`): for logs.
    #[cfg(feature = "tracing")]
    pub(crate) fn describe_key(&self) -> String {
        format!("{:?}", self.key)
    }

    /// The name of the policy this one stands in for (a file's `fallback_for`).
    #[cfg(feature = "tracing")]
    pub(crate) fn stands_in_for(&self) -> Option<&'static str> {
        self.stands_in_for
    }

    /// Why this policy does not apply to a request [`applies_to`](Policy::applies_to)
    /// refused: outside its routes, or carrying the key of the policy it stands in for.
    pub(crate) fn passed_over(&self, parts: &Parts) -> Miss {
        if self
            .scope
            .as_ref()
            .is_some_and(|scope| scope.cost(parts) == 0)
        {
            Miss::OffRoute
        } else {
            Miss::OtherKey
        }
    }

    fn scoped(mut self, method: Option<Method>, template: &str) -> Result<Self, ConfigError> {
        // Routes taken from the policy this one stands in for give way to its own.
        let own = self.scope.take().filter(|_| self.own_routes);
        let scope = own.unwrap_or_else(|| Costs::new().default(0));
        let scope = scope.add(method, template, 1, "route").map_err(|error| {
            ConfigError::new(format!("policy \"{}\": {}", self.name(), error.message()))
        })?;
        self.scope = Some(scope);
        self.own_routes = true;
        Ok(self)
    }
}

/// Every policy of `policies` that stands in for another, attached again to that
/// policy's rules as they are in this set (after hooks added rules in code).
pub(crate) fn resolve_fallbacks(mut policies: Vec<Policy>) -> Result<Vec<Policy>, ConfigError> {
    for index in 0..policies.len() {
        let Some(main) = policies[index].stands_in_for else {
            continue;
        };
        let Some(main) = policies.iter().find(|p| p.name() == main).cloned() else {
            return Err(ConfigError::new(format!(
                "policy \"{}\" stands in for \"{main}\", and this set has no policy of that name",
                policies[index].name()
            )));
        };
        policies[index] = policies[index].clone().fallback_for(&main)?;
    }
    Ok(policies)
}
