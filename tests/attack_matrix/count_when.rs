//! `count_when` and its new wait for outcomes, against penalties, hold caps, reloads
//! and other processes, over real TCP to a real axum server.

use std::time::Duration;

use http::StatusCode;
use tollgate::store::Store;
use tollgate::{Algorithm, Key, MemoryStore, Penalty, Policy, Quota, RateLimitLayer, key};

use crate::common::{clock, redis, redis_at, wait_until};
use crate::desk::{Desk, at_once, attempt, serve, tally};

/// One failed login a minute per user, the first refusal boxes for 10 minutes.
fn one_failure(algorithm: Algorithm) -> Policy {
    Policy::new("failed-logins", Quota::per_minute(1))
        .expect("policy")
        .algorithm(algorithm)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
}

fn layer(policy: Policy, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .policy(policy)
        .store(store)
        .build()
        .expect("layer")
}

fn user(name: &str) -> Key {
    let request = attempt(name, "x", false);
    let (parts, _) = request.into_parts();
    one_failure(Algorithm::Gcra).key_of(&parts).expect("a key")
}

async fn trips(layer: &RateLimitLayer, name: &str) -> (u32, bool) {
    let o = layer
        .limiter()
        .offences("failed-logins", &user(name))
        .await
        .expect("offences");
    (o.trips, o.blocked_for.is_some())
}

/// A quota of one: 20 right passwords at once, each waits its turn behind the one
/// pending, all served, no box; on every algorithm.
async fn twenty_right_passwords_on_a_quota_of_one(store: impl Store + Clone) {
    for algorithm in Algorithm::ALL {
        let desk = Desk::new();
        desk.open();
        let layer = layer(one_failure(algorithm), store.clone());
        let server = serve(&layer, &desk).await;
        let name: &'static str = Box::leak(format!("office-{algorithm}").into_boxed_str());
        let counts = tally(at_once(&server, 20, name, "right")).await;
        assert_eq!(counts, (20, 0, 0), "{algorithm}");
        wait_until("outcomes known", || layer.awaiting_outcomes() == 0).await;
        assert_eq!(trips(&layer, name).await, (0, false), "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_at_once_on_a_quota_of_one_are_all_served_unboxed_on_memory() {
    twenty_right_passwords_on_a_quota_of_one(MemoryStore::with_clock(clock())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_at_once_on_a_quota_of_one_are_all_served_unboxed_on_redis() {
    twenty_right_passwords_on_a_quota_of_one(redis("one-right", clock())).await;
}

/// Requests waiting for outcomes are held: with `max_held(3)`, one pending login and
/// 20 more at once, `held()` never says more than 3, those past it are refused
/// without an offence, and the caller is never boxed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_outcomes_are_held_within_max_held_and_never_boxed() {
    let desk = Desk::new();
    let layer = layer(
        one_failure(Algorithm::SlidingWindowLog),
        MemoryStore::with_clock(clock()),
    )
    .max_held(3);
    let server = serve(&layer, &desk).await;
    let first = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("nat", "right", true)).await.status })
    };
    wait_until("first pending", || desk.reached() == (1, 0)).await;
    let mut rest = at_once(&server, 20, "nat", "right");
    let mut most = 0;
    for _ in 0..100 {
        most = most.max(layer.held());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Those the layer could not hold were answered before any outcome was known.
    let mut early = 0;
    while let Some(reply) = rest.try_join_next() {
        assert_eq!(
            reply.expect("a reply").status,
            StatusCode::TOO_MANY_REQUESTS
        );
        early += 1;
    }
    assert_eq!((most, early), (3, 17), "(held at most, refused at once)");
    desk.open();
    let (ok, wrong, refused) = tally(rest).await;
    let refused = refused + early;
    assert_eq!(first.await.expect("first"), StatusCode::OK);
    assert!(most <= 3, "held() said {most} with max_held(3)");
    assert_eq!(wrong, 0);
    assert_eq!(ok + refused, 20);
    assert!(ok >= 3, "{ok} served, {refused} refused");
    wait_until("outcomes known", || layer.awaiting_outcomes() == 0).await;
    assert_eq!(trips(&layer, "nat").await, (0, false));
}

