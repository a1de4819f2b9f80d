//! [`Costs`]: how much of a policy's quota a request spends.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use http::Method;
use http::request::Parts;

use super::routes::{Route, matched_path};
use crate::ConfigError;

type CostFn = dyn Fn(&Parts) -> u32 + Send + Sync;

/// What a request costs under a policy: a table of routes, and a default (1 unless
/// set) or a closure for everything else.
///
/// Cost 0 makes a request free under the policy: it is not even sent to the store.
///
/// # Routes
///
/// [`route`](Costs::route) prices one method on one path template; templates are
/// written as in axum 0.8: literal segments, `{param}` (exactly one non-empty
/// segment) and a final `{*rest}` (one or more remaining segments, at least one
/// character). Literal segments compare with the raw, still percent-encoded path;
/// a trailing slash is a segment of its own (`/users/` is not `/users`).
///
/// Templates are matched against the route axum matched (its `MatchedPath`
/// extension, feature `axum`) when there is one, and the request's path otherwise.
/// Against a `MatchedPath`, axum's placeholders stand for unknown values: `/users/{id}`
/// is matched by a `{param}` here (whatever its name) but not by a literal
/// `/users/me`, and `{*path}` only by a `{*rest}`.
///
/// **When several routes match, the most specific wins**: templates are compared
/// segment by segment from the left, and at the first segment where they differ a
/// literal beats `{param}`, which beats `{*rest}`. Between equally specific
/// templates, a route for the request's own method beats a `GET` route pricing a
/// `HEAD` request (axum's `get` serves `HEAD` too), which beats
/// [`route_any`](Costs::route_any). Two routes that would tie are a [`ConfigError`].
///
/// ```
/// use http::Method;
/// use tollgate::layer::Costs;
///
/// let costs = Costs::new()
///     .route(Method::POST, "/users", 2)?
///     .route(Method::GET, "/users/{id}", 1)?
///     .route(Method::GET, "/users/me", 0)?
///     .route(Method::GET, "/files/{*path}", 5)?
///     .route_any("/admin/{*rest}", 10)?
///     .default(1);
///
/// let cost = |method: Method, path: &str| -> Result<u32, http::Error> {
///     let (parts, _) = http::Request::builder().method(method).uri(path).body(())?.into_parts();
///     Ok(costs.cost(&parts))
/// };
/// assert_eq!(cost(Method::POST, "/users")?, 2);
/// assert_eq!(cost(Method::GET, "/users/42")?, 1);
/// assert_eq!(cost(Method::GET, "/users/me")?, 0); // a literal beats {id}
/// assert_eq!(cost(Method::HEAD, "/files/a/b.txt")?, 5); // GET routes price HEAD
/// assert_eq!(cost(Method::DELETE, "/admin/users/7")?, 10);
/// assert_eq!(cost(Method::GET, "/elsewhere")?, 1); // the default
///
/// assert!(Costs::new().route(Method::GET, "users/{id}", 1).is_err()); // no leading '/'
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Any closure works too, alone ([`from_fn`](Costs::from_fn), or `From`) or as the
/// fallback of a route table:
///
/// ```
/// use tollgate::layer::Costs;
/// let (get, _) = http::Request::get("/").body(())?.into_parts();
/// let (post, _) = http::Request::post("/").body(())?.into_parts();
///
/// assert_eq!(Costs::new().cost(&get), 1);
/// let writes_cost_more = Costs::from_fn(|p: &http::request::Parts| if p.method == http::Method::POST { 3 } else { 1 });
/// assert_eq!(writes_cost_more.cost(&post), 3);
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Clone)]
pub struct Costs {
    /// Sorted most specific first, so the first match is the winner.
    routes: Arc<[Route]>,
    fallback: DefaultCost,
}

#[derive(Clone)]
enum DefaultCost {
    Fixed(u32),
    Compute(Arc<CostFn>),
}

impl Costs {
    /// No routes; every request costs 1.
    ///
    /// ```
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(tollgate::layer::Costs::new().cost(&parts), 1);
    /// # Ok::<(), http::Error>(())
    /// ```
    pub fn new() -> Self {
        Self {
            routes: Arc::from([]),
            fallback: DefaultCost::Fixed(1),
        }
    }

    /// Costs computed by `compute` for every request no route matches.
    ///
    /// ```
    /// let free = tollgate::layer::Costs::from_fn(|_: &http::request::Parts| 0);
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(free.cost(&parts), 0);
    /// # Ok::<(), http::Error>(())
    /// ```
    pub fn from_fn<F>(compute: F) -> Self
    where
        F: Fn(&Parts) -> u32 + Send + Sync + 'static,
    {
        Self {
            routes: Arc::from([]),
            fallback: DefaultCost::Compute(Arc::new(compute)),
        }
    }

    /// The cost of requests no route matches (default 1). Replaces a closure given to
    /// [`from_fn`](Costs::from_fn).
    ///
    /// ```
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(tollgate::layer::Costs::new().default(5).cost(&parts), 5);
    /// # Ok::<(), http::Error>(())
    /// ```
    #[must_use]
    pub fn default(mut self, cost: u32) -> Self {
        self.fallback = DefaultCost::Fixed(cost);
        self
    }

