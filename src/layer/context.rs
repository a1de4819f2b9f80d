//! What becomes of a request once the store has answered (call, hold or answer it),
//! and what its response gets once the inner service has answered (headers, refunds).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};

use crate::layer::Decisions;
use crate::layer::body::OnGrpcStatus;
use crate::layer::byte_account::{ByteMeters, ByteMetersExtension};
use crate::layer::few::{Checks, Claims, Few};
use crate::layer::grpc::{GrpcContentType, grpc_http_status, grpc_response};
use crate::layer::headers::{GRPC_STATUS, Report};
use crate::layer::in_flight_entry::Entry;
use crate::layer::limiter_calls::{Pending, targets};
use crate::layer::meter::{CloseOnDrop, Metering, Refunds};
use crate::layer::refunds::{refund_charges, refund_uncounted};
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::settles::Standing;
use crate::layer::shared::{HeldSlot, Holder, Shared, View};
use crate::layer::{FailMode, Rejection};
use crate::limiter::{Taken, Taking};
use crate::observe::{self, Outcome};
use crate::store::InFlightSlot;
use crate::{Decision, Key, StoreError};

/// What the future needs besides its state.
pub(crate) struct RequestContext {
    shared: Arc<Shared>,
    /// The policies (one set, even across a reload) and headers of this request.
    view: Arc<View>,
    checks: Checks,
    /// The request's in-flight claims (empty for a request with no in-flight policy),
    /// for the response headers.
    claims: Claims,
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
    /// The policies with an in-flight limit that let the request in.
    claimed: Few<usize>,
    /// While the enforced policies are decided again alone (only shadowed ones denied
    /// the request): the first, all-or-nothing call's decisions, whose shadowed
    /// answers the headers and metrics report.
    first: Option<Vec<Decision>>,
    /// Whether the enforced policies were decided again alone.
    redecided: bool,
    /// The policies counting the request in `tollgate_in_flight` until it is answered.
    running: Few<usize>,
    /// The request's metered charges, settled when the response body ends, or when
    /// this context is dropped first (the response never came).
    metering: Option<CloseOnDrop>,
    /// The request's byte-metered policies, until the response: to tell whether a
    /// `MeterBytes` layer counted the bodies.
    bytes: Option<Arc<ByteMeters>>,
}

/// What to do with a request once the store has answered.
pub(super) enum Next<ReqBody> {
    /// Call the inner service now.
    Call(Request<ReqBody>),
    /// Hold the request (leaky bucket) in a place of the layer's, then call the inner
    /// service.
    Delay(Duration, HeldSlot, Request<ReqBody>),
    /// Wait for the enforced policies' own decision (a remote store), then settle
    /// again.
    Again(Taking, Request<ReqBody>),
    /// Answer without calling the inner service; the request, body unread, is dropped.
    Answer(Response<Bytes>),
}

impl RequestContext {
    pub(super) fn new(
        shared: Arc<Shared>,
        view: Arc<View>,
        checks: Checks,
        claims: Claims,
        grpc: Option<GrpcContentType>,
    ) -> Self {
        let claimed = claims.iter().map(|claim| claim.index).collect();
        Self {
            shared,
            view,
            checks,
            claims,
            decisions: Few::new(),
            grpc,
            charged: false,
            slots: Vec::new(),
            claimed,
            first: None,
            redecided: false,
            running: Few::new(),
            metering: None,
            bytes: None,
        }
    }

    /// The request is admitted: each of its policies counts it as running until it is
    /// answered (the context is dropped). Only the metrics read it.
    fn admit(&mut self) {
        if !cfg!(feature = "metrics") {
            return;
        }
        let checked = self.checks.iter().map(|check| check.index);
        let claimed = self
            .claimed
            .iter()
            .copied()
            .filter(|index| !self.checks.iter().any(|check| check.index == *index));
        self.running = checked.chain(claimed).collect();
        for &index in self.running.iter() {
            self.view.metrics[index].started();
        }
    }

