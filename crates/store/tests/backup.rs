//! `qm_store::backup`: a copy taken while another connection keeps appending is a whole prefix
//! of the log, and the target's name only ever holds a complete, checked copy.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qm_store::{backup, BackupOptions, Batch, Log, SqliteLog, StoreError, Writer};

fn writer() -> Writer {
    Writer {
        version: "test".into(),
        format: 1,
    }
}

/// What batch `seq` holds, so that a torn or misplaced batch in the copy shows.
fn commands_of(seq: u64) -> String {
    format!("[{seq}]")
}

fn decisions_of(seq: u64) -> String {
    // Long enough that the store spans many pages and the copy many steps.
    format!("{seq}:{}", "d".repeat(400 + (seq % 97) as usize))
}

fn append_numbered(log: &mut SqliteLog) -> u64 {
    let next = log.len().unwrap() + 1;
    let seq = log
        .append(next as i64, &commands_of(next), &decisions_of(next))
        .unwrap();
    assert_eq!(seq, next);
    seq
}

fn store_with(path: &Path, batches: u64) {
    let mut log = SqliteLog::open(path).unwrap();
    log.set_writer(&writer()).unwrap();
    for _ in 0..batches {
        append_numbered(&mut log);
    }
}

fn batches_of(path: &Path) -> Vec<Batch> {
    let log = SqliteLog::open(path).unwrap();
    let mut out = Vec::new();
    log.replay(&mut |b| {
        out.push(b);
        Ok(())
    })
    .unwrap();
    out
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn no_progress() -> impl FnMut(qm_store::BackupProgress) {
    |_| {}
}

#[test]
fn a_backup_under_a_steady_writer_finishes_and_holds_every_batch_of_a_prefix_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("qm.sqlite3");
    let initial = 2_000;
    store_with(&store, initial);

    // Another connection, as the server is, appending until the backup is done.
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(initial));
    let writer_thread = {
        let (stop, appended, store) = (stop.clone(), appended.clone(), store.clone());
        std::thread::spawn(move || {
            let mut log = SqliteLog::open(&store).unwrap();
            while !stop.load(Ordering::Relaxed) {
                appended.store(append_numbered(&mut log), Ordering::Relaxed);
            }
        })
    };

    let target = dir.path().join("backup.sqlite3");
    let options = BackupOptions {
        pages_per_step: 8,
        pause: Duration::from_millis(1),
        overwrite: false,
    };
    let mut steps = 0;
    let mut at_first_step = None;
    let mut copied = 0;
    let mut on_progress = |p: qm_store::BackupProgress| {
        steps += 1;
        assert!(p.pages_copied <= p.pages_total, "{p:?}");
        // A copy that went back to its first page restarted: under this writer it would
        // restart again and again and never finish.
        assert!(
            p.pages_copied > copied,
            "the copy restarted at step {steps}: {p:?}"
        );
        copied = p.pages_copied;
        // Make sure the source really changes mid-copy: wait for two more commits once the
        // copy has begun (without its snapshot SQLite would restart the copy after each).
        let seen = *at_first_step.get_or_insert_with(|| appended.load(Ordering::Relaxed));
        if steps == 2 {
            let deadline = Instant::now() + Duration::from_secs(30);
            while appended.load(Ordering::Relaxed) < seen + 2 {
                assert!(Instant::now() < deadline, "the writer made no progress");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    let summary = backup(&store, &target, &options, &mut on_progress).unwrap();
    stop.store(true, Ordering::Relaxed);
    writer_thread.join().unwrap();
    let written = appended.load(Ordering::Relaxed);

    assert!(
        steps > 10,
        "the copy took {steps} steps; the test wants many"
    );
    let copy = batches_of(&target);
    let n = copy.len() as u64;
    assert!(
        (initial..written).contains(&n),
        "the copy holds {n} batches: at least the {initial} written before it started, fewer \
         than the {written} written by the time it ended"
    );
    assert_eq!(summary.batches, n);
    assert_eq!(summary.schema_version, qm_store::SCHEMA_VERSION);
    for (i, b) in copy.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(b.seq, seq, "seqs are contiguous from 1");
        assert_eq!(
            (b.commands.as_str(), b.decisions.as_str(), &b.writer),
            (
                commands_of(seq).as_str(),
                decisions_of(seq).as_str(),
                &writer()
            ),
            "batch {seq} is whole"
        );
    }
    assert_eq!(
        summary.bytes,
        std::fs::metadata(&target).unwrap().len(),
        "the summary gives the file's size"
    );
}

#[test]
fn the_backup_is_one_file_and_nothing_else_is_left_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store").join("qm.sqlite3");
    std::fs::create_dir(store.parent().unwrap()).unwrap();
    store_with(&store, 3);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let target = out.join("b.sqlite3");
    let summary = backup(
        &store,
        &target,
        &BackupOptions::default(),
        &mut no_progress(),
    )
    .unwrap();
    assert_eq!(summary.batches, 3);
    assert_eq!(names_in(&out), ["b.sqlite3"]);
    // Header bytes 18 and 19 are 1 for a rollback-journal database, 2 for WAL: the backup
    // needs no -wal file to be whole.
    let header = std::fs::read(&target).unwrap();
    assert_eq!((header[18], header[19]), (1, 1));
    assert_eq!(
        names_in(store.parent().unwrap()),
        ["qm.sqlite3"],
        "a stopped server's data dir is left as it was"
    );
}

