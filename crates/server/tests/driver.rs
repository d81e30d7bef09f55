//! The driver with a fake executor and a store that journals what it is asked: the order of
//! work (a batch is durable before its decisions are carried out, and before clients hear of
//! it), what a failed commit does, recovery from what the driver committed, and shutdown.
//!
//! The fake executor records every start and stop in the same journal as the store's appends
//! and answers like a real one would, through the driver's event channel: a start is followed
//! by `Running`, a stop by `Exited`. The store is a real SQLite log in a temporary directory.

use qm_core::AttemptId;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qm_api::{ApiError, Arns};
use qm_executor::{ExecError, ExecEvent, Exit, LaunchSpec};
use qm_server::command::{Command, ExitRecord};
use qm_server::driver::{recover, Cadence, Channels, Driver, Envelope, Snapshotter};
use qm_server::error::ServerError;
use qm_server::exec::Execute;
use qm_server::request::{Answer, Query, Request};
use qm_server::state::State;
use qm_store::{Batch, Log, Snapshot, SqliteLog, StoreError, Writer};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

const UNIT: &str = "ml.g5.xlarge";

type Journal = Arc<Mutex<Vec<String>>>;

fn note(j: &Journal, line: String) {
    j.lock().unwrap().push(line);
}

/// A store that journals each append (and can be told to fail the next ones).
struct JournalLog {
    inner: SqliteLog,
    journal: Journal,
    fail: Arc<AtomicBool>,
}

impl Log for JournalLog {
    fn set_writer(&mut self, writer: &Writer) -> Result<(), StoreError> {
        self.inner.set_writer(writer)
    }
    fn append(&mut self, at_ms: i64, commands: &str, decisions: &str) -> Result<u64, StoreError> {
        if self.fail.load(Ordering::SeqCst) {
            note(&self.journal, "append failed".into());
            return Err(StoreError::Replay {
                seq: 0,
                message: "the disk is full (injected)".into(),
            });
        }
        let seq = self.inner.append(at_ms, commands, decisions)?;
        note(&self.journal, format!("append {seq} {decisions}"));
        Ok(seq)
    }
    fn replay(&self, f: &mut dyn FnMut(Batch) -> Result<(), String>) -> Result<u64, StoreError> {
        self.inner.replay(f)
    }
    fn len(&self) -> Result<u64, StoreError> {
        self.inner.len()
    }
    fn last_seq(&self) -> u64 {
        self.inner.last_seq()
    }
    fn snapshots(&self) -> Result<Vec<Snapshot>, StoreError> {
        self.inner.snapshots()
    }
    fn write_snapshot(
        &mut self,
        seq: u64,
        at_ms: i64,
        format: u32,
        state: &str,
    ) -> Result<(), StoreError> {
        self.inner.write_snapshot(seq, at_ms, format, state)
    }
}

/// An executor that records what it is asked and reports like a real one. It gets launches
/// ready as the local executor does (`ready N`), and starts them when released (`start N`).
struct Fake {
    journal: Journal,
    events: mpsc::UnboundedSender<ExecEvent>,
}

impl Execute for Fake {
    fn capacity(&self) -> BTreeMap<String, u32> {
        [(UNIT.to_string(), 2)].into()
    }
    fn ready(&self, spec: LaunchSpec) -> Result<Option<LaunchSpec>, ExecError> {
        note(&self.journal, format!("ready {}", spec.attempt));
        Ok(None)
    }
    fn release(&self, attempt: AttemptId) {
        let _ = self.start_now(attempt);
    }
    fn start(&self, spec: LaunchSpec) -> Result<(), ExecError> {
        self.start_now(spec.attempt)
    }
    fn stop(&self, attempt: AttemptId) {
        note(&self.journal, format!("stop {attempt}"));
        let _ = self.events.send(ExecEvent::Exited {
            attempt,
            outcome: Exit::Failed {
                reason: "stopped".into(),
                retryable: true,
            },
            at_ms: 0,
            usage: None,
        });
    }
    fn recorded_outcome(&self, _: &str, _: u32) -> Option<Exit> {
        None
    }
    fn job_dir(&self, job_id: &str) -> PathBuf {
        PathBuf::from("/nonexistent").join(job_id)
    }
    async fn reconcile(&self, state: &State) -> Result<Vec<Command>, ServerError> {
        Ok(state
            .live_attempts()
            .into_iter()
            .map(|(attempt, _)| Command::AttemptExited {
                attempt,
                outcome: ExitRecord::Lost {
                    reason: "lost with the server".into(),
                    max_in_a_row: None,
                },
                usage: None,
            })
            .collect())
    }
}

