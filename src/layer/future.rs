//! [`ResponseFuture`]: awaits the decision (when the store is remote), the leaky
//! bucket's delay, then the inner service, and writes the rate-limit headers.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::layer::body::OnGrpcStatus;
use crate::layer::grpc::{GrpcContentType, grpc_http_status, grpc_response};
use crate::layer::headers::GRPC_STATUS;
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::shared::{HeldSlot, Shared};
use crate::layer::{Decisions, RateLimitBody};
use crate::observe::{self, Outcome};
use crate::store::StoreFuture;
use crate::{Decision, FailMode, Key, Rejection, StoreError};

/// A few items, kept inline when there is one: a request limited by one policy (the
/// common case) allocates nothing for its checks or its decisions.
#[derive(Debug, Clone)]
pub(crate) enum Few<T> {
    One([T; 1]),
    Many(Vec<T>),
}

impl<T> Few<T> {
    #[inline]
    pub(crate) fn new() -> Self {
        Self::Many(Vec::new())
    }

    #[inline]
    pub(crate) fn push(&mut self, item: T) {
        match self {
            Self::Many(items) if !items.is_empty() => items.push(item),
            Self::Many(_) => *self = Self::One([item]),
            Self::One(_) => {
                if let Self::One([first]) = std::mem::replace(self, Self::Many(Vec::new())) {
                    *self = Self::Many(vec![first, item]);
                }
            }
        }
    }
}

impl<T> Deref for Few<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Self::One(item) => item,
            Self::Many(items) => items,
        }
    }
}

impl<T> FromIterator<T> for Few<T> {
    #[inline]
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut few = Self::new();
        for item in iter {
            few.push(item);
        }
        few
    }
}

/// (policy index, key, cost) of each policy checked for a request.
pub(crate) type Checks = Few<(usize, Key, u64)>;

pin_project! {
    /// The future of a [`RateLimit`](crate::layer::RateLimit) response.
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S, ReqBody, S::Future>,
        // `None` when no policy applied: no headers, no refunds.
        context: Option<RequestContext>,
    }
}

