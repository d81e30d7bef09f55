//! Who a supervisor is, beyond a pid that the kernel reuses: the boot it runs in
//! (`/proc/sys/kernel/random/boot_id`), its pid and the time it started (field 22 of
//! `/proc/<pid>/stat`, in clock ticks since boot). The server records this for every attempt
//! and signals a process only through a pidfd opened on it and checked against the recorded
//! start time, so a pid that now belongs to another process (after a reboot, or plain reuse)
//! is never signalled.

use std::os::fd::OwnedFd;

use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};
use serde::{Deserialize, Serialize};

/// A supervisor as the log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `/proc/sys/kernel/random/boot_id` of the boot it runs in.
    pub boot_id: String,
    /// Its process id.
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`: when it started, in clock ticks since boot.
    pub start_time: u64,
}

/// This machine's boot id, or an empty string where /proc does not say (then every identity
/// compares as another boot's, and nothing recorded is ever adopted or signalled).
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// When process `pid` started (clock ticks since boot): field 22 of `/proc/<pid>/stat`.
pub fn start_time(pid: u32) -> Option<u64> {
    crate::group::stat_field(pid, 19)
}

impl Identity {
    /// The identity of the live process `pid` of this boot, if it exists.
    pub fn of(pid: u32, boot_id: &str) -> Option<Identity> {
        Some(Identity {
            boot_id: boot_id.to_string(),
            pid,
            start_time: start_time(pid)?,
        })
    }

    /// A pidfd on the process this identity names, if it is still that process: the same
    /// boot, and a live process with that pid and that start time. The start time is read
    /// after the pidfd is opened, so the pidfd cannot name a process that took the pid later.
    pub fn open(&self, boot_id: &str) -> Option<OwnedFd> {
        if self.boot_id.is_empty() || self.boot_id != boot_id {
            return None;
        }
        let raw = i32::try_from(self.pid).ok()?;
        let pid = Pid::from_raw(raw)?;
        let fd = pidfd_open(pid, PidfdFlags::empty()).ok()?;
        (start_time(self.pid) == Some(self.start_time)).then_some(fd)
    }

    /// Whether the process this identity names is alive (see [`Identity::open`]).
    pub fn alive(&self, boot_id: &str) -> bool {
        self.open(boot_id).is_some()
    }

    /// Sends `signal` to the process this identity names, only if it still is that process;
    /// false otherwise.
    pub fn signal(&self, boot_id: &str, signal: Signal) -> bool {
        match self.open(boot_id) {
            Some(fd) => pidfd_send_signal(&fd, signal).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_counted_after_the_command_name() {
        let stat =
            "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(crate::group::parse_stat_field(stat, 19), Some(987654));
        assert_eq!(crate::group::parse_stat_field("garbage", 19), None);
    }

    #[test]
    fn this_process_is_itself_and_another_start_time_is_not() {
        let boot = boot_id();
        let me = Identity::of(std::process::id(), &boot).unwrap();
        assert!(me.alive(&boot));
        let reused = Identity {
            start_time: me.start_time + 1,
            ..me.clone()
        };
        assert!(!reused.alive(&boot));
        assert!(!reused.signal(&boot, Signal::CONT));
        let other_boot = Identity {
            boot_id: "another-boot".into(),
            ..me
        };
        assert!(!other_boot.alive(&boot));
    }
}
