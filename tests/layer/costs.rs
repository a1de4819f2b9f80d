//! Cost tables: template matching, precedence, methods, axum's `MatchedPath`, the
//! default, and build-time errors that name the route.

use http::Method;
use http::request::Parts;
use proptest::prelude::*;
use tollgate::layer::Costs;
use tollgate::{Algorithm, Policy, Quota, RateLimitLayer};

fn parts(method: Method, uri: &str) -> Parts {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .expect("request")
        .into_parts()
        .0
}

fn table() -> Costs {
    Costs::new()
        .route(Method::POST, "/users", 2)
        .and_then(|c| c.route(Method::GET, "/users/{id}", 3))
        .and_then(|c| c.route(Method::GET, "/users/me", 0))
        .and_then(|c| c.route(Method::GET, "/users/{id}/posts/{post}", 4))
        .and_then(|c| c.route(Method::GET, "/users/me/{*rest}", 5))
        .and_then(|c| c.route(Method::GET, "/files/{*path}", 6))
        .and_then(|c| c.route(Method::GET, "/files/{name}", 7))
        .and_then(|c| c.route(Method::HEAD, "/files/{name}", 8))
        .and_then(|c| c.route_any("/admin/{*rest}", 9))
        .and_then(|c| c.route(Method::DELETE, "/admin/{*rest}", 10))
        .and_then(|c| c.route(Method::GET, "/", 11))
        .and_then(|c| c.route(Method::GET, "/slash/", 12))
        .expect("valid table")
        .default(1)
}

#[test]
fn templates_match_as_documented() {
    let costs = table();
    let cases: &[(Method, &str, u32)] = &[
        (Method::POST, "/users", 2),
        (Method::GET, "/users", 1), // no GET /users route: the default
        (Method::GET, "/users/42", 3),
        (Method::GET, "/users/42?verbose=1", 3), // the query is not part of the path
        (Method::GET, "/users/", 1),             // {id} needs a non-empty segment
        (Method::GET, "/users/42/", 1),          // a trailing slash is a segment
        (Method::GET, "/users/me", 0),           // a literal beats {id}
        (Method::GET, "/users/7/posts/9", 4),
        (Method::GET, "/users/me/posts/9", 5), // literal "me" decides at segment 2
        (Method::GET, "/users/me/x", 5),
        (Method::GET, "/files/a.txt", 7), // {name} beats {*path}
        (Method::GET, "/files/a/b.txt", 6),
        (Method::GET, "/files/", 1), // {*path} needs something to capture
        (Method::GET, "/files", 1),
        (Method::HEAD, "/files/a.txt", 8), // a HEAD route beats GET for HEAD
        (Method::HEAD, "/files/a/b.txt", 6), // GET routes price HEAD requests
        (Method::PUT, "/admin/x/y", 9),
        (Method::DELETE, "/admin/x", 10), // the method-specific route beats any
        (Method::GET, "/", 11),
        (Method::GET, "/slash/", 12),
        (Method::GET, "/slash", 1),
        (Method::GET, "/users/%6De", 3), // compared raw: "%6De" is not "me"
    ];
    for (method, uri, cost) in cases {
        assert_eq!(
            costs.cost(&parts(method.clone(), uri)),
            *cost,
            "{method} {uri}"
        );
    }
}

#[test]
fn insertion_order_does_not_change_precedence() {
    let forwards = Costs::new()
        .route(Method::GET, "/a/{x}", 1)
        .and_then(|c| c.route(Method::GET, "/a/b", 2))
        .and_then(|c| c.route_any("/a/b", 3))
        .expect("valid");
    let backwards = Costs::new()
        .route_any("/a/b", 3)
        .and_then(|c| c.route(Method::GET, "/a/b", 2))
        .and_then(|c| c.route(Method::GET, "/a/{x}", 1))
        .expect("valid");
    for costs in [forwards, backwards] {
        assert_eq!(costs.cost(&parts(Method::GET, "/a/b")), 2);
        assert_eq!(costs.cost(&parts(Method::POST, "/a/b")), 3);
        assert_eq!(costs.cost(&parts(Method::GET, "/a/c")), 1);
    }
}

#[test]
fn the_default_and_closures_price_what_no_route_matches() {
    assert_eq!(Costs::new().cost(&parts(Method::GET, "/")), 1);
    assert_eq!(
        <Costs as Default>::default()
            .default(0)
            .cost(&parts(Method::GET, "/")),
        0
    );
    let by_closure = Costs::from_fn(|p: &Parts| if p.uri.path().len() > 5 { 2 } else { 1 })
        .route(Method::GET, "/long/path", 9)
        .expect("valid");
    assert_eq!(by_closure.cost(&parts(Method::GET, "/long/path")), 9);
    assert_eq!(by_closure.cost(&parts(Method::GET, "/other/path")), 2);
    assert_eq!(by_closure.cost(&parts(Method::GET, "/a")), 1);
    // `default` replaces the closure.
    assert_eq!(
        by_closure
            .default(4)
            .cost(&parts(Method::GET, "/other/path")),
        4
    );
    let from_closure: Costs = (|_: &Parts| 7).into();
    assert_eq!(from_closure.cost(&parts(Method::GET, "/")), 7);
}

#[test]
fn malformed_templates_are_config_errors_quoting_them() {
    for bad in [
        "users",
        "",
        "/users/:id",
        "/files/*path",
        "/files/{*path}/more",
        "/users/{}",
        "/users/{id",
        "/users/id}",
        "/users/{i-d}",
        "/file-{id}.txt",
        "/a/{x}/{x}",
        "/{*}",
    ] {
        let err = Costs::new().route(Method::GET, bad, 1).expect_err(bad);
        assert!(
            err.to_string().contains(&format!("\"{bad}\"")),
            "{bad}: {err}"
        );
    }
}