    /// What becomes of a request with in-flight limits once the store has answered
    /// for its slots: `None` to go on (to the rate decision), or the layer's answer.
    /// A refused request is not charged by any rate policy (the rate decision has not
    /// been asked).
    pub(super) fn enter(&mut self, result: Result<Entry, StoreError>) -> Option<Response<Bytes>> {
        let index = match result {
            Ok(Ok(entered)) => {
                self.slots = entered.slots;
                for index in entered.shadowed {
                    let policy = &self.view.policies()[index];
                    observe::refused(
                        &self.view.metrics[index],
                        policy.name(),
                        Outcome::ShadowRejected,
                        None,
                    );
                }
                if self.checks.is_empty() {
                    // No rate decision follows: admitted now.
                    self.admit();
                }
                return None;
            }
            // Only an enforced claim is refused (a shadowed one runs without a slot).
            Ok(Err(index)) => index,
            Err(error) => {
                let answer = self.fail(&error);
                if answer.is_none() && self.checks.is_empty() {
                    self.admit();
                }
                return answer;
            }
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
        observe::refused(
            &self.view.metrics[index],
            policy.name(),
            Outcome::Rejected,
            None,
        );
        let info = RejectionInfo {
            reason: RejectReason::InFlight,
            decisions: vec![refused],
            retry_after: Some(retry_after),
        };
        // The in-flight bounds are advertised; no rate policy was decided.
        let report = Report {
            claims: &self.claims,
            ..Report::default()
        };
        Some(rejection(
            &self.shared,
            &self.view,
            self.grpc,
            &info,
            report,
        ))
    }

    /// The rate decision for the request's checks; `None` when it has none (every
    /// policy limits only requests in flight, or costs nothing).
    pub(super) fn decide(&self) -> Option<Pending> {
        (!self.checks.is_empty()).then(|| self.shared.decide(&self.view, &self.checks))
    }

    /// What the response headers describe: the rate decisions and in-flight bounds.
    fn report(&self) -> Report<'_> {
        Report {
            decisions: &self.decisions,
            checks: &self.checks,
            claims: &self.claims,
        }
    }

    /// The request's in-flight claims.
    pub(super) fn claims(&self) -> &Claims {
        &self.claims
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
        let mut decisions = match result {
            Ok(decisions) => decisions,
            Err(error) => return self.store_failed(request, &error),
        };
        if let Some(first) = self.first.take() {
            decisions = self.merged(first, decisions);
        }
        let allowed = decisions.iter().all(|d| d.allowed);
        let rejected_by = self.rejected_by(&decisions);
        if !allowed && rejected_by.is_none() && !self.redecided {
            // Only shadowed policies denied the request, so it is served; the store
            // charged none of its policies (all-or-nothing). The enforced ones must
            // count it still, as if the shadowed ones were not there: decided again,
            // alone, all-or-nothing (a request one of them now denies is rejected).
            self.redecided = true;
            let enforced: Checks = self
                .checks
                .iter()
                .filter(|check| check.enforced)
                .copied()
                .collect();
            if !enforced.is_empty() {
                self.first = Some(decisions);
                return match self.shared.decide_now(&self.view, &enforced) {
                    Pending::Ready(result) => self.settle_decisions(request, result),
                    Pending::Waiting(taking) => Next::Again(taking, request),
                };
            }
        }
        // All-or-nothing: the store charged the request exactly when every policy
        // admitted it, or, decided again, when every enforced one did.
        self.charged = allowed || (self.redecided && rejected_by.is_none());
        if let Some(policy) = rejected_by {
            self.count(&decisions, None, Some(policy));
            return Next::Answer(self.rate_limited(decisions));
        }
        // Held for the longest delay of what was charged.
        let delay = if self.charged {
            self.hold_for(&decisions, allowed)
        } else {
            Duration::ZERO
        };
        let mut slot = None;
        let mut queue_full = None;
        if !delay.is_zero() {
            let (holder, index) = self.holder(&decisions);
            slot = HeldSlot::take(&self.shared, holder, &self.view.metrics[index]).map(|slot| {
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
                let enforced = self
                    .checks
                    .iter()
                    .zip(&decisions)
                    .any(|(check, d)| check.enforced && !d.delay.is_zero());
                if enforced {
                    self.count(&decisions, Some(Outcome::QueueFull), None);
                    return Next::Answer(self.queue_full(decisions, delay));
                }
                // Shadow mode never rejects: give the place back, as the rejection
                // would, and pass the request on now rather than hold more than the cap.
                self.refund_all(&decisions);
                queue_full = Some(Outcome::ShadowRejected);
            }
        }
        let held = slot.is_some();
        self.count(
            &decisions,
            queue_full.or(held.then_some(Outcome::Waited)),
            None,
        );
        self.admit();
        if self.view.meters {
            self.meter(&mut request, &decisions);
        }
        let indices = self.checks.iter().map(|check| check.index);
        if self.shared.decisions_extension {
            self.decisions = indices.zip(decisions.iter().cloned()).collect();
            Decisions::record(request.extensions_mut(), decisions);
        } else {
            self.decisions = indices.zip(decisions).collect();
        }
        match slot {
            Some(slot) => Next::Delay(delay, slot, request),
            None => Next::Call(request),
        }
    }

    /// Gives an admitted request of a metered policy its [`Meter`](crate::layer::Meter),
    /// and one of a byte-metered policy its byte meters, in its extensions.
    fn meter<ReqBody>(&mut self, request: &mut Request<ReqBody>, decisions: &[Decision]) {
        let charges = self
            .checks
            .iter()
            .zip(decisions)
            .map(|(check, d)| Standing::new(check.index, check.key, d.clone(), check.cost));
        if let Some(metering) = Metering::new(&self.shared, &self.view, charges) {
            request.extensions_mut().insert(metering.meter());
            self.metering = Some(CloseOnDrop(metering));
        }
        let charges = self.checks.iter().copied().zip(decisions.iter().cloned());
        if let Some(meters) = ByteMeters::new(&self.shared, &self.view, self.grpc, charges) {
            request
                .extensions_mut()
                .insert(ByteMetersExtension(meters.clone()));
            self.bytes = Some(meters);
        }
    }

    /// The policy that rejects the request: the first enforced one that denied it.
    fn rejected_by(&self, decisions: &[Decision]) -> Option<&'static str> {
        self.checks
            .iter()
            .zip(decisions)
            .find(|(check, d)| check.enforced && !d.allowed)
            .map(|(_, d)| d.limit)
    }

