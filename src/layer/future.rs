//! [`ResponseFuture`]: awaits the decision (when the store is remote), the leaky
//! bucket's delay, then the inner service, and writes the rate-limit headers.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use crate::StoreError;
use crate::layer::RateLimitBody;
use crate::layer::context::{Next, RequestContext};
use crate::layer::few::{Checks, Claims, Decided, Few};
use crate::layer::grpc::GrpcContentType;
use crate::layer::in_flight_entry::{Entering, Entry};
use crate::layer::limiter_calls::Pending;
use crate::layer::pending_outcomes::{self, AwaitingTurn, OutcomeHold, Parked, Verdict};
use crate::layer::service::checked;
use crate::layer::shared::{HeldSlot, Shared, View};
use crate::limiter::Taking;
use crate::store::StoreFuture;

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
        // `count_when`: the request's turn, then its charges awaiting their outcome
        // (see `pending_outcomes`); `None` for most requests.
        outcomes: Option<Box<OutcomeHold>>,
    }
}

pin_project! {
    // The service and the request live in the states that still need them, so they
    // share their room in the future with the inner service's own future.
    #[project = StateProj]
    enum State<S, ReqBody, F> {
        /// Waiting for a remote store's in-flight slots, before the rate decision.
        Entering {
            slots: StoreFuture<'static, Entry>,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
        },
        /// Waiting for a remote store's decision; dropped on the way (the client
        /// left), what the call took goes back when its reply arrives.
        Deciding {
            decision: Taking,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
        },
        /// Holding an admitted request until its turn (a leaky-bucket delay, a place
        /// in wait mode), in one of the layer's places for held requests; the charge
        /// made for it stands in the request's account: dropped before its turn, both
        /// go back.
        Delaying {
            hold: Pin<Box<Hold>>,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
        },
        /// The inner service is answering.
        Calling { #[pin] future: F },
        /// The layer answers itself.
        Answered { response: Option<Response<Bytes>> },
        /// Waiting for its turn while its caller's `count_when` charges await their
        /// outcome; then decided by `resume` (see `pending_outcomes`).
        Awaiting {
            turn: AwaitingTurn,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
            resume: Resume<S, ReqBody, F>,
        },
    }
}

/// How a request that waited for its turn is decided, with the service and the
/// request it waited with: [`ResponseFuture::resume`], made where the service's
/// bounds are known.
type Resume<S, ReqBody, F> = fn(S, Request<ReqBody>, Turned) -> Resumed<S, ReqBody, F>;

/// A request's future once its wait ended: its state, context and hold.
type Resumed<S, ReqBody, F> = (
    State<S, ReqBody, F>,
    Option<RequestContext>,
    Option<Box<OutcomeHold>>,
);

/// What a waiting request's turn ends with (see `pending_outcomes`).
type Turned = (Option<Box<OutcomeHold>>, Verdict, Parked);

pin_project! {
    /// A held request's timer and its place, in one allocation: kept out of the
    /// future itself, whose every other state is smaller.
    struct Hold {
        #[pin]
        sleep: Sleep,
        slot: HeldSlot,
    }
}

impl<S, ReqBody, F> State<S, ReqBody, F> {
    /// Holds `request` for `delay` (a leaky-bucket turn) in `slot`, then `service`
    /// answers it.
    fn delaying(delay: Duration, slot: HeldSlot, service: S, request: Request<ReqBody>) -> Self {
        Self::Delaying {
            hold: Box::pin(Hold {
                sleep: tokio::time::sleep(delay),
                slot,
            }),
            service: Some(service),
            request: Some(request),
        }
    }

    /// What follows a request's entry past its in-flight limits: its rate decision,
    /// or the inner service at once when it has none.
    fn entered(context: &mut RequestContext, mut service: S, request: Request<ReqBody>) -> Self
    where
        S: Service<Request<ReqBody>, Future = F>,
    {
        match context.decide() {
            None => Self::Calling {
                future: service.call(context.unchecked(request)),
            },
            Some(Pending::Ready(result)) => {
                let mut request = request;
                Self::next(context.settle(&mut request, result), service, request)
            }
            Some(Pending::Waiting(decision)) => Self::Deciding {
                decision,
                service: Some(service),
                request: Some(request),
            },
        }
    }

    /// What follows a decision, once `service` is owned by the future.
    fn next(next: Next, mut service: S, request: Request<ReqBody>) -> Self
    where
        S: Service<Request<ReqBody>, Future = F>,
    {
        match next {
            Next::Call => Self::Calling {
                future: service.call(request),
            },
            Next::Delay(delay, slot) => Self::delaying(delay, slot, service, request),
            Next::Again(decision) => Self::Deciding {
                decision,
                service: Some(service),
                request: Some(request),
            },
            Next::Answer(response) => Self::Answered {
                response: Some(response),
            },
        }
    }
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
            outcomes: None,
        }
    }

    /// No policy applies: the inner service answers, and no header is written.
    pub(crate) fn unlimited(future: S::Future) -> Self {
        Self {
            state: State::Calling { future },
            context: None,
            outcomes: None,
        }
    }

    /// The decision is known already (memory store). An admitted request is passed to
    /// `service` at once, so the service is only cloned when the request must wait.
    pub(crate) fn decided(
        shared: Arc<Shared>,
        view: Arc<View>,
        service: &mut S,
        request: Request<ReqBody>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
        result: Result<Decided, StoreError>,
    ) -> Self
    where
        S: Clone,
    {
        Self::settled(
            RequestContext::new(shared, view, checks, Claims::new(), grpc),
            service,
            request,
            result,
        )
    }

    /// The rate decision is known (memory store): call, hold or answer.
    fn settled(
        mut context: RequestContext,
        service: &mut S,
        mut request: Request<ReqBody>,
        result: Result<Decided, StoreError>,
    ) -> Self
    where
        S: Clone,
    {
        let state = match context.settle(&mut request, result) {
            Next::Call => State::Calling {
                future: service.call(request),
            },
            Next::Delay(delay, slot) => State::delaying(delay, slot, take_ready(service), request),
            Next::Again(decision) => State::Deciding {
                decision,
                service: Some(take_ready(service)),
                request: Some(request),
            },
            Next::Answer(response) => return Self::answered(response),
        };
        Self {
            state,
            context: Some(context),
            outcomes: None,
        }
    }

    /// A request with in-flight limits: its slots first (at once on the memory store),
    /// then, if it got them, its rate decision as [`decided`](Self::decided) or
    /// [`deciding`](Self::deciding) would take it. Slots first, so that a request
    /// refused for want of a slot is charged by no rate policy; a request the rate
    /// policies deny gives its slots back at once.
    pub(crate) fn entering(
        shared: &Arc<Shared>,
        view: Arc<View>,
        service: &mut S,
        request: Request<ReqBody>,
        (checks, claims): (Checks, Claims),
        grpc: Option<GrpcContentType>,
    ) -> Self
    where
        S: Clone,
    {
        let mut context = RequestContext::new(shared.clone(), view, checks, claims, grpc);
        // In wait mode, a request that finds no slot free waits for one (only for the
        // slots of enforced policies: a shadowed one never holds a request).
        let wait = context
            .claims()
            .iter()
            .filter(|claim| !claim.shadow)
            .map(|claim| shared.wait_of(&context.view().policies()[claim.index]))
            .collect::<Option<Vec<_>>>()
            .and_then(|waits| waits.into_iter().min());
        match shared.limiter.enter(
            &context.view().set,
            context.claims(),
            wait,
            &shared.slot_lines,
            (&shared.held, shared.max_held, shared.max_held_per_key),
            &shared.store_metrics,
        ) {
            Entering::Ready(result) => {
                if let Some(response) = context.enter(result) {
                    return Self::answered(response);
                }
                let state = match context.decide() {
                    None => State::Calling {
                        future: service.call(context.unchecked(request)),
                    },
                    Some(Pending::Ready(result)) => {
                        return Self::settled(context, service, request, result);
                    }
                    Some(Pending::Waiting(decision)) => State::Deciding {
                        decision,
                        service: Some(take_ready(service)),
                        request: Some(request),
                    },
                };
                Self {
                    state,
                    context: Some(context),
                    outcomes: None,
                }
            }
            Entering::Waiting(slots) => Self {
                state: State::Entering {
                    slots,
                    service: Some(take_ready(service)),
                    request: Some(request),
                },
                context: Some(context),
                outcomes: None,
            },
        }
    }

    /// The decision is on its way (remote store).
    pub(crate) fn deciding(
        shared: Arc<Shared>,
        view: Arc<View>,
        service: S,
        request: Request<ReqBody>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
        decision: Taking,
    ) -> Self {
        Self {
            state: State::Deciding {
                decision,
                service: Some(service),
                request: Some(request),
            },
            context: Some(RequestContext::new(
                shared,
                view,
                checks,
                Claims::new(),
                grpc,
            )),
            outcomes: None,
        }
    }
}