    /// Requests with `method` whose path matches `template` cost `cost` (see
    /// [Routes](Costs#routes)). A `GET` route also prices `HEAD` requests, unless a
    /// `HEAD` route matches them.
    ///
    /// Fails with a [`ConfigError`] quoting the template when it does not start with
    /// `/`, has a malformed or repeated `{param}`, a `{*rest}` that is not last, or
    /// axum 0.7 syntax (`:id`, `*rest`); or when an equally specific route for the
    /// same method already exists.
    ///
    /// ```
    /// use http::Method;
    /// use tollgate::layer::Costs;
    /// let costs = Costs::new().route(Method::POST, "/upload", 10)?;
    /// let (parts, _) = http::Request::post("/upload").body(())?.into_parts();
    /// assert_eq!(costs.cost(&parts), 10);
    ///
    /// let err = Costs::new().route(Method::GET, "/users/:id", 1).unwrap_err();
    /// assert!(err.to_string().contains("\"/users/:id\""));
    /// assert!(Costs::new().route(Method::GET, "/a/{x}", 1)?.route(Method::GET, "/a/{y}", 2).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn route(
        self,
        method: Method,
        template: impl AsRef<str>,
        cost: u32,
    ) -> Result<Self, ConfigError> {
        self.add(Some(method), template.as_ref(), cost, "cost route")
    }

    /// Requests with any method whose path matches `template` cost `cost`; a route for
    /// the request's method, equally specific, wins over this one.
    ///
    /// ```
    /// use http::Method;
    /// use tollgate::layer::Costs;
    /// let costs = Costs::new()
    ///     .route_any("/reports/{id}", 5)?
    ///     .route(Method::GET, "/reports/{id}", 2)?;
    /// let (get, _) = http::Request::get("/reports/7").body(())?.into_parts();
    /// let (put, _) = http::Request::put("/reports/7").body(())?.into_parts();
    /// assert_eq!(costs.cost(&get), 2);
    /// assert_eq!(costs.cost(&put), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn route_any(self, template: impl AsRef<str>, cost: u32) -> Result<Self, ConfigError> {
        self.add(None, template.as_ref(), cost, "cost route")
    }

    /// Adds the route; a mistake is an error naming the value as `what` ("cost route",
    /// or "route" where a policy's scope is kept as costs of 1).
    pub(super) fn add(
        self,
        method: Option<Method>,
        template: &str,
        cost: u32,
        what: &str,
    ) -> Result<Self, ConfigError> {
        let route = Route::new(method, template, cost, what)?;
        if let Some(twin) = self.routes.iter().find(|r| r.ties_with(&route)) {
            return Err(ConfigError::new(format!(
                "invalid {what} \"{}\": it matches exactly what \"{}\" already matches",
                route.describe(),
                twin.describe()
            )));
        }
        let mut routes = self.routes.to_vec();
        // Insertion into sorted order: the first matching route is the most specific.
        let at = routes.partition_point(|r| r.specificity(&route) != Ordering::Greater);
        routes.insert(at, route);
        Ok(Self {
            routes: routes.into(),
            fallback: self.fallback,
        })
    }

    /// What `parts` costs: the most specific matching route's cost, else the default
    /// (or the closure).
    ///
    /// ```
    /// use http::Method;
    /// let costs = tollgate::layer::Costs::new().route(Method::DELETE, "/items/{id}", 4)?.default(2);
    /// let (delete, _) = http::Request::delete("/items/9").body(())?.into_parts();
    /// let (get, _) = http::Request::get("/items/9").body(())?.into_parts();
    /// assert_eq!(costs.cost(&delete), 4);
    /// assert_eq!(costs.cost(&get), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost(&self, parts: &Parts) -> u32 {
        if !self.routes.is_empty() {
            let routed = matched_path(parts);
            let matches = |route: &Route| match routed {
                Some(matched) => route.matches(&parts.method, matched, true),
                None => route.matches(&parts.method, parts.uri.path(), false),
            };
            if let Some(route) = self.routes.iter().find(|route| matches(route)) {
                return route.cost;
            }
        }
        match &self.fallback {
            DefaultCost::Fixed(cost) => *cost,
            DefaultCost::Compute(compute) => compute(parts),
        }
    }

    /// Each route of the table as written (`POST /login`, `/admin/{*rest} (any
    /// method)`), most specific first: for logs.
    #[cfg(feature = "tracing")]
    pub(super) fn describe_routes(&self) -> Vec<String> {
        self.routes.iter().map(Route::describe).collect()
    }

    /// Fails when a cost this table can produce is larger than `capacity`: such a
    /// request could never pass. Costs from a closure cannot be known in advance.
    pub(crate) fn validate(&self, policy: &str, capacity: u64) -> Result<(), ConfigError> {
        if let Some(route) = self
            .routes
            .iter()
            .find(|route| u64::from(route.cost) > capacity)
        {
            return Err(ConfigError::new(format!(
                "invalid policy \"{policy}\": cost {} for {} exceeds its capacity {capacity}, \
                 so such requests could never pass",
                route.cost,
                route.describe()
            )));
        }
        if let DefaultCost::Fixed(cost) = self.fallback
            && u64::from(cost) > capacity
        {
            return Err(ConfigError::new(format!(
                "invalid policy \"{policy}\": default cost {cost} exceeds its capacity {capacity}, \
                 so such requests could never pass"
            )));
        }
        Ok(())
    }
}

impl Default for Costs {
    fn default() -> Self {
        Self::new()
    }
}

impl<F> From<F> for Costs
where
    F: Fn(&Parts) -> u32 + Send + Sync + 'static,
{
    fn from(compute: F) -> Self {
        Self::from_fn(compute)
    }
}

impl fmt::Debug for Costs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Routes<'a>(&'a [Route]);
        impl fmt::Debug for Routes<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(self.0.iter().map(|r| (r.describe(), r.cost)))
                    .finish()
            }
        }
        let mut s = f.debug_struct("Costs");
        s.field("routes", &Routes(&self.routes));
        match &self.fallback {
            DefaultCost::Fixed(cost) => s.field("default", cost),
            DefaultCost::Compute(_) => s.field("default", &"<closure>"),
        };
        s.finish()
    }
}
