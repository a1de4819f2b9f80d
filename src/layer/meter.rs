//! [`Meter`]: the handle through which the inner service reports what a metered
//! request actually cost, and the settles it leads to.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http::StatusCode;

use crate::Decision;
use crate::layer::account::SharedAccount;
use crate::layer::settles::When;
use crate::layer::shared::{Shared, View};

/// The actual cost of a request, reported by the inner service for the request's
/// [`metered`](crate::Policy::metered) policies: found in the request extensions of
/// every request a metered policy admitted (or let through uncounted when the store
/// failed open: that meter settles nothing), cheap to clone, `Send + Sync`. A request
/// no metered policy applied to has none (an `allow` predicate, a route the policy is
/// not on): in axum, take `Option<Extension<Meter>>` where that can happen.
///
/// A metered policy admits a request on an estimate (its [`costs`](crate::Policy::costs),
/// e.g. the request's `max_tokens`) and settles the charge to the actual once the
/// work is known ([`Limiter::settle`](crate::Limiter::settle): less gives back, more
/// charges a debt that keeps the caller refused until time repays it).
///
/// - **Reporting.** [`report`](Meter::report) sets the actual (the last report
///   wins: report a total); [`add`](Meter::add) adds to it (report as you go, e.g. per
///   streamed chunk). Both apply to every metered policy of the request;
///   [`report_to`](Meter::report_to) and [`add_to`](Meter::add_to) to one, by name. A
///   policy's [`max_actual`](crate::Policy::max_actual) caps what it is settled to.
/// - **When it settles.** When the response body ends or is dropped (the client
///   went away mid-stream; the response future was dropped before the head): with
///   what was reported so far, or not at all if nothing was (the estimate stands).
///   From then on the meter is closed: later reports are ignored and return `false`.
///   A streamed response (SSE) whose last event reports the usage is settled right,
///   as long as the report comes before the body ends.
/// - **Headers.** The rate-limit headers go out with the response head. A figure
///   known by then (reported before the handler returned, or read from the head by
///   [`settle_from_response`](crate::Policy::settle_from_response)) is settled
///   before they are written when the store answers at once (the memory store): the
///   headers show where the caller stands after the settle. On a remote store
///   (Redis), and for a figure reported during the body, the headers show the
///   standing after the estimate, and the settle follows in the background.
/// - **Failures.** A settle never fails the response: a store error is logged and
///   counted (`tollgate_store_errors_total`), and the estimate stands. A request
///   that charged nothing (the store failed open, a shadowed denial), or whose charge
///   came back already (a `count_when` refund, a shadowed delay past
///   [`max_held`](crate::RateLimitLayer::max_held)), settles nothing.
///
/// **The bound on under-estimating.** A caller picks its estimate (`max_tokens: 1`),
/// so it is admitted whenever its key has that much left, and the work it then does
/// is charged after the fact. At any instant it is ahead of its quota by at most the
/// actual work, beyond their estimates, of the requests it has running at once; the
/// debt that work leaves keeps it refused until time has repaid it, so over any
/// stretch of time it is served at most the quota, plus the capacity, plus that
/// overshoot. Bound it with [`in_flight`](crate::Policy::in_flight) (`n` running at
/// once) and [`max_actual`](crate::Policy::max_actual) (`m` each, with the work itself
/// stopped at `m`): at most `n × (m − estimate)` ahead.
///
/// ```
/// use std::convert::Infallible;
/// use tollgate::{Policy, Quota, RateLimitLayer};
/// use tollgate::layer::{Costs, Meter};
/// use tower::{Service, ServiceExt, service_fn};
/// # tokio::runtime::Builder::new_current_thread().enable_time().build()?.block_on(async {
/// let tokens = Policy::new("tokens", Quota::per_minute(20_000))?
///     .costs(Costs::from_fn(|_: &http::request::Parts| 1_000)) // the estimate
///     .metered();
/// let layer = RateLimitLayer::builder().policy(tokens).build()?;
/// let limiter = layer.limiter().clone();
/// let mut service = tower::ServiceBuilder::new().layer(layer).service(service_fn(
///     |request: http::Request<()>| async move {
///         // The work used 240 tokens.
///         request.extensions().get::<Meter>().expect("a metered request").report(240);
///         Ok::<_, Infallible>(http::Response::new(String::from("done")))
///     },
/// ));
/// let response = service.ready().await?.call(http::Request::new(())).await?;
/// // Settled before the headers were written (the memory store answers at once).
/// assert_eq!(response.headers()["ratelimit"], r#""tokens";r=19760;t=1"#);
/// drop(response); // the body ends: the settle is final
/// let (parts, ()) = http::Request::new(()).into_parts();
/// let everyone = tollgate::key::global().extract(&parts).expect("one key for all");
/// assert_eq!(limiter.peek("tokens", &everyone).await?.remaining, 19_760);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Meter {
    metering: Arc<Metering>,
}

