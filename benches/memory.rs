//! Placeholder, replaced by the memory benchmark.
fn main() {}
