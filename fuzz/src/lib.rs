//! The properties the fuzz targets check, one module per target.
//!
//! Each `check` takes the fuzzer's bytes, reads them as a small line-oriented text
//! format (so the seed corpus in `seeds/` is readable and easy to extend) and panics
//! when tollgate breaks a promise. `tests/seeds.rs` runs every `check` over the seeds
//! and a few thousand pseudo-random inputs under plain `cargo test`, no nightly needed.

pub mod client_ip;
pub mod cost_routes;
pub mod headers;
pub mod quota;

/// The input as lines of text (invalid UTF-8 replaced), without their `\r`.
pub(crate) fn lines(data: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(data)
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line).to_owned())
        .collect()
}
