//! Upgrades: a data dir written by an earlier release must open under this one with every
//! job, share and attempt intact. Each fixture under `tests/fixtures/` is a store a release
//! wrote (made by `tests/upgrade/make_fixture.py` with that release's binary, killed with
//! SIGKILL while attempts ran) and what that server answered just before; recovering the store
//! with this code must give the same answers to the same questions (members added to an
//! answer since are allowed; none may change or go).

use std::path::{Path, PathBuf};

use qm_api::Arns;
use qm_server::command::{Command, Request};
use qm_server::driver::{encode_decisions, recover, Recovered};
use qm_server::http::parse_operation;
use qm_server::state::State;
use qm_store::{Log, SqliteLog, Writer};
use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A copy of the fixture's store (opening migrates it, and the fixture must stay as made).
fn open_copy(name: &str, dir: &Path) -> SqliteLog {
    let db = dir.join("qm.sqlite3");
    std::fs::copy(fixture(name).join("qm.sqlite3"), &db).expect("fixture store");
    SqliteLog::open(&db).expect("the store opens")
}

fn answers(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name).join("answers.json")).expect("answers.json");
    serde_json::from_str(&text).expect("answers.json is JSON")
}

/// A build that names its commit, standing for this one where its batches must be its own
/// (the tests' build may be dirty, and a dirty build's batches are applied, not decided).
fn this_build() -> Writer {
    Writer {
        version: "0.1.0+0123456789ab".into(),
        format: qm_server::command::DECISIONS_FORMAT,
    }
}

/// A state with the settings the data dir pinned, recovered from `log` by this build, after
/// the pass the server runs first when it applied another build's batches.
fn recovered(log: &SqliteLog) -> (State, Recovered) {
    let (mut state, r) = recovered_as(log, &qm_server::writer());
    if state.core.pass_due() {
        let now = state.now;
        state.apply_batch(now, vec![Command::Wake]);
    }
    (state, r)
}

/// A state with the settings the data dir pinned, recovered from `log` by `running`.
fn recovered_as(log: &SqliteLog, running: &Writer) -> (State, Recovered) {
    let meta = |k: &str| log.meta(k).unwrap().unwrap_or_else(|| panic!("meta {k}"));
    let reserve_after: u64 = meta("scheduler.reserve_after_seconds").parse().unwrap();
    let mut state = State::new(
        Arns::new(meta("region"), meta("account_id")),
        qm_core::Policy {
            reserve_after_ms: reserve_after * 1000,
            ..Default::default()
        },
    );
    let r = recover(&mut state, log, running).expect("recovery succeeds");
    (state, r)
}

/// What the recovered state answers to one recorded read.
fn ask(state: &State, operation: &str, request: &Value) -> Value {
    let query = match operation {
        "usage" => qm_server::command::Query::Usage,
        "audit" => qm_server::command::Query::Audit {
            start: 0,
            max: usize::MAX,
        },
        op => match parse_operation(op, request.to_string().as_bytes()).expect("a read") {
            Request::Query(q) => q,
            other => panic!("{op} is not a read: {other:?}"),
        },
    };
    let body = state
        .query(&query, state.now)
        .unwrap_or_else(|e| panic!("{operation} {request} fails after the upgrade: {e}"));
    serde_json::from_slice(&body).expect("the answer is JSON")
}

/// Whether `now` says everything `then` said: the same members with the same values, lists
/// of the same length. A later release may add members to an answer, never change or drop one.
fn says_all_of(then: &Value, now: &Value) -> bool {
    match (then, now) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| says_all_of(v, w))),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(v, w)| says_all_of(v, w))
        }
        // A number is its value: `0.0` and `0` read the same to every JSON client (serde_json
        // tells them apart, JSON does not).
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => then == now,
    }
}

fn assert_same_answers(state: &State, recorded: &Value) {
    let list = recorded["answers"].as_array().expect("answers");
    assert!(list.len() > 10, "the fixture has its answers");
    for entry in list {
        let (op, request, response) = (&entry[0], &entry[1], &entry[2]);
        let now = ask(state, op.as_str().unwrap(), request);
        assert!(
            says_all_of(response, &now),
            "{op} {request}: the upgraded server answers differently\nthen: {response}\nnow:  {now}"
        );
    }
}

