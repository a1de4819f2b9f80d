//! What becomes of a request once the store has answered (call, hold or answer it),
//! and what its response gets once the inner service has answered (headers, refunds).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};

use crate::layer::Decisions;
use crate::layer::body::OnGrpcStatus;
use crate::layer::few::{Checks, Few};
use crate::layer::grpc::{GrpcContentType, grpc_http_status, grpc_response};
use crate::layer::headers::GRPC_STATUS;
use crate::layer::in_flight_entry::Entry;
use crate::layer::limiter_calls::{Pending, targets};
use crate::layer::refunds::{refund_charges, refund_uncounted};
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::shared::{HeldSlot, Holder, Shared, View};
use crate::layer::{FailMode, Rejection};
use crate::limiter::Taken;
use crate::observe::{self, Outcome};
use crate::store::InFlightSlot;
use crate::{Decision, Key, StoreError};

/// What the future needs besides its state.
pub(crate) struct RequestContext {
    shared: Arc<Shared>,
    /// The policies (one set, even across a reload) and headers of this request.
    view: Arc<View>,
    checks: Checks,
    /// Decisions paired with their policy index, for the response headers.
    decisions: Few<(usize, Decision)>,
    grpc: Option<GrpcContentType>,
    /// Whether the store charged this request, so that a `count_when` refund has
    /// something to take back. Not when the store failed (the request passed
    /// uncounted), nor when a policy denied it (all-or-nothing: nothing was charged,
    /// though shadow mode passes it on), nor once the layer refunded it itself.
    charged: bool,
    /// The request's in-flight slots: given back when the context is dropped, or
    /// moved into the response body, which gives them back when it ends.
    slots: Vec<InFlightSlot>,
}

/// What to do with a request once the store has answered.
pub(super) enum Next<ReqBody> {
    /// Call the inner service now.
    Call(Request<ReqBody>),
    /// Hold the request (leaky bucket) in a place of the layer's, then call the inner
    /// service.
    Delay(Duration, HeldSlot, Request<ReqBody>),
    /// Answer without calling the inner service; the request, body unread, is dropped.
    Answer(Response<Bytes>),
}

impl RequestContext {
    pub(super) fn new(
        shared: Arc<Shared>,
        view: Arc<View>,
        checks: Checks,
        grpc: Option<GrpcContentType>,
    ) -> Self {
        Self {
            shared,
            view,
            checks,
            decisions: Few::new(),
            grpc,
            charged: false,
            slots: Vec::new(),
        }
    }

    /// What becomes of a request with in-flight limits once the store has answered
    /// for its slots: `None` to go on (to the rate decision), or the layer's answer.
    /// A refused request is not charged by any rate policy (the rate decision has not
    /// been asked).
    pub(super) fn enter(&mut self, result: Result<Entry, StoreError>) -> Option<Response<Bytes>> {
        let index = match result {
            Ok(Ok(slots)) => {
                self.slots = slots;
                return None;
            }
            Ok(Err(index)) => index,
            Err(error) => return self.fail(&error),
        };
        let policy = &self.view.policies()[index];
        // A refusal is a decision of the policy's, for logs, metrics and a custom
        // rejection; it is not written to the rate-limit headers (no quota to report).
        let retry_after = Duration::from_secs(1);
        let refused = Decision {
            allowed: false,
            capacity: policy.get_in_flight().map_or(0, u64::from),
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: Some(retry_after),
            delay: Duration::ZERO,
            limit: policy.name(),
            quota: policy.quota(),
            blocked_for: None,
            trips: 0,
            receipt: None,
        };
        if self.shared.shadow {
            observe::decided(std::slice::from_ref(&refused), Outcome::ShadowRejected);
            return None;
        }
        observe::decided(std::slice::from_ref(&refused), Outcome::Rejected);
        let info = RejectionInfo {
            reason: RejectReason::InFlight,
            decisions: vec![refused],
            retry_after: Some(retry_after),
        };
        Some(rejection(&self.shared, &self.view, self.grpc, &info, &[]))
    }

    /// The rate decision for the request's checks; `None` when it has none (every
    /// policy limits only requests in flight, or costs nothing).
    pub(super) fn decide(&self) -> Option<Pending> {
        (!self.checks.is_empty()).then(|| self.shared.decide(&self.view, &self.checks))
    }

    /// The set of policies this request is decided under.
    pub(super) fn view(&self) -> &Arc<View> {
        &self.view
    }

    /// What becomes of `request` once the store has answered; a request the layer
    /// answers itself gives its in-flight slots back at once.
    pub(super) fn settle<ReqBody>(
        &mut self,
        request: Request<ReqBody>,
        result: Result<Vec<Decision>, StoreError>,
    ) -> Next<ReqBody> {
        let next = self.settle_decisions(request, result);
        if matches!(next, Next::Answer(_)) {
            self.slots.clear();
        }
        next
    }

