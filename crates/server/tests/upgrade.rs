//! Upgrades: a data dir written by an earlier release must open under this one with every
//! job, share and attempt intact. Each fixture under `tests/fixtures/` is a store a release
//! wrote (made by `tests/upgrade/make_fixture.py` with that release's binary, killed with
//! SIGKILL while attempts ran) and what that server answered just before; recovering the store
//! with this code must give the same answers to the same questions (members added to an
//! answer since are allowed; none may change or go).

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::path::{Path, PathBuf};

use qm_api::Arns;
use qm_server::command::Command;
use qm_server::driver::{encode_decisions, recover, Recovered};
use qm_server::http::parse_operation;
use qm_server::request::Request;
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

/// `state` as the snapshot the server writes at once after an upgrade brings it back.
fn snapshot_of(state: &State) -> State {
    let text = qm_server::snapshot::encode_image(&state.image()).unwrap();
    let image = qm_server::snapshot::decode_image(
        qm_server::snapshot::SNAPSHOT_FORMAT,
        "this build",
        &text,
    )
    .unwrap();
    State::from_image(state.arns.clone(), state.core.policy(), image).unwrap()
}

/// What the recovered state answers to one recorded read.
fn ask(state: &State, operation: &str, request: &Value) -> Value {
    let query = match operation {
        "usage" => qm_server::request::Query::Usage,
        "audit" => qm_server::request::Query::Audit {
            start: 0,
            max: usize::MAX,
        },
        // `GET /qm/v1/queues/{queue}/groups` and `GET /v1/tags/{arn}`, recorded with what
        // their paths name.
        "groups" => qm_server::request::Query::QueueGroups {
            queue: request["jobQueue"].as_str().expect("jobQueue").into(),
        },
        "listtagsforresource" => qm_server::request::Query::ListTagsForResource(
            serde_json::from_value(request.clone()).expect("resourceArn"),
        ),
        op => match parse_operation(op, request.to_string().as_bytes()).expect("a read") {
            Request::Query(q) => q,
            other => panic!("{op} is not a read: {other:?}"),
        },
    };
    let body = state
        .query(&query, state.now)
        .unwrap_or_else(|e| panic!("{operation} {request} fails after the upgrade: {e}"));
    serde_json::from_slice(&body.to_json().unwrap()).expect("the answer is JSON")
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
    let snapshot = snapshot_of(&state);
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

/// The commands a principal of the fixture sends, as the server logs them: with who sent them
/// as the store keeps that principal now.
fn as_principal(record: &qm_store::PrincipalRecord, command: Command) -> Command {
    Command::As {
        caller: qm_server::command::Caller {
            name: record.name.clone(),
            groups: record.groups.clone(),
            admin: record.admin,
        },
        command: Box::new(command),
        audit: None,
    }
}

#[test]
fn a_data_dir_of_release_0805b08_keeps_jobs_principals_classes_groups_drills_and_the_audit_log() {
    // Release 0805b08 with authentication on, four principals, a share's submitters, leads and
    // maximum priority, job classes, a group of shares under FAIR_SHARE, a reclaim, a drill,
    // terminations by the admin and by a submitter, jobs retired to the archive, and short jobs
    // queued and running when it was killed with SIGKILL (tests/upgrade/make_fixture.py --full).
    let dir = tempfile::tempdir().unwrap();
    let log = open_copy("release-0805b08", dir.path());
    let (state, r) = recovered(&log);
    let recorded = answers("release-0805b08");
    assert_eq!(recorded["written_by"], "qm 0.1.0+0805b08d46ba");
    assert_eq!(r.other_writers, vec!["0.1.0+0805b08d46ba".to_string()]);
    assert_eq!((r.diverged_own, r.refused_other), (0, 0), "{r:?}");
    // Every batch of the release is applied as it was decided, never decided again.
    assert_eq!(r.applied_other, r.batches, "{r:?}");
    assert_same_answers(&state, &recorded);
    let signed = recorded["answers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e.get(3).is_some())
        .count();
    assert!(signed >= 3, "the reads signed by principals are there");
    // The attempts that ran at the kill are live again: p1, r4 and q2 in fx-queue, n-crit,
    // a1, v-wait and o-gate in fs-queue.
    assert_eq!(state.live_attempts().len(), 7);
    // The snapshot the server writes at once after the upgrade answers the same.
    let snapshot = snapshot_of(&state);
    assert_same_answers(&snapshot, &recorded);

    // Every job keeps what its clients were told: a finished one its status and reason, an
    // unfinished one is not failed by the upgrade.
    let (mut finished, mut unfinished) = (0, 0);
    for entry in recorded["answers"].as_array().unwrap() {
        if entry[0] != "describeservicejob" {
            continue;
        }
        let (then, now) = (&entry[2], ask(&state, "describeservicejob", &entry[1]));
        let name = &then["jobName"];
        if matches!(then["status"].as_str(), Some("SUCCEEDED" | "FAILED")) {
            finished += 1;
            assert_eq!(
                (&now["status"], &now["statusReason"]),
                (&then["status"], &then["statusReason"]),
                "{name}"
            );
        } else {
            unfinished += 1;
            assert_ne!(now["status"], "FAILED", "{name}: {now}");
            assert_eq!(now["status"], then["status"], "{name}: {now}");
        }
    }
    assert!(finished >= 4 && unfinished >= 10, "{finished} {unfinished}");

    // The jobs the release had moved to the archive stay retired.
    let retired = recorded["retired"].as_object().expect("retired jobs");
    assert!(retired.len() >= 4, "{retired:?}");
    for (name, id) in retired {
        let query = match parse_operation(
            "describeservicejob",
            serde_json::json!({ "jobId": id }).to_string().as_bytes(),
        )
        .unwrap()
        {
            Request::Query(q) => q,
            other => panic!("{other:?}"),
        };
        assert!(
            state.query(&query, state.now).is_err(),
            "{name} was retired before the kill and is back"
        );
    }

    // The audit log is whole: what the release answered, in order, then nothing or more.
    let then = recorded["answers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e[0] == "audit")
        .expect("the audit answer");
    let then = then[2]["entries"].as_array().unwrap();
    let now = ask(&state, "audit", &Value::Null);
    let now = now["entries"].as_array().unwrap();
    assert!(then.len() >= 10 && now.len() >= then.len(), "{now:?}");
    for (i, (a, b)) in then.iter().zip(now).enumerate() {
        assert!(says_all_of(a, b), "audit entry {i}: then {a}, now {b}");
    }

    // The principals are still in the store, with their groups, admin flag and keys: a
    // request signed with a principal's recorded keys verifies against what the store holds.
    let stored = qm_store::Principals::open(&dir.path().join("qm.sqlite3"))
        .unwrap()
        .list()
        .unwrap();
    assert!(stored.iter().any(|p| p.name == "qm-admin" && p.admin));
    let principals = recorded["principals"].as_object().expect("principals");
    assert_eq!(principals.len(), 4);
    for (name, p) in principals {
        let record = stored
            .iter()
            .find(|r| r.name == *name)
            .unwrap_or_else(|| panic!("{name} is gone from the store"));
        let groups: Vec<&str> = p["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap())
            .collect();
        assert_eq!(record.groups, groups, "{name}");
        assert_eq!(Some(record.admin), p["admin"].as_bool(), "{name}");
        assert_eq!(record.access_key_id, p["accessKeyId"].as_str().unwrap());
        let whoami = &recorded["whoami"][name];
        assert_eq!(whoami["name"], name.as_str());
        assert_eq!(whoami["admin"], record.admin, "{name}");
        let key = qm_api::sigv4::Credentials {
            access_key_id: p["accessKeyId"].as_str().unwrap().into(),
            secret_access_key: p["secretAccessKey"].as_str().unwrap().into(),
        };
        let body = br#"{"jobId":"x"}"#;
        let headers = [
            ("host", "127.0.0.1:7611"),
            ("content-type", "application/json"),
        ];
        let at = std::time::SystemTime::now();
        let signed = qm_api::sigv4::sign(
            "POST",
            "http://127.0.0.1:7611/v1/describeservicejob",
            &headers,
            body,
            &key,
            "us-east-1",
            at,
        )
        .unwrap();
        let authorization = signed
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .unwrap();
        let auth = qm_api::sigv4::parse_authorization(&authorization.1).unwrap();
        assert_eq!(auth.access_key_id, record.access_key_id);
        let amz_date = &signed
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("x-amz-date"))
            .unwrap()
            .1;
        let time = qm_api::sigv4::parse_amz_date(amz_date).unwrap();
        let signed_headers: Vec<(&str, &str)> = auth
            .signed_headers
            .iter()
            .filter(|h| *h != "x-amz-date")
            .map(|h| *headers.iter().find(|(k, _)| k == h).unwrap())
            .collect();
        assert!(
            qm_api::sigv4::verify(
                &auth,
                "POST",
                "/v1/describeservicejob",
                &signed_headers,
                body,
                &record.secret,
                time
            )
            .unwrap(),
            "{name}'s recorded keys no longer sign"
        );
    }

    // The permissions given them are still the shares' tags.
    let share = |name: &str| {
        let arn =
            format!("arn:aws:batch:us-east-1:123456789012:job-queue/fs-queue/quota-share/{name}");
        ask(
            &state,
            "listtagsforresource",
            &serde_json::json!({ "resourceArn": arn }),
        )["tags"]
            .clone()
    };
    let (vision, nlp) = (share("vision"), share("nlp"));
    assert_eq!(vision["qm:submitters"], "alice,group:vision", "{vision}");
    assert_eq!(vision["qm:leads"], "carol", "{vision}");
    assert_eq!(vision["qm:max-priority"], "5", "{vision}");
    assert_eq!(nlp["qm:submitters"], "group:nlp", "{nlp}");
    assert_eq!(nlp["qm:default-class"], "batch", "{nlp}");

    // ... and sign with their permissions: what the release refused them is still refused,
    // what it let them do is still allowed (on a copy recovered again, to change it).
    let (mut copy, _) = recovered(&log);
    let principal = |name: &str| stored.iter().find(|r| r.name == name).unwrap();
    let refused = recorded["refused"].as_array().expect("refused requests");
    assert!(refused.len() >= 4, "{refused:?}");
    for (i, refusal) in refused.iter().enumerate() {
        let who = principal(refusal["principal"].as_str().unwrap());
        let path = refusal["path"].as_str().unwrap();
        let command = match path.strip_prefix("/v1/") {
            Some(op) => {
                match parse_operation(op, refusal["body"].to_string().as_bytes()).unwrap() {
                    Request::Command(c) => c,
                    other => panic!("{other:?}"),
                }
            }
            None => Command::PreemptServiceJob {
                job_id: path.split('/').nth(4).unwrap().to_string(),
                reason: format!("qm preempt by {}: again", who.name),
            },
        };
        let now = copy.now + 1000;
        let outcome = copy.apply_batch(now, vec![as_principal(who, command)]);
        let error = outcome.results[0]
            .as_ref()
            .expect_err("refused then, refused now");
        let then = &refusal["answer"];
        let code = then["__type"].as_str().unwrap();
        let (status, code_now) = match error {
            qm_api::ApiError::Forbidden(code, _) => (403, *code),
            qm_api::ApiError::Client(_) => (400, "ClientException"),
            other => panic!("refusal {i}: {other:?}"),
        };
        assert_eq!(
            (status, code_now, error.to_string().as_str()),
            (
                refusal["status"].as_u64().unwrap() as i32,
                code.rsplit('#').next().unwrap(),
                then["message"].as_str().unwrap()
            ),
            "refusal {i}: {refusal}"
        );
    }
    let jobs = &recorded["jobs"];
    let submit = |name: &str, share: &str, priority: i32| -> Command {
        let body = serde_json::json!({
            "jobName": name, "jobQueue": "fs-queue", "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": share, "schedulingPriority": priority,
            "serviceRequestPayload": serde_json::json!({
                "TrainingJobName": name,
                "RoleArn": "arn:aws:iam::123456789012:role/fixture",
                "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]},
                "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1},
                "OutputDataConfig": {"S3OutputPath": "s3://fixture/out"},
                "StoppingCondition": {"MaxRuntimeInSeconds": 86400},
            }).to_string(),
        });
        match parse_operation("submitservicejob", body.to_string().as_bytes()).unwrap() {
            Request::Command(c) => c,
            other => panic!("{other:?}"),
        }
    };
    for (who, command, allowed) in [
        (
            "alice",
            Command::PreemptServiceJob {
                job_id: jobs["a1"].as_str().unwrap().into(),
                reason: "qm preempt by alice: again".into(),
            },
            false,
        ),
        (
            "carol",
            Command::PreemptServiceJob {
                job_id: jobs["a1"].as_str().unwrap().into(),
                reason: "qm preempt by carol: again".into(),
            },
            true,
        ),
        ("alice", submit("alice-again", "vision", 5), true),
        ("alice", submit("alice-too-high", "vision", 6), false),
        ("bob", submit("bob-vision", "vision", 0), false),
        ("bob", submit("bob-nlp", "nlp", 0), true),
        ("carol", submit("carol-lead", "vision", 9), true),
        ("ops", submit("ops-admin", "vision", 9), true),
    ] {
        let now = copy.now + 1000;
        let outcome = copy.apply_batch(now, vec![as_principal(principal(who), command)]);
        assert_eq!(
            outcome.results[0].is_ok(),
            allowed,
            "{who}: {:?}",
            outcome.results[0]
                .as_ref()
                .map(|b| String::from_utf8_lossy(&b.to_json().unwrap()).into_owned())
        );
    }
}
