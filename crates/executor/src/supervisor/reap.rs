//! The supervisor's children: it is the child subreaper of everything its attempt starts, so
//! whatever the job forks, however it daemonizes, comes back to it as a child when its parent
//! dies. At each SIGCHLD it collects every exited child (`waitpid(-1, WNOHANG)`) and reports
//! each exit; when the kernel says there is no child left, nothing of the attempt runs any more.
//! No polling: the end of the last process is known when it happens.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// Every child of this process, as it exits.
pub(crate) struct Reaper {
    sigchld: Option<tokio::signal::unix::Signal>,
    /// Exits collected but not yet returned.
    ready: std::collections::VecDeque<(u32, i32)>,
    done: bool,
}

/// Starts reaping every child of this process. Call it after the attempt's processes are
/// spawned, and spawn nothing that is waited for otherwise until [`Reaper::next`] said `None`.
pub(crate) fn start() -> Reaper {
    let sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child());
    if let Err(e) = &sigchld {
        tracing::error!(error = %e, "cannot watch SIGCHLD; waiting for the attempt's processes by polling");
    }
    Reaper {
        sigchld: sigchld.ok(),
        ready: std::collections::VecDeque::new(),
        done: false,
    }
}

impl Reaper {
    /// The next exit, as `(pid, raw wait status)`; `None` once no child is left. Cancel safe.
    pub(crate) async fn next(&mut self) -> Option<(u32, i32)> {
        loop {
            if let Some(exit) = self.ready.pop_front() {
                return Some(exit);
            }
            if self.done {
                return None;
            }
            self.collect();
            if !self.ready.is_empty() || self.done {
                continue;
            }
            // The signal is registered before the first collect: no exit can slip between.
            match self.sigchld.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        }
    }

    /// Whether `pid` was reaped and its exit not handed out by [`Reaper::next`] yet.
    pub(crate) fn holds(&self, pid: u32) -> bool {
        self.ready.iter().any(|(p, _)| *p == pid)
    }

    /// Collects every child that has exited, without waiting.
    fn collect(&mut self) {
        loop {
            match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return,
                Ok(status) => {
                    if let Some(exit) = raw_status(status) {
                        self.ready.push_back(exit);
                    }
                }
                Err(Errno::EINTR) => {}
                // ECHILD: no child left.
                Err(_) => {
                    self.done = true;
                    return;
                }
            }
        }
    }
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
