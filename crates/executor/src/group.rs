//! Signals to process groups, whether a group still holds a supervisor's job, and stopping the
//! groups no supervisor holds (a previous server's, a dead supervisor's). Every attempt process
//! leads its own group (`process_group(0)`), so its pid is its group id and a signal to the
//! group reaches whatever the job forked too.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use tokio::time::{sleep, Instant};

/// How often `reap` looks whether the groups are gone: it cannot wait on processes that
/// are not its children, so it polls: only at start-up and when a supervisor died.
const REAP_POLL: Duration = Duration::from_millis(20);

/// How long `reap` waits for SIGKILLed groups before giving up with a warning (a process
/// stuck in the kernel, or a zombie whose parent never reaps it, would otherwise block start-up).
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Sends `signal` to group `pgid`; false when the group is gone or cannot be signalled.
/// Group ids 0 and 1 are refused: 0 would signal the server's own group.
pub(crate) fn signal_group(pgid: u32, signal: Signal) -> bool {
    let Ok(raw) = i32::try_from(pgid) else {
        return false;
    };
    if raw <= 1 {
        return false;
    }
    killpg(Pid::from_raw(raw), signal).is_ok()
}

/// Sends `signal` to process `pid`; false when it is gone or cannot be signalled. Pids 0 and 1
/// are refused. Only for a pid that cannot have been reused: a frozen group's member, a
/// child not reaped yet.
pub(crate) fn signal_pid(pid: u32, signal: Signal) -> bool {
    match i32::try_from(pid) {
        Ok(raw) if raw > 1 => kill(Pid::from_raw(raw), signal).is_ok(),
        _ => false,
    }
}

/// Whether any process of group `pgid` exists and can be signalled by us.
/// A group whose processes are all zombies is gone: they hold nothing, and where their new
/// parent (PID 1 of a container, say) never reaps them they would otherwise hold start-up for
/// the whole grace period and `KILL_WAIT`.
pub(crate) fn group_alive(pgid: u32) -> bool {
    match i32::try_from(pgid) {
        // Signal 0 only checks. EPERM means it exists but is not ours: nothing we can do.
        Ok(raw) if raw > 1 => {
            kill(Pid::from_raw(-raw), None).is_ok() && has_live_member(pgid).unwrap_or(true)
        }
        _ => false,
    }
}

/// Whether a process of group `pgid` is not a zombie, from `/proc/<pid>/stat` (`None` when
/// /proc cannot be read).
fn has_live_member(pgid: u32) -> Option<bool> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields 3 (state), 5 (pgrp) and 20 (num_threads) of proc(5). A process whose main
        // thread exited while others run shows `Z` too: it is alive while it has threads.
        let (state, pgrp, threads) = (fields.first(), fields.get(2), fields.get(17));
        let threads: u32 = threads.and_then(|t| t.parse().ok()).unwrap_or(1);
        if pgrp.and_then(|g| g.parse::<u32>().ok()) == Some(pgid)
            && (state != Some(&"Z") || threads > 1)
        {
            return Some(true);
        }
    }
    Some(false)
}

/// Collects the group leader if it is a zombie child of ours (the server may be PID 1 or a
/// subreaper, and then inherits the old server's orphans).
fn collect_zombie(pgid: u32) {
    if let Ok(raw) = i32::try_from(pgid) {
        let _ = waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG));
    }
}

/// The environment variable that marks every attempt process with the executor's (canonical)
/// data directory.
pub(crate) const MARKER: &str = "QM_DATA_DIR";

fn marker_entry(data_dir: &Path) -> Vec<u8> {
    format!("{MARKER}={}", data_dir.to_string_lossy()).into_bytes()
}

fn has_entry(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|b| *b == 0).any(|var| var == entry)
}

/// Process groups of every live process that carries this data directory's marker and has
/// none of `supervisors` among its ancestors: what no live supervisor holds. Empty where
/// /proc cannot be read.
pub(crate) fn marked_groups_outside(data_dir: &Path, supervisors: &BTreeSet<u32>) -> BTreeSet<u32> {
    let entry = marker_entry(data_dir);
    let mut groups = BTreeSet::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return groups;
    };
    for proc_entry in dir.flatten() {
        let name = proc_entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if !has_entry(&env, &entry) || held_by(pid, supervisors) {
            continue;
        }
        if let Some(pgid) = process_group_of(pid) {
            groups.insert(pgid);
        }
    }
    groups
}

/// Whether process group `pgid` has a member that descends from `ancestor`: a group id a
/// supervisor recorded is signalled only while it still names the job's processes, never a
/// group that took the number after the job's emptied. False where /proc cannot be read.
pub(crate) fn group_held(pgid: u32, ancestor: u32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    let ancestors = BTreeSet::from([ancestor]);
    dir.flatten().any(|entry| {
        entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|pid| process_group_of(pid) == Some(pgid) && held_by(pid, &ancestors))
    })
}

/// Whether one of `supervisors` is an ancestor of `pid` (walking the parents in /proc, at most
/// 64 levels).
fn held_by(pid: u32, supervisors: &BTreeSet<u32>) -> bool {
    let mut at = pid;
    for _ in 0..64 {
        match parent_of(at) {
            Some(p) if supervisors.contains(&p) => return true,
            Some(p) if p > 1 => at = p,
            _ => return false,
        }
    }
    false
}

/// Field `n` of /proc/<pid>/stat counted from the state (0: state, 1: ppid, 2: pgrp, ...):
/// the fields after the command name, which is in parentheses and may itself contain spaces
/// or parentheses.
pub(crate) fn stat_field(pid: u32, n: usize) -> Option<u64> {
    parse_stat_field(
        &std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
        n,
    )
}

/// Field `n` (as [`stat_field`] counts) of a `/proc/<pid>/stat` line.
pub(crate) fn parse_stat_field(stat: &str, n: usize) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(n)?.parse().ok()
}

/// The parent of `pid`.
fn parent_of(pid: u32) -> Option<u32> {
    stat_field(pid, 1).and_then(|p| u32::try_from(p).ok())
}

/// The process group of `pid`.
fn process_group_of(pid: u32) -> Option<u32> {
    stat_field(pid, 2).and_then(|p| u32::try_from(p).ok())
}

/// SIGTERM to every group, up to `grace` for them to go, SIGKILL to the rest, and a bounded
/// wait for those.
pub(crate) async fn reap(pgids: Vec<u32>, grace: Duration) {
    let mut alive: Vec<u32> = pgids
        .into_iter()
        .filter(|&pgid| signal_group(pgid, Signal::SIGTERM))
        .collect();
    if alive.is_empty() {
        return;
    }
    tracing::info!(groups = ?alive, "stopping process groups left by a previous server");
    wait_gone(&mut alive, Instant::now() + grace).await;
    for &pgid in &alive {
        signal_group(pgid, Signal::SIGKILL);
    }
    wait_gone(&mut alive, Instant::now() + KILL_WAIT).await;
    if !alive.is_empty() {
        tracing::warn!(groups = ?alive, "process groups still present after SIGKILL; continuing");
    }
}

async fn wait_gone(alive: &mut Vec<u32>, until: Instant) {
    loop {
        alive.retain(|&pgid| {
            collect_zombie(pgid);
            let alive = group_alive(pgid);
            if !alive {
                // It may have become a zombie of ours just now: collect it too.
                collect_zombie(pgid);
            }
            alive
        });
        if alive.is_empty() || Instant::now() >= until {
            return;
        }
        sleep(REAP_POLL).await;
    }
}
