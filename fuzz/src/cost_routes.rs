//! Cost-table route matching: `Costs::route`, `Costs::route_any`, `Costs::cost`.
//!
//! Input, one item per line:
//!
//! ```text
//! R GET /users/{id} 3      a route: method (or * for any), template, cost
//! D 7                      the default cost
//! Q HEAD /users/42         a request to price: method, path
//! ```
//!
//! Properties: no panic; every request costs what an independent, brute-force reading
//! of the documented rules says: of the routes that match it, the most specific
//! (segment ranks compared from the left: literal, then `{param}`, then `{*rest}`;
//! then the request's own method, then `GET` for a `HEAD`, then any method), else the
//! default.

use http::{Method, Request};
use tollgate::layer::Costs;

/// A route as the reference reads it: per segment, its rank (0 literal, 1 `{param}`,
/// 2 `{*rest}`) and, for a literal, its text.
struct Route {
    method: Option<Method>,
    segments: Vec<(u8, String)>,
    cost: u32,
}

const LITERAL: u8 = 0;
const PARAM: u8 = 1;
const REST: u8 = 2;

pub fn check(data: &[u8]) {
    let mut costs = Costs::new();
    let mut routes: Vec<Route> = Vec::new();
    let mut default = 1;
    for line in crate::lines(data) {
        let mut words = line.splitn(2, ' ');
        let (kind, rest) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        match kind {
            "R" => {
                let mut words = rest.split(' ');
                let (Some(method), Some(template)) = (words.next(), words.next()) else {
                    continue;
                };
                let cost = words.next().and_then(|c| c.parse().ok()).unwrap_or(1);
                let method = if method == "*" {
                    None
                } else {
                    match Method::from_bytes(method.as_bytes()) {
                        Ok(method) => Some(method),
                        Err(_) => continue,
                    }
                };
                let added = match &method {
                    Some(m) => costs.clone().route(m.clone(), template, cost),
                    None => costs.clone().route_any(template, cost),
                };
                match added {
                    Ok(with_route) => {
                        let route = Route {
                            method,
                            segments: segments(template),
                            cost,
                        };
                        assert!(
                            !routes
                                .iter()
                                .any(|r| r.method == route.method && r.segments == route.segments),
                            "a route that ties with an earlier one was accepted: {template:?}"
                        );
                        routes.push(route);
                        costs = with_route;
                    }
                    Err(err) => {
                        let message = err.to_string();
                        let escaped = template.escape_debug().to_string();
                        assert!(
                            message.contains(&escaped) || message.contains(template),
                            "error {message} does not quote the template {template:?}"
                        );
                    }
                }
            }
            "D" => {
                if let Ok(cost) = rest.trim().parse() {
                    default = cost;
                    costs = costs.default(cost);
                }
            }
            "Q" => {
                let Some((method, path)) = rest.split_once(' ') else {
                    continue;
                };
                let Ok(method) = Method::from_bytes(method.as_bytes()) else {
                    continue;
                };
                let Ok(request) = Request::builder().method(method).uri(path).body(()) else {
                    continue;
                };
                let (parts, ()) = request.into_parts();
                let expected =
                    reference_cost(&routes, &parts.method, parts.uri.path()).unwrap_or(default);
                assert_eq!(
                    costs.cost(&parts),
                    expected,
                    "{} {}",
                    parts.method,
                    parts.uri.path()
                );
            }
            _ => {}
        }
    }
}

/// The segments of a template `Costs` accepted.
fn segments(template: &str) -> Vec<(u8, String)> {
    template
        .strip_prefix('/')
        .unwrap_or(template)
        .split('/')
        .map(|segment| match segment.as_bytes() {
            [b'{', b'*', ..] => (REST, String::new()),
            [b'{', ..] => (PARAM, String::new()),
            _ => (LITERAL, segment.to_owned()),
        })
        .collect()
}

fn matches(route: &Route, method: &Method, path: &str) -> bool {
    let method_ok = match &route.method {
        None => true,
        Some(m) => m == method || (*m == Method::GET && *method == Method::HEAD),
    };
    let Some(path) = path.strip_prefix('/') else {
        return false;
    };
    if !method_ok {
        return false;
    }
    let mut rest = Some(path);
    for (rank, literal) in &route.segments {
        let Some(remaining) = rest else {
            return false;
        };
        if *rank == REST {
            // One or more segments, not nothing at all.
            return !remaining.is_empty();
        }
        let (head, tail) = match remaining.split_once('/') {
            Some((head, tail)) => (head, Some(tail)),
            None => (remaining, None),
        };
        let fits = if *rank == PARAM {
            !head.is_empty()
        } else {
            literal == head
        };
        if !fits {
            return false;
        }
        rest = tail;
    }
    rest.is_none()
}

fn reference_cost(routes: &[Route], method: &Method, path: &str) -> Option<u32> {
    let method_rank = |route: &Route| match &route.method {
        Some(m) if *m == Method::GET => 1,
        Some(_) => 0,
        None => 2,
    };
    let key = |route: &Route| {
        (
            route
                .segments
                .iter()
                .map(|&(rank, _)| rank)
                .collect::<Vec<u8>>(),
            method_rank(route),
        )
    };
    let mut matching: Vec<&Route> = routes
        .iter()
        .filter(|route| matches(route, method, path))
        .collect();
    matching.sort_by_key(|route| key(route));
    if let [first, second, ..] = matching.as_slice() {
        assert!(
            key(first) != key(second),
            "two equally specific routes match {method} {path}"
        );
    }
    matching.first().map(|route| route.cost)
}