    /// The request's decisions in check order, from the first, all-or-nothing call
    /// (`first`) for its shadowed policies and from the second (`enforced`) for the
    /// enforced ones, decided again alone.
    fn merged(&self, first: Vec<Decision>, enforced: Vec<Decision>) -> Vec<Decision> {
        let mut enforced = enforced.into_iter();
        self.checks
            .iter()
            .zip(first)
            .map(|(check, first)| {
                if check.enforced {
                    enforced.next().unwrap_or(first)
                } else {
                    first
                }
            })
            .collect()
    }

    /// Counts each decision under its policy: its own outcome (allowed, rejected,
    /// blocked, shadow-rejected), or `all`, what became of the whole request (held:
    /// `Waited` for the policies whose delay held it; the layer could not hold it:
    /// `QueueFull`, or `ShadowRejected` in shadow mode). `rejected_by` is the policy
    /// that rejected the request, if one did.
    fn count(
        &self,
        decisions: &[Decision],
        all: Option<Outcome>,
        rejected_by: Option<&'static str>,
    ) {
        for (check, decision) in self.checks.iter().zip(decisions) {
            let outcome = match all {
                Some(Outcome::Waited) if decision.allowed && decision.delay.is_zero() => {
                    Outcome::Allowed
                }
                Some(all) if decision.allowed => all,
                _ if decision.allowed => Outcome::Allowed,
                _ => Outcome::denied(decision, check.enforced),
            };
            let by = match outcome {
                Outcome::ShadowRejected => Some(decision.limit),
                _ => rejected_by,
            };
            observe::decided(
                &self.view.metrics[check.index],
                decision,
                outcome,
                by,
                &check.key,
                self.shared.near_limit,
            );
        }
    }

    /// Whom a held request counts for in `max_held_per_key`: the policy whose delay
    /// holds it longest, and its key; with that policy's index.
    fn holder(&self, decisions: &[Decision]) -> (Holder, usize) {
        let policies = self.view.policies();
        self.checks
            .iter()
            .zip(decisions)
            .max_by_key(|(_, d)| d.delay)
            .map_or((("", Key::from("")), 0), |(check, _)| {
                ((policies[check.index].name(), check.key), check.index)
            })
    }

