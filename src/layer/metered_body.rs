//! [`MeteredBody`]: a request or response body whose bytes are charged to the
//! request's byte-metered policies as they stream, each frame held until its bytes
//! have their place.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::StoreError;
use crate::layer::byte_account::{ByteMeters, Direction};
use crate::layer::few::{Decided, Few};
use crate::layer::limiter_calls::Pending;
use crate::limiter::{Taken, Taking};

pin_project! {
    /// A body that went through [`MeterBytes`](crate::layer::MeterBytes): the
    /// original body, its bytes charged to the request's byte-metered policies as
    /// they stream when one counts this direction; or the layer's rejection of a
    /// request whose body a policy cut off.
    ///
    /// Each data frame is held until its bytes have their place under every policy
    /// (in charges of at most the policy's capacity each, within the policy's wait);
    /// a frame whose place is further away ends the body with
    /// [`MeteredBodyError::RateLimited`], and its bytes are not charged.
    ///
    /// ```
    /// use http_body::Body;
    /// let body = tollgate::layer::MeteredBody::new(http_body_util::Full::new(bytes::Bytes::from("abc")));
    /// assert_eq!(body.size_hint().exact(), Some(3));
    /// ```
    #[project = MeteredProj]
    pub struct MeteredBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Metered { #[pin] body: B, meter: Box<FrameMeter> },
        Plain { #[pin] body: B },
        Rejection { bytes: Option<Bytes> },
    }
}

impl<B> MeteredBody<B> {
    /// `body`, counted by no policy (what [`MeterBytes`](crate::layer::MeterBytes)
    /// hands on when no policy of the request counts its bytes).
    ///
    /// ```
    /// let body = tollgate::layer::MeteredBody::new(String::from("plain"));
    /// # let _ = body;
    /// ```
    pub fn new(body: B) -> Self {
        Self {
            kind: Kind::Plain { body },
        }
    }

    /// `body`, its bytes counted by the request's byte meters going in `direction`.
    pub(crate) fn metered(body: B, meters: Arc<ByteMeters>, direction: Direction) -> Self {
        let accounts = meters.counting(direction);
        if accounts.is_empty() {
            return Self::new(body);
        }
        Self {
            kind: Kind::Metered {
                body,
                meter: Box::new(FrameMeter {
                    meters,
                    accounts,
                    held: None,
                    next: 0,
                    owed: 0,
                    chunk: 0,
                    call: None,
                    taken: Vec::new(),
                    until: None,
                    sleep: None,
                    ended: false,
                }),
            },
        }
    }

    /// The layer's rejection, `bytes` long.
    pub(crate) fn rejection(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Rejection {
                bytes: (!bytes.is_empty()).then_some(bytes),
            },
        }
    }
}

/// Why a [`MeteredBody`] ended early.
///
/// ```
/// use tollgate::layer::MeteredBodyError;
/// let error: MeteredBodyError<std::io::Error> = MeteredBodyError::Body(std::io::Error::other("reset"));
/// assert_eq!(error.to_string(), "reset");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum MeteredBodyError<E> {
    /// The body itself failed.
    Body(E),
    /// Its next bytes would have waited longer than their policy allows.
    RateLimited(BytesRateLimited),
    /// The store failed while the layer fails closed.
    Store(StoreError),
}

/// A body cut off by a byte-metered policy: its next frame would have waited longer
/// than the policy's wait for its place.
///
/// ```
/// use std::time::Duration;
/// use tollgate::layer::BytesRateLimited;
/// let limited = BytesRateLimited::new("upload", Some(Duration::from_millis(2_500)));
/// assert_eq!(limited.policy(), "upload");
/// assert_eq!(limited.to_string(), "body bytes over the rate limit of policy \"upload\"; retry after 2.5 s");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesRateLimited {
    policy: &'static str,
    retry_after: Option<Duration>,
}

impl BytesRateLimited {
    /// The policy `policy` cut a body off; its bytes could pass `retry_after` from now
    /// (`None`: a frame larger than the policy can ever take at once).
    ///
    /// ```
    /// let limited = tollgate::layer::BytesRateLimited::new("upload", None);
    /// assert_eq!(limited.retry_after(), None);
    /// ```
    pub fn new(policy: &'static str, retry_after: Option<Duration>) -> Self {
        Self {
            policy,
            retry_after,
        }
    }

