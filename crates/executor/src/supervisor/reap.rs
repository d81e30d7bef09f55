//! The supervisor's children: it is the child subreaper of everything its attempt starts, so
//! whatever the job forks, however it daemonizes, comes back to it as a child when its parent
//! dies. At each SIGCHLD it collects every exited child (`wait4(-1, WNOHANG)`) and reports
//! each exit; when the kernel says there is no child left, nothing of the attempt runs any more.
//! No polling: the end of the last process is known when it happens. Each child is collected
//! with `wait4`, whose resource usage covers the child and every descendant it waited for, so
//! that what the attempt used is summed as its processes end: exact for this attempt even
//! though the supervisor ran others before it (`RUSAGE_CHILDREN` counts its whole life).

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// What the reaped processes used, summed as they are collected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Reaped {
    /// User and system CPU time, in microseconds.
    pub(crate) cpu_micros: u64,
    /// The largest resident set of one process (KiB); 0 when nothing ran.
    pub(crate) max_rss_kib: u64,
}

/// Every child of this process, as it exits.
pub(crate) struct Reaper {
    sigchld: Option<tokio::signal::unix::Signal>,
    /// Exits collected but not yet returned.
    ready: std::collections::VecDeque<(u32, i32)>,
    done: bool,
    used: Reaped,
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
        used: Reaped::default(),
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

    /// What the processes collected so far used.
    pub(crate) fn used(&self) -> Reaped {
        self.used
    }

    /// Collects every child that has exited, without waiting.
    fn collect(&mut self) {
        loop {
            match wait_any() {
                Ok(None) => return,
                Ok(Some((pid, status, usage))) => {
                    self.used.add(&usage);
                    // Only exits come: stopped or continued children are not asked for.
                    if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
                        self.ready.push_back((pid, status));
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

impl Reaped {
    fn add(&mut self, r: &libc::rusage) {
        let micros = |t: libc::timeval| {
            u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_usec).unwrap_or(0)
        };
        self.cpu_micros += micros(r.ru_utime) + micros(r.ru_stime);
        self.max_rss_kib = self
            .max_rss_kib
            .max(u64::try_from(r.ru_maxrss).unwrap_or(0));
    }
}

/// `wait4(-1, WNOHANG)` (nix has no `wait4`): the next exited child, its raw wait status
/// (what `ExitStatus::from_raw` reads) and what it and the descendants it waited for used;
/// `None` while children remain but none exited. One of the workspace's five unsafe sites
/// (the others: `zygote`, `wire`, `cgroup::enter`, `cgroup::bpf`).
#[allow(unsafe_code)]
fn wait_any() -> Result<Option<(u32, i32, libc::rusage)>, Errno> {
    let mut status: libc::c_int = 0;
    // SAFETY: all-zero is a valid `rusage` (integers and timevals only).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live locals of the right types for the call's duration.
    let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
    match pid {
        -1 => Err(Errno::last()),
        0 => Ok(None),
        pid => Ok(Some((pid.unsigned_abs(), status, usage))),
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
