//! xorshift64*: reproducible pseudo-random numbers for tests, without a dependency.

/// The generator; its field is the state, seeded by the test (never 0).
#[derive(Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    #[allow(
        clippy::should_implement_trait,
        reason = "an endless generator: an `Iterator` would only add `Option`s to unwrap"
    )]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform-enough in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