    /// The policy that cut the body off.
    ///
    /// ```
    /// assert_eq!(tollgate::layer::BytesRateLimited::new("upload", None).policy(), "upload");
    /// ```
    pub fn policy(&self) -> &'static str {
        self.policy
    }

    /// How long until the frame would have had its place.
    ///
    /// ```
    /// use std::time::Duration;
    /// let limited = tollgate::layer::BytesRateLimited::new("upload", Some(Duration::from_secs(3)));
    /// assert_eq!(limited.retry_after(), Some(Duration::from_secs(3)));
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for BytesRateLimited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "body bytes over the rate limit of policy \"{}\"",
            self.policy
        )?;
        match self.retry_after {
            Some(wait) => write!(f, "; retry after {} s", wait.as_secs_f64()),
            None => f.write_str("; a frame larger than the policy's capacity"),
        }
    }
}

impl Error for BytesRateLimited {}

impl<E: fmt::Display> fmt::Display for MeteredBodyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Body(error) => error.fmt(f),
            Self::RateLimited(limited) => limited.fmt(f),
            Self::Store(error) => write!(f, "rate-limit store failed metering body bytes: {error}"),
        }
    }
}

impl<E: Error + 'static> Error for MeteredBodyError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Body(error) => Some(error),
            Self::RateLimited(limited) => Some(limited),
            Self::Store(error) => Some(error),
        }
    }
}

/// Charges the frames of one body to the accounts that count its direction.
struct FrameMeter {
    meters: Arc<ByteMeters>,
    /// The accounts counting this body, by position in `meters`.
    accounts: Vec<usize>,
    /// The frame whose bytes are being charged, and its length.
    held: Option<(Frame<Bytes>, u64)>,
    /// Which of `accounts` the held frame is being charged to.
    next: usize,
    /// The held frame's bytes still to charge to that account.
    owed: u64,
    /// The size of the charge on its way.
    chunk: u64,
    /// A charge on its way to a remote store.
    call: Option<Taking>,
    /// What was charged for the held frame: kept when it goes through, given back if
    /// the body is dropped first, or ends with an error.
    taken: Vec<Taken>,
    /// When the held frame's last place comes.
    until: Option<Instant>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// An error ended the body.
    ended: bool,
}

impl FrameMeter {
    /// Starts charging `frame` of `len` bytes: from the first account's advance, then
    /// by places in the store.
    fn hold(&mut self, frame: Frame<Bytes>, len: u64) {
        self.next = 0;
        self.owed = self.meters.account(self.accounts[0]).pay_from_advance(len);
        self.held = Some((frame, len));
    }

