//! The hand-computed scenario tables (`tests/support/scenarios.rs`) on the memory store.

mod support {
    pub(crate) mod scenarios;
}

// `make_store` is called as `make_store(clock: ManualClock) -> impl Store`.
support::scenarios::scenario_tests!(tollgate::MemoryStore::with_clock);
