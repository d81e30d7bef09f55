//! `qm backup` through the real binary: it copies a data dir's store, says what the copy holds,
//! and replaces an existing file only when told to with `--force`.

use std::path::Path;
use std::process::{Command, Output};

use qm_store::{Log, SqliteLog};

fn qm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_qm"))
        .args(args)
        .output()
        .expect("qm runs")
}

fn data_dir_with(dir: &Path, batches: u64) -> String {
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    let mut log = SqliteLog::open(&data.join("qm.sqlite3")).unwrap();
    for i in 0..batches {
        log.append(i as i64, "[]", "[]").unwrap();
    }
    data.display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_backup_says_what_it_wrote_and_how_many_batches_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir_with(dir.path(), 3);
    let to = dir.path().join("b.sqlite3");
    let out = qm(&["backup", "--data-dir", &data, "--to", to.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("wrote {}", to.display())) && err.contains("3 batches"),
        "{err}"
    );
    assert_eq!(SqliteLog::open(&to).unwrap().len().unwrap(), 3);
}

#[test]
fn an_existing_file_is_replaced_only_with_force_and_the_refusal_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir_with(dir.path(), 2);
    let to = dir.path().join("b.sqlite3");
    std::fs::write(&to, "an older backup").unwrap();
    let to_arg = to.to_str().unwrap();

    let out = qm(&["backup", "--data-dir", &data, "--to", to_arg]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("already exists") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&to).unwrap(), "an older backup");

    let out = qm(&["backup", "--data-dir", &data, "--to", to_arg, "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(SqliteLog::open(&to).unwrap().len().unwrap(), 2);
}

#[test]
fn a_data_dir_without_a_store_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().display().to_string();
    let to = dir.path().join("b.sqlite3");
    let out = qm(&["backup", "--data-dir", &empty, "--to", to.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("qm.sqlite3") && err.contains("--data-dir"),
        "{err}"
    );
    assert!(!to.exists());
}