/// Per key too: `max_held_per_key(2)` bounds one caller's waiters for outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_waiting_for_outcomes_is_bounded_per_key() {
    let desk = Desk::new();
    let layer = layer(
        one_failure(Algorithm::Gcra),
        MemoryStore::with_clock(clock()),
    )
    .max_held_per_key(2);
    let server = serve(&layer, &desk).await;
    let first = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("greedy", "right", true)).await.status })
    };
    wait_until("first pending", || desk.reached() == (1, 0)).await;
    let rest = at_once(&server, 10, "greedy", "right");
    let mut most = 0;
    for _ in 0..100 {
        most = most.max(layer.held());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    desk.open();
    let (ok, _, refused) = tally(rest).await;
    assert_eq!(first.await.expect("first"), StatusCode::OK);
    assert!(most <= 2, "held() said {most} with max_held_per_key(2)");
    assert_eq!(ok + refused, 10);
    wait_until("outcomes known", || layer.awaiting_outcomes() == 0).await;
    assert_eq!(trips(&layer, "greedy").await, (0, false));
}

/// A login pending under `FixedWindow` 5/min when a reload makes the limit GCRA: its
/// refund (a right password) gives nothing to the new state, so failures still reach
/// the desk exactly 5 times.
async fn a_refund_across_a_reload(store: impl Store) -> (usize, usize) {
    a_refund_across_a_reload_by(store, false).await
}

