//! The draft-11 `pk` parameter (opt-in, [`LayerBuilder::partition_keys`]): the
//! quota partition a member counts, written as the key's fingerprint in a Structured
//! Field Byte Sequence (RFC 9651 §3.3.5: `:`, base64 with padding, `:`).
//!
//! [`LayerBuilder::partition_keys`]: crate::layer::LayerBuilder::partition_keys

use bytes::BufMut;

use crate::Key;

/// The bytes `;pk=:<24 base64 characters>:` takes after a member.
pub(crate) const PK_LEN: usize = ";pk=:".len() + 24 + ":".len();

/// Appends `;pk=:<the key's fingerprint in base64>:` to a list member.
pub(crate) fn push_pk(out: &mut impl BufMut, key: &Key) {
    out.put_slice(b";pk=:");
    out.put_slice(&base64(&key.fingerprint()));
    out.put_u8(b':');
}

/// Base64 (RFC 4648 §4, the alphabet RFC 9651 asks for, padded) of a fingerprint:
/// 16 bytes are five groups of three and one byte, 24 characters with `==`.
fn base64(bytes: &[u8; 16]) -> [u8; 24] {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = [b'='; 24];
    for (group, chunk) in bytes.chunks(3).enumerate() {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        // One input byte makes two characters, two make three, three make four.
        for i in 0..=chunk.len() {
            out[group * 4 + i] = ALPHABET[(n >> (18 - 6 * i) & 63) as usize];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{PK_LEN, base64, push_pk};
    use crate::Key;

    #[test]
    fn base64_is_rfc_4648_with_padding() {
        // RFC 4648 §10's vectors, on a 16-byte input built from them.
        let mut bytes = [0_u8; 16];
        bytes[..6].copy_from_slice(b"foobar");
        let text = base64(&bytes);
        assert_eq!(&text[..8], b"Zm9vYmFy");
        assert_eq!(&text, b"Zm9vYmFyAAAAAAAAAAAAAA==");
        assert_eq!(&base64(&[0xff; 16]), b"/////////////////////w==");
    }

    #[test]
    fn a_pk_parameter_is_exactly_pk_len_bytes() {
        let mut out = Vec::new();
        push_pk(&mut out, &Key::from("alice"));
        assert_eq!(out.len(), PK_LEN);
        assert!(out.starts_with(b";pk=:") && out.ends_with(b"==:"));
    }
}
