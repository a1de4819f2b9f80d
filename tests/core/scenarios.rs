//! The hand-computed scenario tables (`tests/support/scenarios.rs`) on the memory store.

// `make_store` is called as `make_store(clock: ManualClock) -> impl Store`.
support::scenario_tests!(tollgate::MemoryStore::with_clock);
