//! Which device nodes a host's processes may open: v1's `devices.deny` list, v2's device
//! program (an eBPF program attached to the group, which the kernel asks at every open of a
//! device node, as runc and systemd do).
//!
//! NVIDIA GPUs are character devices of major 195: `/dev/nvidia<N>` is minor N, `nvidiactl`
//! is 255 and `nvidia-modeset` 254 (both shared by every GPU process); `nvidia-uvm` and
//! `nvidia-uvm-tools` have a major of their own and are left alone. A host may open its own
//! GPUs and the two shared nodes; every other minor of 195 is denied.

use std::io;
use std::os::fd::AsFd;
use std::path::Path;

use super::bpf::{self, Insn};

/// The major number of NVIDIA's GPU device nodes.
pub(crate) const NVIDIA_MAJOR: u32 = 195;

/// Minors 254 (`nvidia-modeset`) and 255 (`nvidiactl`) serve every GPU process; GPUs are
/// below.
const FIRST_SHARED_MINOR: u32 = 254;

/// Where the NVIDIA driver lists its GPUs: a directory per PCI address, each with an
/// `information` file that says the GPU's `Device Minor`.
const DRIVER_GPUS: &str = "/proc/driver/nvidia/gpus";

/// The device minors (`/dev/nvidia<minor>`) of the GPUs nvidia-smi numbers `indices`. Its
/// indices follow the PCI bus order; the driver's minors usually do too, but need not, so they
/// are read from the driver's own list where it is there (else a minor is its index). The
/// list is read once per process: GPUs do not move while the machine runs, and every attempt
/// with GPUs asks.
pub(crate) fn minors(indices: &[u32]) -> Vec<u32> {
    static LISTED: std::sync::OnceLock<Vec<Option<u32>>> = std::sync::OnceLock::new();
    let listed = LISTED.get_or_init(|| driver_minors(Path::new(DRIVER_GPUS)));
    pick(listed, indices)
}

/// [`minors`] from the driver's list at `dir`, read now (the tests' fake list).
#[cfg(test)]
pub(crate) fn minors_in(dir: &Path, indices: &[u32]) -> Vec<u32> {
    pick(&driver_minors(dir), indices)
}

/// The minor of each GPU of the driver's list at `dir`, in bus order (`None` where its
/// `information` does not say).
fn driver_minors(dir: &Path) -> Vec<Option<u32>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut buses: Vec<(String, Option<u32>)> = entries
        .flatten()
        .map(|e| {
            let info = std::fs::read_to_string(e.path().join("information"));
            let minor = info.ok().and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("Device Minor:"))?;
                line.split(':').nth(1)?.trim().parse().ok()
            });
            (e.file_name().to_string_lossy().to_lowercase(), minor)
        })
        .collect();
    // PCI addresses (`0000:3b:00.0`) are fixed-width hex: their text order is the bus order.
    buses.sort();
    buses.into_iter().map(|(_, minor)| minor).collect()
}

/// The minor of each of `indices` in `listed` (bus order), else the index itself.
fn pick(listed: &[Option<u32>], indices: &[u32]) -> Vec<u32> {
    indices
        .iter()
        .map(|&i| {
            let minor = usize::try_from(i).ok().and_then(|i| listed.get(i).copied());
            minor.flatten().unwrap_or(i)
        })
        .collect()
}

/// cgroup v1: denies, in the group `dir`, every NVIDIA GPU minor but `gpus`. The group starts
/// with its parent's list (everything allowed) and v1 cannot carve an exception out of a
/// wildcard, so each other minor is denied on its own; a host without GPUs gets one wildcard
/// rule for the whole major.
pub(crate) fn deny_v1(dir: &Path, gpus: &[u32]) -> io::Result<()> {
    let deny = dir.join("devices.deny");
    if gpus.is_empty() {
        return super::write(&deny, &format!("c {NVIDIA_MAJOR}:* rwm"));
    }
    for minor in (0..FIRST_SHARED_MINOR).filter(|m| !gpus.contains(m)) {
        super::write(&deny, &format!("c {NVIDIA_MAJOR}:{minor} rwm"))?;
    }
    Ok(())
}

/// `statfs` magic of a cgroup v2 tree.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// cgroup v2: attaches to the group `dir` a device program that denies every NVIDIA GPU minor
/// but `gpus`, unless a program is attached already (the group was made with it, and its
/// instance's GPUs have not changed since: see [`super::Group::take_kept`]). A directory that is not
/// in a cgroup v2 tree (the tests' fake tree) gets none.
pub(crate) fn fence_v2(dir: &Path, gpus: &[u32]) -> io::Result<()> {
    let at = |e| super::at(dir, e);
    let group = std::fs::File::open(dir).map_err(at)?;
    if !in_cgroup2(&group).map_err(at)? {
        return Ok(());
    }
    if bpf::device_programs(group.as_fd()).map_err(at)? > 0 {
        return Ok(());
    }
    let program = bpf::load_device_program(&program(gpus)).map_err(at)?;
    bpf::attach_device_program(group.as_fd(), program.as_fd()).map_err(at)
}

