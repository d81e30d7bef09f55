//! Supervisors are forked from the zygote (`qm_executor::supervisor::zygote`), so they are
//! nobody's child but init's (or a subreaper's); when the zygote is gone, they are executed as
//! the server's children instead, and attempts run all the same.

use qm_executor::ExecEvent;

use crate::world::{sh, World};

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
        } if *a == attempt => supervisor.as_ref().map(|i| i.pid),
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
        w.exec.stop(a);
        w.exited(a).await;
    }
}
