//! [`StoreCall`]: what every [`Store`](super::Store) method returns — an answer made
//! at once, or a future that does the I/O.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::StoreError;

/// A boxed future of a store's answer: what a store that does I/O wraps in a
/// [`StoreCall`].
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// What a [`Store`](super::Store) returns for a call: its answer, when the store
/// decides without I/O (the [`MemoryStore`](super::MemoryStore)), or a future that
/// does the I/O (Redis). Await it either way.
///
/// Callers that can use an answer made at once skip the future machinery (no
/// allocation, no poll): the limiter's memory path is a plain function call this way.
///
/// **A future does nothing until polled.** A store must start its work (send, charge,
/// count) only when its future is first polled, as every `async` block does: the
/// limiter may drop a call it never polled and make it again from arguments it owns
/// (so that a call whose caller leaves can run on and give back what it took).
///
/// ```
/// use tollgate::store::StoreCall;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let now: StoreCall<'_, u32> = StoreCall::ready(Ok(7));
/// assert!(now.is_ready());
/// assert_eq!(now.await?, 7);
/// let later: StoreCall<'_, u32> = StoreCall::future(async { Ok(8) });
/// assert!(!later.is_ready());
/// assert_eq!(later.await?, 8);
/// # Ok::<(), tollgate::StoreError>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a store call does nothing unless it is awaited"]
pub struct StoreCall<'a, T>(Answer<'a, T>);

enum Answer<'a, T> {
    /// Taken by the first poll.
    Ready(Option<Result<T, StoreError>>),
    Future(StoreFuture<'a, T>),
}

impl<'a, T> StoreCall<'a, T> {
    /// An answer made at once.
    ///
    /// ```
    /// # use tollgate::store::StoreCall;
    /// assert!(StoreCall::<()>::ready(Ok(())).is_ready());
    /// ```
    #[inline]
    pub fn ready(answer: Result<T, StoreError>) -> Self {
        Self(Answer::Ready(Some(answer)))
    }

    /// An answer to come: `future` is boxed, and does nothing until polled.
    ///
    /// ```
    /// # use tollgate::store::StoreCall;
    /// assert!(!StoreCall::<u8>::future(async { Ok(1) }).is_ready());
    /// ```
    pub fn future(future: impl Future<Output = Result<T, StoreError>> + Send + 'a) -> Self {
        Self(Answer::Future(Box::pin(future)))
    }

    /// Whether the answer is made (awaiting it returns at once).
    ///
    /// ```
    /// # use tollgate::store::StoreCall;
    /// assert!(StoreCall::<u8>::ready(Ok(1)).is_ready());
    /// ```
    #[inline]
    pub fn is_ready(&self) -> bool {
        matches!(self.0, Answer::Ready(Some(_)))
    }

    /// The answer if it is made, else the call itself (not polled: nothing sent).
    ///
    /// ```
    /// # use tollgate::store::StoreCall;
    /// assert_eq!(StoreCall::<u8>::ready(Ok(1)).into_ready().ok().map(Result::ok), Some(Some(1)));
    /// assert!(StoreCall::<u8>::future(async { Ok(1) }).into_ready().is_err());
    /// ```
    #[inline]
    pub fn into_ready(self) -> Result<Result<T, StoreError>, Self> {
        match self.0 {
            Answer::Ready(Some(answer)) => Ok(answer),
            other => Err(Self(other)),
        }
    }

    /// The call as a boxed future (an answer made at once becomes a future ready at
    /// its first poll).
    ///
    /// ```
    /// # use tollgate::store::StoreCall;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let future = StoreCall::<u8>::ready(Ok(1)).boxed();
    /// assert_eq!(future.await?, 1);
    /// # Ok::<(), tollgate::StoreError>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn boxed(self) -> StoreFuture<'a, T>
    where
        T: Send + 'a,
    {
        match self.0 {
            Answer::Future(future) => future,
            Answer::Ready(answer) => Box::pin(Self(Answer::Ready(answer))),
        }
    }

    /// Maps the answer with `f`, at once when it is made.
    ///
    /// ```
    /// # use tollgate::store::StoreCall;
    /// let call = StoreCall::<u8>::ready(Ok(1)).map(|n| n.map(|n| n + 1));
    /// assert_eq!(call.into_ready().ok().map(Result::ok), Some(Some(2)));
    /// ```
    pub fn map<U>(
        self,
        f: impl FnOnce(Result<T, StoreError>) -> Result<U, StoreError> + Send + 'a,
    ) -> StoreCall<'a, U>
    where
        T: Send + 'a,
        U: Send + 'a,
    {
        match self.0 {
            Answer::Ready(Some(answer)) => StoreCall::ready(f(answer)),
            other => StoreCall::future(async move { f(Self(other).await) }),
        }
    }
}

// Never pinned inside: an answer is moved out, a future is boxed (pinned on the heap).
impl<T> Unpin for StoreCall<'_, T> {}

impl<'a, T> From<StoreFuture<'a, T>> for StoreCall<'a, T> {
    #[inline]
    fn from(future: StoreFuture<'a, T>) -> Self {
        Self(Answer::Future(future))
    }
}

impl<T> Future for StoreCall<'_, T> {
    type Output = Result<T, StoreError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Answer::Ready(answer) => Poll::Ready(
                answer
                    .take()
                    .expect("a store call polled after it completed"),
            ),
            Answer::Future(future) => future.as_mut().poll(cx),
        }
    }
}

impl<T> std::fmt::Debug for StoreCall<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Answer::Ready(Some(_)) => "StoreCall(ready)",
            Answer::Ready(None) => "StoreCall(answered)",
            Answer::Future(_) => "StoreCall(future)",
        })
    }
}
