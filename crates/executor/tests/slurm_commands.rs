//! The Slurm executor against stand-in `sbatch`, `squeue`, `sinfo` and `scancel` scripts (in
//! `executor.slurm.bin_dir`): the situations a real cluster cannot be made to produce on
//! demand — an `sbatch` that times out after slurmctld accepted the job, a refusal, the jobs a
//! previous server left behind. The real cluster is exercised end to end in
//! tests/e2e/test_slurm.py.

use qm_executor::AttemptId;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use qm_executor::slurm::{AdoptSpec, Adopted, SlurmConfig, SlurmExecutor, SlurmInstance};
use qm_executor::{ExecEvent, Exit, LaunchSpec};
use tokio::sync::mpsc;

const TAG: &str = "t1";

/// A directory with the stand-in commands and the files they read and write:
/// `jobs.json` (what squeue prints), `sbatch.mode`, `sbatch.log`, `scancel.log`.
struct FakeSlurm {
    dir: tempfile::TempDir,
}

impl FakeSlurm {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display().to_string();
        let script = |name: &str, body: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/bash\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        script(
            "squeue",
            &format!(
                "if [ -e {d}/squeue.fail ]; then echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1; fi\ncat {d}/jobs.json"
            ),
        );
        script(
            "sinfo",
            "printf 'n1|idle|gpu|(null)\\nn2|idle|gpu|(null)\\n'",
        );
        script("scancel", &format!("echo \"$*\" >> {d}/scancel.log"));
        // sbatch: records its call; by mode, accepts (prints an id and lists the job), refuses,
        // or accepts and then reports a timeout, as a client whose answer was lost does.
        script(
            "sbatch",
            &format!(
                r#"echo "$*" >> {d}/sbatch.log
comment=""
for a in "$@"; do case "$a" in --comment=*) comment=${{a#--comment=}};; esac; done
mode=$(cat {d}/sbatch.mode 2>/dev/null || echo ok)
id=$((100 + $(wc -l < {d}/sbatch.log)))
add() {{ python3 - "$1" "$2" {d}/jobs.json <<'PY'
import json, sys
id, comment, path = sys.argv[1:]
doc = json.load(open(path))
doc["jobs"].append({{"job_id": int(id), "name": "x", "comment": comment, "job_state": "PENDING", "exit_code": 0, "nodes": ""}})
json.dump(doc, open(path, "w"))
PY
}}
case "$mode" in
  ok) add $id "$comment"; echo $id ;;
  refuse) echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2; exit 1 ;;
  lost-answer) add $id "$comment"; echo ok > {d}/sbatch.mode; echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1 ;;
esac"#
            ),
        );
        let fake = FakeSlurm { dir };
        fake.set_jobs("[]");
        fake
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn set_jobs(&self, jobs: &str) {
        std::fs::write(self.path("jobs.json"), format!(r#"{{"jobs": {jobs}}}"#)).unwrap();
    }

    fn lines(&self, name: &str) -> Vec<String> {
        std::fs::read_to_string(self.path(name))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn executor(&self, shared: &Path) -> (SlurmExecutor, mpsc::UnboundedReceiver<ExecEvent>) {
        let mut cfg = SlurmConfig::new(
            shared,
            vec![SlurmInstance {
                instance_type: "ml.g5.xlarge".into(),
                partition: Some("gpu".into()),
                feature: None,
                gpus_per_instance: 1,
            }],
            TAG,
        );
        cfg.bin_dir = Some(self.dir.path().to_path_buf());
        cfg.poll = Duration::from_millis(100);
        cfg.stop_grace = Duration::from_millis(200);
        let (tx, rx) = mpsc::unbounded_channel();
        (SlurmExecutor::new(cfg, tx).unwrap(), rx)
    }
}

fn spec(attempt: u64, job: &str) -> LaunchSpec {
    LaunchSpec::new(AttemptId(attempt), job, "ml.g5.xlarge", vec!["true".into()])
}

fn marker(job: &str, n: u32, attempt: u64) -> String {
    format!("qm/{TAG}/{job}/{n}/{attempt}")
}

fn job_json(id: u64, comment: &str, state: &str, node: &str) -> String {
    format!(
        r#"{{"job_id": {id}, "name": "x", "comment": "{comment}", "job_state": "{state}", "exit_code": 0, "nodes": "{node}"}}"#
    )
}

async fn next_event(rx: &mut mpsc::UnboundedReceiver<ExecEvent>) -> ExecEvent {
    tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("an event within 20 s")
        .expect("the channel is open")
}

async fn exited(rx: &mut mpsc::UnboundedReceiver<ExecEvent>, attempt: u64) -> Exit {
    loop {
        if let ExecEvent::Exited {
            attempt: a,
            outcome,
            ..
        } = next_event(rx).await
        {
            if a == AttemptId(attempt) {
                return outcome;
            }
        }
    }
}

#[tokio::test]
async fn a_submit_whose_answer_was_lost_is_found_by_its_comment_and_not_submitted_again() {
    let fake = FakeSlurm::new();
    let shared = tempfile::tempdir().unwrap();
    let (ex, mut rx) = fake.executor(shared.path());
    ex.adopt(Vec::new()).await.unwrap();
    std::fs::write(fake.path("sbatch.mode"), "lost-answer").unwrap();
    ex.start(spec(1, "job-a")).unwrap();
    // The job exists (PENDING) although sbatch failed: the executor must follow it.
    loop {
        if let ExecEvent::Starting {
            attempt: AttemptId(1),
            ..
        } = next_event(&mut rx).await
        {
            break;
        }
    }
    assert_eq!(fake.lines("sbatch.log").len(), 1, "sbatch ran once");
    fake.set_jobs(&format!(
        "[{}]",
        job_json(101, &marker("job-a", 1, 1), "COMPLETED", "n1")
    ));
    assert_eq!(exited(&mut rx, 1).await, Exit::Succeeded);
    assert!(
        fake.lines("scancel.log").is_empty(),
        "{:?}",
        fake.lines("scancel.log")
    );
}

#[tokio::test]
async fn a_configuration_refusal_fails_the_job_without_retries_and_names_the_keys() {
    let fake = FakeSlurm::new();
    let shared = tempfile::tempdir().unwrap();
    let (ex, mut rx) = fake.executor(shared.path());
    ex.adopt(Vec::new()).await.unwrap();
    std::fs::write(fake.path("sbatch.mode"), "refuse").unwrap();
    ex.start(spec(1, "job-a")).unwrap();
    match exited(&mut rx, 1).await {
        Exit::Failed { reason, retryable } => {
            assert!(!retryable);
            assert!(
                reason.contains("Invalid partition") && reason.contains("executor.slurm.instance"),
                "{reason}"
            );
        }
        o => panic!("{o:?}"),
    }
}

#[tokio::test]
async fn adoption_follows_running_jobs_records_ended_ones_and_carries_on_a_stop() {
    let fake = FakeSlurm::new();
    let shared = tempfile::tempdir().unwrap();
    fake.set_jobs(&format!(
        "[{}, {}, {}]",
        job_json(7, &marker("job-a", 1, 1), "RUNNING", "n1"),
        job_json(8, &marker("job-b", 2, 2), "COMPLETED", "n2"),
        // Attempt 4's comment names another job: not attempt 4 of job-d.
        job_json(9, &marker("job-x", 1, 4), "RUNNING", "n2"),
    ));
    let (ex, mut rx) = fake.executor(shared.path());
    let adopt = |attempt, job: &str, n, stopping| {
        let mut s = spec(attempt, job);
        s.attempt_number = n;
        AdoptSpec {
            spec: s,
            running_since_ms: Some(1),
            stopping,
        }
    };
    let mut got = ex
        .adopt(vec![
            adopt(1, "job-a", 1, true),
            adopt(2, "job-b", 2, false),
            adopt(3, "job-c", 1, false),
            adopt(4, "job-d", 1, false),
        ])
        .await
        .unwrap();
    got.sort_by_key(|(a, _)| *a);
    assert_eq!(
        got,
        vec![
            (AttemptId(1), Adopted::Running),
            (AttemptId(2), Adopted::Ended(Exit::Succeeded)),
            (AttemptId(3), Adopted::Unknown),
            (AttemptId(4), Adopted::Unknown),
        ]
    );
    assert_eq!(ex.recorded_outcome("job-b", 2), Some(Exit::Succeeded));
    assert_eq!(
        ex.capacity()["ml.g5.xlarge"],
        1,
        "n1 is held by our adopted attempt; n2 by job 9, whose attempt is not ours to run"
    );
    // The stop the previous server began goes on: SIGTERM, then (after the grace) SIGKILL and
    // scancel. Job 9 carries our tag for an attempt this server does not run: cancelled.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let log = fake.lines("scancel.log");
        if log.iter().any(|l| l == "--signal=TERM 7") && log.iter().any(|l| l == "7") {
            assert!(
                log.iter().any(|l| l.split(' ').any(|w| w == "9")),
                "{log:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "scancel calls: {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.set_jobs(&format!(
        "[{}]",
        job_json(7, &marker("job-a", 1, 1), "CANCELLED", "n1")
    ));
    assert!(matches!(exited(&mut rx, 1).await, Exit::Failed { .. }));
}

#[tokio::test]
async fn a_stop_goes_out_while_the_job_list_cannot_be_read() {
    let fake = FakeSlurm::new();
    let shared = tempfile::tempdir().unwrap();
    fake.set_jobs(&format!(
        "[{}]",
        job_json(7, &marker("job-a", 1, 1), "RUNNING", "n1")
    ));
    let (ex, mut rx) = fake.executor(shared.path());
    let got = ex
        .adopt(vec![AdoptSpec {
            spec: spec(1, "job-a"),
            running_since_ms: Some(1),
            stopping: false,
        }])
        .await
        .unwrap();
    assert_eq!(got, vec![(AttemptId(1), Adopted::Running)]);
    std::fs::write(fake.path("squeue.fail"), "").unwrap();
    ex.stop(AttemptId(1));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let log = fake.lines("scancel.log");
        if log.iter().any(|l| l == "--signal=TERM 7") && log.iter().any(|l| l == "7") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "scancel calls: {log:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The exit is reported only once Slurm can be read again and says the job is gone.
    assert!(rx.try_recv().is_err());
    std::fs::remove_file(fake.path("squeue.fail")).unwrap();
    fake.set_jobs(&format!(
        "[{}]",
        job_json(7, &marker("job-a", 1, 1), "CANCELLED", "n1")
    ));
    assert!(matches!(exited(&mut rx, 1).await, Exit::Failed { .. }));
}
