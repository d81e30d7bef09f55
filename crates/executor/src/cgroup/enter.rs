//! How a child enters its group under cgroup v2, where only whole processes move: between
//! fork and exec, the child writes itself into the group's `cgroup.procs`.

// One of the workspace's three unsafe sites (the others: `zygote`, `wire`): a `pre_exec`
// hook, the child's move into its v2 group between fork and exec.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Makes `command`'s child write `0` (itself) to `procs` (its group's `cgroup.procs`, opened
/// by the caller) before it executes the program, so that it runs nothing outside the group.
pub(crate) fn move_child_v2(command: &mut Command, procs: std::fs::File) {
    use std::os::unix::process::CommandExt;
    let fd = procs.as_raw_fd();
    // SAFETY: the hook runs in the child between fork and exec and only calls write(2), which
    // is async-signal-safe, on a descriptor the parent keeps open (`procs` is moved into the
    // closure, which lives as long as `command`); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            let _keep = &procs;
            let written = libc_write(fd, b"0");
            if written == 1 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// write(2), without a crate that allocates on error paths.
fn libc_write(fd: i32, bytes: &[u8]) -> isize {
    // SAFETY: `bytes` is a valid buffer of its length for the duration of the call.
    unsafe { nix::libc::write(fd, bytes.as_ptr().cast(), bytes.len()) }
}
