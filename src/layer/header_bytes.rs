//! Small header values and bodies cut from one buffer per thread: a value the layer
//! writes on every response (`RateLimit`, `Retry-After`, a rejection's text) costs a
//! reference count instead of an allocation of its own.
//!
//! Each value is a [`Bytes`] slice of a 4 KB chunk; a new chunk is allocated (two
//! allocations: the buffer and its shared header) once the current one has no room
//! left, about every hundred draft-11 `RateLimit` values. A chunk is freed when the
//! last value cut from it is dropped, as hyper's read buffer is with the request
//! header values it hands out: a value kept for long keeps its chunk.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};

/// The size of a chunk.
const CHUNK: usize = 4096;

/// Values longer than this get an allocation of their own: a chunk holds many small
/// values, not a few large ones.
const LARGEST: usize = CHUNK / 8;

thread_local! {
    static CURRENT: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// The bytes `write` puts in a buffer with room for `len` of them (it may write
/// fewer; more only costs a new buffer).
pub(crate) fn cut(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    if len > LARGEST {
        return alone(len, write);
    }
    let mut write = Some(write);
    let cut = CURRENT.try_with(|current| {
        // Never borrowed twice: `write` only writes bytes. Checked all the same, so
        // that a future change cannot turn it into a panic.
        let mut current = current.try_borrow_mut().ok()?;
        if current.capacity() < len {
            *current = BytesMut::with_capacity(CHUNK);
        }
        (write.take()?)(&mut current);
        Some(current.split().freeze())
    });
    match (cut, write) {
        (Ok(Some(bytes)), _) => bytes,
        // The thread is ending (its buffer is gone) or the buffer is in use.
        (_, Some(write)) => alone(len, write),
        (_, None) => Bytes::new(),
    }
}

/// The bytes `write` puts in a buffer of their own.
fn alone(len: usize, write: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut buffer = BytesMut::with_capacity(len);
    write(&mut buffer);
    buffer.freeze()
}

#[cfg(test)]
mod tests {
    use super::{CHUNK, LARGEST, cut};

    #[test]
    fn values_keep_their_bytes_across_chunks() {
        // Enough values to fill several chunks: each keeps exactly what was written.
        let values: Vec<_> = (0..3 * CHUNK / 10)
            .map(|n| {
                let text = format!("\"api\";r={n};t=7");
                let bytes = cut(text.len(), |buffer| {
                    buffer.extend_from_slice(text.as_bytes());
                });
                (text, bytes)
            })
            .collect();
        for (text, bytes) in &values {
            assert_eq!(&bytes[..], text.as_bytes());
        }
    }

    #[test]
    fn a_short_or_long_write_is_still_exact() {
        let short = cut(10, |buffer| buffer.extend_from_slice(b"ab"));
        assert_eq!(&short[..], b"ab");
        let long = cut(2, |buffer| buffer.extend_from_slice(&[b'x'; 100]));
        assert_eq!(&long[..], &[b'x'; 100][..]);
        let large = cut(LARGEST + 1, |buffer| buffer.extend_from_slice(b"large"));
        assert_eq!(&large[..], b"large");
        let empty = cut(0, |_| {});
        assert!(empty.is_empty());
    }
}
