//! What every clone of the layer and of its service shares: the limiter and the
//! options, and the count of requests held for their turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::request::Parts;

use crate::Limiter;
use crate::layer::fail_mode::FailMode;
use crate::layer::headers::HeaderPlan;
use crate::layer::rejection::Rejection;

/// A request predicate of `allow` / `deny`.
pub(crate) type Predicate = dyn Fn(&Parts) -> bool + Send + Sync;

/// Everything the service needs, shared by every clone of the layer and the service.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) limiter: Limiter,
    pub(crate) headers: HeaderPlan,
    pub(crate) rejection: Rejection,
    pub(crate) fail_mode: FailMode,
    pub(crate) shadow: bool,
    /// Whether admitted requests carry their [`Decisions`](crate::layer::Decisions).
    pub(crate) decisions_extension: bool,
    pub(crate) allow: Vec<Arc<Predicate>>,
    pub(crate) deny: Vec<Arc<Predicate>>,
    /// The most requests held at once for their leaky-bucket turn.
    pub(crate) max_held: usize,
    /// How many are held now, shared by every clone.
    pub(crate) held: Arc<AtomicUsize>,
}

/// One of the layer's places for a held request, given back when dropped: when the
/// request is passed on, or when its caller goes away while it waits.
pub(crate) struct HeldSlot(Arc<AtomicUsize>);

impl HeldSlot {
    /// A place, if fewer than `shared.max_held` are taken.
    pub(crate) fn take(shared: &Shared) -> Option<Self> {
        // Only the count matters, not what other memory it orders: relaxed is enough
        // for a compare-and-swap to never let two requests take the last place.
        shared
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held < shared.max_held).then_some(held + 1)
            })
            .ok()?;
        Some(Self(shared.held.clone()))
    }
}

impl Drop for HeldSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
