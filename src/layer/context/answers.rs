//! The layer's own answers to a request: when the store fails (fail open, or 503),
//! when a policy denies it, when the layer cannot hold it; and the rejection they build.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};

use crate::layer::few::Decided;
use crate::layer::grpc::{GrpcContentType, grpc_response};
use crate::layer::headers::Report;
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::shared::{Shared, View};
use crate::layer::{FailMode, Rejection};
use crate::observe::{self, Outcome};
use crate::{Decision, StoreError};

use super::{Next, RequestContext};

impl RequestContext {
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
    pub(super) fn store_failed<ReqBody>(
        &mut self,
        request: &mut Request<ReqBody>,
        error: &StoreError,
    ) -> Next {
        match self.fail(error) {
            None => {
                self.admit();
                // Passed on uncounted: its account is empty.
                self.served = true;
                self.mark_unchecked(request);
                if self.view.meters {
                    // Charged nothing, so nothing will be settled: the meter is there
                    // for the handlers that expect one.
                    let uncharged: Vec<Decision> = self
                        .checks
                        .iter()
                        .map(|check| self.uncharged(check.index))
                        .collect();
                    self.meter(request, &uncharged);
                }
                Next::Call
            }
            Some(response) => Next::Answer(response),
        }
    }

    /// The store failed: `None` to pass the request on (fail open), or the 503.
    pub(super) fn fail(&self, error: &StoreError) -> Option<Response<Bytes>> {
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
        let info = RejectionInfo::without_decisions(
            RejectReason::StoreUnavailable,
            Some(Duration::from_secs(1)),
        );
        Some(rejection(
            &self.shared,
            &self.view,
            self.grpc,
            &info,
            Report::default(),
        ))
    }

    /// The rejection of a request some policy denied; its body is never read.
    pub(super) fn rate_limited(&mut self, decisions: Decided) -> Response<Bytes> {
        let indices = self.checks.iter().map(|check| check.index);
        self.decisions = indices.zip(decisions.iter().cloned()).collect();
        // A denial whose cost can never fit has no retry time: say so rather than
        // invite a retry that cannot succeed. Only the enforced denials say when: the
        // shadowed ones would not stop a retry.
        let retry_after = self
            .checks
            .iter()
            .zip(decisions.iter())
            .filter(|(check, d)| check.enforced && !d.allowed)
            .map(|(_, d)| d.retry_after)
            .try_fold(Duration::ZERO, |wait, retry| retry.map(|r| wait.max(r)));
        let mut info = RejectionInfo::rate_limited(decisions.into_vec());
        info.retry_after = retry_after;
        info.shadowed = self.shadowed();
        rejection(&self.shared, &self.view, self.grpc, &info, self.report())
    }

    /// The rejection of a request admitted with `delay` when the layer holds as many
    /// requests as it may; its charges are given back. Its headers describe the state
    /// with the charges (never more quota than there may be, should the refund fail).
    pub(super) fn queue_full(&mut self, decisions: Decided, delay: Duration) -> Response<Bytes> {
        self.give_back_all();
        let indices = self.checks.iter().map(|check| check.index);
        self.decisions = indices.zip(decisions.iter().cloned()).collect();
        let info = RejectionInfo {
            reason: RejectReason::QueueFull,
            decisions: decisions.into_vec(),
            retry_after: Some(delay),
            shadowed: self.shadowed(),
        };
        rejection(&self.shared, &self.view, self.grpc, &info, self.report())
    }

    /// The positions, in check order, of the policies that only watch this caller:
    /// never named as what rejected it.
    fn shadowed(&self) -> Vec<usize> {
        self.checks
            .iter()
            .enumerate()
            .filter(|(_, check)| !check.enforced)
            .map(|(position, _)| position)
            .collect()
    }

    /// Gives back what stands of every charge of a request the layer will not serve.
    pub(super) fn give_back_all(&mut self) {
        let (shared, view) = (&self.shared, &self.view);
        self.account
            .with(|account| account.give_back_all(shared, view));
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
