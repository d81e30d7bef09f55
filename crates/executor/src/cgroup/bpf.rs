//! The three `bpf(2)` commands cgroup v2's device control needs: load a device program, attach
//! it to a group, and ask whether a group has one. The kernel's interface is a union of
//! per-command structures (`union bpf_attr`, linux/bpf.h); each command here passes its own
//! structure padded with zeros to [`ATTR_SIZE`] bytes, as libbpf does: the kernel requires
//! every byte past the fields it knows to be zero, and newer kernels write fields of their own
//! back (a query's `revision`) inside the union, which the padding holds.

// One of the workspace's five unsafe sites (the others: `zygote`, `wire`, `reap`, `cgroup::enter`): the
// system call has no safe wrapper in the crates this workspace uses.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: nix::libc::c_long = 5;
const BPF_PROG_ATTACH: nix::libc::c_long = 8;
const BPF_PROG_QUERY: nix::libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
/// Every program attached to a group and to its ancestors runs, and all must allow: a
/// program of systemd's (or podman's, below) keeps its say.
const BPF_F_ALLOW_MULTI: u32 = 1 << 1;

/// The size passed for every command: larger than any kernel's `union bpf_attr` so far (a
/// kernel reads what it knows and checks that the rest is zero).
const ATTR_SIZE: usize = 192;

/// One instruction (`struct bpf_insn`): an opcode, the destination and source registers in one
/// byte (source high), an offset and an immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub(super) struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

#[repr(C, align(8))]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    zero: [u8; ATTR_SIZE - 72],
}

#[repr(C, align(8))]
struct ProgAttach {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    zero: [u8; ATTR_SIZE - 16],
}

#[repr(C, align(8))]
struct ProgQuery {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    zero: [u8; ATTR_SIZE - 28],
}

// Every structure is the whole size, with no padding the compiler leaves uninitialised.
const _: () = assert!(std::mem::size_of::<ProgLoad>() == ATTR_SIZE);
const _: () = assert!(std::mem::size_of::<ProgAttach>() == ATTR_SIZE);
const _: () = assert!(std::mem::size_of::<ProgQuery>() == ATTR_SIZE);

/// `bpf(cmd, attr, size_of(attr))`.
fn bpf<T>(cmd: nix::libc::c_long, attr: &mut T) -> io::Result<nix::libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed `repr(C)` structure of the layout the
    // kernel expects for `cmd`, every byte of it initialised (no implicit padding: asserted
    // above), and its size, larger than any kernel's union, is passed with it; the kernel
    // writes only inside the union. Pointers inside it (instructions, license) are to memory
    // the caller keeps alive across the call.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            std::mem::size_of::<T>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Loads `insns` as a cgroup device program; its descriptor.
pub(super) fn load_device_program(insns: &[Insn]) -> io::Result<OwnedFd> {
    let license = c"GPL";
    let mut name = [0u8; 16];
    name[..6].copy_from_slice(b"qm_gpu");
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: u32::try_from(insns.len()).map_err(io::Error::other)?,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 0,
        log_size: 0,
        log_buf: 0,
        kern_version: 0,
        prog_flags: 0,
        prog_name: name,
        prog_ifindex: 0,
        expected_attach_type: BPF_CGROUP_DEVICE,
        zero: [0; ATTR_SIZE - 72],
    };
    let fd = bpf(BPF_PROG_LOAD, &mut attr)?;
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: on success BPF_PROG_LOAD returns a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches the device program `program` to the group open as `group`; it stays attached
/// while the group exists.
pub(super) fn attach_device_program(
    group: BorrowedFd<'_>,
    program: BorrowedFd<'_>,
) -> io::Result<()> {
    let mut attr = ProgAttach {
        target_fd: fd_u32(group),
        attach_bpf_fd: fd_u32(program),
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        zero: [0; ATTR_SIZE - 16],
    };
    bpf(BPF_PROG_ATTACH, &mut attr).map(drop)
}

/// How many device programs are attached to the group open as `group` itself (not its
/// ancestors').
pub(super) fn device_programs(group: BorrowedFd<'_>) -> io::Result<u32> {
    let mut attr = ProgQuery {
        target_fd: fd_u32(group),
        attach_type: BPF_CGROUP_DEVICE,
        query_flags: 0,
        attach_flags: 0,
        prog_ids: 0,
        prog_cnt: 0,
        zero: [0; ATTR_SIZE - 28],
    };
    bpf(BPF_PROG_QUERY, &mut attr)?;
    Ok(attr.prog_cnt)
}

fn fd_u32(fd: BorrowedFd<'_>) -> u32 {
    // A descriptor is never negative.
    fd.as_raw_fd().unsigned_abs()
}