/// `through_limiter`: the reload goes through `layer.limiter().reload` (limits only,
/// the layer keeps its rules) instead of `layer.reload`.
async fn a_refund_across_a_reload_by(store: impl Store, through_limiter: bool) -> (usize, usize) {
    let policy = |algorithm| {
        Policy::new("failed-logins", Quota::per_minute(5))
            .expect("policy")
            .algorithm(algorithm)
            .key(key::header("x-user").expect("a header"))
            .count_when(|status| status == StatusCode::UNAUTHORIZED)
            .wait_for_outcomes(Duration::from_millis(200))
    };
    let desk = Desk::new();
    let layer = layer(policy(Algorithm::FixedWindow), store);
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("eve", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    if through_limiter {
        layer
            .limiter()
            .reload([policy(Algorithm::Gcra).limit().clone()])
            .expect("reload");
    } else {
        layer.reload([policy(Algorithm::Gcra)]).expect("reload");
    }
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(server.send(attempt("eve", "wrong", false)).await.status);
    }
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    wait_until("outcomes known", || layer.awaiting_outcomes() == 0).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    for _ in 0..3 {
        statuses.push(server.send(attempt("eve", "wrong", false)).await.status);
    }
    let reached_desk = statuses
        .iter()
        .filter(|s| **s == StatusCode::UNAUTHORIZED)
        .count();
    (reached_desk, desk.reached().1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_when_refund_across_a_reload_gives_nothing_on_memory() {
    assert_eq!(
        a_refund_across_a_reload(MemoryStore::with_clock(clock())).await,
        (5, 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_when_refund_across_a_reload_gives_nothing_on_redis() {
    assert_eq!(
        a_refund_across_a_reload(redis("cw-reload", clock())).await,
        (5, 5)
    );
}

/// Two processes on one Redis, polling for each other: process A holds one pending
/// right login on a quota of one; process B gets 5 right logins at once. Once A's
/// outcome is known, B serves all 5 in turn and nobody is boxed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_logins_in_another_process_wait_for_its_outcome_and_are_served() {
    let c = clock();
    let policy = || {
        one_failure(Algorithm::SlidingWindowLog)
            .poll_other_processes(Duration::from_millis(10))
            .wait_for_outcomes(Duration::from_secs(5))
    };
    // B is another process: a store of its own on the same prefix.
    let prefix = support::redis_server::unique_prefix("two-processes");
    let a = layer(policy(), redis_at(&prefix, c.clone()));
    let b = layer(policy(), redis_at(&prefix, c.clone()));
    let (desk_a, desk_b) = (Desk::new(), Desk::new());
    desk_b.open();
    let (server_a, server_b) = (serve(&a, &desk_a).await, serve(&b, &desk_b).await);
    let pending = {
        let server = server_a.clone();
        tokio::spawn(async move { server.send(attempt("office", "right", true)).await.status })
    };
    wait_until("pending in A", || desk_a.reached() == (1, 0)).await;
    let rest = at_once(&server_b, 5, "office", "right");
    tokio::time::sleep(Duration::from_millis(100)).await;
    desk_a.open();
    assert_eq!(pending.await.expect("A"), StatusCode::OK);
    assert_eq!(tally(rest).await, (5, 0, 0));
    wait_until("outcomes known", || {
        a.awaiting_outcomes() == 0 && b.awaiting_outcomes() == 0
    })
    .await;
    assert_eq!(trips(&a, "office").await, (0, false));
}

/// The same with wrong passwords in B: exactly one reaches B's desk (A's right login
/// gives the one unit back), the others are refused and box the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_logins_polling_another_process_reach_the_desk_once() {
    let c = clock();
    let policy = || {
        one_failure(Algorithm::SlidingWindowLog)
            .poll_other_processes(Duration::from_millis(10))
            .wait_for_outcomes(Duration::from_millis(600))
    };
    let prefix = support::redis_server::unique_prefix("two-processes-wrong");
    let a = layer(policy(), redis_at(&prefix, c.clone()));
    let b = layer(policy(), redis_at(&prefix, c.clone()));
    let (desk_a, desk_b) = (Desk::new(), Desk::new());
    desk_b.open();
    let (server_a, server_b) = (serve(&a, &desk_a).await, serve(&b, &desk_b).await);
    let pending = {
        let server = server_a.clone();
        tokio::spawn(async move { server.send(attempt("mallory", "right", true)).await.status })
    };
    wait_until("pending in A", || desk_a.reached() == (1, 0)).await;
    let rest = at_once(&server_b, 8, "mallory", "wrong");
    tokio::time::sleep(Duration::from_millis(100)).await;
    desk_a.open();
    assert_eq!(pending.await.expect("A"), StatusCode::OK);
    let (_, wrong, refused) = tally(rest).await;
    assert_eq!((wrong, refused), (1, 7));
    assert_eq!(desk_b.reached(), (0, 1));
    assert!(trips(&a, "mallory").await.1, "not boxed");
}

/// A client that leaves while its request polls another process for outcomes takes
/// nothing with it: process A holds one right login on a quota of one; 5 wrong logins
/// in process B poll and their clients leave; once A's outcome is known, one wrong
/// login in B reaches its desk, the next is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_leaving_while_polling_another_process_leave_nothing_charged() {
    let c = clock();
    let policy = || {
        Policy::new("failed-logins", Quota::per_minute(1))
            .expect("policy")
            .algorithm(Algorithm::SlidingWindowLog)
            .key(key::header("x-user").expect("a header"))
            .count_when(|status| status == StatusCode::UNAUTHORIZED)
            .poll_other_processes(Duration::from_millis(5))
            .wait_for_outcomes(Duration::from_secs(5))
    };
    let prefix = support::redis_server::unique_prefix("leaving-pollers");
    let a = layer(policy(), redis_at(&prefix, c.clone()));
    let b = layer(policy(), redis_at(&prefix, c.clone()));
    let (desk_a, desk_b) = (Desk::new(), Desk::new());
    desk_b.open();
    let (server_a, server_b) = (serve(&a, &desk_a).await, serve(&b, &desk_b).await);
    let pending = {
        let server = server_a.clone();
        tokio::spawn(async move { server.send(attempt("leaver", "right", true)).await.status })
    };
    wait_until("pending in A", || desk_a.reached() == (1, 0)).await;
    let mut leaving = at_once(&server_b, 5, "leaver", "wrong");
    tokio::time::sleep(Duration::from_millis(150)).await;
    leaving.abort_all();
    while leaving.join_next().await.is_some() {}
    wait_until("B holds nobody", || b.held() == 0).await;
    desk_a.open();
    assert_eq!(pending.await.expect("A"), StatusCode::OK);
    wait_until("outcomes known", || a.awaiting_outcomes() == 0).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = server_b
        .send(attempt("leaver", "wrong", false))
        .await
        .status;
    assert_eq!(desk_b.reached(), (0, 1), "a wrong login after: {first}");
}

/// A guesser who hangs up once the desk has seen each guess (the handler still
/// running, its status never written): the guess reached the handler, so it counts.
/// Of 20 such guesses on "5 failed logins a minute", at most 5 reach the desk.
async fn guesses_that_hang_up(store: impl Store) -> usize {
    let policy = Policy::new("failed-logins", Quota::per_minute(5))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .wait_for_outcomes(Duration::from_millis(300));
    let desk = Desk::new();
    let layer = layer(policy, store);
    let server = serve(&layer, &desk).await;
    for i in 0..20 {
        let before = desk.reached().1;
        let guess = {
            let server = server.clone();
            tokio::spawn(async move { server.send(attempt("guesser", "wrong", true)).await.status })
        };
        let started = std::time::Instant::now();
        while desk.reached().1 == before && !guess.is_finished() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "guess {i} hangs"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        guess.abort();
        let _ = guess.await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    wait_until("outcomes settled", || {
        layer.awaiting_outcomes() == 0 && layer.held() == 0
    })
    .await;
    desk.reached().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_whose_client_hangs_up_in_the_handler_still_count_on_memory() {
    let reached = guesses_that_hang_up(MemoryStore::with_clock(clock())).await;
    assert_eq!(reached, 5, "guesses that reached the desk on 5 a minute");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_whose_client_hangs_up_in_the_handler_still_count_on_redis() {
    let reached = guesses_that_hang_up(redis("hang-up", clock())).await;
    assert_eq!(reached, 5, "guesses that reached the desk on 5 a minute");
}

/// A shadowed `count_when` policy never holds a request: with one login pending on a
/// quota of one, 5 more are served at once (they reach the desk while the first is
/// still in it), whether the policy is shadowed, enforced for nobody (share 0) or the
/// whole layer is in shadow.
async fn shadow_never_waits(policy: Policy, layer_shadow: bool) -> (usize, usize) {
    let desk = Desk::new();
    let layer = layer(policy, MemoryStore::with_clock(clock())).shadow(layer_shadow);
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("shadowed", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let rest = at_once(&server, 5, "shadowed", "right");
    let started = std::time::Instant::now();
    while desk.reached().0 < 6 && started.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reached_while_pending = desk.reached().0 - 1;
    desk.open();
    let (ok, _, _) = tally(rest).await;
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    (reached_while_pending, ok)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadowed_count_when_policy_never_holds_a_request() {
    let shadowed = one_failure(Algorithm::Gcra).shadow(true);
    assert_eq!(shadow_never_waits(shadowed, false).await, (5, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_when_policy_enforced_for_nobody_never_holds_a_request() {
    let nobody = one_failure(Algorithm::Gcra).enforce(0.0).expect("share");
    assert_eq!(shadow_never_waits(nobody, false).await, (5, 5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_in_shadow_never_holds_a_count_when_request() {
    assert_eq!(
        shadow_never_waits(one_failure(Algorithm::Gcra), true).await,
        (5, 5)
    );
}

/// A plan's quota from the request (`x-plan: strict` is 1 failure a minute; the
/// limit's own is 100).
fn planned() -> Policy {
    Policy::new("failed-logins", Quota::per_minute(100))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
        .quota_from(|parts| {
            (parts.headers.get("x-plan")? == "strict").then(|| Quota::per_minute(1))
        })
}

fn on_plan(
    user: &str,
    password: &str,
    hold: bool,
) -> http::Request<http_body_util::Full<bytes::Bytes>> {
    let mut request = attempt(user, password, hold);
    request
        .headers_mut()
        .insert("x-plan", http::HeaderValue::from_static("strict"));
    request
}

/// Under the caller's plan of one: one right login pending, 5 more at once wait for
/// its outcome under the plan's quota (not the limit's), all served, no box; then 5
/// wrong ones at once: one reaches the desk, and the caller is boxed.
async fn plan_waits(store: impl Store) -> ((usize, usize, usize), (u32, bool), usize) {
    let desk = Desk::new();
    let layer = layer(planned(), store);
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(on_plan("planner", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let mut rest = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let server = server.clone();
        rest.spawn(async move { server.send(on_plan("planner", "right", false)).await });
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    let rights = tally(rest).await;
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    let boxed = trips(&layer, "planner").await;
    let mut wrong = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let server = server.clone();
        wrong.spawn(async move { server.send(on_plan("planner", "wrong", false)).await });
    }
    let _ = tally(wrong).await;
    (rights, boxed, desk.reached().1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_callers_wait_for_outcomes_under_their_own_quota_on_memory() {
    let (rights, boxed, wrong) = plan_waits(MemoryStore::with_clock(clock())).await;
    assert_eq!((rights, boxed, wrong), ((5, 0, 0), (0, false), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_callers_wait_for_outcomes_under_their_own_quota_on_redis() {
    let (rights, boxed, wrong) = plan_waits(redis("plan-waits", clock())).await;
    assert_eq!((rights, boxed, wrong), ((5, 0, 0), (0, false), 1));
}

/// Guesses spread over two polling processes at once: 5 wrong logins in each, on 2
/// failures a minute: exactly 2 reach a desk in all, and the caller is boxed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_spread_over_polling_processes_reach_the_desks_the_quota_times() {
    let c = clock();
    let policy = || {
        Policy::new("failed-logins", Quota::per_minute(2))
            .expect("policy")
            .algorithm(Algorithm::SlidingWindowLog)
            .key(key::header("x-user").expect("a header"))
            .count_when(|status| status == StatusCode::UNAUTHORIZED)
            .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
            .poll_other_processes(Duration::from_millis(3))
            .wait_for_outcomes(Duration::from_millis(800))
    };
    let prefix = support::redis_server::unique_prefix("spread-guesses");
    let a = layer(policy(), redis_at(&prefix, c.clone()));
    let b = layer(policy(), redis_at(&prefix, c.clone()));
    let (desk_a, desk_b) = (Desk::new(), Desk::new());
    desk_a.open();
    desk_b.open();
    let (server_a, server_b) = (serve(&a, &desk_a).await, serve(&b, &desk_b).await);
    let from_a = at_once(&server_a, 5, "spreader", "wrong");
    let from_b = at_once(&server_b, 5, "spreader", "wrong");
    let (_, wrong_a, refused_a) = tally(from_a).await;
    let (_, wrong_b, refused_b) = tally(from_b).await;
    assert_eq!(
        (
            desk_a.reached().1 + desk_b.reached().1,
            wrong_a + wrong_b,
            refused_a + refused_b
        ),
        (2, 2, 8)
    );
    assert!(trips(&a, "spreader").await.1, "not boxed");
}

/// On one process's memory store with right logins mixed in: 10 wrong and 10 right at
/// once on 2 failures a minute: exactly 2 wrong ones reach the desk (right ones are
/// refused only once the failures are spent and known).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_and_wrong_logins_at_once_serve_every_right_one_and_the_quota_of_wrong() {
    let policy = Policy::new("failed-logins", Quota::per_minute(2))
        .expect("policy")
        .algorithm(Algorithm::Gcra)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED);
    let layer = layer(policy, MemoryStore::with_clock(clock()));
    let desk = Desk::new();
    desk.open();
    let server = serve(&layer, &desk).await;
    let wrong = at_once(&server, 10, "mixed", "wrong");
    let right = at_once(&server, 10, "mixed", "right");
    let (_, w, _) = tally(wrong).await;
    let (r, _, r_refused) = tally(right).await;
    assert_eq!((w, desk.reached().1), (2, 2));
    assert_eq!(r + r_refused, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_when_refund_across_a_limiter_reload_gives_nothing_on_memory() {
    assert_eq!(
        a_refund_across_a_reload_by(MemoryStore::with_clock(clock()), true).await,
        (5, 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_when_refund_across_a_limiter_reload_gives_nothing_on_redis() {
    assert_eq!(
        a_refund_across_a_reload_by(redis("cw-limiter-reload", clock()), true).await,
        (5, 5)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_at_once_on_a_quota_of_one_are_all_served_unboxed_through_a_lease() {
    let c = clock();
    let leased = tollgate::store::LeasedStore::builder(MemoryStore::with_clock(c.clone()))
        .clock(c)
        .build();
    twenty_right_passwords_on_a_quota_of_one(leased).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_at_once_on_a_quota_of_one_are_all_served_unboxed_through_a_lease_on_redis()
{
    let c = clock();
    let leased = tollgate::store::LeasedStore::builder(redis("leased-rights", c.clone()))
        .clock(c)
        .build();
    twenty_right_passwords_on_a_quota_of_one(leased).await;
}

/// Through a lease, the README recipe (5 failed logins a minute, then a box): 30
/// right logins at once are all served and box nobody; then 10 wrong at once reach
/// the desk 5 times and box the caller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failed_logins_recipe_holds_through_a_lease() {
    let c = clock();
    let leased = tollgate::store::LeasedStore::builder(MemoryStore::with_clock(c.clone()))
        .clock(c)
        .build();
    let policy = Policy::new("failed-logins", Quota::per_minute(5))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)));
    let desk = Desk::new();
    desk.open();
    let layer = layer(policy, leased);
    let server = serve(&layer, &desk).await;
    assert_eq!(
        tally(at_once(&server, 30, "office", "right")).await,
        (30, 0, 0)
    );
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    assert!(!trips(&layer, "office").await.1);
    let (_, wrong, refused) = tally(at_once(&server, 10, "office", "wrong")).await;
    assert_eq!((wrong, refused, desk.reached().1), (5, 5, 5));
    assert!(trips(&layer, "office").await.1, "not boxed");
}

/// The office behind a NAT while the primary store fails: 5 right logins pending on
/// the primary (the quota of "5 failed logins a minute"), the primary goes down, their
/// outcomes are known (all right). The next 5 right logins, decided on the insurance,
/// are served and nobody is boxed: a right login never trips the box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "BROKEN: count_when x Fallback; 5 right logins' refunds dropped when the primary failed: next 5 right logins 429 and the office boxed 600 s"]
async fn right_logins_pending_when_the_primary_fails_never_box_the_office() {
    let c = clock();
    let primary = crate::failover::Switched::new(&c);
    let store = crate::failover::fallback(&primary, &c);
    let policy = Policy::new("failed-logins", Quota::per_minute(5))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
        .wait_for_outcomes(Duration::from_millis(500));
    let desk = Desk::new();
    let layer = layer(policy, store);
    let server = serve(&layer, &desk).await;
    let mut pending = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let server = server.clone();
        pending.spawn(async move { server.send(attempt("nat", "right", true)).await });
    }
    wait_until("5 pending", || desk.reached() == (5, 0)).await;
    primary.set(false);
    desk.open();
    assert_eq!(tally(pending).await, (5, 0, 0));
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(server.send(attempt("nat", "right", false)).await.status);
    }
    let boxed = layer
        .limiter()
        .offences("failed-logins", &user("nat"))
        .await
        .map(|o| o.blocked_for);
    assert!(
        after.iter().all(|s| *s == StatusCode::OK) && matches!(boxed, Ok(None)),
        "right logins after the failover: {after:?}; box: {boxed:?}"
    );
}

/// The other way round: 5 right logins pending on the insurance while the primary is
/// down; the primary comes back (and is charged what the insurance admitted); then
/// their outcomes are known (all right). The next 5 right logins, on the primary, are
/// served and nobody is boxed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_logins_pending_across_the_primarys_return_never_box_the_office() {
    let c = clock();
    let primary = crate::failover::Switched::new(&c);
    let store = crate::failover::fallback(&primary, &c);
    let policy = Policy::new("failed-logins", Quota::per_minute(5))
        .expect("policy")
        .algorithm(Algorithm::SlidingWindowLog)
        .key(key::header("x-user").expect("a header"))
        .count_when(|status| status == StatusCode::UNAUTHORIZED)
        .penalty(Penalty::after(1).block_for(Duration::from_secs(600)))
        .wait_for_outcomes(Duration::from_millis(500));
    let desk = Desk::new();
    let layer = layer(policy, store.clone());
    let server = serve(&layer, &desk).await;
    primary.set(false);
    let mut pending = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let server = server.clone();
        pending.spawn(async move { server.send(attempt("nat2", "right", true)).await });
    }
    wait_until("5 pending", || desk.reached() == (5, 0)).await;
    primary.set(true);
    let probe = Key::from("probe");
    let started = std::time::Instant::now();
    while !store.serving_primary() {
        assert!(started.elapsed() < crate::common::HANG, "never back");
        let _ = layer.limiter().check("failed-logins", &probe, 0).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    desk.open();
    assert_eq!(tally(pending).await, (5, 0, 0));
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut after = Vec::new();
    for _ in 0..5 {
        after.push(server.send(attempt("nat2", "right", false)).await.status);
    }
    let boxed = layer
        .limiter()
        .offences("failed-logins", &user("nat2"))
        .await
        .map(|o| o.blocked_for);
    assert!(
        after.iter().all(|s| *s == StatusCode::OK) && matches!(boxed, Ok(None)),
        "right logins after the primary's return: {after:?}; box: {boxed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn right_passwords_at_once_on_a_quota_of_one_are_all_served_unboxed_on_the_cluster() {
    twenty_right_passwords_on_a_quota_of_one(crate::common::cluster("one-right", clock())).await;
}

/// A login refused because its wait for outcomes ran out says when to retry: a
/// `Retry-After` of at most the quota's period (60 s), and the `RateLimit` header
/// names the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_refused_at_the_end_of_its_wait_says_when_to_retry() {
    let policy = one_failure(Algorithm::Gcra).wait_for_outcomes(Duration::from_millis(100));
    let layer = layer(policy, MemoryStore::with_clock(clock()));
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("late", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let refused = server.send(attempt("late", "right", false)).await;
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused
        .header("retry-after")
        .parse()
        .unwrap_or_else(|_| panic!("retry-after {:?}", refused.header("retry-after")));
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    assert!(
        refused.header("ratelimit").contains("failed-logins"),
        "{:?}",
        refused.headers
    );
}

/// A request is decided by one whole set: a right login pending under "count only
/// 401" when a reload makes the policy count every status (same limit) is still
/// judged by the set it was admitted under: given back, and the next login fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_outcome_is_judged_by_the_set_it_was_admitted_under() {
    let base = || {
        Policy::new("failed-logins", Quota::per_minute(1))
            .expect("policy")
            .algorithm(Algorithm::Gcra)
            .key(key::header("x-user").expect("a header"))
    };
    let layer = layer(
        base().count_when(|status| status == StatusCode::UNAUTHORIZED),
        MemoryStore::with_clock(clock()),
    );
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("judged", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    layer.reload([base()]).expect("reload");
    desk.open();
    assert_eq!(pending.await.expect("pending"), StatusCode::OK);
    wait_until("outcomes", || layer.awaiting_outcomes() == 0).await;
    let next = server.send(attempt("judged", "right", false)).await.status;
    assert_eq!(next, StatusCode::OK);
}

/// A reload that removes the policy while a login is pending and others wait for its
/// outcome: every request is answered (no panic, no hang), and the removed policy's
/// outcome table empties.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_removing_the_policy_under_pending_outcomes_answers_everyone() {
    let layer = layer(
        one_failure(Algorithm::Gcra).wait_for_outcomes(Duration::from_secs(2)),
        MemoryStore::with_clock(clock()),
    );
    let desk = Desk::new();
    let server = serve(&layer, &desk).await;
    let pending = {
        let server = server.clone();
        tokio::spawn(async move { server.send(attempt("gone", "right", true)).await.status })
    };
    wait_until("pending", || desk.reached() == (1, 0)).await;
    let waiting = at_once(&server, 3, "gone", "right");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let other = Policy::new("other", Quota::per_minute(100))
        .expect("policy")
        .key(key::header("x-user").expect("a header"));
    layer.reload([other]).expect("reload");
    desk.open();
    assert_eq!(pending.await.expect("no panic"), StatusCode::OK);
    let counts = tokio::time::timeout(Duration::from_secs(10), tally(waiting))
        .await
        .expect("no hang");
    assert_eq!(counts.0 + counts.2, 3, "{counts:?}");
    wait_until("the table empties", || layer.awaiting_outcomes() == 0).await;
    assert_eq!(
        server.send(attempt("gone", "right", false)).await.status,
        StatusCode::OK
    );
}
