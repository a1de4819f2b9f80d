//! Keys: who a limit applies to.
//!
//! A [`Key`] is an opaque, fixed-size fingerprint of the caller's identity (an IP, an
//! API key, a user id). Fixed size keeps memory per key constant and store keys
//! bounded, whatever the caller sends.

mod fingerprint;

pub use fingerprint::Key;
