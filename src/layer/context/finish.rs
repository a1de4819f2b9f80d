//! What a request's response gets once the inner service has answered: refunds,
//! settles, headers, and the hook its body runs when it ends.

use http::{HeaderMap, StatusCode};

use crate::layer::body::OnGrpcStatus;
use crate::layer::grpc::grpc_http_status;
use crate::layer::headers::GRPC_STATUS;
use crate::layer::meter::Refunds;
use crate::layer::refunds::refund_uncounted;
use crate::observe;

use super::RequestContext;

impl RequestContext {
    /// Refunds, settles and headers once the inner service has answered with `head`.
    /// Returns what the response body holds until it ends: the hook that settles
    /// refunds once a gRPC status arrives in the trailers, the request's in-flight
    /// slots, and its metering, settled when the body ends.
    pub(in crate::layer) fn finish(
        &mut self,
        head: &mut http::response::Parts,
    ) -> Option<OnGrpcStatus> {
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
    pub(super) fn refunds_at_end(
        &mut self,
        headers: &HeaderMap,
        status: StatusCode,
    ) -> (Option<OnGrpcStatus>, Refunds) {
        let policies = self.view.policies();
        if !self
            .checks
            .iter()
            .any(|check| policies[check.index].refunds_some_responses())
        {
            return (None, Refunds::None);
        }
        // Only what the store charged, and still stands, can be refunded.
        if !self.account.with(|account| account.stands()) {
            return (None, Refunds::None);
        }
        // gRPC answers HTTP 200; its own status is in the headers of a trailers-only
        // response, else in the trailers at the end of the body.
        let status = match self.grpc {
            None => Some(status),
            Some(_) => headers
                .get(GRPC_STATUS)
                .map(|code| grpc_http_status(code.as_bytes())),
        };
        if let Some(status) = status {
            let (shared, view, decisions) = (&self.shared, &self.view, &mut self.decisions);
            self.account.with(|account| {
                refund_uncounted(shared, view, account, decisions, status);
            });
            return (None, Refunds::Made(status));
        }
        // The status comes in the trailers: the refund then goes through the account,
        // shared with the response body from now on.
        let (shared, view, account) =
            (self.shared.clone(), self.view.clone(), self.account.share());
        let hook: OnGrpcStatus = Box::new(move |status| {
            refund_uncounted(&shared, &view, &mut account.lock(), &mut [], status);
        });
        (Some(hook), Refunds::AtTrailers)
    }
}