    fn settle_decisions<ReqBody>(
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
            slot = HeldSlot::take(&self.shared, self.holder(&decisions)).map(|slot| {
                // The held request owns its charge: given back if its caller leaves
                // before its turn.
                slot.holding(Taken::new(
                    self.shared.limiter.clone(),
                    self.view.set.clone(),
                    targets(&self.checks),
                    decisions.clone(),
                ))
            });
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
        let indices = self.checks.iter().map(|check| check.index);
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

    /// Whom a held request counts for in `max_held_per_key`: the policy whose delay
    /// holds it longest, and its key.
    fn holder(&self, decisions: &[Decision]) -> Holder {
        let policies = self.view.policies();
        self.checks
            .iter()
            .zip(decisions)
            .max_by_key(|(_, d)| d.delay)
            .map_or(("", Key::from("")), |(check, _)| {
                (policies[check.index].name(), check.key)
            })
    }

    /// The store failed: pass the request on uncounted (fail open) or answer 503.
    fn store_failed<ReqBody>(
        &self,
        request: Request<ReqBody>,
        error: &StoreError,
    ) -> Next<ReqBody> {
        match self.fail(error) {
            None => Next::Call(request),
            Some(response) => Next::Answer(response),
        }
    }

    /// The store failed: `None` to pass the request on (fail open), or the 503.
    fn fail(&self, error: &StoreError) -> Option<Response<Bytes>> {
        let failing_open = self.shared.fail_mode == FailMode::Open;
        observe::store_failed(error, failing_open);
        if failing_open {
            return None;
        }
        let info = RejectionInfo {
            reason: RejectReason::StoreUnavailable,
            decisions: Vec::new(),
            retry_after: Some(Duration::from_secs(1)),
        };
        Some(rejection(&self.shared, &self.view, self.grpc, &info, &[]))
    }

    /// The rejection of a request some policy denied; its body is never read.
    fn rate_limited(&mut self, decisions: Vec<Decision>) -> Response<Bytes> {
        let indices = self.checks.iter().map(|check| check.index);
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
        rejection(&self.shared, &self.view, self.grpc, &info, &self.decisions)
    }

    /// How long to hold an admitted request: its longest delay, each bounded by its
    /// policy's `max_delay`. The store already denies a place beyond the bound, as
    /// measured from the latest instant it has seen; a caller's clock behind that
    /// instant hears a longer delay, which the layer does not wait out.
    fn hold_for(&self, decisions: &[Decision]) -> Duration {
        let policies = self.view.policies();
        self.checks
            .iter()
            .zip(decisions)
            .map(|(check, d)| {
                let policy = &policies[check.index];
                // A waiting policy holds for its place, up to its wait.
                let bound = self
                    .shared
                    .wait_of(policy)
                    .map_or(policy.get_max_delay(), |wait| {
                        wait.max(policy.get_max_delay())
                    });
                d.delay.min(bound)
            })
            .max()
            .unwrap_or_default()
    }

    /// The rejection of a request admitted with `delay` when the layer holds as many
    /// requests as it may; its charge is refunded. Its headers describe the state with
    /// the charge (never more quota than there may be, should the refund fail).
    fn queue_full(&mut self, decisions: Vec<Decision>, delay: Duration) -> Response<Bytes> {
        self.refund_all(&decisions);
        let indices = self.checks.iter().map(|check| check.index);
        self.decisions = indices.zip(decisions.iter().cloned()).collect();
        let info = RejectionInfo {
            reason: RejectReason::QueueFull,
            decisions,
            retry_after: Some(delay),
        };
        rejection(&self.shared, &self.view, self.grpc, &info, &self.decisions)
    }

    /// Gives back every charge of a request the store charged and the layer will not
    /// hold after all.
    fn refund_all(&mut self, decisions: &[Decision]) {
        if std::mem::take(&mut self.charged) {
            refund_charges(&self.shared, &self.view, &self.checks, decisions);
        }
    }

    /// Headers and refunds once the inner service has answered. Returns what the
    /// response body holds until it ends: the hook that settles refunds once a gRPC
    /// status arrives in the trailers, and the request's in-flight slots.
    pub(super) fn finish(
        &mut self,
        headers: &mut HeaderMap,
        status: StatusCode,
    ) -> Option<OnGrpcStatus> {
        let on_status = self.refunds_at_end(headers, status);
        if self.slots.is_empty() {
            return on_status;
        }
        // The body drops this hook when it ends (or is dropped), and calls it when a
        // gRPC status arrives, which is at its end too: either way the slots go back.
        let slots = std::mem::take(&mut self.slots);
        Some(Box::new(move |status| {
            if let Some(on_status) = on_status {
                on_status(status);
            }
            drop(slots);
        }))
    }

    /// Headers and refunds once the inner service has answered. For a gRPC response
    /// whose status comes in the trailers, returns the hook that settles refunds then.
    fn refunds_at_end(&self, headers: &mut HeaderMap, status: StatusCode) -> Option<OnGrpcStatus> {
        self.view.headers.write(&self.decisions, headers);
        let policies = self.view.policies();
        // Only what the store charged can be refunded.
        if !self.charged
            || !self
                .checks
                .iter()
                .any(|check| policies[check.index].refunds_some_responses())
        {
            return None;
        }
        if self.grpc.is_none() {
            refund_uncounted(
                &self.shared,
                &self.view,
                &self.checks,
                &self.decisions,
                status,
            );
            return None;
        }
        // gRPC answers HTTP 200; its own status is in the headers of a trailers-only
        // response, else in the trailers at the end of the body.
        if let Some(code) = headers.get(GRPC_STATUS) {
            refund_uncounted(
                &self.shared,
                &self.view,
                &self.checks,
                &self.decisions,
                grpc_http_status(code.as_bytes()),
            );
            return None;
        }
        let (shared, view, checks) = (self.shared.clone(), self.view.clone(), self.checks.clone());
        let decisions = self.decisions.clone();
        Some(Box::new(move |status| {
            refund_uncounted(&shared, &view, &checks, &decisions, status);
        }))
    }
}

/// The layer's own response: gRPC status or the configured HTTP rejection, plus the
/// rate-limit headers.
pub(crate) fn rejection(
    shared: &Shared,
    view: &View,
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
            view.headers.write(decisions, &mut headers);
            for (name, value) in headers {
                if let Some(name) = name {
                    response.headers_mut().entry(name).or_insert(value);
                }
            }
            return response;
        }
    };
    // The built-in rejections set no rate-limit header: write them straight in.
    view.headers.write(decisions, response.headers_mut());
    response
}