/// A request's metered charges: what the inner service reported for each, and what
/// each stands at.
pub(crate) struct Metering {
    shared: Arc<Shared>,
    view: Arc<View>,
    /// The request's account, where each line's charge stands: a charge given back
    /// already (a `count_when` refund, the hold cap) settles nothing.
    account: SharedAccount,
    lines: Mutex<Lines>,
}

struct Lines {
    /// The response ended: the meter takes no more reports.
    closed: bool,
    lines: Vec<Line>,
}

/// One metered policy of the request.
struct Line {
    name: &'static str,
    /// The policy's index in the request's view: its charge in the account.
    index: usize,
    /// Settled for good: by a figure from the response head, by a settle sent to a
    /// remote store (whose answer nobody waits for), or by a `count_when` refund.
    done: bool,
    /// What the inner service reported, if it did.
    reported: Option<u64>,
}

impl Meter {
    /// Sets the request's actual cost, for every metered policy of the request that
    /// takes reports (the last report wins). Returns whether one took it: `false`
    /// once the response has ended, or when every policy has its final figure.
    ///
    /// ```
    /// # use tollgate::layer::Meter;
    /// fn finished(meter: &Meter, used_tokens: u64) {
    ///     meter.report(used_tokens);
    /// }
    /// ```
    pub fn report(&self, actual: u64) -> bool {
        self.record(None, |_| actual)
    }

    /// Adds `n` to the request's actual cost (from 0 if nothing was reported), for
    /// every metered policy of the request that takes reports; saturates at
    /// `u64::MAX`. Returns whether one took it, as [`report`](Meter::report).
    ///
    /// ```
    /// # use tollgate::layer::Meter;
    /// fn streamed_a_chunk(meter: &Meter, chunk_tokens: u64) {
    ///     meter.add(chunk_tokens);
    /// }
    /// ```
    pub fn add(&self, n: u64) -> bool {
        self.record(None, |so_far| so_far.unwrap_or(0).saturating_add(n))
    }

    /// [`report`](Meter::report) for the policy named `policy` alone. `false` when
    /// it is not a metered policy of this request, or takes no more reports.
    ///
    /// ```
    /// # use tollgate::layer::Meter;
    /// fn finished(meter: &Meter, tokens: u64, images: u64) {
    ///     meter.report_to("tokens", tokens);
    ///     meter.report_to("images", images);
    /// }
    /// ```
    pub fn report_to(&self, policy: &str, actual: u64) -> bool {
        self.record(Some(policy), |_| actual)
    }

    /// [`add`](Meter::add) for the policy named `policy` alone.
    ///
    /// ```
    /// # use tollgate::layer::Meter;
    /// fn streamed_a_chunk(meter: &Meter, chunk_tokens: u64) {
    ///     meter.add_to("tokens", chunk_tokens);
    /// }
    /// ```
    pub fn add_to(&self, policy: &str, n: u64) -> bool {
        self.record(Some(policy), |so_far| so_far.unwrap_or(0).saturating_add(n))
    }

    /// What has been reported for the policy named `policy` so far, if anything (not
    /// capped by its [`max_actual`](crate::Policy::max_actual)).
    ///
    /// ```
    /// # use tollgate::layer::Meter;
    /// fn tokens_so_far(meter: &Meter) -> u64 {
    ///     meter.reported("tokens").unwrap_or(0)
    /// }
    /// ```
    pub fn reported(&self, policy: &str) -> Option<u64> {
        let lines = self.metering.lines();
        lines
            .lines
            .iter()
            .find(|line| line.name == policy)
            .and_then(|line| line.reported)
    }

    /// Whether the meter still takes reports: `false` once the response has ended
    /// (or was dropped).
    ///
    /// ```
    /// # use tollgate::layer::Meter;
    /// fn still_counting(meter: &Meter) -> bool {
    ///     meter.is_open()
    /// }
    /// ```
    pub fn is_open(&self) -> bool {
        !self.metering.lines().closed
    }

    fn record(&self, policy: Option<&str>, actual: impl Fn(Option<u64>) -> u64) -> bool {
        let mut lines = self.metering.lines();
        if lines.closed {
            return false;
        }
        let mut taken = false;
        for line in &mut lines.lines {
            if policy.is_some_and(|name| name != line.name) || line.done {
                continue;
            }
            line.reported = Some(actual(line.reported));
            taken = true;
        }
        taken
    }
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines = self.metering.lines();
        let mut map = f.debug_map();
        for line in &lines.lines {
            map.entry(&line.name, &line.reported);
        }
        map.finish()
    }
}

