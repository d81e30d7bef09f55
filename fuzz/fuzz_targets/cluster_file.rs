//! `qm_fuzz::cluster_file` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::cluster_file(data));
