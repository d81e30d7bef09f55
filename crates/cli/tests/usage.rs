//! `qm report usage` against hours computed by hand.
//!
//! The scenario is driven through the server's own state machine (`qm_server::state::State`,
//! the commands the API and the executor log), at chosen instants, so the hours are exact:
//!
//! * queue `jq` on 4 instances of ml.g5.xlarge (4 GPUs each); share A (alice) is entitled to 2
//!   and LENDs, share B (bob) to 2 and LEND_AND_BORROWs up to 100%;
//! * t0 (2026-11-02T00:00Z): bob's b1 (4 instances) starts: 2 own, 2 borrowed from A; it
//!   checkpoints at 0:30;
//! * 1:00 alice's a1 (2 instances) arrives and reclaims; b1's processes are gone at 1:06
//!   (lost work 0:30 to 1:06 on 4 instances = 2.4 instance-hours), a1 runs 1:06 to 2:06;
//! * b1 runs again 2:06 to 4:00.
//!
//! Over [0:00, 4:00): A used 2 × 1.0 h = 2.0 (all own) and lent 2 × (1.1 + 1.9) = 6.0, so no
//! idle; B used 4 × 1.1 + 4 × 1.9 = 12.0, of which 6.0 own and 6.0 borrowed, and its 2
//! instances idled 1:06 to 2:06 (2.0). Waits: b1 0 s then 1:00 to 2:06 = 3960 s; a1 360 s.
//!
//! The test checks those figures in code, then compares the rendered table, CSV and JSON with
//! the golden files under `tests/golden/usage/` (bless an intended change of the rendering
//! with `QM_BLESS=1 cargo test -p qm-cli --test usage`), and finds the same report after a1 is
//! retired to the archive and the state is rebuilt from its snapshot image (a restart).

use std::path::Path;

use qm_api::qm::{UsageBy, UsageEvery, UsageReport};
use qm_api::Arns;
use qm_cli::client::report::{usage_csv, usage_table};
use qm_core::AttemptId;
use qm_server::archive::{Archive, ArchivedJob};
use qm_server::command::{Command, ExitRecord};
use qm_server::request::{Answer, Query};
use qm_server::state::{Action, State};
use qm_server::usage::{report_with_archive, UsageParams};
use serde_json::{json, Value};

const UNIT: &str = "ml.g5.xlarge";
const MIN: i64 = 60_000;
/// 2026-11-02T00:00:00Z, a Monday.
const T0: i64 = 20_759 * 86_400_000;

fn cmd(op: &str, body: Value) -> Command {
    serde_json::from_value(json!({"op": op, "body": body})).expect("command decodes")
}

/// Applies `commands` as one batch at `t0 + minutes`, returning the actions.
fn at(state: &mut State, minutes: i64, commands: Vec<Command>) -> Vec<Action> {
    let outcome = state.apply_batch(T0 + minutes * MIN, commands);
    for r in &outcome.results {
        r.as_ref().unwrap_or_else(|e| panic!("refused: {e}"));
    }
    state.core.check_invariants().expect("core invariants");
    outcome.actions
}

fn submit(id: &str, share: &str, principal: &str, count: u32) -> Command {
    let payload = json!({
        "TrainingJobName": id,
        "RoleArn": "arn:aws:iam::123456789012:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": count, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"}
    });
    Command::SubmitServiceJob {
        job_id: id.into(),
        request: serde_json::from_value(json!({
            "jobName": id, "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": share, "serviceRequestPayload": payload.to_string()
        }))
        .unwrap(),
        principal: Some(principal.into()),
    }
}

