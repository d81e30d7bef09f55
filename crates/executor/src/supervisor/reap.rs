//! The supervisor's children: it is the child subreaper of everything its attempt starts, so
//! whatever the job forks, however it daemonizes, comes back to it as a child when its parent
//! dies. One blocking thread waits for any child (`waitpid(-1)`) and reports each exit; when
//! the kernel says there is no child left, nothing of the attempt runs any more. No polling:
//! the end of the last process is known when it happens.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::mpsc;

/// Starts reaping every child of this process: each exit comes as `(pid, raw wait status)`;
/// the channel closes once no child is left. Call it after the attempt's processes are
/// spawned, and spawn nothing that is waited for otherwise until it closed.
pub(crate) fn start() -> mpsc::UnboundedReceiver<(u32, i32)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("qm-reaper".into())
        .stack_size(64 * 1024)
        .spawn(move || loop {
            match waitpid(None::<Pid>, None) {
                Ok(status) => {
                    if let Some((pid, raw)) = raw_status(status) {
                        let _ = tx.send((pid, raw));
                    }
                }
                Err(Errno::EINTR) => {}
                // ECHILD: no child left.
                Err(_) => return,
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the reaper thread; the attempt counts as ended");
    }
    rx
}

/// A wait status as the raw number `ExitStatus::from_raw` reads (exit code in the second
/// byte, else the signal, with 0x80 for a core dump).
fn raw_status(status: WaitStatus) -> Option<(u32, i32)> {
    match status {
        WaitStatus::Exited(pid, code) => Some((pid.as_raw() as u32, (code & 0xff) << 8)),
        WaitStatus::Signaled(pid, signal, core) => Some((
            pid.as_raw() as u32,
            signal as i32 | if core { 0x80 } else { 0 },
        )),
        _ => None,
    }
}

/// The pids of this process's children, from `/proc/self/task/*/children` (a child belongs to
/// the thread that forked it; orphans the kernel hands to a subreaper to its main thread).
pub(crate) fn children() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok()),
        );
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// SIGKILL to every child of this process; how many there were.
pub(crate) fn kill_children() -> usize {
    let children = children();
    for &pid in &children {
        if let Ok(raw) = i32::try_from(pid) {
            // A child's pid cannot be reused before this process reaps it: it is ours.
            let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
        }
    }
    children.len()
}
