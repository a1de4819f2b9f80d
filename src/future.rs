//! [`ResponseFuture`]: awaits the decision (when the store is remote), the leaky
//! bucket's delay, then the inner service, and writes the rate-limit headers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::body::OnGrpcStatus;
use crate::headers::GRPC_STATUS;
use crate::layer::Shared;
use crate::observe::{self, Outcome};
use crate::response::{
    GrpcContentType, RejectReason, RejectionInfo, grpc_http_status, grpc_response,
};
use crate::store::StoreFuture;
use crate::{Decision, Decisions, FailMode, Key, RateLimitBody, Rejection, StoreError};

/// (policy index, key, cost) of each policy checked for a request.
type Checks = Vec<(usize, Key, u64)>;

pin_project! {
    /// The future of a [`RateLimit`](crate::RateLimit) response.
    pub struct ResponseFuture<S, ReqBody>
    where
        S: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<S::Future>,
        context: Option<RequestContext<S, ReqBody>>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        /// Waiting for a remote store's decision.
        Deciding { decision: StoreFuture<'static, Vec<Decision>> },
        /// Holding an admitted leaky-bucket request until its turn.
        Delaying { sleep: Pin<Box<Sleep>> },
        /// The inner service is answering.
        Calling { #[pin] future: F },
        /// The layer answers itself.
        Answered { response: Option<Response<Bytes>> },
    }
}

/// What the future needs besides its state.
struct RequestContext<S, ReqBody> {
    shared: Arc<Shared>,
    service: Option<S>,
    request: Option<Request<ReqBody>>,
    checks: Checks,
    /// Decisions paired with their policy index, for the response headers.
    decisions: Vec<(usize, Decision)>,
    grpc: Option<GrpcContentType>,
}

impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    /// The layer answers without calling the inner service.
    pub(crate) fn rejected(
        shared: &Shared,
        grpc: Option<GrpcContentType>,
        info: &RejectionInfo,
        decisions: &[(usize, Decision)],
    ) -> Self {
        Self {
            state: State::Answered {
                response: Some(rejection(shared, grpc, info, decisions)),
            },
            context: None,
        }
    }

    /// No policy applies: call the inner service, write no headers.
    pub(crate) fn unlimited(
        shared: Arc<Shared>,
        mut service: S,
        request: Request<ReqBody>,
    ) -> Self {
        Self {
            state: State::Calling {
                future: service.call(request),
            },
            context: Some(RequestContext {
                shared,
                service: None,
                request: None,
                checks: Vec::new(),
                decisions: Vec::new(),
                grpc: None,
            }),
        }
    }

    /// The decision is known already (memory store).
    pub(crate) fn decided(
        shared: Arc<Shared>,
        service: S,
        request: Request<ReqBody>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
        result: Result<Vec<Decision>, StoreError>,
    ) -> Self {
        let mut context = RequestContext::new(shared, service, request, checks, grpc);
        let state = context.settle(result);
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
            state: State::Deciding { decision },
            context: Some(RequestContext::new(shared, service, request, checks, grpc)),
        }
    }
}

impl<S, ReqBody> RequestContext<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    fn new(
        shared: Arc<Shared>,
        service: S,
        request: Request<ReqBody>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
    ) -> Self {
        Self {
            shared,
            service: Some(service),
            request: Some(request),
            checks,
            decisions: Vec::new(),
            grpc,
        }
    }

    /// The next state once the store has answered.
    fn settle(&mut self, result: Result<Vec<Decision>, StoreError>) -> State<S::Future> {
        let decisions = match result {
            Ok(decisions) => decisions,
            Err(error) => {
                let failing_open = self.shared.fail_mode == FailMode::Open;
                observe::store_failed(&error, failing_open);
                if failing_open {
                    return self.call_inner();
                }
                let info = RejectionInfo {
                    reason: RejectReason::StoreUnavailable,
                    decisions: Vec::new(),
                    retry_after: Some(Duration::from_secs(1)),
                };
                return State::Answered {
                    response: Some(rejection(&self.shared, self.grpc, &info, &[])),
                };
            }
        };
        let allowed = decisions.iter().all(|d| d.allowed);
        let outcome = match (allowed, self.shared.shadow) {
            (true, _) => Outcome::Allowed,
            (false, false) => Outcome::Rejected,
            (false, true) => Outcome::ShadowRejected,
        };
        observe::decided(&decisions, outcome);
        self.decisions = self
            .checks
            .iter()
            .map(|(index, _, _)| *index)
            .zip(decisions.iter().cloned())
            .collect();
        if outcome == Outcome::Rejected {
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
            // Dropping the request here drops its body unread.
            self.request = None;
            return State::Answered {
                response: Some(rejection(&self.shared, self.grpc, &info, &self.decisions)),
            };
        }
        let delay = if allowed {
            decisions.iter().map(|d| d.delay).max().unwrap_or_default()
        } else {
            Duration::ZERO
        };
        if let Some(request) = self.request.as_mut() {
            request.extensions_mut().insert(Decisions(decisions));
        }
        if delay.is_zero() {
            self.call_inner()
        } else {
            State::Delaying {
                sleep: Box::pin(tokio::time::sleep(delay)),
            }
        }
    }

    fn call_inner(&mut self) -> State<S::Future> {
        match (self.service.take(), self.request.take()) {
            (Some(mut service), Some(request)) => State::Calling {
                future: service.call(request),
            },
            _ => unreachable!("the inner service is called once"),
        }
    }

    /// Headers and refunds once the inner service has answered. For a gRPC response
    /// whose status comes in the trailers, returns the hook that settles refunds then.
    fn finish(&self, headers: &mut HeaderMap, status: StatusCode) -> Option<OnGrpcStatus> {
        self.shared.headers.write(&self.decisions, headers);
        let policies = self.shared.limiter.policies();
        if !self
            .checks
            .iter()
            .any(|(index, _, _)| policies[*index].refunds_some_responses())
        {
            return None;
        }
        if self.grpc.is_none() {
            refund_uncounted(&self.shared, &self.checks, status);
            return None;
        }
        // gRPC answers HTTP 200; its own status is in the headers of a trailers-only
        // response, else in the trailers at the end of the body.
        if let Some(code) = headers.get(GRPC_STATUS) {
            refund_uncounted(
                &self.shared,
                &self.checks,
                grpc_http_status(code.as_bytes()),
            );
            return None;
        }
        let (shared, checks) = (self.shared.clone(), self.checks.clone());
        Some(Box::new(move |status| {
            refund_uncounted(&shared, &checks, status);
        }))
    }
}

/// Refunds each checked policy whose `count_when` does not count `status`.
fn refund_uncounted(shared: &Shared, checks: &Checks, status: StatusCode) {
    let policies = shared.limiter.policies();
    for (index, key, cost) in checks {
        let policy = &policies[*index];
        if policy.refunds_some_responses()
            && !policy.counts(status)
            && let Some(refund) = shared.limiter.refund_later(*index, *key, *cost)
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
fn rejection(
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
                StateProj::Deciding { decision } => {
                    let result = ready!(decision.as_mut().poll(cx));
                    match this.context.as_mut() {
                        Some(context) => context.settle(result),
                        None => unreachable!("a deciding future has a context"),
                    }
                }
                StateProj::Delaying { sleep } => {
                    ready!(sleep.as_mut().poll(cx));
                    match this.context.as_mut() {
                        Some(context) => context.call_inner(),
                        None => unreachable!("a delayed future has a context"),
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
