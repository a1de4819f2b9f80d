//! Attacks on issue 35's fixes where they meet every other feature: one test binary,
//! one module per subject. A test marked `#[ignore = "BROKEN: …"]` shows a promise
//! that does not hold (run it with `--ignored` to see the numbers); the others hold.
//!
//! `cargo test --all-features --test attack_matrix <module>::`

// Real Redis servers, axum servers, limits files and metrics: built with those features.
#![cfg(all(
    feature = "axum",
    feature = "config",
    feature = "redis",
    feature = "metrics"
))]

mod common;

mod account;
mod count_when;
mod denials;
mod desk;
mod extremes;
mod failover;
mod holding;
mod leases;
mod metering;
mod metrics;
mod operators;
mod receipts;
mod walks;
