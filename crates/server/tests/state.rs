//! The server state without HTTP or processes: the AWS demo driven through the same commands
//! the API logs, executor reports played by hand, and the log replayed into a fresh state
//! that must come out identical. (The end-to-end tests in tests/e2e do the same through boto3
//! and real processes.)

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use qm_api::Arns;
use qm_core::AttemptId;
use qm_server::command::{AuditEntry, Command, ExitRecord};
use qm_server::driver::{encode_decisions, recover, TimeLimits};
use qm_server::request::{Query, Reply};
use qm_server::snapshot::{decode_image, SNAPSHOT_FORMAT};
use qm_server::state::{Action, JobRec, State};
use qm_store::{Log, MemoryLog, Writer};
use serde_json::{json, Value};

const UNIT: &str = "ml.g5.xlarge";

/// A state plus the log of every batch applied to it, one batch per `batch` call.
struct World {
    state: State,
    log: MemoryLog,
    now: i64,
}

/// A typed reply as the JSON the server answers, for assertions written against the wire.
fn bytes(reply: &Reply) -> Vec<u8> {
    reply.to_json().expect("a reply encodes")
}

fn cmd(op: &str, body: Value) -> Command {
    serde_json::from_value(json!({"op": op, "body": body})).expect("command decodes")
}

fn payload(name: &str) -> String {
    json!({
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::123456789012:role/x",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]},
        "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"}
    })
    .to_string()
}

fn logged_by(writer: &Writer) -> MemoryLog {
    let mut log = MemoryLog::default();
    log.set_writer(writer).unwrap();
    log
}

fn old_build() -> Writer {
    Writer {
        version: "0.0.1+an-older-build".into(),
        format: qm_server::command::DECISIONS_FORMAT,
    }
}

fn fresh_state() -> State {
    State::new(
        Arns::new("us-east-1", "123456789012"),
        qm_core::Policy::default(),
    )
}

impl World {
    fn new() -> Self {
        World {
            state: State::new(
                Arns::new("us-east-1", "123456789012"),
                qm_core::Policy::default(),
            ),
            log: logged_by(&this_build()),
            now: 1_000_000,
        }
    }

    /// Applies commands as one batch, logs it like the driver does, returns the actions.
    fn batch(&mut self, commands: Vec<Command>) -> Vec<Action> {
        self.now += 1000;
        let outcome = self.state.apply_batch(self.now, commands.clone());
        for (r, c) in outcome.results.iter().zip(&commands) {
            if let Err(e) = r {
                panic!("command refused: {e}: {c:?}");
            }
        }
        self.log
            .append(
                self.now,
                &serde_json::to_string(&outcome.logged).unwrap(),
                &encode_decisions(&outcome.decisions).unwrap(),
            )
            .unwrap();
        self.state.core.check_invariants().expect("core invariants");
        outcome.actions
    }

    fn one(&mut self, c: Command) -> Vec<Action> {
        self.batch(vec![c])
    }

    fn submit(&mut self, id: &str, share: &str, priority: i32) -> Vec<Action> {
        self.submit_payload(id, share, priority, payload(id))
    }

    /// [`World::submit`] with a training-job payload of its own.
    fn submit_payload(
        &mut self,
        id: &str,
        share: &str,
        priority: i32,
        body: String,
    ) -> Vec<Action> {
        self.one(Command::SubmitServiceJob {
            job_id: id.into(),
            principal: None,
            request: serde_json::from_value(json!({
                "jobName": id, "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
                "quotaShareName": share, "schedulingPriority": priority,
                "serviceRequestPayload": body
            }))
            .unwrap(),
        })
    }

    fn describe(&self, id: &str) -> Value {
        let q = Query::DescribeServiceJob(serde_json::from_value(json!({"jobId": id})).unwrap());
        serde_json::from_slice(&bytes(&self.state.query(&q, self.now).expect("describe"))).unwrap()
    }

    fn status(&self, id: &str) -> String {
        self.describe(id)["status"].as_str().unwrap().to_string()
    }
}

fn launched(actions: &[Action]) -> Vec<(String, AttemptId)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Launch { spec, .. } => Some((spec.job_id.clone(), spec.attempt)),
            _ => None,
        })
        .collect()
}

fn stopped(actions: &[Action]) -> Vec<AttemptId> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Stop { attempt } => Some(*attempt),
            _ => None,
        })
        .collect()
}

fn demo_setup(w: &mut World) {
    fifo_queue(w, 3, UNIT, 3, json!([]));
    for (name, strategy, borrow, isp) in [
        ("QS1", "LEND_AND_BORROW", Some(200), "ENABLED"),
        ("QS2", "LEND", None, "DISABLED"),
        ("QS3", "RESERVE", None, "DISABLED"),
    ] {
        let mut sharing = json!({"strategy": strategy});
        if let Some(b) = borrow {
            sharing["borrowLimit"] = json!(b);
        }
        w.one(cmd(
            "CreateQuotaShare",
            json!({"quotaShareName": name, "jobQueue": "jq",
                   "capacityLimits": [{"maxCapacity": 1, "capacityUnit": UNIT}],
                   "resourceSharingConfiguration": sharing,
                   "preemptionConfiguration": {"inSharePreemption": isp}}),
        ));
    }
}

