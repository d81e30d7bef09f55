//! `qm_fuzz::page_token` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::page_token(data));
