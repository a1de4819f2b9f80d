//! The store-conformance suite (`tests/support/conformance.rs`: the scenario tables
//! and the shared waiting tests) on the memory store.

support::store_conformance!(tollgate::MemoryStore::with_clock);