impl Fake {
    fn start_now(&self, attempt: AttemptId) -> Result<(), ExecError> {
        note(&self.journal, format!("start {attempt}"));
        let _ = self.events.send(ExecEvent::Running {
            attempt,
            pids: vec![],
            gpus: vec![],
            log_dir: PathBuf::new(),
            at_ms: 0,
            supervisor: None,
        });
        Ok(())
    }
}

struct Running {
    requests: mpsc::Sender<Envelope>,
    journal: Journal,
    fail: Arc<AtomicBool>,
    done: tokio::task::JoinHandle<Result<(), ServerError>>,
    dir: tempfile::TempDir,
}

fn fresh_state() -> State {
    State::new(Arns::new("us-east-1", "123456789012"), Default::default())
}

fn open_log(dir: &std::path::Path) -> SqliteLog {
    let mut log = SqliteLog::open(&dir.join("qm.db")).expect("open the store");
    log.set_writer(&qm_server::writer()).expect("writer");
    log
}

/// A driver over a fresh store in a temp dir, its fake executor sharing the store's journal.
async fn start() -> Running {
    let dir = tempfile::tempdir().unwrap();
    let journal: Journal = Arc::default();
    let fail = Arc::new(AtomicBool::new(false));
    let log = JournalLog {
        inner: open_log(dir.path()),
        journal: journal.clone(),
        fail: fail.clone(),
    };
    let snapshot_log = JournalLog {
        inner: open_log(dir.path()),
        journal: journal.clone(),
        fail: Arc::new(AtomicBool::new(false)),
    };
    let (events_tx, events) = mpsc::unbounded_channel();
    let (requests, requests_rx) = mpsc::channel(64);
    let fake = Fake {
        journal: journal.clone(),
        events: events_tx.clone(),
    };
    let mut driver = Driver::new(
        fresh_state(),
        log,
        fake,
        Channels {
            requests: requests_rx,
            events,
            events_tx,
        },
        Snapshotter::new(snapshot_log),
        dir.path().to_path_buf(),
        Cadence {
            tick: Duration::from_millis(20),
            snapshot_every: 0,
            since_snapshot: 0,
            retention: Duration::from_secs(86_400),
            delete_job_dirs: false,
            max_lost_attempts: 3,
            audit_entries: 100_000,
        },
    );
    driver.reconcile().await.expect("reconcile");
    let done = tokio::spawn(driver.run());
    Running {
        requests,
        journal,
        fail,
        done,
        dir,
    }
}

impl Running {
    async fn ask(&self, request: Request) -> Result<Answer, ApiError> {
        let (reply, rx) = oneshot::channel();
        self.requests
            .send(Envelope { request, reply })
            .await
            .expect("the driver runs");
        rx.await.expect("an answer")
    }

    async fn command(&self, op: &str, body: Value) -> Result<Value, ApiError> {
        let c: Command = serde_json::from_value(json!({"op": op, "body": body})).unwrap();
        let body = self
            .ask(Request::Command(c))
            .await?
            .into_reply()?
            .to_json()?;
        Ok(serde_json::from_slice(&body).unwrap_or(Value::Null))
    }

