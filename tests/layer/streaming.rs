//! Streamed bodies for the metering tests: a response body fed by a channel (what a
//! handler proxying an upstream's SSE stream returns), and request bodies sent in
//! chunks by a real client.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::sync::mpsc;

/// A body whose frames come from a channel, ending when every sender is dropped.
#[derive(Debug)]
pub(crate) struct ChannelBody {
    frames: mpsc::Receiver<Bytes>,
}

impl ChannelBody {
    /// A body and the sender that feeds it, `capacity` frames ahead.
    pub(crate) fn new(capacity: usize) -> (mpsc::Sender<Bytes>, Self) {
        let (sender, frames) = mpsc::channel(capacity);
        (sender, Self { frames })
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.frames
            .poll_recv(cx)
            .map(|frame| frame.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// One server-sent event carrying `data`.
pub(crate) fn event(data: &str) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}
