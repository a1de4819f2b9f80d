#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tollgate_fuzz::cost_routes::check(data));
