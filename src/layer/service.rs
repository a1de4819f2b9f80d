//! [`RateLimit`]: the service the layer wraps around yours.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use http_body::Body;
use tower_layer::Layer;
use tower_service::Service;

use crate::Limiter;
use crate::layer::RateLimitBody;
use crate::layer::context::rejection;
use crate::layer::few::{Checks, Claims};
use crate::layer::future::{ResponseFuture, take_ready};
use crate::layer::grpc::{GrpcContentType, grpc_flavour};
use crate::layer::headers::Report;
use crate::layer::in_flight_entry::Claim;
use crate::layer::limiter_calls::{LayerCheck, Pending};
use crate::layer::pending_outcomes::{self, FirstTurn, Parked};
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::shared::{Shared, View};
use crate::layer::{Decisions, MissingKey};
use crate::observe::{self, Miss, Outcome};

/// Rate limiting around an inner service; built by [`RateLimitLayer`](crate::RateLimitLayer).
///
/// Clones share the layer's limiter and state.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> RateLimit<S> {
    /// Rate limits `inner` with `limiter`'s policies and the layer's default options;
    /// the same as `RateLimitLayer::new(limiter).layer(inner)`, for which
    /// [`RateLimitLayer`](crate::RateLimitLayer) has the options.
    ///
    /// ```
    /// use tollgate::{Limit, Limiter, Quota};
    /// use tollgate::layer::RateLimit;
    /// let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// let service = RateLimit::new(tower::service_fn(|_: http::Request<()>| async {
    ///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    /// }), limiter);
    /// let _inner = service.into_inner();
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn new(inner: S, limiter: Limiter) -> Self {
        crate::RateLimitLayer::new(limiter).layer(inner)
    }

    pub(crate) fn with_shared(inner: S, shared: Arc<Shared>) -> Self {
        Self { inner, shared }
    }

    /// The wrapped service.
    ///
    /// ```
    /// # use tollgate::{Limit, Limiter, Quota};
    /// # let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// let service = tollgate::layer::RateLimit::new(7_u8, limiter);
    /// assert_eq!(*service.get_ref(), 7);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    ///
    /// ```
    /// # use tollgate::{Limit, Limiter, Quota};
    /// # let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// let mut service = tollgate::layer::RateLimit::new(7_u8, limiter);
    /// *service.get_mut() += 1;
    /// assert_eq!(*service.get_ref(), 8);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped (the limiter's state lives on in its other
    /// clones and in the store).
    ///
    /// ```
    /// # use tollgate::{Limit, Limiter, Quota};
    /// # let limiter = Limiter::builder().limit(Limit::new("api", Quota::per_second(5))?).build()?;
    /// assert_eq!(tollgate::layer::RateLimit::new(7_u8, limiter).into_inner(), 7);
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", &self.shared.limiter)
            .finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ResBody: Body<Data = Bytes>,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the inner service's: limits are decided per request, never by
        // holding back readiness (which would throttle every caller at once).
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &self.shared;
        let (parts, body) = request.into_parts();
        let grpc = grpc_flavour(&parts.method, &parts.headers);

        if shared.deny.iter().any(|deny| deny(&parts)) {
            let info = RejectionInfo::without_decisions(RejectReason::Denied, None);
            return ResponseFuture::answered(rejection(
                shared,
                &shared.view(),
                grpc,
                &info,
                Report::default(),
            ));
        }
        if shared.allow.iter().any(|allow| allow(&parts)) {
            return ResponseFuture::unlimited(self.inner.call(unchecked(shared, parts, body)));
        }

        // One set of policies decides the whole request, even across a reload.
        let view = shared.view();
        let (checks, claims, missing_key) = gather(shared, &view, &parts);
        if let Some(period) = missing_key {
            let info = RejectionInfo::without_decisions(
                RejectReason::MissingKey,
                Some(period.max(Duration::from_secs(1))),
            );
            return ResponseFuture::answered(rejection(
                shared,
                &view,
                grpc,
                &info,
                Report::default(),
            ));
        }
        if claims.is_empty() && checks.is_empty() {
            return ResponseFuture::unlimited(self.inner.call(unchecked(shared, parts, body)));
        }
        let request = Request::from_parts(parts, body);
        // `count_when`: a request of a caller whose charges await their outcome looks
        // before it is charged, and may wait for them (see `pending_outcomes`).
        match pending_outcomes::first_turn(shared, &view, &checks) {
            None => {}
            Some(FirstTurn::Now(hold)) => {
                return checked(
                    shared,
                    view,
                    &mut self.inner,
                    request,
                    (checks, claims),
                    grpc,
                )
                .holding(hold);
            }
            Some(FirstTurn::Later(first, targets)) => {
                let parked = Parked {
                    shared: shared.clone(),
                    view,
                    checks,
                    claims,
                    grpc,
                };
                return ResponseFuture::awaiting(
                    pending_outcomes::await_turn(first, targets, parked),
                    take_ready(&mut self.inner),
                    request,
                );
            }
        }
        checked(
            shared,
            view,
            &mut self.inner,
            request,
            (checks, claims),
            grpc,
        )
    }
}