/// `count_when` (see `pending_outcomes`): waiting for a turn, and holding one.
impl<S, ReqBody> ResponseFuture<S, ReqBody>
where
    S: Service<Request<ReqBody>>,
{
    /// The request waits for its turn, then is decided.
    pub(crate) fn awaiting<ResBody>(
        turn: AwaitingTurn,
        service: S,
        request: Request<ReqBody>,
    ) -> Self
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    {
        Self {
            state: State::Awaiting {
                turn,
                service: Some(service),
                request: Some(request),
                resume: Self::resume,
            },
            context: None,
            outcomes: None,
        }
    }

    /// A request that waited for its turn: decided as any other, holding its turn,
    /// or refused as its wait found it.
    fn resume<ResBody>(
        mut service: S,
        request: Request<ReqBody>,
        (hold, verdict, parked): Turned,
    ) -> Resumed<S, ReqBody, S::Future>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    {
        let Parked {
            shared,
            view,
            checks,
            claims,
            grpc,
        } = parked;
        let mut future = match verdict {
            Verdict::Decide => {
                checked(&shared, view, &mut service, request, (checks, claims), grpc)
            }
            Verdict::Refuse(decisions) => Self::decided(
                shared,
                view,
                &mut service,
                request,
                checks,
                grpc,
                Ok(decisions),
            ),
            // Kept with no await since the trial's answer: the request owns it now.
            Verdict::Tried(taken) => Self::decided(
                shared,
                view,
                &mut service,
                request,
                checks,
                grpc,
                Ok(taken.keep().into()),
            ),
        };
        if let Some(hold) = hold {
            future = future.holding(hold);
        }
        (future.state, future.context, future.outcomes)
    }

    /// The request holds `hold` (its turn) from here.
    pub(crate) fn holding(mut self, hold: Box<OutcomeHold>) -> Self {
        self.outcomes = Some(hold);
        self.state.follow_outcomes(&mut self.outcomes);
        self
    }
}