pin_project! {
    // The service and the request live in the states that still need them, so they
    // share their room in the future with the inner service's own future.
    #[project = StateProj]
    enum State<S, ReqBody, F> {
        /// Waiting for a remote store's decision.
        Deciding {
            decision: StoreFuture<'static, Vec<Decision>>,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
        },
        /// Holding an admitted leaky-bucket request until its turn, in one of the
        /// layer's places for held requests.
        Delaying {
            sleep: Pin<Box<Sleep>>,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
            slot: HeldSlot,
        },
        /// The inner service is answering.
        Calling { #[pin] future: F },
        /// The layer answers itself.
        Answered { response: Option<Response<Bytes>> },
    }
}

impl<S, ReqBody, F> State<S, ReqBody, F> {
    /// Holds `request` for `delay` (a leaky-bucket turn) in `slot`, then `service`
    /// answers it.
    fn delaying(delay: Duration, slot: HeldSlot, service: S, request: Request<ReqBody>) -> Self {
        Self::Delaying {
            sleep: Box::pin(tokio::time::sleep(delay)),
            service: Some(service),
            request: Some(request),
            slot,
        }
    }
}

/// What the future needs besides its state.
pub(crate) struct RequestContext {
    shared: Arc<Shared>,
    checks: Checks,
    /// Decisions paired with their policy index, for the response headers.
    decisions: Few<(usize, Decision)>,
    grpc: Option<GrpcContentType>,
    /// Whether the store charged this request, so that a `count_when` refund has
    /// something to take back. Not when the store failed (the request passed
    /// uncounted), nor when a policy denied it (all-or-nothing: nothing was charged,
    /// though shadow mode passes it on), nor once the layer refunded it itself.
    charged: bool,
}

/// What to do with a request once the store has answered.
enum Next<ReqBody> {
    /// Call the inner service now.
    Call(Request<ReqBody>),
    /// Hold the request (leaky bucket) in a place of the layer's, then call the inner
    /// service.
    Delay(Duration, HeldSlot, Request<ReqBody>),
    /// Answer without calling the inner service; the request, body unread, is dropped.
    Answer(Response<Bytes>),
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    /// The layer answers without calling the inner service.
    pub(crate) fn answered(response: Response<Bytes>) -> Self {
        Self {
            state: State::Answered {
                response: Some(response),
            },
            context: None,
        }
    }

    /// No policy applies: the inner service answers, and no header is written.
    pub(crate) fn unlimited(future: S::Future) -> Self {
        Self {
            state: State::Calling { future },
            context: None,
        }
    }

    /// The decision is known already (memory store). An admitted request is passed to
    /// `service` at once, so the service is only cloned when the request must wait.
    pub(crate) fn decided(
        shared: Arc<Shared>,
        service: &mut S,
        request: Request<ReqBody>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
        result: Result<Vec<Decision>, StoreError>,
    ) -> Self
    where
        S: Clone,
    {
        let mut context = RequestContext::new(shared, checks, grpc);
        let state = match context.settle(request, result) {
            Next::Call(request) => State::Calling {
                future: service.call(request),
            },
            Next::Delay(delay, slot, request) => {
                State::delaying(delay, slot, take_ready(service), request)
            }
            Next::Answer(response) => return Self::answered(response),
        };
        Self {
            state,
            context: Some(context),
        }
    }

    /// The decision is on its way (remote store).
    pub(crate) fn deciding(
        shared: Arc<Shared>,
        service: S,
        request: Request<ReqBody>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
        decision: StoreFuture<'static, Vec<Decision>>,
    ) -> Self {
        Self {
            state: State::Deciding {
                decision,
                service: Some(service),
                request: Some(request),
            },
            context: Some(RequestContext::new(shared, checks, grpc)),
        }
    }
}

/// The ready service, for a future that calls it later; `service` keeps a fresh clone.
pub(crate) fn take_ready<S: Clone>(service: &mut S) -> S {
    let clone = service.clone();
    std::mem::replace(service, clone)
}

impl RequestContext {
    fn new(shared: Arc<Shared>, checks: Checks, grpc: Option<GrpcContentType>) -> Self {
        Self {
            shared,
            checks,
            decisions: Few::new(),
            grpc,
            charged: false,
        }
    }

    /// What becomes of `request` once the store has answered.
    fn settle<ReqBody>(
        &mut self,
        mut request: Request<ReqBody>,
        result: Result<Vec<Decision>, StoreError>,
    ) -> Next<ReqBody> {
        let decisions = match result {
            Ok(decisions) => decisions,
            Err(error) => return self.store_failed(request, &error),
        };
        let allowed = decisions.iter().all(|d| d.allowed);
        // All-or-nothing: the store charged the request exactly when every policy
        // admitted it.
        self.charged = allowed;
        if !allowed && !self.shared.shadow {
            observe::decided(&decisions, Outcome::Rejected);
            return Next::Answer(self.rate_limited(decisions));
        }
        let delay = if allowed {
            self.hold_for(&decisions)
        } else {
            Duration::ZERO
        };
        let mut outcome = if allowed {
            Outcome::Allowed
        } else {
            Outcome::ShadowRejected
        };
        let mut slot = None;
        if !delay.is_zero() {
            slot = HeldSlot::take(&self.shared);
            if slot.is_none() {
                if !self.shared.shadow {
                    observe::decided(&decisions, Outcome::QueueFull);
                    return Next::Answer(self.queue_full(decisions, delay));
                }
                // Shadow mode never rejects: give the place back, as the rejection
                // would, and pass the request on now rather than hold more than the cap.
                self.refund_all(&decisions);
                outcome = Outcome::ShadowQueueFull;
            }
        }
        observe::decided(&decisions, outcome);
        let indices = self.checks.iter().map(|(index, _, _)| *index);
        if self.shared.decisions_extension {
            self.decisions = indices.zip(decisions.iter().cloned()).collect();
            request.extensions_mut().insert(Decisions(decisions));
        } else {
            self.decisions = indices.zip(decisions).collect();
        }
        match slot {
            Some(slot) => Next::Delay(delay, slot, request),
            None => Next::Call(request),
        }
    }

    /// The store failed: pass the request on uncounted (fail open) or answer 503.
    fn store_failed<ReqBody>(
        &self,
        request: Request<ReqBody>,
        error: &StoreError,
    ) -> Next<ReqBody> {
        let failing_open = self.shared.fail_mode == FailMode::Open;
        observe::store_failed(error, failing_open);
        if failing_open {
            return Next::Call(request);
        }
        let info = RejectionInfo {
            reason: RejectReason::StoreUnavailable,
            decisions: Vec::new(),
            retry_after: Some(Duration::from_secs(1)),
        };
        Next::Answer(rejection(&self.shared, self.grpc, &info, &[]))
    }

    /// The rejection of a request some policy denied; its body is never read.
    fn rate_limited(&mut self, decisions: Vec<Decision>) -> Response<Bytes> {
        let indices = self.checks.iter().map(|(index, _, _)| *index);
        self.decisions = indices.zip(decisions.iter().cloned()).collect();
        // A denial whose cost can never fit has no retry time: say so rather than
        // invite a retry that cannot succeed.
        let retry_after = decisions
            .iter()
            .filter(|d| !d.allowed)
            .map(|d| d.retry_after)
            .try_fold(Duration::ZERO, |wait, retry| retry.map(|r| wait.max(r)));
        let info = RejectionInfo {
            reason: RejectReason::RateLimited,
            decisions,
            retry_after,
        };
        rejection(&self.shared, self.grpc, &info, &self.decisions)
    }

    /// How long to hold an admitted request: its longest delay, each bounded by its
    /// policy's `max_delay`. The store already denies a place beyond the bound, as
    /// measured from the latest instant it has seen; a caller's clock behind that
    /// instant hears a longer delay, which the layer does not wait out.
    fn hold_for(&self, decisions: &[Decision]) -> Duration {
        let policies = self.shared.limiter.policies();
        self.checks
            .iter()
            .zip(decisions)
            .map(|((index, _, _), d)| d.delay.min(policies[*index].get_max_delay()))
            .max()
            .unwrap_or_default()
    }

    /// The rejection of a request admitted with `delay` when the layer holds as many
    /// requests as it may; its charge is refunded. Its headers describe the state with
    /// the charge (never more quota than there may be, should the refund fail).
    fn queue_full(&mut self, decisions: Vec<Decision>, delay: Duration) -> Response<Bytes> {
        self.refund_all(&decisions);
        let indices = self.checks.iter().map(|(index, _, _)| *index);
        self.decisions = indices.zip(decisions.iter().cloned()).collect();
        let info = RejectionInfo {
            reason: RejectReason::QueueFull,
            decisions,
            retry_after: Some(delay),
        };
        rejection(&self.shared, self.grpc, &info, &self.decisions)
    }

    /// Gives back every charge of a request the store charged and the layer will not
    /// hold after all.
    fn refund_all(&mut self, decisions: &[Decision]) {
        if std::mem::take(&mut self.charged) {
            refund_charges(&self.shared, &self.checks, decisions);
        }
    }

    /// Headers and refunds once the inner service has answered. For a gRPC response
    /// whose status comes in the trailers, returns the hook that settles refunds then.
    fn finish(&self, headers: &mut HeaderMap, status: StatusCode) -> Option<OnGrpcStatus> {
        self.shared.headers.write(&self.decisions, headers);
        let policies = self.shared.limiter.policies();
        // Only what the store charged can be refunded.
        if !self.charged
            || !self
                .checks
                .iter()
                .any(|(index, _, _)| policies[*index].refunds_some_responses())
        {
            return None;
        }
        if self.grpc.is_none() {
            refund_uncounted(&self.shared, &self.checks, &self.decisions, status);
            return None;
        }
        // gRPC answers HTTP 200; its own status is in the headers of a trailers-only
        // response, else in the trailers at the end of the body.
        if let Some(code) = headers.get(GRPC_STATUS) {
            refund_uncounted(
                &self.shared,
                &self.checks,
                &self.decisions,
                grpc_http_status(code.as_bytes()),
            );
            return None;
        }
        let (shared, checks) = (self.shared.clone(), self.checks.clone());
        let decisions = self.decisions.clone();
        Some(Box::new(move |status| {
            refund_uncounted(&shared, &checks, &decisions, status);
        }))
    }
}

/// Takes back, for each checked policy whose `count_when` does not count `status`,
/// what the request's decision charged, by its receipt: a refund that arrives after
/// the charge's window rolled over (a slow response) takes nothing from the new
/// window, and a request that charged nothing (its store failed open, or shadow mode
/// let a denial through) gets nothing back.
fn refund_uncounted(
    shared: &Shared,
    checks: &Checks,
    decisions: &[(usize, Decision)],
    status: StatusCode,
) {
    let policies = shared.limiter.policies();
    // `decisions` pairs with `checks` in order; it is empty when the store failed.
    for ((index, key, _), (_, decision)) in checks.iter().zip(decisions) {
        let policy = &policies[*index];
        if policy.refunds_some_responses()
            && !policy.counts(status)
            && let Some(receipt) = decision.receipt
            && let Some(refund) = shared.limiter.refund_charge_later(*index, *key, receipt)
        {
            spawn_refund(refund);
        }
    }
}

/// Refunds, by their receipts, what every checked policy charged: the request was
/// charged, then not held.
fn refund_charges(shared: &Shared, checks: &Checks, decisions: &[Decision]) {
    for ((index, key, _), decision) in checks.iter().zip(decisions) {
        if let Some(receipt) = decision.receipt
            && let Some(refund) = shared.limiter.refund_charge_later(*index, *key, receipt)
        {
            spawn_refund(refund);
        }
    }
}

/// Runs a remote refund in the background: the response does not wait for it.
fn spawn_refund(refund: StoreFuture<'static, ()>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(error) = refund.await {
                observe::refund_failed(&error);
            }
        });
    }
}