impl Metering {
    /// The metering of a request, for the metered policies among its checked ones
    /// (`checked`, policy indices), whose charges stand in `account`; `None` when no
    /// policy of the request is metered.
    pub(crate) fn new(
        shared: &Arc<Shared>,
        view: &Arc<View>,
        account: SharedAccount,
        checked: impl Iterator<Item = usize>,
    ) -> Option<Arc<Self>> {
        let policies = view.policies();
        let lines: Vec<Line> = checked
            .filter(|&index| policies[index].is_metered())
            .map(|index| Line {
                name: policies[index].name(),
                index,
                done: false,
                reported: None,
            })
            .collect();
        (!lines.is_empty()).then(|| {
            Arc::new(Self {
                shared: shared.clone(),
                view: view.clone(),
                account,
                lines: Mutex::new(Lines {
                    closed: false,
                    lines,
                }),
            })
        })
    }

    /// The handle the inner service finds in the request extensions.
    pub(crate) fn meter(self: &Arc<Self>) -> Meter {
        Meter {
            metering: self.clone(),
        }
    }

    fn lines(&self) -> MutexGuard<'_, Lines> {
        // A report is a few stores of integers: nothing can be left half done.
        self.lines.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The actual a line is settled to: what was reported, within its policy's cap.
    fn actual(&self, line: &Line) -> Option<u64> {
        let policy = &self.view.policies()[line.index];
        line.reported
            .map(|reported| reported.min(policy.get_max_actual().unwrap_or(u64::MAX)))
    }

    /// Settles `line`'s charge, as it stands in the account, to `actual`. A settle
    /// sent to a remote store or failed ends the line: nothing more can follow it.
    fn settle(&self, line: &mut Line, actual: u64, when: When) -> Option<Decision> {
        if line.done {
            return None;
        }
        let mut account = self.account.lock();
        let charge = account.charge(line.index)?;
        let settled = charge.settle(&self.shared, &self.view, actual, when);
        if settled.is_none() && when == When::NowOrLater {
            line.done = true;
        }
        settled
    }

    /// The response head has arrived: each policy that reads its actual from `head`
    /// settles to it for good; a figure already reported settles now if the store
    /// answers at once (a later report may still move it). The decisions in
    /// `decisions` that a settle moved are replaced by the settled ones, for the
    /// headers. A policy whose `count_when` refunded the request is settled by that
    /// refund instead; one whose refund waits for a gRPC status in the trailers is
    /// settled at the end, from its charge as it was made, which that refund names.
    pub(crate) fn head(
        &self,
        head: Option<&http::response::Parts>,
        refunds: Refunds,
        decisions: &mut [(usize, Decision)],
    ) {
        let mut lines = self.lines();
        for line in &mut lines.lines {
            let policy = &self.view.policies()[line.index];
            match refunds {
                Refunds::Made(status) if !policy.counts(status) => {
                    line.done = true;
                    continue;
                }
                Refunds::AtTrailers if policy.refunds_some_responses() => continue,
                _ => {}
            }
            let from_head = head.and_then(|head| policy.actual_from_response(head));
            let when = if from_head.is_some() {
                line.reported = from_head;
                When::NowOrLater
            } else {
                When::NowOnly
            };
            let Some(actual) = self.actual(line) else {
                continue;
            };
            // A provisional figure of 0 would end the charge, and a later report
            // could then charge nothing: it waits for the end.
            if when == When::NowOnly && actual == 0 {
                continue;
            }
            let settled = self.settle(line, actual, when);
            if from_head.is_some() {
                line.done = true;
            }
            if let Some(settled) = settled
                && let Some((_, shown)) =
                    decisions.iter_mut().find(|(index, _)| *index == line.index)
            {
                *shown = settled;
            }
        }
    }

    /// A gRPC status arrived in the trailers: the policies whose `count_when` gives
    /// it back were refunded, and settle nothing more.
    pub(crate) fn refunded(&self, status: StatusCode) {
        let mut lines = self.lines();
        for line in &mut lines.lines {
            if !self.view.policies()[line.index].counts(status) {
                line.done = true;
            }
        }
    }

    /// The response has ended (or was dropped): closes the meter and settles each
    /// line to what was reported, if anything was.
    fn close(&self) {
        let mut lines = self.lines();
        if std::mem::replace(&mut lines.closed, true) {
            return;
        }
        for line in &mut lines.lines {
            if let Some(actual) = self.actual(line) {
                self.settle(line, actual, When::NowOrLater);
            }
        }
    }
}

/// What became of a request's `count_when` refunds when its response head arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refunds {
    /// None to make: nothing charged, or no policy refunds any status.
    None,
    /// Made (or sent) for the policies that do not count this status.
    Made(StatusCode),
    /// To make once a gRPC status arrives in the trailers.
    AtTrailers,
}

/// Settles a request's metering when dropped: by the request context if the
/// response never came, else by the response body when it ends or is dropped.
pub(crate) struct CloseOnDrop(pub(crate) Arc<Metering>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}