#[test]
fn a_data_dir_of_release_7368e83_opens_with_every_job_share_and_attempt_intact() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_copy("release-7368e83", dir.path());
    assert_eq!(log.meta("schema_version").unwrap().as_deref(), Some("3"));
    let (state, r) = recovered(&log);
    assert!(r.batches > 20, "{r:?}");
    assert_eq!(r.other_writers, vec![Writer::legacy().version]);
    assert_eq!(r.diverged_own, 0);
    assert_eq!(
        r.refused_other, 0,
        "every command the release accepted is still accepted"
    );
    // Every batch of the release is applied as it was decided, never decided again.
    assert_eq!(r.applied_other, r.batches, "{r:?}");
    let recorded = answers("release-7368e83");
    assert_same_answers(&state, &recorded);
    // The three attempts that ran when the release was killed are live again, for the
    // executor's reconciliation to stop or adopt.
    assert_eq!(state.live_attempts().len(), 3);
    // The server snapshots the upgraded state at once; that snapshot answers the same.
    let image = state.image();
    let text = qm_server::snapshot::encode_image(&image).unwrap();
    let image = qm_server::snapshot::decode_image(
        qm_server::snapshot::SNAPSHOT_FORMAT,
        "this build",
        &text,
    )
    .unwrap();
    let snapshot = State::from_image(state.arns.clone(), state.core.policy(), image).unwrap();
    assert_same_answers(&snapshot, &recorded);
    assert_eq!(snapshot.live_attempts(), state.live_attempts());
}

#[test]
fn a_release_data_dir_goes_on_under_this_build_and_replays_its_own_batches_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_copy("release-7368e83", dir.path());
    let (mut state, before) = recovered_as(&log, &this_build());
    log.set_writer(&this_build()).unwrap();
    // This build appends one batch: the waiting job is terminated.
    let jobs = &answers("release-7368e83")["jobs"];
    let terminate: Command = serde_json::from_value(serde_json::json!({
        "op": "TerminateServiceJob",
        "body": {"jobId": jobs["waits"], "reason": "after the upgrade"}
    }))
    .unwrap();
    let now = state.now + 1000;
    let outcome = state.apply_batch(now, vec![terminate]);
    outcome.results[0]
        .as_ref()
        .expect("the command is accepted");
    let commands = serde_json::to_string(&outcome.logged).unwrap();
    log.append(
        now,
        &commands,
        &encode_decisions(&outcome.decisions).unwrap(),
    )
    .unwrap();
    drop(log);

    let log = SqliteLog::open(&dir.path().join("qm.sqlite3")).unwrap();
    let (again, r) = recovered_as(&log, &this_build());
    assert_eq!(r.batches, before.batches + 1);
    assert_eq!((r.diverged_own, r.applied_other), (0, before.batches));
    let waits = jobs["waits"].as_str().unwrap();
    let job = ask(
        &again,
        "describeservicejob",
        &serde_json::json!({"jobId": waits}),
    );
    assert_eq!(job["status"], "FAILED", "{job}");
}

#[test]
fn a_data_dir_with_snapshots_of_the_first_snapshotting_release_opens_intact() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_copy("schema-2-snapshots", dir.path());
    assert!(
        log.snapshots().unwrap().len() == 2,
        "the fixture keeps two snapshots"
    );
    assert!(!log.is_empty().unwrap(), "and batches after them");
    let (state, r) = recovered(&log);
    assert!(r.snapshot.is_some(), "{r:?}");
    assert!(
        r.batches > 0,
        "the batches after the snapshot are replayed: {r:?}"
    );
    assert_eq!((r.diverged_own, r.refused_other), (0, 0), "{r:?}");
    let recorded = answers("schema-2-snapshots");
    assert_same_answers(&state, &recorded);
    assert_eq!(state.live_attempts().len(), 3);
}

#[test]
fn a_data_dir_of_release_7368e83_with_jobs_queued_at_a_kill_keeps_every_job_as_it_was_told() {
    // The data dir of issue 39's report: under the earlier recovery, an upgrade decided its
    // batches again and could fail queued jobs with another attempt's exit. Applied as
    // logged, every job is what its clients were told; the six short jobs wait or run on.
    let dir = tempfile::tempdir().unwrap();
    let log = open_copy("release-7368e83-queued", dir.path());
    let (state, r) = recovered(&log);
    assert_eq!((r.diverged_own, r.refused_other), (0, 0), "{r:?}");
    assert_eq!(r.applied_other, r.batches, "{r:?}");
    let recorded = answers("release-7368e83-queued");
    assert_same_answers(&state, &recorded);
    let jobs = &recorded["jobs"];
    for (name, status) in [
        ("q1", "SUCCEEDED"),
        ("q2", "RUNNING"),
        ("q3", "RUNNABLE"),
        ("q4", "RUNNABLE"),
        ("q5", "RUNNABLE"),
        ("q6", "RUNNABLE"),
    ] {
        let job = ask(
            &state,
            "describeservicejob",
            &serde_json::json!({"jobId": jobs[name]}),
        );
        assert_eq!(job["status"], status, "{name}: {job}");
    }
}