#[test]
fn an_existing_target_is_kept_unless_overwrite_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("qm.sqlite3");
    store_with(&store, 2);
    let target = dir.path().join("b.sqlite3");
    std::fs::write(&target, "precious").unwrap();
    let err = backup(
        &store,
        &target,
        &BackupOptions::default(),
        &mut no_progress(),
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::BackupTarget { .. }), "{err}");
    assert!(err.to_string().contains("--force"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");

    let options = BackupOptions {
        overwrite: true,
        ..BackupOptions::default()
    };
    backup(&store, &target, &options, &mut no_progress()).unwrap();
    assert_eq!(batches_of(&target).len(), 2);
}

#[test]
fn the_store_itself_is_never_a_target_even_with_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("qm.sqlite3");
    store_with(&store, 1);
    let options = BackupOptions {
        overwrite: true,
        ..BackupOptions::default()
    };
    let same = dir.path().join(".").join("qm.sqlite3");
    let err = backup(&store, &same, &options, &mut no_progress()).unwrap_err();
    assert!(err.to_string().contains("is the store"), "{err}");
    assert_eq!(batches_of(&store).len(), 1);
}

#[test]
fn a_missing_or_foreign_store_is_refused_with_a_hint_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("b.sqlite3");
    let missing = dir.path().join("nothing").join("qm.sqlite3");
    let err = backup(
        &missing,
        &target,
        &BackupOptions::default(),
        &mut no_progress(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("--data-dir"), "{err}");

    let foreign = dir.path().join("foreign.sqlite3");
    write_foreign_file(&foreign);
    let err = backup(
        &foreign,
        &target,
        &BackupOptions::default(),
        &mut no_progress(),
    )
    .unwrap_err();
    assert!(matches!(err, StoreError::NoStore { .. }), "{err}");
    assert_eq!(
        names_in(dir.path()),
        ["foreign.sqlite3"],
        "no partial copy is left"
    );
}

/// A file that is not a qm store: plain text, which SQLite calls "not a database".
fn write_foreign_file(path: &Path) {
    std::fs::write(
        path,
        "this is not a database, just a file with some text in it\n",
    )
    .unwrap();
}

#[test]
fn a_target_in_a_missing_directory_is_refused_with_what_to_create() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("qm.sqlite3");
    store_with(&store, 1);
    let target = dir.path().join("no-such-dir").join("b.sqlite3");
    let err = backup(
        &store,
        &target,
        &BackupOptions::default(),
        &mut no_progress(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("no-such-dir does not exist"),
        "{err}"
    );
}
