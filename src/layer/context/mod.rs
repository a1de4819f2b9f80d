//! What becomes of a request once the store has answered (call, hold or answer it),
//! and what its response gets once the inner service has answered (headers, refunds).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};

use crate::layer::account::{Account, Ledger};
use crate::layer::byte_account::{ByteMeters, ByteMetersExtension};
use crate::layer::few::{Checks, Claims, Decided, Few};
use crate::layer::grpc::GrpcContentType;
use crate::layer::headers::Report;
use crate::layer::in_flight_entry::Entry;
use crate::layer::limiter_calls::Pending;
use crate::layer::meter::{CloseOnDrop, Metering};
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::shared::{HeldSlot, Holder, Shared, View};
use crate::layer::{Decisions, Unit};
use crate::limiter::Taking;
use crate::observe::{self, Outcome};
use crate::store::InFlightSlot;
use crate::{Decision, Key, StoreError};

mod answers;
mod finish;

pub(crate) use answers::rejection;
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
    /// What the store charged this request, per checked policy: every give-back
    /// (`count_when`, a settle, the hold cap, a client gone) goes through it, so
    /// that each charge comes back at most once. Empty until the store has answered;
    /// nothing stands in it when the store failed (the request passed uncounted) or a
    /// policy denied it (all-or-nothing: nothing was charged, though shadow mode
    /// passes it on).
    account: Ledger,
    /// Whether the request was passed to the inner service: until then, a context
    /// dropped (its client left while it was held) gives back what stands.
    served: bool,
    /// The request's in-flight slots: given back when the context is dropped, or
    /// moved into the response body, which gives them back when it ends.
    slots: Vec<InFlightSlot>,
    /// While the enforced policies are decided again alone (only shadowed ones denied
    /// the request): the first, all-or-nothing call's decisions, whose shadowed
    /// answers the headers and metrics report.
    /// A `Vec`, not inline: a rare path, kept out of every request's future.
    first: Option<Vec<Decision>>,
    /// Whether the enforced policies were decided again alone.
    redecided: bool,
    /// Whether the request's policies count it in `tollgate_in_flight` until it is
    /// answered ([`running_policies`](Self::running_policies)).
    running: bool,
    /// The request's metered charges, settled when the response body ends, or when
    /// this context is dropped first (the response never came).
    metering: Option<CloseOnDrop>,
    /// The request's byte-metered policies, until the response: to tell whether a
    /// `MeterBytes` layer counted the bodies.
    bytes: Option<Arc<ByteMeters>>,
}

/// What to do with a request once the store has answered. The request itself stays
/// with the caller (settling only adds to its extensions): it is not moved through
/// every step on the common path.
pub(super) enum Next {
    /// Call the inner service now.
    Call,
    /// Hold the request (leaky bucket) in a place of the layer's, then call the inner
    /// service.
    Delay(Duration, HeldSlot),
    /// Wait for the enforced policies' own decision (a remote store), then settle
    /// again.
    Again(Taking),
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
        Self {
            shared,
            view,
            checks,
            claims,
            decisions: Few::new(),
            grpc,
            account: Ledger::default(),
            served: false,
            slots: Vec::new(),
            first: None,
            redecided: false,
            running: false,
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
        self.running = true;
        for index in self.running_policies() {
            self.view.metrics[index].started();
        }
    }

