//! [`Costs`]: how much of a policy's quota a request spends.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use http::Method;
use http::request::Parts;

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
/// use tollgate::Costs;
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
/// use tollgate::Costs;
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
    fallback: Fallback,
}

#[derive(Clone)]
enum Fallback {
    Fixed(u32),
    Compute(Arc<CostFn>),
}

impl Costs {
    /// No routes; every request costs 1.
    ///
    /// ```
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(tollgate::Costs::new().cost(&parts), 1);
    /// # Ok::<(), http::Error>(())
    /// ```
    pub fn new() -> Self {
        Self {
            routes: Arc::from([]),
            fallback: Fallback::Fixed(1),
        }
    }

    /// Costs computed by `compute` for every request no route matches.
    ///
    /// ```
    /// let free = tollgate::Costs::from_fn(|_: &http::request::Parts| 0);
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
            fallback: Fallback::Compute(Arc::new(compute)),
        }
    }

    /// The cost of requests no route matches (default 1). Replaces a closure given to
    /// [`from_fn`](Costs::from_fn).
    ///
    /// ```
    /// let (parts, _) = http::Request::get("/").body(())?.into_parts();
    /// assert_eq!(tollgate::Costs::new().default(5).cost(&parts), 5);
    /// # Ok::<(), http::Error>(())
    /// ```
    #[must_use]
    pub fn default(mut self, cost: u32) -> Self {
        self.fallback = Fallback::Fixed(cost);
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
    /// use tollgate::Costs;
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
        self.add(Some(method), template.as_ref(), cost)
    }

    /// Requests with any method whose path matches `template` cost `cost`; a route for
    /// the request's method, equally specific, wins over this one.
    ///
    /// ```
    /// use http::Method;
    /// use tollgate::Costs;
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
        self.add(None, template.as_ref(), cost)
    }

    fn add(self, method: Option<Method>, template: &str, cost: u32) -> Result<Self, ConfigError> {
        let route = Route {
            segments: parse_template(template)?,
            template: template.into(),
            method,
            cost,
        };
        if let Some(twin) = self.routes.iter().find(|r| r.ties_with(&route)) {
            return Err(ConfigError::new(format!(
                "invalid cost route \"{}\": it matches exactly what \"{}\" already matches",
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
    /// let costs = tollgate::Costs::new().route(Method::DELETE, "/items/{id}", 4)?.default(2);
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
            Fallback::Fixed(cost) => *cost,
            Fallback::Compute(compute) => compute(parts),
        }
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
        if let Fallback::Fixed(cost) = self.fallback
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
            Fallback::Fixed(cost) => s.field("default", cost),
            Fallback::Compute(_) => s.field("default", &"<closure>"),
        };
        s.finish()
    }
}

/// The route axum matched, if the request went through an axum router.
fn matched_path(parts: &Parts) -> Option<&str> {
    #[cfg(feature = "axum")]
    {
        parts
            .extensions
            .get::<axum::extract::MatchedPath>()
            .map(axum::extract::MatchedPath::as_str)
    }
    #[cfg(not(feature = "axum"))]
    {
        let _ = parts;
        None
    }
}

#[derive(Clone)]
struct Route {
    method: Option<Method>,
    template: Box<str>,
    segments: Box<[Segment]>,
    cost: u32,
}

/// One segment of a template, precompiled so matching a request allocates nothing.
#[derive(Clone, PartialEq, Eq)]
enum Segment {
    Literal(Box<str>),
    Param,
    /// Always the last segment.
    Rest,
}

impl Segment {
    /// Lower is more specific.
    fn rank(&self) -> u8 {
        match self {
            Self::Literal(_) => 0,
            Self::Param => 1,
            Self::Rest => 2,
        }
    }
}

/// One segment of a path being priced: concrete text, or one of axum's placeholders
/// when the path is a `MatchedPath`.
#[derive(Clone, Copy)]
enum PathSegment<'a> {
    Text(&'a str),
    Placeholder,
    CatchAll,
}

fn path_segments(path: &str, routed: bool) -> Option<impl Iterator<Item = PathSegment<'_>>> {
    let rest = path.strip_prefix('/')?;
    Some(rest.split('/').map(move |segment| {
        if routed && segment.starts_with('{') && segment.ends_with('}') && segment.len() >= 2 {
            if segment.starts_with("{*") {
                PathSegment::CatchAll
            } else {
                PathSegment::Placeholder
            }
        } else {
            PathSegment::Text(segment)
        }
    }))
}

