//! Stopping attempts: stop(), timeouts, a failing host stopping the others, and capacity that
//! comes back only when every process is gone.

use qm_executor::AttemptId;
use std::collections::BTreeMap;
use std::time::Duration;

use qm_executor::{ExecError, Exit, TIMEOUT_REASON};

use crate::world::{failed, pool, sh, wait_for_text, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_handles_sigterm_within_the_grace_reports_its_real_outcome() {
    let mut w = World::with(|cfg| cfg.stop_grace = Duration::from_secs(60));
    w.exec
        .start(sh(
            1,
            "job-trap",
            "trap 'echo saved; exit 0' TERM; echo ready; while true; do sleep 0.1; done",
        ))
        .unwrap();
    let (_, _, log_dir) = w.running(1).await;
    wait_for_text(&log_dir.join("stdout.log"), "ready").await;
    w.exec.stop(AttemptId(1));
    w.exec.stop(AttemptId(1));
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    assert!(std::fs::read_to_string(log_dir.join("stdout.log"))
        .unwrap()
        .contains("saved"));
    w.exec.stop(AttemptId(1));
    w.exec.stop(AttemptId(99));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_ignores_sigterm_is_killed_after_the_grace() {
    let mut w = World::new();
    w.exec
        .start(sh(
            1,
            "job-stubborn",
            "trap '' TERM; echo ready; sleep 1000",
        ))
        .unwrap();
    let (_, _, log_dir) = w.running(1).await;
    wait_for_text(&log_dir.join("stdout.log"), "ready").await;
    w.exec.stop(AttemptId(1));
    assert_eq!(
        w.exited(1).await,
        failed("Received status from SageMaker: AlgorithmError: process killed by signal SIGKILL")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_past_its_runtime_is_stopped_as_a_timeout_that_is_not_retried() {
    let mut w = World::new();
    let mut spec = sh(
        1,
        "job-slow",
        "trap 'exit 0' TERM; while true; do sleep 0.1; done",
    );
    spec.max_runtime = Some(Duration::from_millis(300));
    w.exec.start(spec).unwrap();
    assert_eq!(
        w.exited(1).await,
        Exit::Failed {
            reason: TIMEOUT_REASON.into(),
            retryable: false
        },
        "a clean exit on SIGTERM is still a timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_host_stops_the_others_and_its_failure_is_reported() {
    let mut w = World::new();
    let mut spec = sh(
        1,
        "job-multi",
        "if [ \"$SM_CURRENT_HOST\" = algo-2 ]; then exit 4; fi; sleep 1000",
    );
    spec.count = 2;
    w.exec.start(spec).unwrap();
    assert_eq!(
        w.exited(1).await,
        failed("Received status from SageMaker: AlgorithmError: process exited with code 4")
    );
    assert_eq!(w.exec.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_are_free_again_only_after_every_process_is_gone() {
    let mut w = World::with(|cfg| {
        cfg.pools = vec![pool("ml.g5.xlarge", 1, 0)];
        cfg.stop_grace = Duration::from_secs(60);
    });
    assert_eq!(
        w.exec.capacity(),
        BTreeMap::from([("ml.g5.xlarge".into(), 1)])
    );
    // On SIGTERM the job says so, then keeps running until the test releases it.
    let script = "trap 'echo term; while [ ! -f release ]; do sleep 0.05; done; exit 0' TERM; \
                  echo ready; while true; do sleep 0.1; done";
    w.exec.start(sh(1, "job-a", script)).unwrap();
    let (_, _, log_dir) = w.running(1).await;
    let stdout = log_dir.join("stdout.log");
    wait_for_text(&stdout, "ready").await;
    assert!(matches!(
        w.exec.start(sh(2, "job-b", "true")),
        Err(ExecError::InsufficientInstances {
            requested: 1,
            free: 0,
            ..
        })
    ));
    w.exec.stop(AttemptId(1));
    wait_for_text(&stdout, "term").await;
    assert_eq!(w.exec.free("ml.g5.xlarge"), 0, "stopping is not stopped");
    assert_eq!(w.exec.running(), 1);
    w.exec.check_invariants().unwrap();
    std::fs::write(w.exec.job_dir("job-a").join("work/release"), "").unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    assert_eq!(w.exec.free("ml.g5.xlarge"), 1);
    w.exec.start(sh(2, "job-b", "true")).unwrap();
    assert_eq!(w.exited(2).await, Exit::Succeeded);
    assert_eq!(
        w.exec.capacity(),
        BTreeMap::from([("ml.g5.xlarge".into(), 1)])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_shell_leader_dies_at_sigterm_its_children_keep_the_grace_to_save() {
    // The SageMaker SDK's entrypoint is bash, which dies at SIGTERM while the training script
    // it started is still writing its checkpoint: the group keeps the grace period.
    let mut w = World::with(|cfg| cfg.stop_grace = Duration::from_secs(60));
    w.exec
        .start(sh(
            1,
            "job-leader",
            "sh -c 'trap \"sleep 0.5; echo saved >> child.out; exit 0\" TERM; \
                    echo ready > child.out; while true; do sleep 0.05; done' & \
             wait",
        ))
        .unwrap();
    let (_, _, _) = w.running(1).await;
    let out = w.exec.job_dir("job-leader").join("work/child.out");
    wait_for_text(&out, "ready").await;
    w.exec.stop(AttemptId(1));
    w.exited(1).await;
    assert!(
        std::fs::read_to_string(&out).unwrap().contains("saved"),
        "the child finished saving before the attempt ended: {:?}",
        std::fs::read_to_string(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_channels_but_no_storage_fails_before_it_runs_and_says_why() {
    let mut w = World::new();
    let mut spec = sh(1, "job-nostore", "touch ran");
    spec.channels = vec![qm_executor::InputChannel {
        name: "train".into(),
        uri: "s3://bucket/train".into(),
        data_type: "S3Prefix".into(),
        input_mode: "File".into(),
        distribution: "FullyReplicated".into(),
        content_type: None,
        compression: None,
        record_wrapper: None,
    }];
    w.exec.start(spec).unwrap();
    match w.exited(1).await {
        Exit::Failed { reason, retryable } => {
            assert!(
                reason.contains("no storage configured ([storage]"),
                "{reason}"
            );
            assert!(!retryable);
        }
        other => panic!("{other:?}"),
    }
    assert!(!w.exec.job_dir("job-nostore").join("work/ran").exists());
}
