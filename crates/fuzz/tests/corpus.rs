//! Replays the fuzz corpus (`fuzz/corpus/<target>/`, seeds and every input a fuzzer found
//! worth keeping) through the targets on the stable toolchain: a regression test of every
//! crash ever found, and a check that each target's seeds still reach its parser.

use std::fs;
use std::path::PathBuf;

fn corpus(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn every_target_replays_its_corpus_without_a_panic() {
    for &(name, target) in qm_fuzz::TARGETS {
        let dir = corpus(name);
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}: every target needs a seed corpus", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} is empty: add seeds", dir.display());
        for file in files {
            let data = fs::read(&file).unwrap();
            let run = std::panic::catch_unwind(|| target(&data));
            assert!(run.is_ok(), "{name} panics on {}", file.display());
        }
    }
}

#[test]
fn the_seeded_state_is_what_the_api_target_expects() {
    let state = qm_fuzz::seeded_state();
    assert_eq!(state.jobs.len(), 2, "two jobs");
}
