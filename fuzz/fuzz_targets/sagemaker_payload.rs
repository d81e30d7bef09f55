//! `qm_fuzz::sagemaker_payload` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::sagemaker_payload(data));
