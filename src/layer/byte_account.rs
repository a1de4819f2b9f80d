//! What a request's body bytes owe its byte-metered policies: the bytes its admission
//! paid for in advance, the frames charged since, and the settle of what was paid in
//! advance and not used, once the bodies are done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http::Response;

use crate::Decision;
use crate::layer::account::SharedAccount;
use crate::layer::context::rejection;
use crate::layer::grpc::GrpcContentType;
use crate::layer::headers::Report;
use crate::layer::limiter_calls::{LayerCheck, Pending};
use crate::layer::rejection::{RejectReason, RejectionInfo};
use crate::layer::settles::When;
use crate::layer::shared::{Shared, View};
use crate::limiter::Taken;
use crate::observe::Operation;

/// Which body a byte-metered policy counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Request,
    Response,
}

/// A request's byte-metered policies, shared by its request body, its response body
/// and the layer: found in the request extensions by
/// [`MeterBytes`](crate::layer::MeterBytes). When the last of them is dropped, each
/// policy's advance is settled to the bytes that went through, if fewer.
pub(crate) struct ByteMeters {
    shared: Arc<Shared>,
    view: Arc<View>,
    grpc: Option<GrpcContentType>,
    /// The request's account, where each policy's advance stands: settled through it,
    /// so an advance given back already is never given back again.
    account: SharedAccount,
    accounts: Vec<ByteAccount>,
    /// Whether a [`MeterBytes`](crate::layer::MeterBytes) layer took the bodies; if
    /// none did, nothing was counted, and the admission's charge stands.
    attached: AtomicBool,
}

/// The request extension that carries a request's [`ByteMeters`] to the
/// [`MeterBytes`](crate::layer::MeterBytes) layer.
#[derive(Clone)]
pub(crate) struct ByteMetersExtension(pub(crate) Arc<ByteMeters>);

/// One byte-metered policy of a request.
pub(crate) struct ByteAccount {
    check: LayerCheck,
    name: &'static str,
    request: bool,
    response: bool,
    /// The most bytes one charge may be: the policy's capacity under the caller's
    /// quota (a larger charge could never fit).
    capacity: u64,
    /// The longest a frame's bytes may wait for their place.
    wait: Duration,
    state: Mutex<Counted>,
}

struct Counted {
    /// What is left of the advance.
    credit: u64,
    /// The bytes delivered (both directions).
    delivered: u64,
    /// The denial that ended a request body, for the response that replaces the
    /// inner service's.
    tripped: Option<Decision>,
}