/// The layer's own response: gRPC status or the configured HTTP rejection, plus the
/// rate-limit headers.
pub(crate) fn rejection(
    shared: &Shared,
    grpc: Option<GrpcContentType>,
    info: &RejectionInfo,
    decisions: &[(usize, Decision)],
) -> Response<Bytes> {
    let mut response = match grpc {
        Some(content_type) => grpc_response(info, content_type),
        None if !matches!(shared.rejection, Rejection::Custom(_)) => {
            shared.rejection.http_response(info)
        }
        None => {
            // A custom response keeps any rate-limit header it set itself.
            let mut response = shared.rejection.http_response(info);
            let mut headers = HeaderMap::new();
            shared.headers.write(decisions, &mut headers);
            for (name, value) in headers {
                if let Some(name) = name {
                    response.headers_mut().entry(name).or_insert(value);
                }
            }
            return response;
        }
    };
    // The built-in rejections set no rate-limit header: write them straight in.
    shared.headers.write(decisions, response.headers_mut());
    response
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Output = Result<Response<RateLimitBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let next = match this.state.as_mut().project() {
                StateProj::Deciding {
                    decision,
                    service,
                    request,
                } => {
                    let result = ready!(decision.as_mut().poll(cx));
                    let (Some(context), Some(mut service), Some(request)) =
                        (this.context.as_mut(), service.take(), request.take())
                    else {
                        unreachable!("a deciding future has its context, service and request")
                    };
                    match context.settle(request, result) {
                        Next::Call(request) => State::Calling {
                            future: service.call(request),
                        },
                        Next::Delay(delay, slot, request) => {
                            State::delaying(delay, slot, service, request)
                        }
                        Next::Answer(response) => State::Answered {
                            response: Some(response),
                        },
                    }
                }
                StateProj::Delaying {
                    sleep,
                    service,
                    request,
                    ..
                } => {
                    ready!(sleep.as_mut().poll(cx));
                    match (service.take(), request.take()) {
                        (Some(mut service), Some(request)) => State::Calling {
                            future: service.call(request),
                        },
                        _ => unreachable!("the inner service is called once"),
                    }
                }
                StateProj::Calling { future } => {
                    let mut response = ready!(future.poll(cx))?;
                    let status = response.status();
                    let on_status = this
                        .context
                        .as_ref()
                        .and_then(|context| context.finish(response.headers_mut(), status));
                    return Poll::Ready(Ok(match on_status {
                        Some(on_status) => {
                            response.map(|body| RateLimitBody::watching(body, on_status))
                        }
                        None => response.map(RateLimitBody::inner),
                    }));
                }
                StateProj::Answered { response } => {
                    let response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(response.map(RateLimitBody::rejection)));
                }
            };
            this.state.set(next);
        }
    }
}

impl<S, ReqBody> fmt::Debug for ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
