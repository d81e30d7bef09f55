//! Supervisors are forked from the zygote (`qm_executor::supervisor::zygote`), so they are
//! nobody's child but init's (or a subreaper's); when the zygote is gone, they are executed as
//! the server's children instead, and attempts run all the same.

use qm_executor::supervisor::{free_socket_path, socket_path};
use qm_executor::AttemptId;
use qm_executor::ExecEvent;
use tokio::sync::mpsc;

use crate::world::{running_in, server_runtime, sh, until, World, WAIT};

fn parent_of(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split(' ').nth(1).unwrap().parse().unwrap()
}

fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

async fn supervisor_of(w: &mut World, attempt: u64) -> u32 {
    w.wait_for("Running", |e| match e {
        ExecEvent::Running {
            attempt: a,
            supervisor,
            ..
        } if *a == AttemptId(attempt) => supervisor.as_ref().map(|i| i.pid),
        _ => None,
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisors_are_forked_from_the_zygote_and_executed_once_it_is_gone() {
    let mut w = World::new();
    w.exec.start(sh(1, "job-z", "sleep 30")).unwrap();
    let forked = supervisor_of(&mut w, 1).await;
    let me = std::process::id();
    assert_ne!(
        parent_of(forked),
        me,
        "a forked supervisor is not the server's child"
    );
    assert_eq!(cmdline(forked).last().map(String::as_str), Some("zygote"));
    let zygote = w.exec.zygote().expect("a zygote runs");
    assert_eq!(parent_of(zygote), me, "the zygote is the server's child");

    // The zygote dies: supervisors are executed, and their attempts run all the same.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(zygote as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    w.exec.start(sh(2, "job-z2", "sleep 30")).unwrap();
    let executed = supervisor_of(&mut w, 2).await;
    assert_eq!(
        parent_of(executed),
        me,
        "an executed supervisor is the server's child"
    );
    assert_eq!(
        w.exec.zygote(),
        None,
        "a failed zygote is not used for a while"
    );
    for a in [1, 2] {
        w.exec.stop(AttemptId(a));
        w.exited(a).await;
    }
}

/// Waits for the `Exited` event of `attempt` and acknowledges it, as the server does.
async fn ended(
    exec: &qm_executor::LocalExecutor,
    events: &mut mpsc::UnboundedReceiver<ExecEvent>,
    attempt: u64,
) {
    loop {
        let event = tokio::time::timeout(WAIT, events.recv())
            .await
            .unwrap()
            .unwrap();
        if matches!(event, ExecEvent::Exited { attempt: a, .. } if a == AttemptId(attempt)) {
            exec.acknowledge(&[AttemptId(attempt)]);
            return;
        }
    }
}

#[test]
fn a_supervisor_whose_attempt_was_acknowledged_runs_the_next_one_and_goes_with_its_server() {
    // Forked once: after its attempt is acknowledged it waits free on its server's
    // connection (its socket renamed to free-<pid>.sock), and the next attempt runs under it
    // (no fork, no new socket file). The server goes: the free supervisor goes with it.
    let w = World::new();
    let data_dir = w.dir.path().canonicalize().unwrap();
    let runtime = server_runtime();
    let (exec, mut events) = w.executor_alike();
    let first = runtime.block_on(async {
        exec.start(sh(1, "job-r1", "true")).unwrap();
        let first = running_in(&mut events, 1).await.0.pid;
        ended(&exec, &mut events, 1).await;
        let spare = free_socket_path(&data_dir, first);
        until("acknowledged, it waits free", || {
            exec.free_supervisors() == 1
        })
        .await;
        assert!(spare.exists());
        assert!(
            !socket_path(&data_dir, AttemptId(1)).exists(),
            "its attempt's socket is gone"
        );
        exec.start(sh(2, "job-r2", "sleep 30")).unwrap();
        assert_eq!(
            running_in(&mut events, 2).await.0.pid,
            first,
            "the free supervisor runs the next attempt"
        );
        assert!(
            socket_path(&data_dir, AttemptId(2)).exists(),
            "at the attempt's socket"
        );
        assert!(!spare.exists());
        exec.stop(AttemptId(2));
        ended(&exec, &mut events, 2).await;
        until("it is free again", || exec.free_supervisors() == 1).await;
        assert!(spare.exists());
        first
    });
    drop(exec);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    wait_gone(first, "a free supervisor exits when its server is gone");
    assert!(
        !free_socket_path(&data_dir, first).exists(),
        "and removes its socket"
    );
}

#[test]
fn a_stopping_server_writes_its_last_acknowledgement_before_it_goes() {
    // The server's last commit holds an attempt's exit and it stops right after: the ack it
    // decided must still reach the supervisor, which then goes with the server instead of
    // waiting for the next one to learn what the log already holds. One thread, so that
    // nothing writes the ack behind the test's back.
    let w = World::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (exec, mut events) = w.executor_alike();
    let pid = runtime.block_on(async {
        exec.start(sh(1, "job-s1", "true")).unwrap();
        let pid = running_in(&mut events, 1).await.0.pid;
        // Acknowledged as the driver does after its last commit; nothing has run since.
        ended(&exec, &mut events, 1).await;
        pid
    });
    runtime.block_on(exec.settle(WAIT));
    drop(exec);
    drop(runtime);
    wait_gone(
        pid,
        "the supervisor of an attempt acknowledged before the server stopped goes with it",
    );
}

/// Waits (at most `WAIT`) until process `pid` is gone or a zombie; else fails saying `what`.
fn wait_gone(pid: u32, what: &str) {
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
    };
    let deadline = std::time::Instant::now() + WAIT;
    while !gone() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
