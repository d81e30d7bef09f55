//! `qm_fuzz::sigv4_header` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::sigv4_header(data));