/// The executor's `capacity` of `UNIT`, a FIFO scheduling policy `p`, a service environment
/// `se` of `max` instances of `unit` and a job queue `jq` on it; `actions` are its
/// `jobStateTimeLimitActions`.
fn fifo_queue(w: &mut World, capacity: u32, unit: &str, max: u32, actions: Value) {
    w.one(Command::SetCapacity {
        capacity: [(UNIT.to_string(), capacity)].into(),
    });
    w.one(cmd(
        "CreateSchedulingPolicy",
        json!({"name": "p", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
    ));
    w.one(cmd(
        "CreateServiceEnvironment",
        json!({"serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
               "capacityLimits": [{"maxCapacity": max, "capacityUnit": unit}]}),
    ));
    let mut queue = json!({"jobQueueName": "jq", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
               "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p",
               "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}]});
    if actions.as_array().is_some_and(|a| !a.is_empty()) {
        queue["jobStateTimeLimitActions"] = actions;
    }
    w.one(cmd("CreateJobQueue", queue));
}

#[test]
fn the_aws_demo_runs_step_by_step_and_replays_to_the_same_state() {
    let mut w = World::new();
    demo_setup(&mut w);

    // Step 1: high on QS1's own capacity, med borrowing QS2's idle instance, low waiting.
    let a = w.submit("high", "QS1", 3);
    let b = w.submit("med", "QS1", 2);
    let c = w.submit("low", "QS1", 1);
    let (high, med) = (launched(&a), launched(&b));
    assert_eq!(high.len() + med.len(), 2, "{a:?} {b:?}");
    assert!(launched(&c).is_empty());
    assert_eq!(w.status("high"), "SCHEDULED");
    w.one(Command::AttemptRunning {
        attempt: high[0].1,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    });
    assert_eq!(w.status("high"), "RUNNING");
    let low = w.describe("low");
    assert_eq!(low["status"], "RUNNABLE");
    assert!(
        low["statusReason"]
            .as_str()
            .unwrap()
            .starts_with("NOTHING_TO_BORROW"),
        "{low}"
    );

    // Step 2: QS2 reclaims its instance from med.
    let d = w.submit("qs2", "QS2", 1);
    assert_eq!(stopped(&d), vec![med[0].1], "med is preempted: {d:?}");
    assert_eq!(w.status("med"), "RUNNABLE");
    let exit = w.one(Command::AttemptExited {
        attempt: med[0].1,
        outcome: ExitRecord::Failed {
            reason: "killed".into(),
            retryable: true,
        },
        usage: None,
    });
    assert_eq!(
        launched(&exit)[0].0,
        "qs2",
        "qs2 starts once med's process is gone"
    );
    let med_rec = w.describe("med");
    assert_eq!(med_rec["preemptionSummary"]["preemptedAttemptCount"], 1);
    assert_eq!(
        med_rec["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"],
        "Preempted: capacity reclaimed by quota share QS2"
    );
    assert_eq!(
        med_rec["attempts"].as_array().unwrap().len(),
        0,
        "preemptions are not attempts"
    );

    // Step 3: raising low to 4 preempts high in-share.
    let e = w.one(cmd(
        "UpdateServiceJob",
        json!({"jobId": "low", "schedulingPriority": 4}),
    ));
    assert_eq!(stopped(&e), vec![high[0].1]);
    let f = w.one(Command::AttemptExited {
        attempt: high[0].1,
        outcome: ExitRecord::Succeeded,
        usage: None,
    });
    assert_eq!(launched(&f)[0].0, "low");
    let high_rec = w.describe("high");
    assert_eq!(high_rec["status"], "RUNNABLE");
    assert!(
        high_rec["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"]
            .as_str()
            .unwrap()
            .starts_with("Preempted by higher priority job low")
    );

    // Replaying the log gives the same answers for every job.
    let mut fresh = State::new(
        Arns::new("us-east-1", "123456789012"),
        qm_core::Policy::default(),
    );
    let r = recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!(r.batches, w.log.len().unwrap());
    assert_eq!(r.diverged_own, 0, "replay decides exactly as logged");
    for id in ["high", "med", "low", "qs2"] {
        let q = Query::DescribeServiceJob(serde_json::from_value(json!({"jobId": id})).unwrap());
        let replayed: Value =
            serde_json::from_slice(&bytes(&fresh.query(&q, w.now).unwrap())).unwrap();
        assert_eq!(replayed, w.describe(id), "job {id} after replay");
    }
    let live: Vec<AttemptId> = fresh.live_attempts().into_iter().map(|(a, _)| a).collect();
    assert_eq!(live.len(), 2, "low and qs2 hold capacity: {live:?}");
}

#[test]
fn a_drill_requeues_a_running_job_and_replays_to_the_same_state() {
    let mut w = World::new();
    demo_setup(&mut w);
    let a = w.submit("drilled", "QS1", 1);
    let attempt = launched(&a)[0].1;
    let drill = Command::PreemptServiceJob {
        job_id: "drilled".into(),
        reason: "qm preempt by lead: resume check".into(),
    };
    // Not running yet (SCHEDULED): refused, nothing changes.
    let outcome = w.state.apply_batch(w.now + 1, vec![drill.clone()]);
    let refused = outcome.results[0]
        .as_ref()
        .expect_err("a scheduled job is not drilled");
    assert!(
        refused.message().contains("only a running job"),
        "{refused}"
    );
    w.one(Command::AttemptRunning {
        attempt,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    });
    assert_eq!(stopped(&w.one(drill)), vec![attempt]);
    let exit = w.one(Command::AttemptExited {
        attempt,
        outcome: ExitRecord::Failed {
            reason: "killed".into(),
            retryable: true,
        },
        usage: None,
    });
    assert_eq!(launched(&exit)[0].0, "drilled", "it runs again at once");
    let rec = w.describe("drilled");
    assert_eq!(rec["preemptionSummary"]["preemptedAttemptCount"], 1);
    assert_eq!(
        rec["preemptionSummary"]["recentPreemptedAttempts"][0]["statusReason"],
        "Preempted: drill (qm preempt by lead: resume check)"
    );

    let mut fresh = fresh_state();
    let r = recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!(r.diverged_own, 0, "replay decides exactly as logged");
    let q = Query::DescribeServiceJob(serde_json::from_value(json!({"jobId": "drilled"})).unwrap());
    let replayed: Value = serde_json::from_slice(&bytes(&fresh.query(&q, w.now).unwrap())).unwrap();
    assert_eq!(replayed, rec);
}

#[test]
fn a_client_token_replay_returns_the_original_job_and_a_changed_body_is_refused() {
    let mut w = World::new();
    demo_setup(&mut w);
    // Job `job_id` of a request named `name`, always with the token t-1.
    let submit = |w: &mut World, job_id: &str, name: &str| {
        let request = serde_json::from_value(json!({
            "jobName": name, "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "QS2", "serviceRequestPayload": payload(name), "clientToken": "t-1"
        }))
        .unwrap();
        w.state.apply(&Command::SubmitServiceJob {
            job_id: job_id.into(),
            principal: None,
            request,
        })
    };
    w.now += 1;
    w.state.begin(w.now);
    let first = submit(&mut w, "j1", "a").unwrap();
    let again = submit(&mut w, "j2", "a").unwrap();
    assert_eq!(bytes(&first), bytes(&again));
    let err = submit(&mut w, "j3", "b").unwrap_err();
    assert!(err.to_string().contains("clientToken"), "{err}");
    assert_eq!(w.state.jobs.len(), 1);
    // A snapshot keeps no copy of the request: the token is found again through its job's.
    let mut copy = rebuilt_from_snapshot(&w);
    copy.now += 1;
    copy.state.begin(copy.now);
    let after = submit(&mut copy, "j4", "a").unwrap();
    assert_eq!(bytes(&first), bytes(&after));
    let err = submit(&mut copy, "j5", "b").unwrap_err();
    assert!(err.to_string().contains("clientToken"), "{err}");
}

#[test]
fn a_lost_attempt_requeues_its_job_without_using_a_retry() {
    let mut w = World::new();
    demo_setup(&mut w);
    let a = w.submit("j", "QS2", 0);
    let (_, attempt) = launched(&a)[0].clone();
    let b = w.one(Command::AttemptExited {
        attempt,
        outcome: ExitRecord::Lost {
            reason: "Attempt lost: the server restarted".into(),
            max_in_a_row: Some(3),
        },
        usage: None,
    });
    assert_eq!(launched(&b).len(), 1, "the job starts again: {b:?}");
    let rec = w.describe("j");
    assert_eq!(rec["status"], "SCHEDULED");
    assert_eq!(
        rec["attempts"][0]["statusReason"],
        "Attempt lost: the server restarted"
    );
    let (_, second) = launched(&b)[0].clone();
    w.one(Command::AttemptExited {
        attempt: second,
        outcome: ExitRecord::Succeeded,
        usage: None,
    });
    assert_eq!(w.status("j"), "SUCCEEDED", "one retry attempt was enough");
}

#[test]
fn a_job_for_an_instance_type_the_executor_lacks_waits_with_a_reason_instead_of_starting() {
    let mut w = World::new();
    fifo_queue(&mut w, 3, "ml.p4d.24xlarge", 2, json!([]));
    w.one(cmd(
        "CreateQuotaShare",
        json!({"quotaShareName": "QS", "jobQueue": "jq",
               "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "ml.p4d.24xlarge"}],
               "resourceSharingConfiguration": {"strategy": "LEND"},
               "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
    ));
    let a = w.one(Command::SubmitServiceJob {
        job_id: "big".into(),
        principal: None,
        request: serde_json::from_value(json!({
            "jobName": "big", "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
            "quotaShareName": "QS",
            "serviceRequestPayload": payload("big").replace(UNIT, "ml.p4d.24xlarge")
        }))
        .unwrap(),
    });
    assert!(launched(&a).is_empty(), "nothing to run it on: {a:?}");
    let rec = w.describe("big");
    assert_eq!(rec["status"], "RUNNABLE");
    assert!(
        rec["statusReason"]
            .as_str()
            .unwrap()
            .starts_with("CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"),
        "{rec}"
    );
}

#[test]
fn jobs_of_a_deleted_queue_are_not_listed_under_a_new_queue_of_the_same_name() {
    let mut w = World::new();
    demo_setup(&mut w);
    w.submit("old", "QS3", 0);
    for share in ["QS1", "QS2", "QS3"] {
        w.one(cmd(
            "UpdateQuotaShare",
            json!({"quotaShareArn": format!("arn:aws:batch:us-east-1:123456789012:job-queue/jq/quota-share/{share}"),
                   "state": "DISABLED"}),
        ));
    }
    w.one(cmd(
        "UpdateJobQueue",
        json!({"jobQueue": "jq", "state": "DISABLED"}),
    ));
    let stop = w.one(cmd("DeleteJobQueue", json!({"jobQueue": "jq"})));
    let (attempt,) = (stopped(&stop)[0],);
    w.one(Command::AttemptExited {
        attempt,
        outcome: ExitRecord::Failed {
            reason: "SIGTERM".into(),
            retryable: true,
        },
        usage: None,
    });
    let old = w.describe("old");
    assert_eq!(old["status"], "FAILED");
    assert_eq!(old["isTerminated"], true);
    w.one(cmd(
        "CreateJobQueue",
        json!({"jobQueueName": "jq", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
               "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p",
               "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}]}),
    ));
    let q = Query::ListServiceJobs(
        serde_json::from_value(json!({"jobQueue": "jq", "jobStatus": "FAILED"})).unwrap(),
    );
    let listed: Value = serde_json::from_slice(&bytes(&w.state.query(&q, w.now).unwrap())).unwrap();
    assert_eq!(
        listed["jobSummaryList"].as_array().unwrap().len(),
        0,
        "{listed}"
    );
}

/// DESIGN.md §2 rule 10, last clause: a share's head job blocked for a reason the queue's
/// `jobStateTimeLimitActions` names is terminated once it has been blocked that long.
#[test]
fn a_head_job_blocked_past_its_queues_time_limit_action_is_terminated() {
    let mut w = World::new();
    fifo_queue(
        &mut w,
        1,
        "ml.p4d.24xlarge",
        2,
        json!([{"reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "state": "RUNNABLE",
                "maxTimeSeconds": 600, "action": "TERMINATE"}]),
    );
    w.one(cmd(
        "CreateQuotaShare",
        json!({"quotaShareName": "QS", "jobQueue": "jq",
               "capacityLimits": [{"maxCapacity": 2, "capacityUnit": "ml.p4d.24xlarge"}],
               "resourceSharingConfiguration": {"strategy": "LEND"},
               "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
    ));
    w.submit_payload(
        "big",
        "QS",
        0,
        payload("big").replace(UNIT, "ml.p4d.24xlarge"),
    );
    assert_eq!(w.status("big"), "RUNNABLE");
    terminated_after_600_s(&mut w, "big", "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY");
}

/// The queue's 600 s time-limit action terminates RUNNABLE `job`, waiting for `reason`: not
/// before the 600 s, and at them with the action's status reason.
fn terminated_after_600_s(w: &mut World, job: &str, reason: &str) {
    let mut limits = TimeLimits::default();
    let t0 = w.now;
    assert!(limits.due(w.state.time_limit_candidates(), t0).is_empty());
    assert!(
        limits
            .due(w.state.time_limit_candidates(), t0 + 599_999)
            .is_empty(),
        "not before maxTimeSeconds"
    );
    let due = limits.due(w.state.time_limit_candidates(), t0 + 600_000);
    assert_eq!(due.len(), 1, "{due:?}");
    w.batch(due);
    let rec = w.describe(job);
    assert_eq!(rec["status"], "FAILED");
    assert_eq!(
        rec["statusReason"],
        format!("Terminated by JobStateTimeLimit action due to reason: {reason}")
    );
}

/// DESIGN.md §2 rule 10: a job that can never run as its share is set up (it needs more than
/// its share may ever hold) waits with a MISCONFIGURATION reason, and the queue's
/// `jobStateTimeLimitActions` for that reason terminate it.
#[test]
fn a_misconfigured_job_is_terminated_by_its_queues_time_limit_action() {
    let mut w = World::new();
    let reason = "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED";
    fifo_queue(
        &mut w,
        4,
        UNIT,
        4,
        json!([{"reason": reason, "state": "RUNNABLE", "maxTimeSeconds": 600, "action": "TERMINATE"}]),
    );
    w.one(cmd(
        "CreateQuotaShare",
        json!({"quotaShareName": "QS", "jobQueue": "jq",
               "capacityLimits": [{"maxCapacity": 1, "capacityUnit": UNIT}],
               "resourceSharingConfiguration": {"strategy": "RESERVE"},
               "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
    ));
    w.submit_payload(
        "wide",
        "QS",
        0,
        payload("wide").replace("\"InstanceCount\":1", "\"InstanceCount\":2"),
    );
    let rec = w.describe("wide");
    assert_eq!(rec["status"], "RUNNABLE");
    assert!(
        rec["statusReason"]
            .as_str()
            .unwrap_or("")
            .starts_with(reason),
        "{rec}"
    );
    terminated_after_600_s(&mut w, "wide", reason);
}

/// DESIGN.md §2 rule 9: every preempted attempt is kept in the job's `preemptionSummary`,
/// newest first, and counted.
#[test]
fn preempted_attempts_are_listed_newest_first_and_counted() {
    let mut w = World::new();
    demo_setup(&mut w);
    let mut attempt = launched(&w.submit("twice", "QS1", 1))[0].1;
    for _ in 0..2 {
        w.one(Command::AttemptRunning {
            attempt,
            pids: vec![],
            gpus: vec![],
            supervisor: None,
            at_ms: None,
        });
        w.one(Command::PreemptServiceJob {
            job_id: "twice".into(),
            reason: "drill".into(),
        });
        let exit = w.one(Command::AttemptExited {
            attempt,
            outcome: ExitRecord::Failed {
                reason: "killed".into(),
                retryable: true,
            },
            usage: None,
        });
        attempt = launched(&exit)[0].1;
    }
    let summary = &w.describe("twice")["preemptionSummary"];
    assert_eq!(summary["preemptedAttemptCount"], 2, "{summary}");
    let recent = summary["recentPreemptedAttempts"]
        .as_array()
        .expect("attempts");
    assert_eq!(recent.len(), 2, "{summary}");
    assert!(
        recent[0]["startedAt"].as_i64() > recent[1]["startedAt"].as_i64(),
        "newest first: {summary}"
    );
}

/// The log of `j`'s submit, written by `writer`, with the decisions of the batch that started
/// it changed by `change` (as if that build's rules had decided otherwise).
fn log_with_the_start_decided(writer: &Writer, change: impl Fn(&str) -> String) -> MemoryLog {
    let mut w = World::new();
    w.log = logged_by(writer);
    demo_setup(&mut w);
    w.submit("j", "QS2", 0);
    let mut log = logged_by(writer);
    w.log
        .replay(&mut |b| {
            let decisions = if b.decisions.contains("Start") {
                change(&b.decisions)
            } else {
                b.decisions
            };
            log.append(b.at_ms, &b.commands, &decisions).unwrap();
            Ok(())
        })
        .unwrap();
    log
}

/// A log whose submit batch did not start the job (as if an older build's rule had kept it
/// waiting), written by `writer`.
fn log_with_a_decision_this_build_does_not_take(writer: &Writer) -> MemoryLog {
    log_with_the_start_decided(writer, |_| "[]".into())
}

#[test]
fn a_decision_another_build_took_differently_is_applied_as_it_was_taken() {
    let log = log_with_a_decision_this_build_does_not_take(&old_build());
    let mut state = fresh_state();
    let r = recover(&mut state, &log, &qm_server::writer()).expect("recovery goes on");
    assert_eq!(r.diverged_own, 0);
    assert_eq!(r.applied_other, r.batches);
    assert_eq!(r.other_writers, vec![old_build().version]);
    // The old build's decision stands: the job waits, as its clients were told; this build's
    // first pass (the next batch) is free to start it.
    assert!(state.live_attempts().is_empty());
    let j = state.query(
        &qm_server::request::Query::DescribeServiceJob(
            serde_json::from_value(json!({"jobId": "j"})).unwrap(),
        ),
        state.now,
    );
    let j: Value = serde_json::from_slice(&bytes(&j.unwrap())).unwrap();
    assert_eq!(j["status"], "RUNNABLE", "{j}");
}

#[test]
fn a_logged_decision_that_does_not_fit_the_state_stops_the_recovery_naming_its_batch() {
    // A start on two instances for a job that asks for one: no build decides so.
    let log = log_with_the_start_decided(&old_build(), |d| d.replace("\"count\":1", "\"count\":2"));
    let e = recover(&mut fresh_state(), &log, &qm_server::writer()).unwrap_err();
    let e = e.to_string();
    assert!(
        e.contains("batch ") && e.contains("cannot be applied"),
        "{e}"
    );
    assert!(e.contains("starts on 2 x ml.g5.xlarge"), "{e}");
}

/// The build that writes the tests' logs and recovers them: one that names its commit, so
/// that its batches are its own (decided again on replay) whether or not the tree the tests
/// were built from is clean.
fn this_build() -> Writer {
    identified_build()
}

/// A build that names its commit (the tests' own build may be dirty, which is never "own").
fn identified_build() -> Writer {
    Writer {
        version: "0.1.0+0123456789ab".into(),
        format: qm_server::command::DECISIONS_FORMAT,
    }
}

#[test]
fn a_decision_this_very_build_took_differently_is_counted_for_refusal() {
    let log = log_with_a_decision_this_build_does_not_take(&identified_build());
    let r = recover(&mut fresh_state(), &log, &identified_build()).unwrap();
    assert_eq!((r.diverged_own, r.applied_other), (1, 0));
    assert!(r.other_writers.is_empty());
}

#[test]
fn a_build_that_cannot_name_its_source_has_its_batches_applied_as_logged() {
    // It may be another build under the same name: its batches are applied, never held to a
    // replay of this build's rules.
    for version in ["0.1.0+unknown", "0.1.0+0123456789ab-dirty"] {
        let w = Writer {
            version: version.into(),
            format: qm_server::command::DECISIONS_FORMAT,
        };
        let log = log_with_a_decision_this_build_does_not_take(&w);
        let mut state = fresh_state();
        let r = recover(&mut state, &log, &w).unwrap();
        assert_eq!(
            (r.diverged_own, r.applied_other),
            (0, r.batches),
            "{version}"
        );
        assert!(state.live_attempts().is_empty(), "{version}");
    }
}

#[test]
fn a_command_another_build_accepted_but_this_one_refuses_is_skipped_with_a_warning() {
    // An update of a queue that does not exist: refused by this build, as if an older build
    // had accepted what this one no longer does.
    let refused = cmd(
        "UpdateJobQueue",
        json!({"jobQueue": "no-such-queue", "priority": 3}),
    );
    let mut w = World::new();
    demo_setup(&mut w);
    let mut log = logged_by(&old_build());
    w.log
        .replay(&mut |b| {
            log.append(b.at_ms, &b.commands, &b.decisions).unwrap();
            Ok(())
        })
        .unwrap();
    let commands = serde_json::to_string(&vec![refused]).unwrap();
    log.append(w.now + 1000, &commands, "[]").unwrap();

    let r = recover(&mut fresh_state(), &log, &qm_server::writer()).expect("recovery goes on");
    assert_eq!(r.refused_other, 1);
    let mut own = logged_by(&identified_build());
    own.append(w.now + 1000, &commands, "[]").unwrap();
    let err = recover(&mut fresh_state(), &own, &identified_build()).unwrap_err();
    assert!(err.to_string().contains("refused on replay"), "{err}");
}

#[test]
fn decisions_in_the_schema_1_encoding_replay_without_a_difference() {
    // Schema 1 logged each effect's Debug text, one a line; such batches come back attributed
    // to the legacy writer (format 0).
    let mut w = World::new();
    demo_setup(&mut w);
    w.submit("j", "QS2", 0);
    let mut replayed = fresh_state();
    let mut legacy = logged_by(&Writer::legacy());
    w.log
        .replay(&mut |b| {
            let commands: Vec<Command> = serde_json::from_str(&b.commands).unwrap();
            let outcome = replayed.apply_batch(b.at_ms, commands);
            assert!(outcome.results.iter().all(Result::is_ok));
            let text: Vec<String> = outcome.decisions.iter().map(|e| format!("{e:?}")).collect();
            legacy
                .append(b.at_ms, &b.commands, &text.join("\n"))
                .unwrap();
            Ok(())
        })
        .unwrap();
    let mut recovered = fresh_state();
    let r = recover(&mut recovered, &legacy, &qm_server::writer()).unwrap();
    assert_eq!((r.diverged_own, r.applied_other), (0, r.batches));
    let (got, want) = (recovered.core.image(), replayed.core.image());
    assert_eq!((got.jobs, got.attempts), (want.jobs, want.attempts));
    assert_eq!(r.other_writers, vec![Writer::legacy().version]);
}

/// A world whose state is rebuilt from the snapshot of `w`'s, at the same time.
fn rebuilt_from_snapshot(w: &World) -> World {
    let text = w.state.encode_image().unwrap();
    let image = decode_image(SNAPSHOT_FORMAT, "test", &text).unwrap();
    let state = State::from_image(
        Arns::new("us-east-1", "123456789012"),
        qm_core::Policy::default(),
        image,
    )
    .expect("the snapshot loads");
    assert_eq!(
        state.encode_image().unwrap(),
        text,
        "a snapshot survives a round trip"
    );
    World {
        state,
        log: logged_by(&this_build()),
        now: w.now,
    }
}

const DEMO_JOBS: [&str; 4] = ["high", "med", "low", "qs2"];

#[test]
fn a_state_rebuilt_from_its_snapshot_answers_and_decides_as_the_original() {
    let mut w = World::new();
    demo_setup(&mut w);
    let high = launched(&w.submit("high", "QS1", 3));
    w.submit("med", "QS1", 2);
    w.submit("low", "QS1", 1);
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": "arn:aws:batch:us-east-1:123456789012:job-queue/jq", "tags": {"k": "v"}}),
    ));
    w.one(Command::AttemptRunning {
        attempt: high[0].1,
        pids: vec![42],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    });
    // QS2's job reclaims the instance med borrowed: med is stopping when the snapshot is taken.
    let reclaim = w.submit("qs2", "QS2", 0);
    assert_eq!(stopped(&reclaim).len(), 1, "{reclaim:?}");

    let mut copy = rebuilt_from_snapshot(&w);
    for id in DEMO_JOBS {
        assert_eq!(copy.describe(id), w.describe(id), "job {id}");
    }
    assert_eq!(copy.state.live_attempts(), w.state.live_attempts());
    // The rest of the demo decides the same in both.
    let med_attempt = stopped(&reclaim)[0];
    let rest = [
        Command::AttemptExited {
            attempt: med_attempt,
            outcome: ExitRecord::Succeeded,
            usage: None,
        },
        cmd(
            "UpdateServiceJob",
            json!({"jobId": "low", "schedulingPriority": 4}),
        ),
        Command::AttemptExited {
            attempt: high[0].1,
            outcome: ExitRecord::Succeeded,
            usage: None,
        },
    ];
    for c in rest {
        assert_eq!(copy.one(c.clone()), w.one(c), "the same actions");
    }
    for id in DEMO_JOBS {
        assert_eq!(copy.describe(id), w.describe(id), "job {id} afterwards");
    }
}

#[test]
fn recovery_starts_from_the_latest_snapshot_and_replays_only_the_batches_after_it() {
    let mut w = World::new();
    demo_setup(&mut w);
    w.submit("high", "QS1", 3);
    w.submit("med", "QS1", 2);
    let seq = w.log.last_seq();
    let text = w.state.encode_image().unwrap();
    w.log
        .write_snapshot(seq, w.now, SNAPSHOT_FORMAT, &text)
        .unwrap();
    assert!(
        w.log.len().unwrap() > 0,
        "the first snapshot keeps the batches before it"
    );
    w.submit("low", "QS1", 1);
    w.submit("qs2", "QS2", 0);

    let mut fresh = fresh_state();
    let r = recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!((r.snapshot, r.batches, r.diverged_own), (Some(seq), 2, 0));
    for id in DEMO_JOBS {
        let q = Query::DescribeServiceJob(serde_json::from_value(json!({"jobId": id})).unwrap());
        let got: Value = serde_json::from_slice(&bytes(&fresh.query(&q, w.now).unwrap())).unwrap();
        assert_eq!(got, w.describe(id), "job {id}");
    }
}

#[test]
fn a_snapshot_in_an_unknown_format_is_refused_with_what_to_do() {
    let w = World::new();
    let text = w.state.encode_image().unwrap();
    let err = decode_image(SNAPSHOT_FORMAT + 1, "9.9.9+later", &text)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("at least as new"), "{err}");
    let err = decode_image(SNAPSHOT_FORMAT, "x", "{")
        .err()
        .expect("refused");
    assert!(err.to_string().contains("cannot be decoded"), "{err}");
}

#[test]
fn a_retired_job_leaves_the_state_the_core_and_its_client_token_and_replays_the_same() {
    let mut w = World::new();
    demo_setup(&mut w);
    let started = launched(&w.submit("done", "QS1", 0));
    w.submit("waiting", "QS3", 0);
    w.one(Command::AttemptExited {
        attempt: started[0].1,
        outcome: ExitRecord::Succeeded,
        usage: None,
    });
    assert_eq!(w.status("done"), "SUCCEEDED");
    let jobs_before = w.state.core.job_count();
    // Nothing is due before the job finished; then exactly the finished job is.
    assert!(w.state.retirable(w.now - 1, 10).is_empty());
    let due: Vec<String> = w
        .state
        .retirable(w.now, 10)
        .iter()
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(due, ["done"]);
    let archived = qm_server::archive::ArchivedJob::of(w.state.retirable(w.now, 10)[0]);
    assert_eq!(
        (archived.status.as_str(), archived.attempts.len()),
        ("SUCCEEDED", 1)
    );

    w.one(Command::RetireJobs {
        job_ids: vec!["done".into(), "waiting".into()],
    });
    let q = Query::DescribeServiceJob(serde_json::from_value(json!({"jobId": "done"})).unwrap());
    assert!(w.state.query(&q, w.now).is_err(), "a retired job is gone");
    assert_ne!(
        w.status("waiting"),
        "SUCCEEDED",
        "an unfinished job is never retired"
    );
    assert_eq!(w.state.core.job_count(), jobs_before - 1);
    assert!(w.state.retirable(w.now, 10).is_empty());

    let mut fresh = fresh_state();
    let r = recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!(r.diverged_own, 0);
    assert!(fresh.query(&q, w.now).is_err());
    assert_eq!(fresh.core.job_count(), jobs_before - 1);
    let copy = rebuilt_from_snapshot(&w);
    assert!(copy.state.retirable(w.now, 10).is_empty());
}

#[test]
fn retired_audit_entries_leave_the_log_keep_their_numbers_and_replay_the_same() {
    let mut w = World::new();
    for i in 0..5 {
        w.one(Command::Audit(AuditEntry {
            at: 0,
            actor: "admin".into(),
            action: "apply".into(),
            summary: format!("e{i}"),
            details: String::new(),
            tags: None,
        }));
    }
    let due = w.state.audit_retirable(3, 10);
    assert_eq!(
        due.iter()
            .map(|a| (a.seq, a.entry.summary.as_str()))
            .collect::<Vec<_>>(),
        [(0, "e0"), (1, "e1")],
        "the oldest beyond the newest 3"
    );
    assert!(
        due.iter().all(|a| a.entry.at > 0 && a.entry.at <= w.now),
        "stamped by the state"
    );
    w.one(Command::RetireAudit { upto: 2 });
    let now = w.now;
    let page = |s: &State, start: usize, max: usize| -> Value {
        serde_json::from_slice(&bytes(&s.query(&Query::Audit { start, max }, now).unwrap()))
            .unwrap()
    };
    let summaries = |v: &Value| -> Vec<String> {
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["summary"].as_str().unwrap().to_string())
            .collect()
    };
    let first = page(&w.state, 0, 2);
    assert_eq!(
        summaries(&first),
        ["e2", "e3"],
        "a start before the first kept begins there"
    );
    assert_eq!(
        (
            first["nextToken"].as_str(),
            first["archivedEntries"].as_u64()
        ),
        (Some("4"), Some(2))
    );
    assert_eq!(
        summaries(&page(&w.state, 4, 2)),
        ["e4"],
        "tokens are entry numbers"
    );
    assert!(w.state.audit_retirable(3, 10).is_empty());
    // Retiring again (a replay, or a retry after a crash) removes nothing more.
    w.one(Command::RetireAudit { upto: 1 });
    assert_eq!(summaries(&page(&w.state, 0, 10)), ["e2", "e3", "e4"]);

    let mut fresh = fresh_state();
    let r = recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!(r.diverged_own, 0);
    assert_eq!(page(&fresh, 0, 10), page(&w.state, 0, 10));
    let copy = rebuilt_from_snapshot(&w);
    assert_eq!(page(&copy.state, 0, 10), page(&w.state, 0, 10));
}

#[test]
fn a_latest_snapshot_that_cannot_be_loaded_falls_back_to_the_one_before_it() {
    let mut w = World::new();
    demo_setup(&mut w);
    w.submit("high", "QS1", 3);
    let text = w.state.encode_image().unwrap();
    w.log
        .write_snapshot(w.log.last_seq(), w.now, SNAPSHOT_FORMAT, &text)
        .unwrap();
    w.submit("med", "QS1", 2);
    // The latest snapshot is garbage (as if a later build's encoding went wrong).
    w.log
        .write_snapshot(w.log.last_seq(), w.now, SNAPSHOT_FORMAT, "{not a snapshot")
        .unwrap();
    w.submit("low", "QS1", 1);
    let mut fresh = fresh_state();
    let r = recover(&mut fresh, &w.log, &this_build()).expect("falls back");
    assert_eq!(
        r.batches, 2,
        "med and low replayed after the older snapshot"
    );
    for id in ["high", "med", "low"] {
        let q = Query::DescribeServiceJob(serde_json::from_value(json!({"jobId": id})).unwrap());
        let got: Value = serde_json::from_slice(&bytes(&fresh.query(&q, w.now).unwrap())).unwrap();
        assert_eq!(got, w.describe(id), "job {id}");
    }
}

/// Job ids ListServiceJobs gives for `request` (every page).
fn listed(state: &State, mut request: Value) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let q = Query::ListServiceJobs(serde_json::from_value(request.clone()).unwrap());
        let page: Value = serde_json::from_slice(&bytes(&state.query(&q, 0).unwrap())).unwrap();
        for j in page["jobSummaryList"].as_array().unwrap() {
            out.push(j["jobId"].as_str().unwrap().to_string());
        }
        match page.get("nextToken").and_then(|t| t.as_str()) {
            Some(t) => request["nextToken"] = json!(t),
            None => return out,
        }
    }
}

#[test]
fn listing_by_queue_and_status_walks_the_index_and_finds_what_a_full_scan_finds() {
    let mut w = World::new();
    demo_setup(&mut w);
    let mut attempts = Vec::new();
    for i in 0..12 {
        let share = ["QS1", "QS2", "QS3"][i % 3];
        attempts.extend(launched(&w.submit(&format!("j{i}"), share, (i % 4) as i32)));
    }
    w.one(Command::AttemptRunning {
        attempt: attempts[0].1,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    });
    w.one(Command::AttemptExited {
        attempt: attempts[1].1,
        outcome: ExitRecord::Succeeded,
        usage: None,
    });
    w.one(cmd(
        "TerminateServiceJob",
        json!({"jobId": "j5", "reason": "not needed"}),
    ));
    w.one(Command::RetireJobs {
        job_ids: vec![attempts[1].0.clone()],
    });
    let copy = rebuilt_from_snapshot(&w);
    for state in [&w.state, &copy.state] {
        for status in ["RUNNABLE", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED"] {
            let scan = listed(state, json!({"jobStatus": status, "maxResults": 2}));
            let indexed = listed(
                state,
                json!({"jobQueue": "jq", "jobStatus": status, "maxResults": 2}),
            );
            assert_eq!(indexed, scan, "{status}");
            for share in ["QS1", "QS2", "QS3"] {
                let f = json!([{"name": "QUOTA_SHARE_NAME", "values": [share]}]);
                let scan = listed(
                    state,
                    json!({"jobStatus": status, "filters": f, "maxResults": 1}),
                );
                let indexed = listed(
                    state,
                    json!({"jobQueue": "jq", "jobStatus": status, "filters": f, "maxResults": 1}),
                );
                assert_eq!(indexed, scan, "{status} {share}");
            }
        }
        let every: usize = [
            "SUBMITTED",
            "PENDING",
            "RUNNABLE",
            "SCHEDULED",
            "STARTING",
            "RUNNING",
            "SUCCEEDED",
            "FAILED",
        ]
        .iter()
        .map(|s| listed(state, json!({"jobQueue": "jq", "jobStatus": s})).len())
        .sum();
        assert_eq!(
            every,
            state.jobs.len(),
            "every job is listed under one status"
        );
        assert_eq!(state.jobs.len(), 11, "12 submitted, one retired");
    }
}

/// Issue 18, item 4: the `qm:` thrash-protection tags of a quota share reach the core. In the
/// demo, QS1 borrows QS2's idle instance with qs1_b; with `qm:min-runtime-seconds` on QS1,
/// QS2's owner job waits with VICTIMS_PROTECTED instead of reclaiming it, until the tag is
/// removed. A value out of range is refused, naming the tag and the range.
#[test]
fn thrash_protection_tags_on_a_quota_share_protect_its_jobs_from_reclaim() {
    let mut w = World::new();
    demo_setup(&mut w);
    let qs1 = "arn:aws:batch:us-east-1:123456789012:job-queue/jq/quota-share/QS1";
    let refused = w.state.apply_batch(
        w.now + 1,
        vec![cmd(
            "TagResource",
            json!({"resourceArn": qs1, "tags": {"qm:min-runtime-seconds": "soon"}}),
        )],
    );
    let err = refused.results[0].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("qm:min-runtime-seconds") && err.contains("0 to 604800"),
        "{err}"
    );
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": qs1, "tags": {"qm:min-runtime-seconds": "3600"}}),
    ));
    w.submit("qs1-a", "QS1", 1);
    w.submit("qs1-b", "QS1", 1);
    assert_eq!(w.status("qs1-b"), "SCHEDULED");
    let actions = w.submit("qs2-owner", "QS2", 1);
    assert!(stopped(&actions).is_empty(), "the borrower is protected");
    let reason = w.describe("qs2-owner")["statusReason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reason.starts_with("VICTIMS_PROTECTED"), "{reason}");
    let actions = w.one(cmd(
        "UntagResource",
        json!({"resourceArn": qs1, "tagKeys": ["qm:min-runtime-seconds"]}),
    ));
    assert_eq!(stopped(&actions).len(), 1, "reclaimed once unprotected");
}

#[test]
fn a_job_backfilled_onto_a_reservation_says_it_is_preemptible_for_that_job() {
    // One share of 2 instances: a1 holds one, big (2) waits past the starvation guard (10
    // minutes) and holds a reservation; small (1) then starts on the free instance, backfilled
    // onto it, and its statusReason names big.
    let mut w = World::new();
    fifo_queue(&mut w, 2, UNIT, 2, json!([]));
    w.one(cmd(
        "CreateQuotaShare",
        json!({"quotaShareName": "A", "jobQueue": "jq",
               "capacityLimits": [{"maxCapacity": 2, "capacityUnit": UNIT}],
               "resourceSharingConfiguration": {"strategy": "RESERVE"},
               "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
    ));
    w.submit("a1", "A", 0);
    let two = payload("big").replace("\"InstanceCount\":1", "\"InstanceCount\":2");
    w.submit_payload("big", "A", 0, two);
    assert_eq!(w.status("big"), "RUNNABLE");
    w.now += 700_000;
    w.submit("small", "A", 0);
    assert_ne!(w.status("small"), "RUNNABLE");
    let reason = w.describe("small")["statusReason"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        reason.starts_with("BACKFILLED - runs on capacity reserved for job big"),
        "{reason}"
    );
    assert_eq!(
        w.describe("a1")["statusReason"],
        "OWN_CAPACITY - runs within quota share A's own limit",
        "a1 is not backfilled"
    );
}

fn share_body(name: &str, limit: u32, strategy: &str) -> Value {
    json!({"quotaShareName": name, "jobQueue": "jq",
           "capacityLimits": [{"maxCapacity": limit, "capacityUnit": UNIT}],
           "resourceSharingConfiguration": {"strategy": strategy},
           "preemptionConfiguration": {"inSharePreemption": "DISABLED"}})
}

fn what_if(w: &World, request: Value) -> Result<Value, String> {
    let q = Query::WhatIf(serde_json::from_value(request).expect("a what-if request"));
    w.state
        .query(&q, w.now)
        .map(|b| serde_json::from_slice(&bytes(&b)).unwrap())
        .map_err(|e| e.to_string())
}

#[test]
fn a_what_if_names_the_job_the_scheduler_would_preempt_and_changes_nothing() {
    // research runs its own two, inference runs one and waits with another, prod (RESERVE) is
    // idle. Moving one instance from research to inference lets the waiting job claim it:
    // prod's idle instance is not room for it, so research's lower-priority job (now borrowed)
    // is the victim.
    let mut w = World::new();
    fifo_queue(&mut w, 4, UNIT, 4, json!([]));
    let shares = |research: u32, inference: u32| {
        vec![
            share_body("research", research, "LEND_AND_BORROW"),
            share_body("inference", inference, "LEND"),
            share_body("prod", 1, "RESERVE"),
        ]
    };
    for s in shares(2, 1) {
        w.one(cmd("CreateQuotaShare", s));
    }
    w.submit("r1", "research", 1);
    w.submit("r2", "research", 2);
    w.submit("i1", "inference", 0);
    w.submit("i2", "inference", 0);
    assert_eq!(w.status("i2"), "RUNNABLE");

    let answer = what_if(&w, json!({"jobQueue": "jq", "quotaShares": shares(1, 2)})).unwrap();
    let decisions = answer["decisions"].as_array().unwrap();
    let preempted: Vec<(&str, &str)> = decisions
        .iter()
        .filter(|d| d["action"] == "PREEMPT")
        .map(|d| {
            (
                d["job"]["jobId"].as_str().unwrap(),
                d["forJob"]["jobId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(preempted, [("r1", "i2")], "{answer}");
    assert_eq!(decisions[0]["at"], answer["now"]);
    // Nothing moved.
    assert_eq!(w.status("r1"), "SCHEDULED");
    assert_eq!(w.status("i2"), "RUNNABLE");

    // Leaving a share out deletes it: its running job is terminated.
    let answer = what_if(
        &w,
        json!({"jobQueue": "jq", "quotaShares": [share_body("research", 2, "LEND_AND_BORROW")]}),
    )
    .unwrap();
    let terminated: Vec<&str> = answer["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "TERMINATE")
        .map(|d| d["job"]["jobId"].as_str().unwrap())
        .collect();
    assert_eq!(terminated, ["i1"], "{answer}");
}

#[test]
fn a_what_if_plays_the_fair_sharing_rules_it_is_given_and_keeps_the_weights_it_is_not() {
    // owner lends 2; a and b own one each; a borrows both of owner's, b waits to borrow.
    let mut w = World::new();
    fifo_queue(&mut w, 4, UNIT, 4, json!([]));
    let shares = || {
        vec![
            share_body("owner", 2, "LEND"),
            share_body("a", 1, "LEND_AND_BORROW"),
            share_body("b", 1, "LEND_AND_BORROW"),
        ]
    };
    for s in shares() {
        w.one(cmd("CreateQuotaShare", s));
    }
    let policy = "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p";
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": policy, "tags": {"qm:idle-assignment": "FAIR_SHARE"}}),
    ));
    for j in ["a1", "a2", "a3"] {
        w.submit(j, "a", 0);
    }
    w.submit("b1", "b", 0);
    w.submit("b2", "b", 0);
    assert_eq!(w.status("b2"), "RUNNABLE");
    let preempted = |answer: &Value| -> Vec<String> {
        answer["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["action"] == "PREEMPT")
            .map(|d| d["job"]["jobId"].as_str().unwrap().to_string())
            .collect()
    };
    // As it is, nothing is preempted; turning fair reclaim on would take one of a's borrowed
    // jobs for b2 at once (a at 2/4 above b's 1/4 after).
    let same = what_if(&w, json!({"jobQueue": "jq", "quotaShares": shares()})).unwrap();
    assert!(preempted(&same).is_empty(), "{same}");
    let reclaim = json!({"jobQueue": "jq", "quotaShares": shares(),
                         "policyTags": {"qm:fair-reclaim": "true"}});
    let answer = what_if(&w, reclaim).unwrap();
    assert_eq!(preempted(&answer).len(), 1, "{answer}");
    assert!(preempted(&answer)[0].starts_with('a'), "{answer}");
    // A weight the server has and the request keeps: a at weight 4 borrows 2 of 4 / 4 =
    // 0.125, below b's 0.25 after: nothing to take. Sent without keepTags, a's tags drop it.
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": "arn:aws:batch:us-east-1:123456789012:job-queue/jq/quota-share/a",
               "tags": {"qm:weight": "4"}}),
    ));
    let mut tagged = shares();
    tagged[1]["tags"] = json!({"qm:min-runtime-seconds": "0"});
    let kept = json!({"jobQueue": "jq", "quotaShares": tagged.clone(),
                      "policyTags": {"qm:fair-reclaim": "true"}, "keepTags": ["qm:weight"]});
    assert!(preempted(&what_if(&w, kept).unwrap()).is_empty());
    let dropped = json!({"jobQueue": "jq", "quotaShares": tagged,
                         "policyTags": {"qm:fair-reclaim": "true"}});
    assert_eq!(preempted(&what_if(&w, dropped).unwrap()).len(), 1);
    // Bad rules are refused as the real operations would refuse them.
    let err = what_if(
        &w,
        json!({"jobQueue": "jq", "quotaShares": shares(), "policyTags": {"qm:fair-reclaim": "yes"}}),
    )
    .unwrap_err();
    assert!(err.contains("policyTags.qm:fair-reclaim"), "{err}");
    let err = what_if(
        &w,
        json!({"jobQueue": "jq", "quotaShares": shares(),
               "groups": [{"name": "a", "limits": {UNIT: 1}}]}),
    )
    .unwrap_err();
    assert!(err.contains("also a quota share"), "{err}");
    // Nothing moved.
    assert_eq!(w.status("b2"), "RUNNABLE");
}

#[test]
fn a_what_if_is_validated_like_the_operations_it_stands_for() {
    let mut w = World::new();
    fifo_queue(&mut w, 4, UNIT, 4, json!([]));
    let mut bad = share_body("research", 1, "LEND_AND_BORROW");
    bad["capacityLimits"] = json!([]);
    let err = what_if(&w, json!({"jobQueue": "jq", "quotaShares": [bad]})).unwrap_err();
    assert!(err.contains("quotaShares[0].capacityLimits"), "{err}");
    let twice = vec![share_body("a", 1, "LEND"), share_body("a", 1, "LEND")];
    let err = what_if(&w, json!({"jobQueue": "jq", "quotaShares": twice})).unwrap_err();
    assert!(
        err.contains("quotaShares[1].quotaShareName") && err.contains("twice"),
        "{err}"
    );
    let err = what_if(&w, json!({"jobQueue": "nope", "quotaShares": []})).unwrap_err();
    assert!(
        err.contains("jobQueue: job queue 'nope' does not exist"),
        "{err}"
    );
}

#[test]
fn a_job_whose_max_runtime_ends_before_the_aged_head_could_start_is_not_backfilled() {
    // As the backfill test above, but a1 and small carry MaxRuntimeInSeconds: big could
    // surely start once a1's hour is up, and small's ten minutes end before that, so small
    // runs EASY-backfilled: not preemptible for big, and its statusReason says nothing of it.
    let mut w = World::new();
    fifo_queue(&mut w, 2, UNIT, 2, json!([]));
    w.one(cmd("CreateQuotaShare", share_body("A", 2, "RESERVE")));
    let bounded = |name: &str, secs: u64| {
        let mut p: Value = serde_json::from_str(&payload(name)).unwrap();
        p["StoppingCondition"] = json!({"MaxRuntimeInSeconds": secs});
        p.to_string()
    };
    w.submit_payload("a1", "A", 0, bounded("a1", 3600));
    let two = payload("big").replace("\"InstanceCount\":1", "\"InstanceCount\":2");
    w.submit_payload("big", "A", 0, two);
    w.now += 700_000;
    w.submit_payload("small", "A", 0, bounded("small", 600));
    assert_ne!(w.status("small"), "RUNNABLE");
    assert_eq!(
        w.describe("small")["statusReason"],
        "OWN_CAPACITY - runs within quota share A's own limit",
        "not backfilled"
    );
    let core = &w.state.core;
    let id = core
        .job_ids()
        .into_iter()
        .find(|&j| core.job(j).unwrap().spec.runtime_limit_ms == Some(600_000))
        .expect("small's core job carries its bound");
    let attempt = core.job(id).unwrap().attempt.expect("small runs");
    assert_eq!(core.attempt(attempt).unwrap().backfill_for, None);
}

/// What an attempt's progress file reported.
fn steps(first: Option<u64>, last: Option<u64>, checkpoint: Option<u64>) -> qm_executor::Steps {
    qm_executor::Steps {
        first,
        last,
        checkpoint,
    }
}

/// A stopping attempt exits as a killed process does; its job's next attempt starts at once:
/// that attempt.
fn killed_and_started_again(w: &mut World, attempt: AttemptId) -> AttemptId {
    let again = w.one(Command::AttemptExited {
        attempt,
        outcome: ExitRecord::Failed {
            reason: "AlgorithmError: killed by SIGTERM".into(),
            retryable: true,
        },
        usage: None,
    });
    launched(&again)[0].1
}

/// The attempt-now answer (`GET /qm/v1/jobs/{job}/attempt`).
fn attempt_now(w: &World, id: &str) -> qm_api::qm::JobAttemptNow {
    let q = Query::RunningAttempt { job_id: id.into() };
    serde_json::from_slice(&bytes(&w.state.query(&q, w.now).expect("attempt now"))).unwrap()
}

#[test]
fn the_steps_of_a_preempted_attempt_classify_the_next_one_and_survive_a_snapshot() {
    let mut w = World::new();
    demo_setup(&mut w);
    let first = launched(&w.submit("learner", "QS2", 0))[0].1;
    w.one(Command::AttemptRunning {
        attempt: first,
        pids: vec![42],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    });
    w.one(Command::AttemptProgress {
        attempt: first,
        steps: steps(Some(0), Some(1200), Some(1000)),
    });
    let now = attempt_now(&w, "learner");
    let running = now.running.expect("running");
    assert_eq!(
        (running.last_step, running.checkpoint_step),
        (Some(1200), Some(1000))
    );
    assert!(now.resumes.is_empty(), "never preempted");

    w.one(Command::PreemptServiceJob {
        job_id: "learner".into(),
        reason: "drill".into(),
    });
    // What it wrote while stopping counts: the executor reads the file once more at the exit.
    w.one(Command::AttemptProgress {
        attempt: first,
        steps: steps(Some(0), Some(1250), Some(1000)),
    });
    let second = killed_and_started_again(&mut w, first);
    let pending = attempt_now(&w, "learner").resumes;
    assert_eq!(
        pending[0].outcome,
        qm_api::qm::ResumeOutcome::Unknown,
        "no step yet"
    );
    w.one(Command::AttemptProgress {
        attempt: second,
        steps: steps(Some(1000), Some(1010), None),
    });
    let record = attempt_now(&w, "learner").resumes[0].clone();
    assert_eq!(record.attempt, 2);
    assert_eq!(record.outcome, qm_api::qm::ResumeOutcome::Resumed);
    assert_eq!(
        (
            record.checkpoint_step,
            record.previous_last_step,
            record.first_step
        ),
        (Some(1000), Some(1250), Some(1000))
    );
    assert_eq!(record.recomputed_steps, Some(250));
    let rebuilt = rebuilt_from_snapshot(&w);
    assert_eq!(attempt_now(&rebuilt, "learner").resumes, vec![record]);
}

#[test]
fn a_class_borrows_once_a_drill_resumed_one_of_its_jobs_until_its_verify_days_pass() {
    let mut w = World::new();
    demo_setup(&mut w);
    let arn = "arn:aws:batch:us-east-1:123456789012";
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": format!("{arn}:job-queue/jq"),
               "tags": {"qm:class.unproven": "interruptible,borrow=after-verified-resume,verify-days=1"}}),
    ));
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": format!("{arn}:job-queue/jq/quota-share/QS1"),
               "tags": {"qm:default-class": "unproven"}}),
    ));
    let first = launched(&w.submit("a", "QS1", 1))[0].1;
    w.submit("b", "QS1", 0);
    let waiting = w.describe("b")["statusReason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(waiting.starts_with("RESUME_UNVERIFIED - "), "{waiting}");

    // A drill of a: its next attempt goes on from the checkpoint, which verifies the class.
    w.one(Command::AttemptRunning {
        attempt: first,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms: None,
    });
    w.one(Command::AttemptProgress {
        attempt: first,
        steps: steps(Some(0), Some(120), Some(100)),
    });
    w.one(Command::PreemptServiceJob {
        job_id: "a".into(),
        reason: "resume check".into(),
    });
    let second = killed_and_started_again(&mut w, first);
    assert_eq!(
        w.status("b"),
        "RUNNABLE",
        "not verified before a reports a step"
    );
    let borrowed = w.one(Command::AttemptProgress {
        attempt: second,
        steps: steps(Some(100), Some(101), None),
    });
    assert_eq!(
        launched(&borrowed)[0].0,
        "b",
        "b borrows QS2's idle instance"
    );
    let expiry = w.state.next_verification_expiry().expect("a verification");
    assert_eq!(expiry, w.now + 86_400_000);
    assert_eq!(
        rebuilt_from_snapshot(&w).state.next_verification_expiry(),
        Some(expiry)
    );

    // A day later the verification has run out: a new job of the class may not borrow.
    w.now = expiry;
    w.one(Command::Wake);
    assert_eq!(w.state.next_verification_expiry(), None);
    w.submit("c", "QS1", 0);
    let waiting = w.describe("c")["statusReason"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(waiting.starts_with("RESUME_UNVERIFIED - "), "{waiting}");
}

/// The core's rules for idle capacity of queue `jq`.
fn fair_rules(state: &State) -> (qm_core::IdleAssignment, bool, Vec<qm_core::GroupSpec>) {
    let spec = state.core.queue_spec("jq").expect("queue jq");
    (spec.idle_assignment, spec.fair_reclaim, spec.groups)
}

#[test]
fn policy_and_share_tags_and_group_definitions_reach_the_core_and_survive_replay_and_snapshot() {
    let mut w = World::new();
    demo_setup(&mut w);
    let policy = "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p";
    let share =
        |s: &str| format!("arn:aws:batch:us-east-1:123456789012:job-queue/jq/quota-share/{s}");
    assert_eq!(
        fair_rules(&w.state),
        (qm_core::IdleAssignment::Fifo, false, vec![])
    );
    // A bad value changes nothing and names the tag.
    let refused = w.state.apply_batch(
        w.now + 1,
        vec![cmd(
            "TagResource",
            json!({"resourceArn": policy, "tags": {"qm:idle-assignment": "fair"}}),
        )],
    );
    let err = refused.results[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("tags.qm:idle-assignment is 'fair'"), "{err}");
    assert!(w.state.policies["p"].tags.is_empty());

    w.one(cmd(
        "TagResource",
        json!({"resourceArn": policy, "tags": {"qm:idle-assignment": "FAIR_SHARE", "qm:fair-reclaim": "true"}}),
    ));
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": share("QS1"), "tags": {"qm:weight": "4", "qm:group": "research"}}),
    ));
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": share("QS2"), "tags": {"qm:group": "research"}}),
    ));
    w.one(cmd(
        "TagResource",
        json!({"resourceArn": share("QS3"), "tags": {"qm:group": "ops"}}),
    ));
    // Defined groups come first, in the order given; `ops` is only named by a tag; `empty`
    // has no member, which the core has no use for.
    let groups: qm_api::qm::QueueGroups = serde_json::from_value(json!({"groups": [
        {"name": "research", "limits": {UNIT: 2}, "weight": 3},
        {"name": "empty"},
    ]}))
    .unwrap();
    // Only admins define groups.
    let denied = w.state.apply_batch(
        w.now + 1,
        vec![Command::As {
            caller: qm_server::command::Caller {
                name: "bob".into(),
                groups: vec![],
                admin: false,
            },
            command: Box::new(Command::PutQueueGroups {
                queue: "jq".into(),
                groups: groups.clone(),
            }),
            audit: None,
        }],
    );
    let err = denied.results[0].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("bob may not change groups of quota shares"),
        "{err}"
    );
    w.one(Command::PutQueueGroups {
        queue: "jq".into(),
        groups,
    });
    let group =
        |name: &str, shares: &[&str], limits: &[(&str, u32)], weight: u32| qm_core::GroupSpec {
            name: name.into(),
            shares: shares.iter().map(|s| s.to_string()).collect(),
            limits: limits.iter().map(|(u, n)| (u.to_string(), *n)).collect(),
            weight,
        };
    let want = (
        qm_core::IdleAssignment::FairShare,
        true,
        vec![
            group("research", &["QS1", "QS2"], &[(UNIT, 2)], 3),
            group("ops", &["QS3"], &[], 1),
        ],
    );
    assert_eq!(fair_rules(&w.state), want);
    // `qm shares` and the dashboard show every group, `empty` too.
    let usage: Value =
        serde_json::from_slice(&bytes(&w.state.query(&Query::Usage, w.now).unwrap())).unwrap();
    let shown: Vec<&str> = usage["queues"][0]["fairness"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(shown, ["research", "ops", "empty"]);
    assert_eq!(w.state.core.fairness("jq").unwrap().shares[0].weight, 4);
    // An environment change keeps the rules.
    w.one(cmd(
        "UpdateServiceEnvironment",
        json!({"serviceEnvironment": "se", "capacityLimits": [{"maxCapacity": 3, "capacityUnit": UNIT}]}),
    ));
    assert_eq!(fair_rules(&w.state), want);

    // Replayed from the log, and rebuilt from a snapshot: the same rules.
    let mut fresh = fresh_state();
    let r = recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!(r.diverged_own, 0);
    assert_eq!(fair_rules(&fresh), want);
    let mut copy = rebuilt_from_snapshot(&w);
    assert_eq!(fair_rules(&copy.state), want);

    // Untagging goes back to the defaults; a share that leaves its group leaves it.
    copy.one(cmd(
        "UntagResource",
        json!({"resourceArn": policy, "tagKeys": ["qm:idle-assignment", "qm:fair-reclaim"]}),
    ));
    copy.one(cmd(
        "UntagResource",
        json!({"resourceArn": share("QS3"), "tagKeys": ["qm:group"]}),
    ));
    let (mode, reclaim, groups) = fair_rules(&copy.state);
    assert_eq!((mode, reclaim), (qm_core::IdleAssignment::Fifo, false));
    assert_eq!(groups, want.2[..1]);
}

