//! `qm_fuzz::arn` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::arn(data));