    /// A decision for the policy at `index` that charged nothing and knows nothing of
    /// the key (the store failed).
    fn uncharged(&self, index: usize) -> Decision {
        let policy = &self.view.policies()[index];
        Decision {
            allowed: true,
            capacity: 0,
            remaining: 0,
            reset_after: Duration::ZERO,
            retry_after: None,
            delay: Duration::ZERO,
            limit: policy.name(),
            quota: policy.quota(),
            blocked_for: None,
            trips: 0,
            receipt: None,
        }
    }

    /// The store failed: pass the request on uncounted (fail open) or answer 503.
    fn store_failed<ReqBody>(
        &mut self,
        request: Request<ReqBody>,
        error: &StoreError,
    ) -> Next<ReqBody> {
        match self.fail(error) {
            None => {
                self.admit();
                let mut request = self.unchecked(request);
                if self.view.meters {
                    // Charged nothing, so nothing will be settled: the meter is there
                    // for the handlers that expect one.
                    let uncharged: Vec<Decision> = self
                        .checks
                        .iter()
                        .map(|check| self.uncharged(check.index))
                        .collect();
                    self.meter(&mut request, &uncharged);
                }
                Next::Call(request)
            }
            Some(response) => Next::Answer(response),
        }
    }

    /// A request passed on with no rate decision (its policies limit only requests in
    /// flight, or the store failed open): its [`Decisions`] say so, empty.
    pub(super) fn unchecked<ReqBody>(&self, mut request: Request<ReqBody>) -> Request<ReqBody> {
        if self.shared.decisions_extension {
            Decisions::record_none(request.extensions_mut());
        }
        request
    }

    /// The store failed: `None` to pass the request on (fail open), or the 503.
    fn fail(&self, error: &StoreError) -> Option<Response<Bytes>> {
        let failing_open = self.shared.fail_mode == FailMode::Open;
        self.shared.store_metrics.failed(error, failing_open);
        let outcome = if failing_open {
            Outcome::FailOpen
        } else {
            Outcome::FailClosed
        };
        for check in self.checks.iter() {
            let policy = &self.view.policies()[check.index];
            observe::refused(
                &self.view.metrics[check.index],
                policy.name(),
                outcome,
                Some(&check.key),
            );
        }
        if failing_open {
            return None;
        }
        let info = RejectionInfo {
            reason: RejectReason::StoreUnavailable,
            decisions: Vec::new(),
            retry_after: Some(Duration::from_secs(1)),
        };
        Some(rejection(
            &self.shared,
            &self.view,
            self.grpc,
            &info,
            Report::default(),
        ))
    }

    /// The rejection of a request some policy denied; its body is never read.
    fn rate_limited(&mut self, decisions: Vec<Decision>) -> Response<Bytes> {
        let indices = self.checks.iter().map(|check| check.index);
        self.decisions = indices.zip(decisions.iter().cloned()).collect();
        // A denial whose cost can never fit has no retry time: say so rather than
        // invite a retry that cannot succeed. Only the enforced denials say when: the
        // shadowed ones would not stop a retry.
        let retry_after = self
            .checks
            .iter()
            .zip(&decisions)
            .filter(|(check, d)| check.enforced && !d.allowed)
            .map(|(_, d)| d.retry_after)
            .try_fold(Duration::ZERO, |wait, retry| retry.map(|r| wait.max(r)));
        let mut info = RejectionInfo::rate_limited(decisions);
        info.retry_after = retry_after;
        rejection(&self.shared, &self.view, self.grpc, &info, self.report())
    }

    /// How long to hold an admitted request: its longest delay, each bounded by its
    /// policy's `max_delay`. The store already denies a place beyond the bound, as
    /// measured from the latest instant it has seen; a caller's clock behind that
    /// instant hears a longer delay, which the layer does not wait out.
    /// Only what was charged holds it: every decision when all admitted it
    /// (`allowed`), else the enforced ones, decided again alone.
    fn hold_for(&self, decisions: &[Decision], allowed: bool) -> Duration {
        let policies = self.view.policies();
        self.checks
            .iter()
            .zip(decisions)
            .filter(|(check, _)| allowed || check.enforced)
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
        rejection(&self.shared, &self.view, self.grpc, &info, self.report())
    }

