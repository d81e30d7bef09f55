//! Checkpoints: the directory survives attempts, writes during an attempt are reported, and an
//! old checkpoint is not new work. Progress files: read at the scan period, coalesced, and
//! read once more before `Exited`.

use qm_executor::AttemptId;
use std::fs;

use qm_executor::{ExecEvent, Exit, Steps};

use crate::world::{sh, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_written_during_the_attempt_is_reported() {
    let mut w = World::new();
    w.exec
        .start(sh(
            1,
            "job-ckpt",
            "sleep 0.2; echo step-1 > \"$SM_CHECKPOINT_DIR/model.ckpt\"; sleep 1000",
        ))
        .unwrap();
    let at_ms = w
        .wait_for("Checkpoint", |e| match e {
            ExecEvent::Checkpoint {
                attempt: AttemptId(1),
                at_ms,
            } => Some(*at_ms),
            _ => None,
        })
        .await;
    let (_, _, _) = w.running(1).await;
    let running_at = w
        .seen
        .iter()
        .find_map(|e| match e {
            ExecEvent::Running { at_ms, .. } => Some(*at_ms),
            _ => None,
        })
        .unwrap();
    assert!(
        at_ms + 1_000 >= running_at,
        "the checkpoint's mtime is this attempt's"
    );
    w.exec.stop(AttemptId(1));
    w.exited(1).await;
    let kinds: Vec<&str> = w
        .events_of(1)
        .iter()
        .map(|e| match e {
            ExecEvent::Running { .. } => "running",
            ExecEvent::Checkpoint { .. } => "checkpoint",
            ExecEvent::Progress { .. } => "progress",
            ExecEvent::Exited { .. } => "exited",
            ExecEvent::Starting { .. } => "starting",
            ExecEvent::Capacity { .. } => "capacity",
        })
        .collect();
    assert_eq!(kinds, ["running", "checkpoint", "exited"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoint_directory_survives_to_the_next_attempt_without_counting_as_new_work() {
    let mut w = World::new();
    let mut first = sh(1, "job-resume", "echo 41 > \"$SM_CHECKPOINT_DIR/state\"");
    first.attempt_number = 1;
    w.exec.start(first).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);

    // Long enough for several scans (every 50 ms) while the old checkpoint sits there.
    let mut second = sh(
        2,
        "job-resume",
        "test \"$(cat \"$SM_CHECKPOINT_DIR/state\")\" = 41 && sleep 0.5",
    );
    second.attempt_number = 2;
    w.exec.start(second).unwrap();
    assert_eq!(w.exited(2).await, Exit::Succeeded);
    assert!(
        !w.events_of(2)
            .iter()
            .any(|e| matches!(e, ExecEvent::Checkpoint { .. })),
        "{:?}",
        w.events_of(2)
    );
    assert!(w
        .exec
        .job_dir("job-resume")
        .join("checkpoints/state")
        .is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_checkpoint_local_path_counts_from_the_working_directory() {
    let mut w = World::new();
    let mut spec = sh(
        1,
        "job-local",
        "echo \"$SM_CHECKPOINT_DIR\"; touch \"$SM_CHECKPOINT_DIR/c\"",
    );
    spec.checkpoint_path = Some("my-checkpoints".into());
    w.exec.start(spec).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let (_, _, log_dir) = w.running(1).await;
    let out = fs::read_to_string(log_dir.join("stdout.log")).unwrap();
    let expected = w.exec.job_dir("job-local").join("work/my-checkpoints");
    assert_eq!(out.trim(), expected.to_str().unwrap());
    assert!(expected.join("c").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opt_ml_checkpoint_local_path_is_the_job_s_own_so_jobs_never_share_it() {
    let mut w = World::new();
    for (attempt, job) in [(1, "job-a"), (2, "job-b")] {
        let mut spec = sh(
            attempt,
            job,
            "echo \"$SM_CHECKPOINT_DIR\"; touch \"$SM_CHECKPOINT_DIR/$QM_JOB_ID\"",
        );
        spec.checkpoint_path = Some("/opt/ml/checkpoints/".into());
        w.exec.start(spec).unwrap();
        assert_eq!(w.exited(attempt).await, Exit::Succeeded);
        // /opt/ml is the job's directory (mounted there when the server is root).
        let expected = w.exec.job_dir(job).join("checkpoints");
        let (_, _, log_dir) = w.running(attempt).await;
        let out = fs::read_to_string(log_dir.join("stdout.log")).unwrap();
        assert_eq!(out.trim(), expected.to_str().unwrap());
        assert!(expected.join(job).is_file());
    }
    assert!(!std::path::Path::new("/opt/ml/checkpoints/job-a").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_are_reported_coalesced_and_the_last_ones_before_the_exit() {
    let mut w = World::new();
    // A thousand lines at once, then, while stopping, the lines that say where it stopped.
    let script = r#"i=0; while [ $i -lt 1000 ]; do echo "{\"step\": $i}"; i=$((i+1)); done >> "$QM_PROGRESS_FILE"
        echo not json >> "$QM_PROGRESS_FILE"
        trap 'echo "{\"step\": 1200, \"checkpoint_step\": 1100}" >> "$QM_PROGRESS_FILE"; exit 143' TERM
        while :; do sleep 0.05; done"#;
    w.exec.start(sh(1, "job-progress", script)).unwrap();
    let (_, _, log_dir) = w.running(1).await;
    w.wait_for("Progress", |e| match e {
        ExecEvent::Progress { steps, .. } if steps.last == Some(999) => Some(()),
        _ => None,
    })
    .await;
    w.exec.stop(AttemptId(1));
    w.exited(1).await;
    let reports: Vec<Steps> = w
        .events_of(1)
        .iter()
        .filter_map(|e| match e {
            ExecEvent::Progress { steps, .. } => Some(*steps),
            _ => None,
        })
        .collect();
    assert!(
        reports.len() <= 3,
        "coalesced, not one per line: {reports:?}"
    );
    assert_eq!(
        reports.last(),
        Some(&Steps {
            first: Some(0),
            last: Some(1200),
            checkpoint: Some(1100)
        }),
        "the lines written while stopping are read before Exited"
    );
    let kinds: Vec<bool> = w
        .events_of(1)
        .iter()
        .map(|e| matches!(e, ExecEvent::Exited { .. }))
        .collect();
    assert_eq!(kinds.last(), Some(&true), "Exited comes last");
    let stderr = fs::read_to_string(log_dir.join("stderr.log")).unwrap();
    assert_eq!(stderr.matches("[qm] ignored a line").count(), 1, "{stderr}");
}
