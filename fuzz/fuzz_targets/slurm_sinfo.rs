//! `qm_fuzz::slurm_sinfo` under libFuzzer.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| qm_fuzz::slurm_sinfo(data));