/// Whether this process may fence groups like `probe` (a group it makes and removes): loads
/// a device program, attaches it to `probe` and finds it there. A directory outside a cgroup
/// v2 tree (the tests' fake tree) needs no program.
pub(crate) fn probe_v2(probe: &Path) -> io::Result<()> {
    let parent = probe.parent().unwrap_or(probe);
    let at = |e| super::at(parent, e);
    if !in_cgroup2(&std::fs::File::open(parent).map_err(at)?).map_err(at)? {
        return Ok(());
    }
    let _ = std::fs::remove_dir(probe);
    std::fs::create_dir(probe).map_err(|e| super::at(probe, e))?;
    let fenced = fence_v2(probe, &[]).and_then(|()| {
        let group = std::fs::File::open(probe)?;
        match bpf::device_programs(group.as_fd())? {
            0 => Err(io::Error::other("the program attached is not there")),
            _ => Ok(()),
        }
    });
    let _ = std::fs::remove_dir(probe);
    fenced.map_err(|e| {
        io::Error::new(e.kind(), format!("cannot fence GPU device nodes with a cgroup device program ({e}): run the server as root (or with CAP_BPF, CAP_SYS_ADMIN and CAP_NET_ADMIN), in a group where no ancestor's device program forbids others"))
    })
}

/// Whether `dir` is a directory of a cgroup v2 tree.
fn in_cgroup2(dir: &std::fs::File) -> io::Result<bool> {
    let fs = rustix::fs::fstatfs(dir)?;
    #[allow(clippy::useless_conversion)] // f_type's width differs between targets
    Ok(i64::from(fs.f_type) == CGROUP2_SUPER_MAGIC)
}

/// The device program for a host with `gpus`: 1 (allow) for every access but to a GPU node
/// of major 195 below the shared minors that is not one of `gpus`, 0 (deny) for those. Its
/// context (`struct bpf_cgroup_dev_ctx`): the access type (the device's type in the low 16
/// bits: 2 for a character device), the major and the minor, as 32-bit words.
pub(crate) fn program(gpus: &[u32]) -> Vec<Insn> {
    let mut gpus: Vec<i32> = gpus
        .iter()
        .filter(|&&g| g < FIRST_SHARED_MINOR)
        .filter_map(|&g| i32::try_from(g).ok())
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    // r2 = type, r3 = major, r4 = minor.
    let mut insns = vec![
        ldx_w(2, 0),
        Insn {
            code: ALU64_AND_K,
            regs: 2,
            off: 0,
            imm: 0xffff,
        },
        ldx_w(3, 4),
        ldx_w(4, 8),
    ];
    let tests = [
        (JNE_K, 2, BPF_DEVCG_DEV_CHAR),
        (JNE_K, 3, NVIDIA_MAJOR as i32),
        (JGE_K, 4, FIRST_SHARED_MINOR as i32),
    ];
    let jumps: Vec<(u8, u8, i32)> = tests
        .into_iter()
        .chain(gpus.into_iter().map(|g| (JEQ_K, 4, g)))
        .collect();
    // The jumps, then deny (2 instructions), then allow.
    let allow = insns.len() + jumps.len() + 2;
    for (code, reg, imm) in jumps {
        let off = i16::try_from(allow - insns.len() - 1).unwrap_or(i16::MAX);
        insns.push(Insn {
            code,
            regs: reg,
            off,
            imm,
        });
    }
    insns.extend([mov_r0(0), EXIT, mov_r0(1), EXIT]);
    insns
}

/// `bpf_cgroup_dev_ctx`'s device type of a character device.
const BPF_DEVCG_DEV_CHAR: i32 = 2;
/// Opcodes (linux/bpf_common.h, linux/bpf.h): class | operation | source.
const LDX_MEM_W: u8 = 0x61;
const ALU64_AND_K: u8 = 0x57;
const ALU64_MOV_K: u8 = 0xb7;
const JEQ_K: u8 = 0x15;
const JGE_K: u8 = 0x35;
const JNE_K: u8 = 0x55;
const EXIT: Insn = Insn {
    code: 0x95,
    regs: 0,
    off: 0,
    imm: 0,
};

/// `dst = *(u32 *)(r1 + off)`: a word of the context.
fn ldx_w(dst: u8, off: i16) -> Insn {
    Insn {
        code: LDX_MEM_W,
        regs: (1 << 4) | dst,
        off,
        imm: 0,
    }
}

/// `r0 = value`: the program's answer.
fn mov_r0(value: i32) -> Insn {
    Insn {
        code: ALU64_MOV_K,
        regs: 0,
        off: 0,
        imm: value,
    }
}