    /// Charges the held frame; `Ready(Ok)` when every account has given it its place
    /// and that place has come.
    fn poll_charge(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Cut>> {
        loop {
            if let Some(call) = self.call.as_mut() {
                let answer = ready!(Pin::new(call).poll(cx));
                self.call = None;
                self.answered(answer.map(|taken| Few::from(taken.keep())), self.chunk)?;
                continue;
            }
            let i = self.accounts[self.next];
            if self.owed > 0 {
                let chunk = self.owed.min(self.meters.account(i).capacity());
                match self.meters.reserve(i, chunk) {
                    Pending::Ready(answer) => self.answered(answer, chunk)?,
                    Pending::Waiting(call) => {
                        self.call = Some(call);
                        self.chunk = chunk;
                    }
                }
                continue;
            }
            if self.next + 1 < self.accounts.len() {
                self.next += 1;
                let len = self.held.as_ref().map_or(0, |(_, len)| *len);
                self.owed = self
                    .meters
                    .account(self.accounts[self.next])
                    .pay_from_advance(len);
                continue;
            }
            if let Some(until) = self.until.take() {
                self.sleep = Some(Box::pin(tokio::time::sleep_until(until)));
            }
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            return Poll::Ready(Ok(()));
        }
    }

    /// What the store answered for a charge of `chunk` bytes to the current account.
    fn answered(&mut self, answer: Result<Decided, StoreError>, chunk: u64) -> Result<(), Cut> {
        let i = self.accounts[self.next];
        let account = self.meters.account(i);
        let decisions = match answer {
            Ok(decisions) => decisions,
            Err(error) if self.meters.fails_open() => {
                // Through uncounted, as a request is when the store fails open.
                crate::observe::store_error(&error);
                self.owed -= chunk;
                return Ok(());
            }
            Err(error) => return Err(self.end(Cut::Store(error))),
        };
        let Some(decision) = decisions.first() else {
            return Err(self.end(Cut::Store(StoreError::new(
                crate::StoreErrorKind::Protocol,
                "no decision for a body's bytes",
            ))));
        };
        if decision.allowed || !account.enforced() {
            // A shadowed policy's denial charged nothing and holds nothing.
            self.owed -= chunk;
            if decision.allowed {
                if !decision.delay.is_zero() {
                    let at = Instant::now() + decision.delay;
                    self.until = Some(self.until.map_or(at, |until| until.max(at)));
                }
                self.taken.push(self.meters.taken(i, decisions.into_vec()));
            }
            return Ok(());
        }
        let limited = BytesRateLimited::new(account.name(), decision.retry_after);
        account.trip(decision.clone());
        Err(self.end(Cut::RateLimited(limited)))
    }

    /// Ends the body with `error`: what was charged for the held frame goes back.
    fn end(&mut self, cut: Cut) -> Cut {
        self.ended = true;
        self.held = None;
        self.taken.clear();
        self.call = None;
        self.sleep = None;
        cut
    }

    /// The held frame, now that its bytes have their place: what was charged for it
    /// stands.
    fn release(&mut self) -> Option<Frame<Bytes>> {
        let (frame, len) = self.held.take()?;
        for taken in self.taken.drain(..) {
            taken.keep();
        }
        for &i in &self.accounts {
            self.meters.account(i).delivered(len);
        }
        Some(frame)
    }
}

/// Why a charge ended the body.
enum Cut {
    RateLimited(BytesRateLimited),
    Store(StoreError),
}

impl<E> From<Cut> for MeteredBodyError<E> {
    fn from(cut: Cut) -> Self {
        match cut {
            Cut::RateLimited(limited) => Self::RateLimited(limited),
            Cut::Store(error) => Self::Store(error),
        }
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = MeteredBodyError<B::Error>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Plain { body } => body
                .poll_frame(cx)
                .map(|frame| frame.map(|frame| frame.map_err(MeteredBodyError::Body))),
            KindProj::Rejection { bytes } => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            KindProj::Metered { mut body, meter } => loop {
                if meter.ended {
                    return Poll::Ready(None);
                }
                if meter.held.is_none() {
                    let frame = match ready!(body.as_mut().poll_frame(cx)) {
                        None => return Poll::Ready(None),
                        Some(Err(error)) => {
                            return Poll::Ready(Some(Err(MeteredBodyError::Body(error))));
                        }
                        Some(Ok(frame)) => frame,
                    };
                    let len = frame.data_ref().map_or(0, |data| data.len() as u64);
                    if len == 0 {
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    meter.hold(frame, len);
                }
                match ready!(meter.poll_charge(cx)) {
                    Ok(()) => {
                        if let Some(frame) = meter.release() {
                            return Poll::Ready(Some(Ok(frame)));
                        }
                    }
                    Err(cut) => return Poll::Ready(Some(Err(cut.into()))),
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Plain { body } => body.is_end_stream(),
            Kind::Metered { body, meter } => {
                meter.ended || (meter.held.is_none() && body.is_end_stream())
            }
            Kind::Rejection { bytes } => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Plain { body } => body.size_hint(),
            Kind::Metered { body, meter } => {
                // A frame held for its place is still to come.
                let held = meter.held.as_ref().map_or(0, |(_, len)| *len);
                let inner = body.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(inner.lower().saturating_add(held));
                if let Some(upper) = inner.upper() {
                    hint.set_upper(upper.saturating_add(held));
                }
                hint
            }
            Kind::Rejection { bytes } => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for MeteredBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Metered { .. } => "metered",
            Kind::Plain { .. } => "plain",
            Kind::Rejection { .. } => "rejection",
        };
        f.debug_struct("MeteredBody")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}
