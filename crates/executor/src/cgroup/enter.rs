//! How a child enters its group under cgroup v2, where only whole processes move: between
//! fork and exec, the child writes itself into the group's `cgroup.procs`.

// One of the workspace's five unsafe sites (the others: `zygote`, `wire`, `reap`, `cgroup::bpf`): a
// `pre_exec` hook, the child's move into its v2 group between fork and exec.
#![allow(unsafe_code)]

use std::io;
use std::process::Command;

/// Makes `command`'s child write `0` (itself) to `procs` (its group's `cgroup.procs`, opened
/// by the caller) before it executes the program, so that it runs nothing outside the group.
pub(crate) fn move_child_v2(command: &mut Command, procs: std::fs::File) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the hook runs in the child between fork and exec and only calls write(2)
    // (rustix's raw system call: async-signal-safe, no allocation, no lock) on a descriptor
    // the parent keeps open (`procs` is moved into the closure, which lives as long as
    // `command`).
    unsafe {
        command.pre_exec(move || match rustix::io::write(&procs, b"0") {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
            Err(e) => Err(io::Error::from(e)),
        });
    }
}
