//! `qm_fuzz::scenario_file` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::scenario_file(data));
