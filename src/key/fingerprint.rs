//! [`Key`]: a 128-bit fingerprint of a caller identity.

use std::fmt;
use std::hash::Hasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use siphasher::sip128::{Hasher128, SipHasher24};

// Fixed SipHash key: fingerprints must agree across processes and versions, because
// Redis keys are derived from them. Secrecy is not needed: SipHash-2-4 with a 128-bit
// output keeps collisions out of reach even when its key is public.
const SIP_K0: u64 = 0x746f_6c6c_6761_7465; // "tollgate"
const SIP_K1: u64 = 0x6b65_7966_7072_696e; // "keyfprin"

// Domain tags keep different kinds of identity apart: the string "1" and the number 1
// are different callers.
const TAG_BYTES: u8 = b'b';
const TAG_IP: u8 = b'i';
const TAG_NUMBER: u8 = b'n';
const TAG_COMPOSITE: u8 = b'c';

/// Who a limit applies to: an opaque 128-bit fingerprint of an identity.
///
/// Built from strings, bytes, IP addresses or numbers. The raw value is hashed at
/// construction (SipHash-2-4, 128-bit output, a fixed key so every process derives the
/// same fingerprint) and never kept, so a `Key` can be logged, stored and sent to Redis
/// without leaking API tokens, and it is always 16 bytes however long the input was.
/// `Debug` prints only a short prefix of the fingerprint.
///
/// ```
/// use std::net::IpAddr;
/// use tollgate::Key;
///
/// let alice = Key::from("alice");
/// assert_eq!(alice, Key::from(String::from("alice")));
/// assert_eq!(alice, Key::from(&b"alice"[..]));
/// assert_ne!(Key::from("1"), Key::from(1_u64));
/// let ip: IpAddr = "192.0.2.7".parse()?;
/// assert_eq!(Key::from(ip), Key::from("::ffff:192.0.2.7".parse::<IpAddr>()?));
/// assert!(!format!("{alice:?}").contains("alice"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key([u8; 16]);

// By hand rather than derived: the derived impl hashes a length prefix and a byte
// slice; one `u128` is the same information in one step for the memory store's hasher,
// which runs on every decision.
impl std::hash::Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u128(u128::from_le_bytes(self.0));
    }
}

impl Key {
    fn digest(tag: u8, parts: &[&[u8]]) -> Self {
        let mut hasher = SipHasher24::new_with_keys(SIP_K0, SIP_K1);
        hasher.write_u8(tag);
        for part in parts {
            // Length-prefix each part so ("ab","c") and ("a","bc") differ.
            hasher.write_u64(part.len() as u64);
            hasher.write(part);
        }
        Self(hasher.finish128().as_bytes())
    }

    /// A key for a composite identity: both parts must match for two keys to be equal.
    /// The order matters.
    ///
    /// ```
    /// use tollgate::Key;
    /// let user_on_route = Key::from("alice").and(&Key::from("/upload"));
    /// assert_ne!(user_on_route, Key::from("alice"));
    /// assert_ne!(user_on_route, Key::from("/upload").and(&Key::from("alice")));
    /// ```
    #[must_use]
    pub fn and(&self, other: &Key) -> Key {
        Self::digest(TAG_COMPOSITE, &[&self.0, &other.0])
    }

    /// The 16 fingerprint bytes. Stable across processes and versions of this crate.
    ///
    /// ```
    /// use tollgate::Key;
    /// assert_eq!(Key::from("a").fingerprint(), Key::from("a").fingerprint());
    /// ```
    pub fn fingerprint(&self) -> [u8; 16] {
        self.0
    }

    /// The fingerprint as 32 lowercase hex digits (used in Redis keys).
    ///
    /// ```
    /// let hex = tollgate::Key::from("a").to_hex();
    /// assert_eq!(hex.len(), 32);
    /// assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    /// ```
    pub fn to_hex(&self) -> String {
        format!("{self:x}")
    }
}

/// The fingerprint as 32 lowercase hex digits, written in one step (the Redis store
/// puts it in every key name it builds, once per call).
impl fmt::LowerHex for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", u128::from_be_bytes(self.0))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Key({:02x}{:02x}{:02x}{:02x}…)",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

impl From<&[u8]> for Key {
    fn from(bytes: &[u8]) -> Self {
        Self::digest(TAG_BYTES, &[bytes])
    }
}

impl From<Vec<u8>> for Key {
    fn from(bytes: Vec<u8>) -> Self {
        Self::from(bytes.as_slice())
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Self {
        Self::from(s.as_bytes())
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Self::from(s.as_bytes())
    }
}

impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Self::from(s.as_bytes())
    }
}

impl From<u64> for Key {
    fn from(n: u64) -> Self {
        Self::digest(TAG_NUMBER, &[&n.to_le_bytes()])
    }
}

impl From<Ipv6Addr> for Key {
    fn from(ip: Ipv6Addr) -> Self {
        // IPv4 addresses are hashed in their IPv4-mapped form, so both spellings of one
        // host are one key.
        Self::digest(TAG_IP, &[&ip.octets()])
    }
}

impl From<Ipv4Addr> for Key {
    fn from(ip: Ipv4Addr) -> Self {
        Self::digest(TAG_IP, &[&ip.to_ipv6_mapped().octets()])
    }
}

impl From<IpAddr> for Key {
    fn from(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::from(v4),
            IpAddr::V6(v6) => Self::from(v6),
        }
    }
}
