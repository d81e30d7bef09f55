//! Processes of this data dir that no supervisor holds (a previous server's, a dead
//! supervisor's) are stopped; processes of other data dirs (and reused pids) are not.

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
    // What a previous server's attempt looks like: its own group, marked with the data dir.
    let leftover = Command::new("sleep")
        .arg("1000")
        .env("QM_JOB_ID", "old-job")
        .env("QM_DATA_DIR", w.dir.path().canonicalize().unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = leftover.id();
    assert!(alive(pid));
    w.exec.reap_orphans().await;
    assert!(
        !alive(pid),
        "the leftover group is gone (and its zombie collected)"
    );
    drop(leftover);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_pid_without_this_data_dirs_marker_is_left_alone() {
    let w = World::new();
    let mut stranger = Command::new("sleep")
        .arg("1000")
        // An attempt of another qm, on another data dir.
        .env("QM_JOB_ID", "other-job")
        .env("QM_DATA_DIR", "/somewhere/else")
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
    w.exec.reap_orphans().await;
    assert!(alive(pid), "{:?}", stranger.try_wait());
    stranger.kill().unwrap();
    stranger.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_found_by_their_marker_even_without_a_recorded_pid() {
    let w = World::new();
    let marker = w.dir.path().canonicalize().unwrap();
    // A job process that forked a child into its group: both carry the marker; the group is
    // reported once.
    let mut leftover = Command::new("sh")
        .args(["-c", "sleep 1000 & wait"])
        .env("QM_DATA_DIR", &marker)
        .process_group(0)
        .spawn()
        .unwrap();
    let mut stranger = Command::new("sleep")
        .arg("1000")
        .env("QM_DATA_DIR", "/somewhere/else")
        .process_group(0)
        .spawn()
        .unwrap();
    let pid = leftover.id();
    let deadline = std::time::Instant::now() + crate::world::WAIT;
    let found = loop {
        let found = w.exec.orphans();
        if found.contains(&pid) || std::time::Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(found, vec![pid], "only our marked group, once");
    w.exec.reap_orphans().await;
    assert!(!alive(pid));
    assert!(w.exec.orphans().is_empty());
    assert!(alive(stranger.id()));
    stranger.kill().unwrap();
    stranger.wait().unwrap();
    let _ = leftover.wait();
}
