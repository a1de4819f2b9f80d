//! Route templates (`/users/{id}`, `/files/{*rest}`) and how a request's path or
//! axum's matched route is matched against them, most specific first.

use std::cmp::Ordering;

use http::Method;
use http::request::Parts;

use crate::ConfigError;

/// The route axum matched, if the request went through an axum router.
pub(super) fn matched_path(parts: &Parts) -> Option<&str> {
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
pub(super) struct Route {
    pub(super) method: Option<Method>,
    pub(super) template: Box<str>,
    segments: Box<[Segment]>,
    pub(super) cost: u32,
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
    /// The route of `template` (for `method`, or any) costing `cost`; a bad template
    /// is an error naming it as `what` ("cost route", or "route" for a policy's scope).
    pub(super) fn new(
        method: Option<Method>,
        template: &str,
        cost: u32,
        what: &str,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            segments: parse_template(template, what)?,
            template: template.into(),
            method,
            cost,
        })
    }

    pub(super) fn matches(&self, method: &Method, path: &str, routed: bool) -> bool {
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
    pub(super) fn specificity(&self, other: &Route) -> Ordering {
        let by_path = self
            .segments
            .iter()
            .map(Segment::rank)
            .cmp(other.segments.iter().map(Segment::rank));
        by_path.then_with(|| self.method_rank().cmp(&other.method_rank()))
    }

    /// Among equally specific templates: the request's own method, then GET (which
    /// may be pricing a HEAD), then any method.
    pub(super) fn method_rank(&self) -> u8 {
        match &self.method {
            Some(m) if *m == Method::GET => 1,
            Some(_) => 0,
            None => 2,
        }
    }

    /// Whether the two routes match exactly the same requests.
    pub(super) fn ties_with(&self, other: &Route) -> bool {
        self.method == other.method && self.segments == other.segments
    }

    pub(super) fn describe(&self) -> String {
        match &self.method {
            Some(method) => format!("{method} {}", self.template),
            None => format!("{} (any method)", self.template),
        }
    }
}

fn parse_template(template: &str, what: &str) -> Result<Box<[Segment]>, ConfigError> {
    let invalid = |why: &str| {
        ConfigError::new(format!(
            "invalid {what} \"{}\": {why}",
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
            segments: parse_template(template, "route").expect("valid literal"),
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