#[test]
fn equally_specific_routes_for_one_method_are_rejected() {
    let err = Costs::new()
        .route(Method::GET, "/users/{id}", 1)
        .and_then(|c| c.route(Method::GET, "/users/{name}", 2))
        .expect_err("tie");
    assert!(err.to_string().contains("GET /users/{name}"), "{err}");
    assert!(err.to_string().contains("GET /users/{id}"), "{err}");
    // Different methods, or any-method next to one method, do not tie.
    assert!(
        Costs::new()
            .route(Method::GET, "/users/{id}", 1)
            .and_then(|c| c.route(Method::POST, "/users/{id}", 2))
            .and_then(|c| c.route_any("/users/{id}", 3))
            .is_ok()
    );
}

#[test]
fn a_route_costing_more_than_the_capacity_fails_the_build_naming_it() {
    let policy = Policy::new("api", Quota::per_minute(100).with_burst(20).expect("burst"))
        .expect("policy")
        .costs(
            Costs::new()
                .route(Method::GET, "/cheap", 20)
                .and_then(|c| c.route(Method::POST, "/upload", 50))
                .expect("valid"),
        );
    let err = RateLimitLayer::builder()
        .policy(policy)
        .build()
        .expect_err("too costly");
    let message = err.to_string();
    assert!(message.contains("\"api\""), "{message}");
    assert!(message.contains("cost 50 for POST /upload"), "{message}");
    assert!(message.contains("capacity 20"), "{message}");

    // A window algorithm's capacity is its limit.
    let windowed = Policy::new("w", Quota::per_second(10))
        .expect("policy")
        .algorithm(Algorithm::FixedWindow)
        .costs(Costs::new().route_any("/bulk", 11).expect("valid"));
    let err = RateLimitLayer::builder()
        .policy(windowed)
        .build()
        .expect_err("too costly");
    assert!(
        err.to_string().contains("cost 11 for /bulk (any method)"),
        "{err}"
    );

    let default_too_big = Policy::new("d", Quota::per_second(3))
        .expect("policy")
        .costs(Costs::new().default(4));
    let err = RateLimitLayer::builder()
        .policy(default_too_big)
        .build()
        .expect_err("too costly");
    assert!(err.to_string().contains("default cost 4"), "{err}");

    let fits = Policy::new("ok", Quota::per_second(3))
        .expect("policy")
        .costs(
            Costs::new()
                .route(Method::POST, "/x", 3)
                .expect("valid")
                .default(0),
        );
    assert!(RateLimitLayer::builder().policy(fits).build().is_ok());
}

#[test]
fn debug_lists_routes() {
    let costs = Costs::new()
        .route(Method::POST, "/users", 2)
        .expect("valid");
    let printed = format!("{costs:?}");
    assert!(printed.contains("POST /users"), "{printed}");
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn routes_match_axums_matched_path() {
    use axum::routing::{get, post};
    use tower::ServiceExt as _;

    let costs = Costs::new()
        .route(Method::GET, "/users/{user}", 3) // axum names it {id}: names don't matter
        .and_then(|c| c.route(Method::GET, "/v1/users/me", 9)) // never axum's route
        .and_then(|c| c.route(Method::POST, "/v1/items", 4))
        .expect("valid")
        .default(1);
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let inner = axum::Router::new()
        .route("/users/{id}", get(|| async {}))
        .route("/items", post(|| async {}));
    let app = axum::Router::new()
        .nest("/v1", inner)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let (costs, record) = (costs.clone(), record.clone());
                async move {
                    let (parts, body) = request.into_parts();
                    let matched = parts
                        .extensions
                        .get::<axum::extract::MatchedPath>()
                        .map(|m| m.as_str().to_owned());
                    record
                        .lock()
                        .expect("lock")
                        .push((matched, costs.cost(&parts)));
                    next.run(axum::extract::Request::from_parts(parts, body))
                        .await
                }
            },
        ));
    for (method, path) in [
        (Method::GET, "/v1/users/me"),
        (Method::POST, "/v1/items"),
        (Method::GET, "/nowhere"),
    ] {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .body(axum::body::Body::empty())
            .expect("request");
        app.clone().oneshot(request).await.expect("response");
    }
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 3, "{seen:?}");
    // axum matched "/v1/users/{id}": our literal "/v1/users/me" is not that route, and
    // "/users/{user}" is not under /v1, so the default applies.
    assert_eq!(seen[0], (Some("/v1/users/{id}".to_owned()), 1));
    assert_eq!(seen[1], (Some("/v1/items".to_owned()), 4));
    // No route matched (404): the raw path, here matching nothing.
    assert_eq!(seen[2], (None, 1));
}

proptest! {
    #[test]
    fn random_paths_never_panic(path in "[/a-z{}*%.]{0,40}", template in "[/a-z{}*:]{0,20}") {
        let costs = table();
        if let Ok(uri) = http::Uri::try_from(path.as_str()) {
            let mut head = parts(Method::GET, "/");
            head.uri = uri;
            let cost = costs.cost(&head);
            prop_assert!(cost <= 12);
        }
        // Random templates either build or fail with an error quoting them.
        match Costs::new().route(Method::GET, &template, 1) {
            Ok(_) => prop_assert!(template.starts_with('/')),
            Err(err) => {
                let quoted = format!("\"{}\"", template.escape_debug());
                let quotes_it = err.to_string().contains(&quoted);
                prop_assert!(quotes_it, "{}", err);
            }
        }
    }
}
