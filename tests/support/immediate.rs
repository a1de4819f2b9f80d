//! Runs a future that is ready on its first poll (every memory-store call is), without
//! an async runtime: property tests build thousands of limiters.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// The output of `future`, which must complete on its first poll.
pub fn immediate<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a memory-store call did not complete immediately"),
    }
}