#[test]
fn started_at_is_when_the_processes_were_spawned_within_the_dispatch_and_the_report() {
    let mut w = World::new();
    demo_setup(&mut w);
    let a = w.submit("high", "QS1", 3);
    let dispatched = w.now;
    let b = w.submit("med", "QS1", 2);
    let (high, med) = (launched(&a)[0].1, launched(&b)[0].1);
    let running = |attempt, at_ms| Command::AttemptRunning {
        attempt,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms,
    };
    // Spawned 300 ms after its dispatch, reported (logged) 1.7 s later.
    w.one(running(high, Some(dispatched + 300)));
    assert_eq!(w.describe("high")["startedAt"], dispatched + 300);
    // A clock ahead of the server's is not believed past the report's batch.
    w.one(running(med, Some(w.now + 60_000)));
    assert_eq!(w.describe("med")["startedAt"], w.now);
}

#[test]
fn a_spawn_time_before_the_dispatch_counts_as_the_dispatch() {
    let mut w = World::new();
    demo_setup(&mut w);
    let a = w.submit("high", "QS1", 3);
    let dispatched = w.now;
    w.one(Command::AttemptRunning {
        attempt: launched(&a)[0].1,
        pids: vec![],
        gpus: vec![],
        supervisor: None,
        at_ms: Some(5),
    });
    assert_eq!(w.describe("high")["startedAt"], dispatched);
}

