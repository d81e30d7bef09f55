//! Process groups left by a previous server are stopped at start-up; reused pids are not.

use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::world::World;

fn alive(pid: u32) -> bool {
    kill(Pid::from_raw(pid as i32), None).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_process_group_is_killed() {
    let w = World::new();
    // What a previous server's attempt looks like: its own group, QM_JOB_ID set.
    let leftover = Command::new("sleep")
        .arg("1000")
        .env("QM_JOB_ID", "old-job")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = leftover.id();
    assert!(alive(pid));
    w.exec.reap_stale(&[pid]).await;
    assert!(
        !alive(pid),
        "the leftover group is gone (and its zombie collected)"
    );
    drop(leftover);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_pid_without_qm_job_id_is_left_alone() {
    let w = World::new();
    let mut stranger = Command::new("sleep")
        .arg("1000")
        .env_remove("QM_JOB_ID")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = stranger.id();
    // Right after spawn the kernel may not show the new environment yet; a stranger found at
    // start-up has long been running.
    let deadline = std::time::Instant::now() + crate::world::WAIT;
    while std::fs::read(format!("/proc/{pid}/environ")).map_or(true, |env| env.is_empty()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stranger's environment never showed"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    w.exec.reap_stale(&[pid, 0, 1]).await;
    assert!(alive(pid), "{:?}", stranger.try_wait());
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}