    async fn jobs(&self) -> Value {
        let q = Query::ListServiceJobs(
            serde_json::from_value(json!({"jobQueue": "jq", "jobStatus": "RUNNING"})).unwrap(),
        );
        let body = self
            .ask(Request::Query(q))
            .await
            .unwrap()
            .into_reply()
            .and_then(|r| r.to_json())
            .unwrap();
        serde_json::from_slice(&body).unwrap()
    }

    fn journal(&self) -> Vec<String> {
        self.journal.lock().unwrap().clone()
    }

    async fn wait_for(&self, what: &str, f: impl Fn(&[String]) -> bool) {
        for _ in 0..500 {
            if f(&self.journal()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what}: {:?}", self.journal());
    }

    async fn setup(&self) {
        for (op, body) in [
            (
                "CreateSchedulingPolicy",
                json!({"name": "p", "quotaSharePolicy": {"idleResourceAssignmentStrategy": "FIFO"}}),
            ),
            (
                "CreateServiceEnvironment",
                json!({"serviceEnvironmentName": "se", "serviceEnvironmentType": "SAGEMAKER_TRAINING",
                "capacityLimits": [{"maxCapacity": 2, "capacityUnit": UNIT}]}),
            ),
            (
                "CreateJobQueue",
                json!({"jobQueueName": "jq", "jobQueueType": "SAGEMAKER_TRAINING", "priority": 1,
                "schedulingPolicyArn": "arn:aws:batch:us-east-1:123456789012:scheduling-policy/p",
                "serviceEnvironmentOrder": [{"order": 1, "serviceEnvironment": "se"}]}),
            ),
            (
                "CreateQuotaShare",
                json!({"quotaShareName": "A", "jobQueue": "jq",
                "capacityLimits": [{"maxCapacity": 2, "capacityUnit": UNIT}],
                "resourceSharingConfiguration": {"strategy": "LEND"},
                "preemptionConfiguration": {"inSharePreemption": "DISABLED"}}),
            ),
        ] {
            self.command(op, body).await.expect("setup");
        }
    }

    async fn submit(&self, name: &str) -> Result<String, ApiError> {
        let payload = json!({
            "TrainingJobName": name, "RoleArn": "arn:aws:iam::123456789012:role/x",
            "AlgorithmSpecification": {"TrainingInputMode": "File", "ContainerEntrypoint": ["true"]},
            "ResourceConfig": {"InstanceType": UNIT, "InstanceCount": 1, "VolumeSizeInGB": 1},
            "OutputDataConfig": {"S3OutputPath": "s3://b/o"}
        });
        let c = Command::SubmitServiceJob {
            job_id: format!("job-{name}"),
            request: serde_json::from_value(json!({
                "jobName": name, "jobQueue": "jq", "serviceJobType": "SAGEMAKER_TRAINING",
                "quotaShareName": "A", "serviceRequestPayload": payload.to_string()
            }))
            .unwrap(),
            principal: None,
        };
        let body = self
            .ask(Request::Command(c))
            .await?
            .into_reply()?
            .to_json()?;
        let v: Value = serde_json::from_slice(&body).unwrap();
        Ok(v["jobId"].as_str().unwrap().to_string())
    }

    /// Closes the request channel and waits for the driver to stop.
    async fn stop(self) -> (Result<(), ServerError>, Vec<String>, tempfile::TempDir) {
        let Running {
            requests,
            journal,
            done,
            dir,
            ..
        } = self;
        drop(requests);
        let r = done.await.expect("the driver task");
        let j = journal.lock().unwrap().clone();
        (r, j, dir)
    }
}

fn position(journal: &[String], f: impl Fn(&str) -> bool) -> usize {
    journal
        .iter()
        .position(|l| f(l))
        .unwrap_or_else(|| panic!("not in the journal: {journal:?}"))
}

#[tokio::test(flavor = "current_thread")]
async fn a_start_is_carried_out_only_after_the_batch_deciding_it_is_durable() {
    let d = start().await;
    d.setup().await;
    let id = d.submit("one").await.expect("submitted");
    d.wait_for("the attempt to start", |j| {
        j.iter().any(|l| l.starts_with("start "))
    })
    .await;
    let j = d.journal();
    let started = position(&j, |l| l.starts_with("start "));
    let attempt = AttemptId(j[started]["start ".len()..].parse().unwrap());
    // The batch whose decisions hold the Start of this attempt was appended before it.
    let decided = position(&j, |l| {
        l.starts_with("append ")
            && l.contains("\"Start\"")
            && l.contains(&format!("\"attempt\":{attempt}"))
    });
    assert!(decided < started, "{j:?}");
    // Got ready while that batch was written: nothing ran before it was durable.
    let readied = position(&j, |l| l == format!("ready {attempt}"));
    assert!(readied < decided, "{j:?}");
    // And the client's answer came from a durable batch: the job is in the log.
    let log = open_log(d.dir.path());
    let mut seen = false;
    log.replay(&mut |b| {
        seen |= b.commands.contains(&id);
        Ok(())
    })
    .unwrap();
    assert!(seen, "the submission of {id} is in the log");
    let (r, _, _) = d.stop().await;
    r.expect("a clean stop");
}

#[tokio::test(flavor = "current_thread")]
async fn a_batch_that_cannot_be_committed_is_refused_and_nothing_of_it_is_carried_out() {
    let d = start().await;
    d.setup().await;
    d.fail.store(true, Ordering::SeqCst);
    let err = d.submit("doomed").await.expect_err("a ServerException");
    assert_eq!(err.error_type(), "ServerException", "{err}");
    assert!(err.message().contains("durable"), "{err}");
    let (r, j, _) = d.stop().await;
    assert!(
        matches!(r, Err(ServerError::Store(_))),
        "the driver stops: {r:?}"
    );
    assert!(
        !j.iter().any(|l| l.starts_with("start ")),
        "nothing started: {j:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn recovery_rebuilds_exactly_what_the_driver_committed() {
    let d = start().await;
    d.setup().await;
    for name in ["a", "b", "c"] {
        d.submit(name).await.expect("submitted");
    }
    d.wait_for("two attempts running", |j| {
        j.iter().filter(|l| l.starts_with("start ")).count() == 2
    })
    .await;
    // Let the Running reports be applied.
    let mut running = Value::Null;
    for _ in 0..200 {
        running = d.jobs().await;
        if running["jobSummaryList"]
            .as_array()
            .is_some_and(|l| l.len() == 2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        running["jobSummaryList"].as_array().map(Vec::len),
        Some(2),
        "{running}"
    );
    let (r, j, dir) = d.stop().await;
    r.expect("a clean stop");

    // Stopping the server stops the server: the attempts go on (their supervisors outlive it),
    // nothing asked them to stop.
    assert!(!j.iter().any(|l| l.starts_with("stop ")), "{j:?}");

    // A fresh state recovered from the store holds the same two attempts as live, and a
    // third job waiting: the next start reconciles them (adopts them where they run).
    let log = open_log(dir.path());
    let mut state = fresh_state();
    let r = recover(&mut state, &log, &qm_server::writer()).expect("recover");
    assert_eq!((r.diverged_own, r.refused_other), (0, 0));
    assert_eq!(state.live_attempts().len(), 2);
    let q = Query::ListServiceJobs(
        serde_json::from_value(json!({"jobQueue": "jq", "jobStatus": "RUNNING"})).unwrap(),
    );
    let listed: Value =
        serde_json::from_slice(&state.query(&q, 0).unwrap().to_json().unwrap()).unwrap();
    let ids = |v: &Value| {
        let mut ids: Vec<String> = v["jobSummaryList"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["jobId"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&listed), ids(&running));
}