impl<S, ReqBody, F> State<S, ReqBody, F> {
    /// What the request's `count_when` hold becomes in this state: charges awaiting
    /// their outcome once it is admitted (called, or held for its turn), nothing once
    /// the layer answers it.
    fn follow_outcomes(&self, hold: &mut Option<Box<OutcomeHold>>) {
        match self {
            _ if hold.is_none() => {}
            Self::Calling { .. } | Self::Delaying { .. } => pending_outcomes::admitted(hold),
            Self::Answered { .. } => *hold = None,
            Self::Entering { .. } | Self::Deciding { .. } | Self::Awaiting { .. } => {}
        }
    }
}

/// The ready service, for a future that calls it later; `service` keeps a fresh clone.
pub(crate) fn take_ready<S: Clone>(service: &mut S) -> S {
    let clone = service.clone();
    std::mem::replace(service, clone)
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
                    // Settled with no await in between: from here the context (the
                    // request's account) owns what the call took.
                    let result =
                        ready!(Pin::new(decision).poll(cx)).map(|taken| Few::from(taken.keep()));
                    let (Some(context), Some(service), Some(mut request)) =
                        (this.context.as_mut(), service.take(), request.take())
                    else {
                        unreachable!("a deciding future has its context, service and request")
                    };
                    State::next(context.settle(&mut request, result), service, request)
                }
                StateProj::Entering {
                    slots,
                    service,
                    request,
                } => {
                    let result = ready!(slots.as_mut().poll(cx));
                    let (Some(context), Some(service), Some(request)) =
                        (this.context.as_mut(), service.take(), request.take())
                    else {
                        unreachable!("an entering future has its context, service and request")
                    };
                    match context.enter(result) {
                        Some(response) => State::Answered {
                            response: Some(response),
                        },
                        None => State::entered(context, service, request),
                    }
                }
                StateProj::Delaying {
                    hold,
                    service,
                    request,
                } => {
                    ready!(hold.as_mut().project().sleep.poll(cx));
                    // Its turn: the charges stand; the place is freed with the state.
                    if let Some(context) = this.context.as_mut() {
                        context.serve();
                    }
                    match (service.take(), request.take()) {
                        (Some(mut service), Some(request)) => State::Calling {
                            future: service.call(request),
                        },
                        _ => unreachable!("the inner service is called once"),
                    }
                }
                StateProj::Calling { future } => {
                    let (mut head, body) = ready!(future.poll(cx))?.into_parts();
                    let on_status = this
                        .context
                        .as_mut()
                        .and_then(|context| context.finish(&mut head));
                    let on_status = pending_outcomes::known_after(this.outcomes.take(), on_status);
                    let body = match on_status {
                        Some(on_status) => RateLimitBody::watching(body, on_status),
                        None => RateLimitBody::inner(body),
                    };
                    return Poll::Ready(Ok(Response::from_parts(head, body)));
                }
                StateProj::Awaiting {
                    turn,
                    service,
                    request,
                    resume,
                } => {
                    let turned = ready!(turn.as_mut().poll(cx));
                    let (Some(service), Some(request)) = (service.take(), request.take()) else {
                        unreachable!("a waiting future has its service and request")
                    };
                    let state;
                    (state, *this.context, *this.outcomes) = resume(service, request, turned);
                    state
                }
                StateProj::Answered { response } => {
                    let response = response
                        .take()
                        .expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(response.map(RateLimitBody::rejection)));
                }
            };
            next.follow_outcomes(this.outcomes);
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
