//! `qm_fuzz::storage_uri` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::storage_uri(data));