#[test]
fn a_tag_change_and_its_audit_entry_are_one_logged_command_with_the_tags_before_and_after() {
    let mut w = World::new();
    demo_setup(&mut w);
    let arn = "arn:aws:batch:us-east-1:123456789012:job-queue/jq/quota-share/QS1";
    let change = |command: Command, action: &str| Command::As {
        caller: qm_server::command::Caller {
            name: "admin@ops".into(),
            groups: vec![],
            admin: true,
        },
        command: Box::new(command),
        audit: Some(AuditEntry {
            at: 0,
            actor: "admin@ops".into(),
            action: action.into(),
            summary: "submitters".into(),
            details: String::new(),
            tags: None,
        }),
    };
    let tag = change(
        cmd(
            "TagResource",
            json!({"resourceArn": arn, "tags": {"qm:submitters": "team-a"}}),
        ),
        "TagResource",
    );
    let logged_before = w.log.len().unwrap();
    w.one(tag);
    // One batch, one command: the change and its entry cannot be parted by a crash.
    assert_eq!(w.log.len().unwrap(), logged_before + 1);
    let mut last = None;
    w.log
        .replay(&mut |b| {
            last = Some(b.commands);
            Ok(())
        })
        .unwrap();
    let logged: Vec<Value> = serde_json::from_str(&last.unwrap()).unwrap();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(
        logged[0]["body"]["audit"]["actor"], "admin@ops",
        "{logged:?}"
    );
    w.one(change(
        cmd(
            "UntagResource",
            json!({"resourceArn": arn, "tagKeys": ["qm:submitters"]}),
        ),
        "UntagResource",
    ));
    let entries: Vec<_> = w.state.audit.iter().rev().take(2).rev().cloned().collect();
    let tags: Vec<_> = entries.iter().map(|e| e.tags.clone().unwrap()).collect();
    assert_eq!(tags[0].resource, arn);
    assert!(tags[0].before.is_empty());
    assert_eq!(tags[0].after["qm:submitters"], "team-a");
    assert_eq!(tags[1].before, tags[0].after);
    assert!(tags[1].after.is_empty());
    assert!(entries.iter().all(|e| e.actor == "admin@ops" && e.at > 0));
    // Replay restores the changes and their entries together.
    let mut fresh = fresh_state();
    recover(&mut fresh, &w.log, &this_build()).unwrap();
    assert_eq!(fresh.audit, w.state.audit);
}

#[test]
fn jobs_share_one_copy_of_their_queue_and_share_names_before_and_after_a_snapshot() {
    let mut w = World::new();
    demo_setup(&mut w);
    w.submit("one", "QS1", 1);
    w.submit("two", "QS1", 2);
    let same = |w: &World| {
        let [a, b]: [&JobRec; 2] = w
            .state
            .jobs
            .values()
            .map(|r| &**r)
            .collect::<Vec<_>>()
            .try_into()
            .expect("two jobs");
        std::sync::Arc::ptr_eq(&a.queue, &b.queue) && std::sync::Arc::ptr_eq(&a.share, &b.share)
    };
    assert!(same(&w));
    assert!(same(&rebuilt_from_snapshot(&w)));
}