/// The future of a request with rate `checks` and in-flight `claims`: decided now on
/// a store that answers at once, else on its way.
pub(super) fn checked<S, ReqBody, ResBody>(
    shared: &Arc<Shared>,
    view: Arc<View>,
    inner: &mut S,
    request: Request<ReqBody>,
    (checks, claims): (Checks, Claims),
    grpc: Option<GrpcContentType>,
) -> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    if !claims.is_empty() {
        return ResponseFuture::entering(shared, view, inner, request, (checks, claims), grpc);
    }
    // The memory store decides here and now: an admitted request goes straight to
    // the inner service. Only a request that waits (a remote store, a leaky-bucket
    // delay) takes the ready service along and leaves a clone in its place.
    match shared.decide(&view, &checks) {
        Pending::Ready(result) => {
            ResponseFuture::decided(shared.clone(), view, inner, request, checks, grpc, result)
        }
        Pending::Waiting(decision) => ResponseFuture::deciding(
            shared.clone(),
            view,
            take_ready(inner),
            request,
            checks,
            grpc,
            decision,
        ),
    }
}

/// A request no policy checks (allowed, or every policy skipped or free), passed on
/// with empty [`Decisions`](crate::layer::Decisions) unless the layer leaves them out.
fn unchecked<ReqBody>(shared: &Shared, mut parts: Parts, body: ReqBody) -> Request<ReqBody> {
    if shared.decisions_extension {
        Decisions::record_none(&mut parts.extensions);
    }
    Request::from_parts(parts, body)
}

/// What a request asks of each policy that applies to it: its rate checks, its
/// in-flight claims, and the period of an enforced policy that rejects it for having
/// no key.
#[inline]
fn gather(shared: &Shared, view: &View, parts: &Parts) -> (Checks, Claims, Option<Duration>) {
    let mut checks = Checks::new();
    let mut claims = Claims::new();
    let mut missing_key = None;
    for (index, policy) in view.policies().iter().enumerate() {
        // Whether the policy applies to anything is watched over the first requests.
        let watch = &view.metrics[index].unapplied;
        if !policy.applies_to(parts) {
            watch.passed_over(policy, || policy.passed_over(parts));
            continue;
        }
        match policy.key_of(parts) {
            Some(key) => {
                watch.applied();
                let enforced = !shared.shadow && policy.enforces(&key);
                // A running request takes a slot whatever it costs.
                if let Some(max) = policy.get_in_flight() {
                    claims.push(Claim {
                        index,
                        key,
                        max,
                        shadow: !enforced,
                    });
                }
                let cost = policy.cost_of(parts);
                // Free requests skip the store entirely.
                if cost > 0 && policy.has_rate() {
                    checks.push(LayerCheck {
                        index,
                        key,
                        cost: u64::from(cost),
                        quota: policy.quota_of(parts),
                        enforced,
                    });
                }
            }
            None if policy.missing_key() == MissingKey::Reject => {
                watch.applied();
                // Without a key there is no fingerprint: only a policy that
                // enforces every caller rejects it.
                let enforced = !shared.shadow && policy.get_rollout().enforces_all();
                let outcome = if enforced {
                    missing_key = Some(policy.quota().period());
                    Outcome::Rejected
                } else {
                    Outcome::ShadowRejected
                };
                observe::refused(&view.metrics[index], policy.name(), outcome, None);
            }
            None => watch.passed_over(policy, || Miss::NoKey),
        }
    }
    (checks, claims, missing_key)
}