/// The attempt the batch launched for `job`.
fn launched(actions: &[Action], job: &str) -> AttemptId {
    actions
        .iter()
        .find_map(|a| match a {
            Action::Launch { spec, .. } if spec.job_id == job => Some(spec.attempt),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{job} was not launched: {actions:?}"))
}

fn running(attempt: AttemptId) -> Command {
    Command::AttemptRunning {
        attempt,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    }
}

fn exited(attempt: AttemptId, ok: bool) -> Command {
    Command::AttemptExited {
        attempt,
        outcome: if ok {
            ExitRecord::Succeeded
        } else {
            ExitRecord::Failed {
                reason: "terminated".into(),
                retryable: true,
            }
        },
        usage: None,
    }
}

fn scenario() -> State {
    let mut s = State::new(Arns::new("us-east-1", "123456789012"), Default::default());
    let setup = vec![
        cmd(
            "CreateSchedulingPolicy",
            json!({"name": "p", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
        ),
        cmd(
            "CreateServiceEnvironment",
            json!({"serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                   "capacityLimits": [{"maxCapacity": 4, "capacityUnit": UNIT}]}),
        ),
        cmd(
            "CreateJobQueue",
            json!({"jobQueueName": "jq", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
                   "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p",
                   "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}]}),
        ),
        share("A", json!({"strategy": "LEND"})),
        share(
            "B",
            json!({"strategy": "LEND_AND_BORROW", "borrowLimit": 100}),
        ),
        Command::SetCapacity {
            capacity: [(UNIT.to_string(), 4)].into(),
        },
    ];
    at(&mut s, -60, setup);
    let b1 = launched(&at(&mut s, 0, vec![submit("b1", "B", "bob", 4)]), "b1");
    at(&mut s, 0, vec![running(b1)]);
    at(&mut s, 30, vec![Command::AttemptCheckpoint { attempt: b1 }]);
    let reclaim = at(&mut s, 60, vec![submit("a1", "A", "alice", 2)]);
    assert!(
        reclaim
            .iter()
            .any(|a| matches!(a, Action::Stop { attempt } if *attempt == b1)),
        "a1 reclaims A's instances from b1: {reclaim:?}"
    );
    let a1 = launched(&at(&mut s, 66, vec![exited(b1, false)]), "a1");
    at(&mut s, 66, vec![running(a1)]);
    let b1_again = launched(&at(&mut s, 126, vec![exited(a1, true)]), "b1");
    at(&mut s, 126, vec![running(b1_again)]);
    at(&mut s, 240, vec![exited(b1_again, true)]);
    s
}

fn share(name: &str, sharing: Value) -> Command {
    cmd(
        "CreateQuotaShare",
        json!({"quotaShareName": name, "jobQueue": "jq",
               "capacityLimits": [{"maxCapacity": 2, "capacityUnit": UNIT}],
               "resourceSharingConfiguration": sharing,
               "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
    )
}

fn report(state: &State, archive: &Archive, by: UsageBy, every: Option<UsageEvery>) -> UsageReport {
    let params = UsageParams {
        since: T0,
        until: T0 + 240 * MIN,
        now: T0 + 240 * MIN,
        by,
        every,
        gpus: [(UNIT.to_string(), 4)].into(),
    };
    let Answer::UsageFacts(facts) = state
        .answer(
            &Query::UsageFacts {
                since: params.since,
            },
            params.now,
        )
        .expect("usage facts")
    else {
        panic!("a typed answer")
    };
    report_with_archive(archive, *facts, &params).expect("report")
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/usage")
        .join(name);
    if std::env::var_os("QM_BLESS").is_some() {
        std::fs::write(&path, actual).expect("bless");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; bless with QM_BLESS=1", path.display()));
    assert_eq!(actual, expected, "{name} differs from its golden file");
}

#[test]
fn usage_by_share_matches_the_hours_computed_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::new(dir.path());
    let state = scenario();
    let r = report(&state, &archive, UsageBy::Share, None);
    let row = |share: &str| {
        r.rows
            .iter()
            .find(|row| row.quota_share_name.as_deref() == Some(share))
            .unwrap_or_else(|| panic!("a row for {share}: {r:?}"))
    };
    let (a, b) = (row("A"), row("B"));
    let h = |x: &qm_api::qm::UsageHours| {
        [
            x.used,
            x.within_entitlement,
            x.borrowed,
            x.lent_out,
            x.idle_entitlement,
        ]
    };
    assert_eq!(h(&a.instance_hours), [2.0, 2.0, 0.0, 6.0, 0.0]);
    assert_eq!(h(&b.instance_hours), [12.0, 6.0, 6.0, 0.0, 2.0]);
    assert_eq!(h(&a.gpu_hours), [8.0, 8.0, 0.0, 24.0, 0.0]);
    assert_eq!(h(&b.gpu_hours), [48.0, 24.0, 24.0, 0.0, 8.0]);
    assert_eq!((a.preemptions_suffered, a.preemptions_caused), (0, 1));
    assert_eq!((b.preemptions_suffered, b.preemptions_caused), (1, 0));
    assert_eq!((b.lost_instance_hours, b.lost_gpu_hours), (2.4, 9.6));
    assert_eq!((a.starts, b.starts), (1, 2));
    let b_wait = b.queue_delay_seconds.unwrap();
    assert_eq!((b_wait.p50, b_wait.p90, b_wait.max), (0.0, 3960.0, 3960.0));
    assert_eq!(a.queue_delay_seconds.unwrap().p50, 360.0);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    golden("by-share.txt", &usage_table(&r));
    golden(
        "by-share.json",
        &format!("{}\n", serde_json::to_string_pretty(&r).unwrap()),
    );
}

#[test]
fn usage_by_principal_and_by_instance_type_split_the_same_hours() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::new(dir.path());
    let state = scenario();
    let p = report(&state, &archive, UsageBy::Principal, None);
    let hours: Vec<(String, f64, f64, f64, u64, u64)> = p
        .rows
        .iter()
        .map(|r| {
            let h = r.instance_hours;
            (
                r.principal.clone().unwrap(),
                h.used,
                h.within_entitlement,
                h.borrowed,
                r.preemptions_suffered,
                r.preemptions_caused,
            )
        })
        .collect();
    assert_eq!(
        hours,
        vec![
            ("alice".into(), 2.0, 2.0, 0.0, 0, 1),
            ("bob".into(), 12.0, 6.0, 6.0, 1, 0)
        ]
    );
    let t = report(&state, &archive, UsageBy::InstanceType, None);
    let [row] = &t.rows[..] else {
        panic!("one instance type: {t:?}")
    };
    let h = row.instance_hours;
    // The four parts add up to the entitlement: 4 instances × 4 h.
    assert_eq!(
        [
            h.used,
            h.within_entitlement,
            h.borrowed,
            h.lent_out,
            h.idle_entitlement
        ],
        [14.0, 8.0, 6.0, 6.0, 2.0]
    );
    assert_eq!(h.within_entitlement + h.lent_out + h.idle_entitlement, 16.0);
    assert_eq!(row.queue_delay_seconds.unwrap().p50, 360.0);
    golden("by-principal.csv", &usage_csv(&p).unwrap());
    golden("by-instance-type.csv", &usage_csv(&t).unwrap());
}

#[test]
fn hourly_usage_splits_each_interval_at_the_hour() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::new(dir.path());
    let r = report(
        &scenario(),
        &archive,
        UsageBy::Share,
        Some(UsageEvery::Hour),
    );
    let cell = |hour: i64, share: &str| {
        let row = r
            .rows
            .iter()
            .find(|row| {
                row.period_start == T0 + hour * 60 * MIN
                    && row.quota_share_name.as_deref() == Some(share)
            })
            .unwrap_or_else(|| panic!("hour {hour}, share {share}: {r:?}"));
        let h = row.instance_hours;
        [
            h.used,
            h.within_entitlement,
            h.borrowed,
            h.lent_out,
            h.idle_entitlement,
        ]
    };
    // 1:00-2:00: b1 held 4 until 1:06, a1 ran from 1:06, B idled from 1:06.
    assert_eq!(cell(1, "B"), [0.4, 0.2, 0.2, 0.0, 1.8]);
    assert_eq!(cell(1, "A"), [1.8, 1.8, 0.0, 0.2, 0.0]);
    // 2:00-3:00: a1 until 2:06, then b1 borrowing again.
    assert_eq!(cell(2, "A"), [0.2, 0.2, 0.0, 1.8, 0.0]);
    assert_eq!(cell(2, "B"), [3.6, 1.8, 1.8, 0.0, 0.2]);
    golden("by-share-hourly.txt", &usage_table(&r));
}

#[test]
fn usage_is_the_same_after_retirement_to_the_archive_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::new(dir.path());
    let mut state = scenario();
    let before = report(&state, &archive, UsageBy::Share, Some(UsageEvery::Day));

    // Retire a1 the way the driver does: archive first, then the logged command.
    let a1 = ArchivedJob::of(&state.jobs[&state.by_id["a1"]]);
    archive.append(&[a1]).unwrap();
    at(
        &mut state,
        300,
        vec![Command::RetireJobs {
            job_ids: vec!["a1".into()],
        }],
    );
    assert!(!state.by_id.contains_key("a1"), "a1 left the state");
    let retired = report(&state, &archive, UsageBy::Share, Some(UsageEvery::Day));
    assert_eq!(retired, before, "after retirement");

    // A restart: the state rebuilt from its snapshot image.
    let image = qm_server::snapshot::decode_image(
        qm_server::snapshot::SNAPSHOT_FORMAT,
        "test",
        &state.encode_image().unwrap(),
    )
    .unwrap();
    let restarted = State::from_image(state.arns.clone(), Default::default(), image).unwrap();
    let after = report(&restarted, &archive, UsageBy::Share, Some(UsageEvery::Day));
    assert_eq!(after, before, "after a restart");
}
