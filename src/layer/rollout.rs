//! [`Rollout`]: which of a policy's callers it enforces, and which it only watches
//! (shadow mode), chosen by the caller's key fingerprint so that each caller always
//! sees one behaviour.

use std::fmt;

use crate::{ConfigError, Key};

/// 2⁶⁴, the number of fingerprint buckets: exact in an `f64`.
const BUCKETS: f64 = 18_446_744_073_709_551_616.0;

/// How much of a policy is enforced: every caller (the default), none (shadow mode),
/// or a stable share of callers picked by their key's fingerprint.
///
/// A caller is enforced when the first 8 bytes of its [`Key::fingerprint`], read as a
/// big-endian integer, fall below `share × 2⁶⁴`. Fingerprints are the same in every
/// process and version, so a caller is enforced everywhere or nowhere, and raising the
/// share only adds callers: those enforced at 10 % stay enforced at 20 %. Over many
/// keys the enforced fraction is close to the share (fingerprints are `SipHash` outputs,
/// uniform for any set of distinct keys).
///
/// ```
/// use tollgate::Key;
/// use tollgate::layer::Rollout;
/// let tenth = Rollout::enforce(0.1)?;
/// let enforced = (0..10_000_u64).filter(|n| tenth.enforces(&Key::from(*n))).count();
/// assert!((900..1_100).contains(&enforced), "{enforced}");
/// // Stable: the same caller, the same answer, every time and in every process.
/// assert_eq!(tenth.enforces(&Key::from("alice")), Rollout::enforce(0.1)?.enforces(&Key::from("alice")));
/// assert!(Rollout::enforce(1.5).is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq)]
pub struct Rollout {
    share: f64,
    /// Fingerprint buckets below this are enforced: `share × 2⁶⁴`, up to 2⁶⁴ (all).
    below: u128,
}

impl Rollout {
    /// Every caller is enforced: the default.
    ///
    /// ```
    /// use tollgate::layer::Rollout;
    /// assert!(Rollout::ENFORCED.enforces(&tollgate::Key::from("anyone")));
    /// assert_eq!(Rollout::default(), Rollout::ENFORCED);
    /// ```
    pub const ENFORCED: Self = Self {
        share: 1.0,
        below: 1 << 64,
    };

    /// No caller is enforced: shadow mode.
    ///
    /// ```
    /// use tollgate::layer::Rollout;
    /// assert!(!Rollout::SHADOW.enforces(&tollgate::Key::from("anyone")));
    /// assert_eq!(Rollout::SHADOW.share(), 0.0);
    /// ```
    pub const SHADOW: Self = Self {
        share: 0.0,
        below: 0,
    };

    /// Enforces a stable `share` of callers (0 to 1: `0.1` is one in ten), the rest in
    /// shadow mode. A share outside `[0, 1]`, or not a number, is a [`ConfigError`]
    /// that quotes it.
    ///
    /// ```
    /// use tollgate::layer::Rollout;
    /// assert_eq!(Rollout::enforce(0.25)?.share(), 0.25);
    /// assert_eq!(Rollout::enforce(1.0)?, Rollout::ENFORCED);
    /// assert_eq!(Rollout::enforce(0.0)?, Rollout::SHADOW);
    /// let err = Rollout::enforce(-0.1).unwrap_err();
    /// assert!(err.to_string().contains("-0.1"), "{err}");
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn enforce(share: f64) -> Result<Self, ConfigError> {
        if !(0.0..=1.0).contains(&share) {
            return Err(ConfigError::new(format!(
                "invalid enforcement share {share}: expected a fraction of callers from 0 \
                 (shadow mode: none) to 1 (every caller), e.g. 0.1 for one in ten"
            )));
        }
        // `share × 2⁶⁴` is at most 2⁶⁴, exact as an f64; the cast truncates toward 0.
        Ok(Self {
            share,
            below: (share * BUCKETS) as u128,
        })
    }

    /// The share of callers enforced, from 0 (shadow mode) to 1 (all).
    ///
    /// ```
    /// assert_eq!(tollgate::layer::Rollout::ENFORCED.share(), 1.0);
    /// ```
    pub fn share(&self) -> f64 {
        self.share
    }

    /// Whether the caller with `key` is enforced (else its requests are only watched).
    ///
    /// ```
    /// use tollgate::{Key, layer::Rollout};
    /// let half = Rollout::enforce(0.5)?;
    /// let key = Key::from("alice");
    /// assert_eq!(half.enforces(&key), half.enforces(&key));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[inline]
    pub fn enforces(&self, key: &Key) -> bool {
        // The common case (every caller) reads no fingerprint.
        self.below == Self::ENFORCED.below || u128::from(bucket(key)) < self.below
    }

    /// Whether every caller is enforced, so that a request without a key can be too.
    #[inline]
    pub(crate) fn enforces_all(&self) -> bool {
        self.below == Self::ENFORCED.below
    }
}

/// The caller's bucket: the fingerprint's first 8 bytes, big-endian.
fn bucket(key: &Key) -> u64 {
    let fingerprint = key.fingerprint();
    let mut first = [0; 8];
    first.copy_from_slice(&fingerprint[..8]);
    u64::from_be_bytes(first)
}

impl Default for Rollout {
    fn default() -> Self {
        Self::ENFORCED
    }
}

impl fmt::Debug for Rollout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::ENFORCED {
            f.write_str("Rollout::ENFORCED")
        } else if *self == Self::SHADOW {
            f.write_str("Rollout::SHADOW")
        } else {
            write!(f, "Rollout::enforce({})", self.share)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_the_share_keeps_every_caller_enforced_before() {
        let keys: Vec<Key> = (0..2_000_u64).map(Key::from).collect();
        let mut before = 0;
        for share in [0.0, 0.01, 0.1, 0.5, 0.9, 1.0] {
            let rollout = Rollout::enforce(share).expect("a share");
            let enforced: Vec<bool> = keys.iter().map(|k| rollout.enforces(k)).collect();
            let count = enforced.iter().filter(|e| **e).count();
            assert!(count >= before, "{share}: {count} < {before}");
            before = count;
        }
        assert_eq!(before, keys.len());
    }

    #[test]
    fn not_a_number_and_out_of_range_are_refused() {
        for share in [f64::NAN, -0.0001, 1.0001, f64::INFINITY] {
            assert!(Rollout::enforce(share).is_err(), "{share}");
        }
    }
}