impl Route {
    fn matches(&self, method: &Method, path: &str, routed: bool) -> bool {
        let method_ok = match &self.method {
            None => true,
            Some(m) => m == method || (*m == Method::GET && *method == Method::HEAD),
        };
        if !method_ok {
            return false;
        }
        let Some(mut path) = path_segments(path, routed) else {
            return false;
        };
        for segment in &self.segments {
            let next = path.next();
            match (segment, next) {
                (Segment::Literal(literal), Some(PathSegment::Text(text)))
                    if **literal == *text => {}
                (Segment::Param, Some(PathSegment::Text(text))) if !text.is_empty() => {}
                (Segment::Param, Some(PathSegment::Placeholder)) => {}
                (Segment::Rest, Some(PathSegment::Text(text))) => {
                    // One or more segments, not all empty: `/files/` has no rest.
                    return !text.is_empty() || path.next().is_some();
                }
                (Segment::Rest, Some(_)) => return true,
                _ => return false,
            }
        }
        path.next().is_none()
    }

    /// `Less` when `self` should be tried before `other`.
    fn specificity(&self, other: &Route) -> Ordering {
        let by_path = self
            .segments
            .iter()
            .map(Segment::rank)
            .cmp(other.segments.iter().map(Segment::rank));
        by_path.then_with(|| self.method_rank().cmp(&other.method_rank()))
    }

    /// Among equally specific templates: the request's own method, then GET (which
    /// may be pricing a HEAD), then any method.
    fn method_rank(&self) -> u8 {
        match &self.method {
            Some(m) if *m == Method::GET => 1,
            Some(_) => 0,
            None => 2,
        }
    }

    /// Whether the two routes match exactly the same requests.
    fn ties_with(&self, other: &Route) -> bool {
        self.method == other.method && self.segments == other.segments
    }

    fn describe(&self) -> String {
        match &self.method {
            Some(method) => format!("{method} {}", self.template),
            None => format!("{} (any method)", self.template),
        }
    }
}

fn parse_template(template: &str) -> Result<Box<[Segment]>, ConfigError> {
    let invalid = |why: &str| {
        ConfigError::new(format!(
            "invalid cost route \"{}\": {why}",
            template.escape_debug()
        ))
    };
    let Some(rest) = template.strip_prefix('/') else {
        return Err(invalid(
            "expected a path starting with '/', such as \"/users/{id}\"",
        ));
    };
    let mut names: Vec<&str> = Vec::new();
    let mut segments = Vec::new();
    let count = rest.split('/').count();
    for (i, segment) in rest.split('/').enumerate() {
        if segment.starts_with(':') || segment.starts_with('*') {
            return Err(invalid(
                "expected {param} or {*rest} for captures (axum 0.8 syntax), not :param or *rest",
            ));
        }
        let parsed = match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(inner) => {
                let (name, kind) = match inner.strip_prefix('*') {
                    Some(name) => (name, Segment::Rest),
                    None => (inner, Segment::Param),
                };
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                {
                    return Err(invalid(
                        "expected a capture name of letters, digits and '_' between the braces",
                    ));
                }
                if names.contains(&name) {
                    return Err(invalid("a capture name is used twice"));
                }
                if kind == Segment::Rest && i + 1 != count {
                    return Err(invalid("{*rest} must be the last segment"));
                }
                names.push(name);
                kind
            }
            None if segment.contains(['{', '}']) => {
                return Err(invalid(
                    "expected a capture to fill a whole segment, such as /files/{name}",
                ));
            }
            None => Segment::Literal(segment.into()),
        };
        segments.push(parsed);
    }
    Ok(segments.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(method: Option<Method>, template: &str) -> Route {
        Route {
            method,
            template: template.into(),
            segments: parse_template(template).expect("valid literal"),
            cost: 1,
        }
    }

    #[test]
    fn literals_rank_before_params_before_rest() {
        let literal = route(Some(Method::GET), "/users/me");
        let param = route(Some(Method::GET), "/users/{id}");
        let rest = route(Some(Method::GET), "/users/{*rest}");
        let any = route(None, "/users/{id}");
        assert_eq!(literal.specificity(&param), Ordering::Less);
        assert_eq!(param.specificity(&rest), Ordering::Less);
        assert_eq!(param.specificity(&any), Ordering::Less);
    }

    #[test]
    fn routed_placeholders_match_only_captures() {
        let param = route(None, "/users/{id}");
        let literal = route(None, "/users/me");
        let rest = route(None, "/files/{*p}");
        assert!(param.matches(&Method::GET, "/users/{user_id}", true));
        assert!(!literal.matches(&Method::GET, "/users/{id}", true));
        assert!(rest.matches(&Method::GET, "/files/{*path}", true));
        assert!(!param.matches(&Method::GET, "/users/{*path}", true));
        // The raw path is never read as placeholders.
        assert!(!literal.matches(&Method::GET, "/users/{id}", false));
        assert!(param.matches(&Method::GET, "/users/{id}", false));
    }

    #[test]
    fn rest_needs_something_to_capture() {
        let rest = route(None, "/files/{*p}");
        assert!(rest.matches(&Method::GET, "/files/a", false));
        assert!(rest.matches(&Method::GET, "/files/a/b/", false));
        assert!(rest.matches(&Method::GET, "/files//", false));
        assert!(!rest.matches(&Method::GET, "/files/", false));
        assert!(!rest.matches(&Method::GET, "/files", false));
    }
}
