//! Which device nodes a host's processes may open, under cgroup v1. (cgroup v2 controls devices
//! with an eBPF program attached to the group, which this build does not load yet: under v2 the
//! GPUs are handed out but their nodes are not fenced, and the banner says so.)
//!
//! NVIDIA GPUs are character devices of major 195: `/dev/nvidia<N>` is minor N, `nvidiactl`
//! is 255 and `nvidia-modeset` 254 (both shared by every GPU process); `nvidia-uvm` and
//! `nvidia-uvm-tools` have a major of their own and are left alone. A host may open its own
//! GPUs and the two shared nodes; every other minor of 195 is denied.

use std::io;
use std::path::Path;

/// The major number of NVIDIA's GPU device nodes.
pub(crate) const NVIDIA_MAJOR: u32 = 195;

/// Minors 254 (`nvidia-modeset`) and 255 (`nvidiactl`) serve every GPU process; GPUs are
/// below.
const FIRST_SHARED_MINOR: u32 = 254;

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