impl ByteMeters {
    /// The byte meters of a request whose `charges` were admitted under `view`, with
    /// what stands of them in `account`; `None` when no policy of the request counts
    /// bytes.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        view: &Arc<View>,
        grpc: Option<GrpcContentType>,
        account: SharedAccount,
        charges: impl Iterator<Item = (LayerCheck, Decision)>,
    ) -> Option<Arc<Self>> {
        let policies = view.policies();
        let accounts: Vec<ByteAccount> = charges
            .filter_map(|(check, decision)| {
                let policy = &policies[check.index];
                if policy.get_unit() != crate::layer::Unit::ContentBytes {
                    return None;
                }
                let capacity = if decision.evaluated() {
                    decision.capacity
                } else {
                    policy.capacity()
                };
                // The advance: what the admission charged and still stands (nothing
                // when it did not, or gave it back already).
                let advance = account
                    .lock()
                    .charge(check.index)
                    .map_or(0, |charge| charge.cost());
                Some(ByteAccount {
                    name: policy.name(),
                    request: policy.meters_request_bytes(),
                    response: policy.meters_response_bytes(),
                    capacity: capacity.max(1),
                    wait: shared.wait_of(policy).unwrap_or(decision.quota.period()),
                    state: Mutex::new(Counted {
                        credit: advance,
                        delivered: 0,
                        tripped: None,
                    }),
                    check,
                })
            })
            .collect();
        (!accounts.is_empty()).then(|| {
            Arc::new(Self {
                shared: shared.clone(),
                view: view.clone(),
                grpc,
                account,
                accounts,
                attached: AtomicBool::new(false),
            })
        })
    }

    /// A [`MeterBytes`](crate::layer::MeterBytes) layer takes the request's bodies.
    pub(crate) fn attach(&self) {
        self.attached.store(true, Ordering::Relaxed);
    }

    /// Whether a [`MeterBytes`](crate::layer::MeterBytes) layer took the bodies.
    pub(crate) fn attached(&self) -> bool {
        self.attached.load(Ordering::Relaxed)
    }

    /// The accounts counting the body going in `direction`, by position.
    pub(crate) fn counting(&self, direction: Direction) -> Vec<usize> {
        (0..self.accounts.len())
            .filter(|&i| self.accounts[i].counts(direction))
            .collect()
    }

    pub(crate) fn account(&self, i: usize) -> &ByteAccount {
        &self.accounts[i]
    }

    /// Asks for the place of `bytes` more under account `i`, within its wait: at once
    /// on the memory store, else a call that gives its place back if dropped.
    pub(crate) fn reserve(&self, i: usize, bytes: u64) -> Pending {
        let account = &self.accounts[i];
        let check = LayerCheck {
            cost: bytes,
            ..account.check
        };
        if !check.enforced {
            // A shadowed policy charges what fits and never holds or ends a body.
            return self.shared.decide_now(&self.view, &[check]);
        }
        let timer = self.shared.store_metrics.start(Operation::Reserve);
        self.shared.limiter.decide_waiting(
            &self.view.set,
            &check,
            account.wait,
            (&self.shared.store_metrics, timer),
        )
    }

    /// What a reservation answered at once took, to keep or give back.
    pub(crate) fn taken(&self, i: usize, decisions: Vec<Decision>) -> Taken {
        let check = &self.accounts[i].check;
        Taken::new(
            self.shared.limiter.clone(),
            self.view.set.clone(),
            vec![(check.index, check.key)],
            decisions,
        )
    }

    /// Whether a store failure lets the bytes through (the layer fails open).
    pub(crate) fn fails_open(&self) -> bool {
        self.shared.fail_mode == crate::layer::FailMode::Open
    }

    /// The layer's rejection for a request whose body a policy cut off, if one did.
    pub(crate) fn rejection(&self) -> Option<Response<Bytes>> {
        let (check, decision) = self.accounts.iter().find_map(|account| {
            let tripped = account.state().tripped.clone()?;
            Some((account.check, tripped))
        })?;
        let info = RejectionInfo {
            reason: RejectReason::RateLimited,
            retry_after: decision.retry_after,
            decisions: vec![decision.clone()],
            shadowed: Vec::new(),
        };
        Some(rejection(
            &self.shared,
            &self.view,
            self.grpc,
            &info,
            Report {
                decisions: &[(check.index, decision)],
                checks: &[check],
                claims: &[],
            },
        ))
    }
}

impl ByteAccount {
    fn state(&self) -> MutexGuard<'_, Counted> {
        // A few integers, never left half written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn counts(&self, direction: Direction) -> bool {
        match direction {
            Direction::Request => self.request,
            Direction::Response => self.response,
        }
    }

    /// The policy's name.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Whether the policy ends a body that would wait too long (else it only watches).
    pub(crate) fn enforced(&self) -> bool {
        self.check.enforced
    }

    /// The most bytes one charge may be.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Pays what it can of a frame of `bytes` from the advance; returns what is left
    /// to charge.
    pub(crate) fn pay_from_advance(&self, bytes: u64) -> u64 {
        let mut state = self.state();
        let paid = state.credit.min(bytes);
        state.credit -= paid;
        bytes - paid
    }

    /// A frame of `bytes` went through.
    pub(crate) fn delivered(&self, bytes: u64) {
        let mut state = self.state();
        state.delivered = state.delivered.saturating_add(bytes);
    }

    /// The policy ended a request body with `denial`.
    pub(crate) fn trip(&self, denial: Decision) {
        self.state().tripped.get_or_insert(denial);
    }
}

impl Drop for ByteMeters {
    fn drop(&mut self) {
        if !self.attached() {
            // Nothing counted the bytes: the admission's charge stands.
            return;
        }
        let mut standing = self.account.lock();
        for account in &self.accounts {
            let delivered = account.state().delivered;
            // Paid in advance for more than went through: the rest comes back, once,
            // from what stands of the advance.
            if let Some(charge) = standing.charge(account.check.index)
                && delivered < charge.cost()
            {
                charge.settle(&self.shared, &self.view, delivered, When::NowOrLater);
            }
        }
    }
}
