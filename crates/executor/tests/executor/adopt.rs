//! Attempts outlive their executor: a new executor on the same data dir adopts what the old
//! one's supervisors run, records what ended meanwhile, and never signals a process that merely
//! took a recorded pid.

use qm_executor::AttemptId;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::kill;
use nix::unistd::Pid;
use qm_executor::supervisor::{boot_id, Identity};
use qm_executor::{ExecEvent, Exit, Reconciled, Recorded};

use crate::world::{running_in, server_runtime, sh, wait_for_text, World};

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

/// Waits until the process `identity` names is gone; fails with `what` after the tests' wait.
async fn gone(identity: &Identity, what: &str) {
    let deadline = std::time::Instant::now() + crate::world::WAIT;
    while identity.alive(&boot_id()) {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn recorded(attempt: u64, job: &str, supervisor: Option<Identity>) -> Recorded {
    Recorded {
        attempt: AttemptId(attempt),
        job_id: job.into(),
        attempt_number: 1,
        pids: vec![1],
        supervisor,
        stopping: false,
    }
}

/// Starts `script` as attempt `attempt` under an executor on a runtime of its own, waits until
/// it runs, then drops that runtime (the server is gone; the supervisor is not). Returns the
/// supervisor and the job's pid.
fn start_and_abandon(w: &World, attempt: u64, job: &str, script: &str) -> (Identity, u32) {
    // On a thread of its own: the test's runtime cannot block on another.
    std::thread::scope(|s| {
        s.spawn(|| abandon_on_own_runtime(w, attempt, job, script))
            .join()
            .unwrap()
    })
}

fn abandon_on_own_runtime(w: &World, attempt: u64, job: &str, script: &str) -> (Identity, u32) {
    let runtime = server_runtime();
    let (old, mut events) = w.executor_alike();
    let (identity, pids) = runtime.block_on(async {
        old.start(sh(attempt, job, script)).unwrap();
        running_in(&mut events, attempt).await
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    (identity, pids[0])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_executor_adopts_a_running_attempt_and_can_stop_it() {
    let mut w = World::new();
    let (identity, pid) = start_and_abandon(
        &w,
        1,
        "job-a",
        "trap 'exit 7' TERM; while :; do sleep 0.05; done",
    );
    assert!(identity.alive(&boot_id()));
    assert!(alive(pid), "the job outlives its executor");
    let out = w
        .exec
        .reconcile(vec![recorded(1, "job-a", Some(identity.clone()))])
        .await;
    assert_eq!(
        out,
        vec![(AttemptId(1), Reconciled::Adopted { running: None })]
    );
    assert_eq!(w.exec.running(), 1);
    assert_eq!(w.exec.free("ml.g5.xlarge"), 1, "its instance is held again");
    assert_eq!(w.exec.supervisor(AttemptId(1)), Some(identity));
    w.exec.stop(AttemptId(1));
    let outcome = w.exited(1).await;
    assert!(
        matches!(&outcome, Exit::Failed { reason, .. } if reason.contains("code 7")),
        "{outcome:?}"
    );
    assert!(!alive(pid));
    assert_eq!(w.exec.free("ml.g5.xlarge"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_ended_without_an_executor_is_recorded_as_it_ended() {
    let mut w = World::new();
    let gate = w.dir.path().join("gate");
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; exit 3",
        gate.display()
    );
    let (identity, _) = start_and_abandon(&w, 2, "job-b", &script);
    std::fs::write(&gate, "").unwrap();
    // The supervisor writes the outcome, then waits for a server to acknowledge it.
    let outcome_file = w
        .dir
        .path()
        .canonicalize()
        .unwrap()
        .join("jobs/job-b/attempts/1/outcome.json");
    wait_for_text(&outcome_file, "code 3").await;
    assert!(
        identity.alive(&boot_id()),
        "it waits for an acknowledgement"
    );
    let out = w
        .exec
        .reconcile(vec![recorded(2, "job-b", Some(identity.clone()))])
        .await;
    // Its outcome is on disk, so it is told in the hello; a server that connects between the
    // write and the supervisor taking note of it adopts the attempt and hears the exit next.
    let outcome = match &out[0].1 {
        Reconciled::Ended(outcome, _) => outcome.clone(),
        Reconciled::Adopted { .. } => w.exited(2).await,
        other => panic!("{other:?}"),
    };
    assert!(
        matches!(&outcome, Exit::Failed { reason, .. } if reason.contains("code 3")),
        "{outcome:?}"
    );
    gone(&identity, "acknowledged, the supervisor exits").await;
    assert_eq!(w.exec.running(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_pid_that_now_names_another_process_is_never_signalled() {
    let w = World::new();
    let mut stranger = Command::new("sleep").arg("1000").spawn().unwrap();
    let pid = stranger.id();
    let now = Identity::of(pid, &boot_id()).unwrap();
    // What the log recorded: the same pid, an earlier process (another start time).
    let then = Identity {
        start_time: now.start_time.saturating_sub(1),
        ..now.clone()
    };
    let out = w
        .exec
        .reconcile(vec![recorded(3, "job-c", Some(then))])
        .await;
    assert!(
        matches!(&out[0].1, Reconciled::Lost(reason) if reason.contains("supervisor")),
        "{out:?}"
    );
    assert!(alive(pid), "{:?}", stranger.try_wait());
    assert!(stranger.try_wait().unwrap().is_none());
    // Another boot's identity is never signalled either.
    let other_boot = Identity {
        boot_id: "another-boot".into(),
        ..now
    };
    let out = w
        .exec
        .reconcile(vec![recorded(4, "job-d", Some(other_boot))])
        .await;
    assert!(
        matches!(&out[0].1, Reconciled::Lost(reason) if reason.contains("rebooted")),
        "{out:?}"
    );
    assert!(alive(pid));
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_keeps_its_exit_until_the_server_has_logged_it() {
    let mut w = World::new();
    w.exec.start(sh(5, "job-e", "exit 0")).unwrap();
    let identity = w
        .wait_for("Running", |e| match e {
            ExecEvent::Running { supervisor, .. } => supervisor.clone(),
            _ => None,
        })
        .await;
    w.wait_for("Exited", |e| {
        matches!(
            e,
            ExecEvent::Exited {
                attempt: AttemptId(5),
                ..
            }
        )
        .then_some(())
    })
    .await;
    // Reported, not yet in the server's log: the supervisor holds on to it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        identity.alive(&boot_id()),
        "it waits for the acknowledgement"
    );
    w.exec.acknowledge(&[AttemptId(5)]);
    // Acknowledged, it lets the attempt go: its socket is gone (renamed while it waits free
    // for the next attempt, removed if it exits).
    let socket =
        qm_executor::supervisor::socket_path(&w.dir.path().canonicalize().unwrap(), AttemptId(5));
    let deadline = std::time::Instant::now() + crate::world::WAIT;
    while socket.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "acknowledged, it lets go"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Gets `script` ready as attempt `attempt` (launched with `hold`, never released) under an
/// executor on a runtime of its own, waits until its supervisor prepared it, then drops that
/// runtime: the server died while it wrote the start. Returns the supervisor.
fn ready_and_abandon(w: &World, attempt: u64, job: &str, script: &str) -> Identity {
    std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = server_runtime();
            let (old, _events) = w.executor_alike();
            let config = old.job_dir(job).join("input/config/resourceconfig.json");
            let identity = runtime.block_on(async {
                old.ready(sh(attempt, job, script)).unwrap();
                wait_for_text(&config, "algo-1").await;
                old.supervisor(AttemptId(attempt))
                    .expect("its supervisor is connected")
            });
            runtime.shutdown_timeout(Duration::from_secs(5));
            identity
        })
        .join()
        .unwrap()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_launch_the_log_holds_is_started_by_the_server_that_adopts_it() {
    let mut w = World::new();
    let ran = w.dir.path().join("ran");
    let identity = ready_and_abandon(&w, 1, "job-held", &format!("touch {}", ran.display()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!ran.exists(), "a held launch ran before it was released");
    let logged = Recorded {
        pids: vec![],
        supervisor: None,
        ..recorded(1, "job-held", None)
    };
    let out = w.exec.reconcile(vec![logged]).await;
    assert_eq!(
        out,
        vec![(AttemptId(1), Reconciled::Adopted { running: None })]
    );
    assert_eq!(w.exec.supervisor(AttemptId(1)), Some(identity));
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    assert!(ran.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_launch_the_log_does_not_hold_is_stopped_unstarted_and_leaves_no_outcome() {
    let w = World::new();
    let ran = w.dir.path().join("ran");
    let identity = ready_and_abandon(&w, 1, "job-stray", &format!("touch {}", ran.display()));
    let out = w.exec.reconcile(vec![]).await;
    assert!(out.is_empty());
    gone(&identity, "the stray held supervisor did not go").await;
    assert!(!ran.exists(), "a launch no log holds ran");
    let attempt_dir = w.exec.log_dir("job-stray", 1);
    assert!(attempt_dir.is_dir(), "it was prepared");
    assert!(
        !attempt_dir.join("outcome.json").exists(),
        "an attempt that never started wrote an outcome a later attempt 1 would be taken for"
    );
    assert_eq!(w.exec.free("ml.g5.xlarge"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_starting_server_removes_the_sockets_a_previous_servers_free_supervisors_left() {
    let w = World::new();
    let data_dir = w.dir.path().canonicalize().unwrap();
    let stale = qm_executor::supervisor::free_socket_path(&data_dir, 999_999);
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    w.exec.reconcile(vec![]).await;
    assert!(
        !stale.exists(),
        "a free supervisor's socket outlived its server"
    );
}
