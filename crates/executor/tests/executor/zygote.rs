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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_supervisor_whose_attempt_was_acknowledged_runs_the_next_one() {
    // Forked once: after its attempt is acknowledged it tells the zygote it is free, and the
    // next attempt runs under it (no fork, no new runtime).
    let mut w = World::new();
    w.exec.start(sh(1, "job-r1", "true")).unwrap();
    let first = supervisor_of(&mut w, 1).await;
    w.exited(1).await;
    let mut second = 0;
    for n in 2..40 {
        w.exec.start(sh(n, &format!("job-r{n}"), "true")).unwrap();
        second = supervisor_of(&mut w, n).await;
        w.exited(n).await;
        if second == first {
            break;
        }
    }
    assert_eq!(second, first, "the first supervisor ran a later attempt");
    assert!(
        std::path::Path::new(&format!("/proc/{first}")).exists(),
        "it waits for the next"
    );
    // The zygote goes (its server stopped): the free supervisors go with it.
    let zygote = w.exec.zygote().expect("a zygote runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(zygote as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let gone = async {
        while std::fs::read_to_string(format!("/proc/{first}/stat"))
            .is_ok_and(|s| !s.contains(") Z "))
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), gone)
        .await
        .expect("a free supervisor exits when its zygote is gone");
}