    /// Gives back every charge of a request the store charged and the layer will not
    /// hold after all.
    fn refund_all(&mut self, decisions: &[Decision]) {
        if std::mem::take(&mut self.charged) {
            refund_charges(&self.shared, &self.view, &self.checks, decisions);
        }
    }

    /// Refunds, settles and headers once the inner service has answered with `head`.
    /// Returns what the response body holds until it ends: the hook that settles
    /// refunds once a gRPC status arrives in the trailers, the request's in-flight
    /// slots, and its metering, settled when the body ends.
    pub(super) fn finish(&mut self, head: &mut http::response::Parts) -> Option<OnGrpcStatus> {
        let (on_status, refunds) = self.refunds_at_end(&head.headers, head.status);
        if let Some(metering) = &self.metering {
            let reads_head = self
                .checks
                .iter()
                .any(|check| self.view.policies()[check.index].reads_response());
            metering
                .0
                .head(reads_head.then_some(&*head), refunds, &mut self.decisions);
        }
        // Written after the refunds and settles the store answered at once.
        self.view.headers.write(self.report(), &mut head.headers);
        if let Some(bytes) = self.bytes.take()
            && !bytes.attached()
        {
            observe::bytes_not_metered();
        }
        if self.slots.is_empty() && self.metering.is_none() {
            return on_status;
        }
        // The body drops this hook when it ends (or is dropped), and calls it when a
        // gRPC status arrives, which is at its end too: either way the slots go back
        // and the metering settles.
        let slots = std::mem::take(&mut self.slots);
        let metering = self.metering.take();
        Some(Box::new(move |status| {
            if let Some(on_status) = on_status {
                on_status(status);
            }
            if let Some(metering) = &metering {
                metering.0.refunded(status);
            }
            // Settled before the slots go back, so that on the memory store a request
            // has posted its debt before the next one of its key can start.
            drop(metering);
            drop(slots);
        }))
    }

    /// Refunds once the inner service has answered with `status`: at once, or, for a
    /// gRPC response whose status comes in the trailers, through the hook returned,
    /// which refunds then; with what became of them, for the metering.
    fn refunds_at_end(
        &mut self,
        headers: &HeaderMap,
        status: StatusCode,
    ) -> (Option<OnGrpcStatus>, Refunds) {
        let policies = self.view.policies();
        // Only what the store charged can be refunded.
        if !self.charged
            || !self
                .checks
                .iter()
                .any(|check| policies[check.index].refunds_some_responses())
        {
            return (None, Refunds::None);
        }
        if self.grpc.is_none() {
            refund_uncounted(
                &self.shared,
                &self.view,
                &self.checks,
                &mut self.decisions,
                status,
            );
            return (None, Refunds::Made(status));
        }
        // gRPC answers HTTP 200; its own status is in the headers of a trailers-only
        // response, else in the trailers at the end of the body.
        if let Some(code) = headers.get(GRPC_STATUS) {
            let status = grpc_http_status(code.as_bytes());
            refund_uncounted(
                &self.shared,
                &self.view,
                &self.checks,
                &mut self.decisions,
                status,
            );
            return (None, Refunds::Made(status));
        }
        let (shared, view, checks) = (self.shared.clone(), self.view.clone(), self.checks.clone());
        let mut decisions = self.decisions.clone();
        let hook: OnGrpcStatus = Box::new(move |status| {
            refund_uncounted(&shared, &view, &checks, &mut decisions, status);
        });
        (Some(hook), Refunds::AtTrailers)
    }
}

impl Drop for RequestContext {
    fn drop(&mut self) {
        // Answered (or given up): no longer running under its policies.
        for &index in self.running.iter() {
            self.view.metrics[index].ended();
        }
    }
}

/// The layer's own response: gRPC status or the configured HTTP rejection, plus the
/// rate-limit headers.
pub(crate) fn rejection(
    shared: &Shared,
    view: &View,
    grpc: Option<GrpcContentType>,
    info: &RejectionInfo,
    report: Report<'_>,
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
            view.headers.write(report, &mut headers);
            for (name, value) in headers {
                if let Some(name) = name {
                    response.headers_mut().entry(name).or_insert(value);
                }
            }
            return response;
        }
    };
    // The built-in rejections set no rate-limit header: write them straight in.
    view.headers.write(report, response.headers_mut());
    response
}