    /// The policies a running request counts under: those that checked it, then those
    /// whose in-flight limit let it in without checking it.
    fn running_policies(&self) -> impl Iterator<Item = usize> + '_ {
        let checked = self.checks.iter().map(|check| check.index);
        let claimed = self
            .claims
            .iter()
            .map(|claim| claim.index)
            .filter(|index| !self.checks.iter().any(|check| check.index == *index));
        checked.chain(claimed)
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
            shadowed: Vec::new(),
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
        request: &mut Request<ReqBody>,
        result: Result<Decided, StoreError>,
    ) -> Next {
        let next = self.settle_decisions(request, result);
        if matches!(next, Next::Answer(_)) {
            self.slots.clear();
        }
        next
    }

    fn settle_decisions<ReqBody>(
        &mut self,
        request: &mut Request<ReqBody>,
        result: Result<Decided, StoreError>,
    ) -> Next {
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
                self.first = Some(decisions.into_vec());
                return match self.shared.decide_now(&self.view, &enforced) {
                    Pending::Ready(result) => self.settle_decisions(request, result),
                    Pending::Waiting(taking) => Next::Again(taking),
                };
            }
        }
        // All-or-nothing: the store charged the request exactly when every policy
        // admitted it, or, decided again, when every enforced one did.
        let charged = allowed || (self.redecided && rejected_by.is_none());
        if let Some(policy) = rejected_by {
            self.count(&decisions, None, Some(policy));
            return Next::Answer(self.rate_limited(decisions));
        }
        // From here every receipt the store gave stands in the request's account.
        self.account = Ledger::Own(Account::open(&self.checks, &decisions));
        // Held for the longest delay of what was charged.
        let delay = if charged {
            self.hold_for(&decisions, allowed)
        } else {
            Duration::ZERO
        };
        let mut slot = None;
        let mut queue_full = None;
        if !delay.is_zero() {
            let (holder, index) = self.holder(&decisions);
            // The held request's charges stand in its account: given back if its
            // caller leaves before its turn (the context is dropped unserved).
            slot = HeldSlot::take(&self.shared, holder, &self.view.metrics[index]);
            if slot.is_none() {
                let enforced = self
                    .checks
                    .iter()
                    .zip(decisions.iter())
                    .any(|(check, d)| check.enforced && !d.delay.is_zero());
                if enforced {
                    self.count(&decisions, Some(Outcome::QueueFull), None);
                    return Next::Answer(self.queue_full(decisions, delay));
                }
                // Only shadowed policies asked for the delay, and shadow mode never
                // rejects: those give their places back, as their rejection would,
                // and the request is passed on now rather than held past the cap.
                // The enforced policies keep their charges and their answers.
                let (shared, view) = (&self.shared, &self.view);
                self.account.with(|account| {
                    account.give_back_shadowed(shared, view, |position| {
                        decisions.get(position).is_some_and(|d| !d.delay.is_zero())
                    });
                });
                queue_full = Some(Outcome::ShadowRejected);
            }
        }
        let held = slot.is_some();
        self.served = !held;
        self.count(
            &decisions,
            queue_full.or(held.then_some(Outcome::Waited)),
            None,
        );
        self.admit();
        if self.view.meters {
            self.meter(request, &decisions);
        }
        if self.shared.decisions_extension {
            self.decisions = match (&*self.checks, &decisions) {
                // One policy: paired as it is, not collected item by item.
                ([check], Few::One([decision])) => Few::One([(check.index, decision.clone())]),
                _ => self.indexed(decisions.iter().cloned()),
            };
            Decisions::record(request.extensions_mut(), decisions);
        } else {
            self.decisions = self.indexed(decisions);
        }
        match slot {
            Some(slot) => Next::Delay(delay, slot),
            None => Next::Call,
        }
    }

    /// `decisions`, in check order, each paired with its policy's index.
    fn indexed(&self, decisions: impl IntoIterator<Item = Decision>) -> Few<(usize, Decision)> {
        self.checks
            .iter()
            .map(|check| check.index)
            .zip(decisions)
            .collect()
    }

    /// Gives an admitted request of a metered policy its [`Meter`](crate::layer::Meter),
    /// and one of a byte-metered policy its byte meters, in its extensions; both settle
    /// through the request's account, which is shared with them from then on.
    fn meter<ReqBody>(&mut self, request: &mut Request<ReqBody>, decisions: &[Decision]) {
        let policies = self.view.policies();
        if self
            .checks
            .iter()
            .any(|check| policies[check.index].is_metered())
        {
            let account = self.account.share();
            let metered = self.checks.iter().map(|check| check.index);
            if let Some(metering) = Metering::new(&self.shared, &self.view, account, metered) {
                request.extensions_mut().insert(metering.meter());
                self.metering = Some(CloseOnDrop(metering));
            }
        }
        if self
            .checks
            .iter()
            .any(|check| policies[check.index].get_unit() == Unit::ContentBytes)
        {
            let account = self.account.share();
            let charges = self.checks.iter().copied().zip(decisions.iter().cloned());
            if let Some(meters) =
                ByteMeters::new(&self.shared, &self.view, self.grpc, account, charges)
            {
                request
                    .extensions_mut()
                    .insert(ByteMetersExtension(meters.clone()));
                self.bytes = Some(meters);
            }
        }
    }

    /// The request's turn came and it is passed to the inner service: its charges
    /// stand, to be settled or refunded only by its response.
    pub(super) fn serve(&mut self) {
        self.served = true;
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
    fn merged(&self, first: Vec<Decision>, enforced: Decided) -> Decided {
        let mut enforced = enforced.into_vec().into_iter();
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
                // Held, or given back past the hold cap, for the policies that asked
                // for a delay; the others admitted it as usual.
                Some(Outcome::Waited | Outcome::ShadowRejected)
                    if decision.allowed && decision.delay.is_zero() =>
                {
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

    /// A request passed on with no rate decision (its policies limit only requests in
    /// flight, or the store failed open): its [`Decisions`] say so, empty.
    pub(super) fn unchecked<ReqBody>(&self, mut request: Request<ReqBody>) -> Request<ReqBody> {
        self.mark_unchecked(&mut request);
        request
    }

    /// As [`unchecked`](Self::unchecked), in place.
    pub(super) fn mark_unchecked<ReqBody>(&self, request: &mut Request<ReqBody>) {
        if self.shared.decisions_extension {
            Decisions::record_none(request.extensions_mut());
        }
    }

    /// How long to hold an admitted request: its longest delay, each bounded by its
    /// policy's `max_delay`. The store already denies a place beyond the bound, as
    /// measured from the latest instant it has seen; a caller's clock behind that
    /// instant hears a longer delay, which the layer does not wait out.
    /// Only what was charged holds it: every decision when all admitted it
    /// (`allowed`), else the enforced ones, decided again alone.
    fn hold_for(&self, decisions: &[Decision], allowed: bool) -> Duration {
        // The common case, no decision asks for a delay: nothing to bound.
        if decisions.iter().all(|d| d.delay.is_zero()) {
            return Duration::ZERO;
        }
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
}

impl Drop for RequestContext {
    fn drop(&mut self) {
        if !self.served {
            // Never passed on (its client left while it was held, or the layer
            // answered it): what stands of its charges goes back.
            let (shared, view) = (&self.shared, &self.view);
            self.account
                .with(|account| account.give_back_all(shared, view));
        }
        // Answered (or given up): no longer running under its policies.
        if self.running {
            for index in self.running_policies() {
                self.view.metrics[index].ended();
            }
        }
    }
}
