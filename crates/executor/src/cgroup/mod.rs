//! Control groups: each host of an attempt runs in its instance's control group
//! (`instance_group`), which its supervisor takes (makes, the first time) and limits before
//! the host's first process starts, and leaves empty after its last one ended, for the
//! instance's next attempt. The group holds the host to its instance: a memory limit (no swap
//! beyond it), a CPU quota, a pids limit and, for the GPUs, only the instance's own device
//! nodes. A stop that reaches SIGKILL kills the whole group, so nothing the job started
//! escapes by `setsid` or a double fork; the group also says whether the kernel's OOM killer
//! struck.
//!
//! Both interfaces are supported: cgroup v2 (one unified tree, what current distributions
//! mount) and cgroup v1 (one tree per controller: memory, pids, cpu, devices, freezer). The
//! attempt's CPU time is not read from a group: its supervisor sums it as it reaps each process
//! (`wait4`), which also spares v1 a sixth tree (`cpuacct`, where mounted apart) to join. [`detect`] finds which one this machine offers, from
//! `/proc/self/mountinfo` and `/proc/self/cgroup`. Every file is written through a directory
//! path, so the tests run the module over a fake tree of plain files.
//!
//! Instances' groups live under `<the server's own group>/qm-<key>`, where the key is a hash
//! of the data dir: two servers on one machine never touch each other's groups, and a
//! delegated subtree (systemd's `Delegate=yes`) is all the server needs.

use qm_core::AttemptId;
mod bpf;
pub(crate) mod detect;
mod devices;
mod enter;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

pub use detect::{detect, key_for, Found};

/// How many times, 10 ms apart, `take` looks whether a group it killed emptied.
const TAKE_WAITS: u32 = 20;

/// The CFS period a CPU quota is expressed in, in microseconds (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// Where instances' groups are made: the server's `qm-<key>` directory in each tree it uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", rename_all = "snake_case")]
pub enum Hierarchy {
    /// The unified hierarchy: one directory, with memory, cpu and pids enabled for its children.
    V2 {
        /// `<mount>/<server's group>/qm-<key>`.
        dir: PathBuf,
        /// Whether each group gets a device program that fences the GPU nodes: false only for
        /// a server that may not load one and may run without ([`Hierarchy::fence_probe`]).
        #[serde(default = "fenced")]
        fence_devices: bool,
    },
    /// One tree per controller.
    V1 {
        /// `<mount of the controller>/<server's group there>/qm-<key>`, per controller.
        dirs: V1Dirs,
    },
}

impl Hierarchy {
    /// Makes the server's `qm-<key>` directories, once at start, before any supervisor is
    /// forked. Under v2 a group hands controllers to its children only while it holds no
    /// process itself, so the server moves into a leaf beside them (`qm-<key>-server`) and
    /// enables memory, cpu and pids for `qm-<key>` and for the instances' groups below it.
    /// Then it weighs `qm-<key>`'s CPU share (v1 `cpu.shares`, v2 `cpu.weight`; why and how
    /// much: docs/security.md, "CPU").
    pub fn prepare(&self) -> io::Result<()> {
        let cpus = Machine::this().cpu_millis;
        match self {
            Hierarchy::V1 { dirs } => {
                dirs.all()
                    .into_iter()
                    .try_for_each(|d| make_dir(d).map(drop))?;
                weigh(&dirs.cpu.join("cpu.shares"), v1_shares(cpus));
                Ok(())
            }
            Hierarchy::V2 { dir, .. } => {
                let parent = dir.parent().unwrap_or(dir);
                let enable = "+memory +cpu +pids";
                if write(&parent.join("cgroup.subtree_control"), enable).is_err() {
                    let mut leaf = dir.clone().into_os_string();
                    leaf.push("-server");
                    let leaf = PathBuf::from(leaf);
                    make_dir(&leaf)?;
                    write(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
                    write(&parent.join("cgroup.subtree_control"), enable).map_err(|e| {
                        io::Error::new(e.kind(), format!("{e}: another process shares the server's control group; run the server in a group of its own (systemd: a service with Delegate=yes)"))
                    })?;
                }
                make_dir(dir)?;
                write(&dir.join("cgroup.subtree_control"), enable)?;
                weigh(&dir.join("cpu.weight"), v2_weight(cpus));
                Ok(())
            }
        }
    }

    /// Whether the server may fence GPU nodes under this interface: v1's devices hierarchy
    /// always; under v2, a device program is loaded, attached to a new group below `qm-<key>`,
    /// found there and removed with the group (root, or `CAP_BPF`, `CAP_SYS_ADMIN` and
    /// `CAP_NET_ADMIN`, and no ancestor's program attached without `BPF_F_ALLOW_MULTI`).
    /// Call it after [`Hierarchy::prepare`].
    pub fn fence_probe(&self) -> io::Result<()> {
        match self {
            Hierarchy::V1 { .. } => Ok(()),
            Hierarchy::V2 { dir, .. } => devices::probe_v2(&dir.join("qm-probe-devices")),
        }
    }

    /// This interface without device programs (see [`Hierarchy::fence_probe`]).
    pub fn without_device_fence(self) -> Self {
        match self {
            Hierarchy::V2 { dir, .. } => Hierarchy::V2 {
                dir,
                fence_devices: false,
            },
            v1 => v1,
        }
    }

    /// The interface, for the banner.
    pub fn describe(&self) -> String {
        match self {
            Hierarchy::V2 {
                dir,
                fence_devices: true,
            } => format!("cgroup v2 under {}", dir.display()),
            Hierarchy::V2 { dir, .. } => format!(
                "cgroup v2 under {}; GPU device nodes NOT fenced: this server may not load device programs",
                dir.display()
            ),
            Hierarchy::V1 { dirs } => format!("cgroup v1 under {}", dirs.memory.display()),
        }
    }
}

/// Removes what of the server's `qm-<key>` directories is empty, and those directories if
/// they are left empty: at a stop with no attempt running, so that a server whose data dir
/// goes (or a test's) leaves no tree behind in the kernel, where every group costs each CFS
/// quota write a step. Nothing is killed: a group that holds a process, or anything else the
/// server did not make, stays, and so does its `qm-<key>` directory. Returns how many groups
/// went. A group is made again, whole, when an attempt next takes it.
pub(crate) fn remove_empty(hierarchy: &Hierarchy) -> usize {
    let dirs: Vec<&Path> = match hierarchy {
        Hierarchy::V2 { dir, .. } => vec![dir],
        Hierarchy::V1 { dirs } => dirs.all(),
    };
    let mut removed = 0;
    for dir in dirs {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let ours = entry.file_name().to_string_lossy().starts_with("qm-")
                && entry.file_type().is_ok_and(|t| t.is_dir());
            // A group with a process, or with a group below it, is busy: rmdir refuses.
            if ours && fs::remove_dir(entry.path()).is_ok() {
                removed += 1;
            }
        }
        let _ = fs::remove_dir(dir);
    }
    removed
}

/// Kills and removes every group of the server's but `keep` (the groups live attempts run
/// in), at start, before any attempt is launched: what a server or supervisor that died left,
/// and groups of instances the config may have changed (a group is made again, with its
/// device rules, when an attempt next takes it). Returns the groups that could not be emptied
/// and removed within a second, with why.
pub(crate) fn sweep(hierarchy: &Hierarchy, keep: &[String]) -> Vec<String> {
    let dirs: Vec<PathBuf> = match hierarchy {
        Hierarchy::V2 { dir, .. } => vec![dir.clone()],
        Hierarchy::V1 { dirs } => dirs.all().into_iter().map(Path::to_path_buf).collect(),
    };
    let mut names = std::collections::BTreeSet::new();
    for dir in dirs {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with("qm-") && entry.file_type().is_ok_and(|t| t.is_dir());
            if ours && !keep.contains(&name) {
                names.insert(name);
            }
        }
    }
    discard(hierarchy, names)
}

/// Kills what is in each group of `names` and removes it; returns those that could not be
/// within a second, with why. The groups of an attempt whose supervisor died go this way, so
/// that the next attempt makes them again whole (the supervisor may have died half-way
/// through taking them, before their device rules were written).
pub(crate) fn discard(
    hierarchy: &Hierarchy,
    names: impl IntoIterator<Item = String>,
) -> Vec<String> {
    let mut left = Vec::new();
    for name in names {
        let group = Group::named(hierarchy, &name);
        let mut result = group.remove();
        for _ in 0..10 {
            if result.is_ok() {
                break;
            }
            let _ = group.kill();
            std::thread::sleep(std::time::Duration::from_millis(100));
            result = group.remove();
        }
        if let Err(e) = result {
            left.push(format!("{name}: {e}"));
        }
    }
    left
}

/// Serde's default for [`Hierarchy::V2`]'s `fence_devices`: a group of an older build's
/// settings is fenced.
fn fenced() -> bool {
    true
}

/// The v1 CPU weight of all the server's attempts together, against the other tasks of the
/// server's own group (the server's threads and its supervisors among them), each at the
/// kernel's default of 1024: four such tasks per CPU of the machine, so that a busy thread of
/// the server's still gets a fifth of a CPU the jobs fill, and the jobs, the machine's work,
/// lose little to the bursts of the server and its supervisors. At the kernel's default the
/// jobs of every instance together weighed as one task: a drain of 2,000 trivial jobs on 64
/// instances of a 2-core machine waited 20 ms a spawn for its turn (ratio 0.30 against raw
/// spawns; 0.42 at this weight, 0.33 at one task per CPU, kubelet's weight for its pods).
fn v1_shares(cpu_millis: u64) -> u64 {
    (cpu_millis * 4096 / 1000).clamp(2, 262_144)
}

/// The v2 CPU weight of all the server's attempts together, against the sibling groups in
/// the server's own group, each at the default of 100: one such group per CPU. Not v1's four:
/// under v2 the server and all its supervisors share one group (`qm-<key>-server`, or the
/// server's own), which v1's reasoning per task would leave a ninth of a 2-core machine the
/// jobs fill; kubelet weighs its pods so. (No v2 machine measured it.)
fn v2_weight(cpu_millis: u64) -> u64 {
    (cpu_millis * 100 / 1000).clamp(1, 10_000)
}

/// Writes a CPU weight where the kernel has weights (fair group scheduling: the file exists).
/// A weight the server may not write is said and left: it tunes who waits for a contended CPU,
/// and limits nothing the server promises.
fn weigh(file: &Path, weight: u64) {
    match update(file, &weight.to_string()) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot set the CPU weight of the jobs' control group; they weigh the kernel's default")
        }
    }
}

/// Makes `dir` unless it exists; whether it made it.
fn make_dir(dir: &Path) -> io::Result<bool> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(at(dir, e)),
    }
}

/// The v1 controllers' directories for instances' groups. Controllers mounted together (say
/// `cpu,cpuacct`) share one directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct V1Dirs {
    /// `memory`: the limit, the OOM count, the peak.
    pub memory: PathBuf,
    /// `pids`: the process limit.
    pub pids: PathBuf,
    /// `cpu`: the CFS quota.
    pub cpu: PathBuf,
    /// `devices`: which device nodes may be opened.
    pub devices: PathBuf,
    /// `freezer`: a group is frozen before it is killed, so that nothing forks meanwhile.
    pub freezer: PathBuf,
}

impl V1Dirs {
    /// Every directory, each once, in a fixed order.
    fn all(&self) -> Vec<&Path> {
        let dirs: [&Path; 5] = [
            &self.memory,
            &self.pids,
            &self.cpu,
            &self.devices,
            &self.freezer,
        ];
        let mut unique: Vec<&Path> = Vec::with_capacity(dirs.len());
        for dir in dirs {
            if !unique.contains(&dir) {
                unique.push(dir);
            }
        }
        unique
    }
}

/// What one host of an attempt may use: one instance's share of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Memory, in bytes; swap is not allowed beyond it.
    pub memory_bytes: u64,
    /// CPU, in thousandths of a CPU (1500: one and a half CPUs); 0: no quota.
    pub cpu_millis: u64,
    /// Processes and threads.
    pub pids: u64,
    /// The GPUs (device minors of `/dev/nvidia<N>`) this host may open; every other NVIDIA
    /// GPU node is denied.
    pub gpus: Vec<u32>,
}

/// One instance's share of the machine: what each host of an attempt on it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Share {
    /// Memory, in bytes.
    pub memory_bytes: u64,
    /// CPU, in thousandths of a CPU.
    pub cpu_millis: u64,
    /// Processes and threads.
    pub pids: u64,
}

/// How an attempt is confined: where its hosts' groups go and what each may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    /// Where the groups go.
    pub hierarchy: Hierarchy,
    /// One instance's share.
    pub share: Share,
}

impl Confinement {
    /// The limits of a host with the GPUs nvidia-smi numbers `gpus`.
    pub(crate) fn limits(&self, gpus: &[u32]) -> Limits {
        Limits {
            memory_bytes: self.share.memory_bytes,
            cpu_millis: self.share.cpu_millis,
            pids: self.share.pids,
            gpus: if gpus.is_empty() {
                Vec::new()
            } else {
                devices::minors(gpus)
            },
        }
    }
}

/// What the machine has to share out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Machine {
    /// Memory, in bytes.
    pub memory_bytes: u64,
    /// CPUs, in thousandths.
    pub cpu_millis: u64,
}

impl Machine {
    /// This machine: `MemTotal` of `/proc/meminfo` and the CPUs the server may run on, read
    /// once.
    pub fn this() -> Self {
        static MACHINE: std::sync::OnceLock<Machine> = std::sync::OnceLock::new();
        *MACHINE.get_or_init(Self::read)
    }

    fn read() -> Self {
        let memory_kib = fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                let line = t.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .unwrap_or(0);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        Self {
            memory_bytes: memory_kib * 1024,
            cpu_millis: cpus * 1000,
        }
    }
}

/// Memory kept for the server (and the system) when instances are sized by default: 1 GiB,
/// or a quarter of a machine under 4 GiB. No CPU is kept: a quota is a ceiling, and the
/// kernel's scheduler gives the server its turn however busy the jobs are (their weight,
/// [`v1_shares`], [`v2_weight`], leaves the server a share of a CPU they fill).
fn server_reserve(memory_bytes: u64) -> u64 {
    (1u64 << 30).min(memory_bytes / 4)
}

/// A host's processes and threads at once, unless its pool says (`max_pids`).
pub(crate) const DEFAULT_MAX_PIDS: u64 = 16_384;

/// The smallest default memory share, so that a machine cut into many instances still starts
/// an interpreter in each.
const MIN_MEMORY_BYTES: u64 = 256 << 20;

/// The smallest CPU share: the kernel takes no quota under a millisecond per 100 ms period.
const MIN_CPU_MILLIS: u64 = 10;

/// One instance of `instance_type`'s share. A pool that sets `memory_gib` or `vcpus` gets
/// that; what the machine has left, less the server's reserve of memory, is divided evenly
/// among the instances of the pools that do not. A type no pool has (a reload removed it) gets
/// the default share.
pub(crate) fn share(pools: &[crate::PoolSpec], machine: Machine, instance_type: &str) -> Share {
    let gib = |g: f64| (g * f64::from(1u32 << 30)) as u64;
    let millis = |c: f64| (c * 1000.0) as u64;
    let split = |total: u64, given: &dyn Fn(&crate::PoolSpec) -> Option<u64>, floor: u64| {
        let (mut taken, mut undecided) = (0u64, 0u64);
        for p in pools {
            match given(p) {
                Some(v) => taken += v * u64::from(p.count),
                None => undecided += u64::from(p.count),
            }
        }
        (total.saturating_sub(taken) / undecided.max(1)).max(floor)
    };
    let pool = pools.iter().find(|p| p.instance_type == instance_type);
    let (memory_gib, vcpus, max_pids) =
        pool.map_or((None, None, None), |p| (p.memory_gib, p.vcpus, p.max_pids));
    let memory = machine.memory_bytes - server_reserve(machine.memory_bytes);
    Share {
        memory_bytes: memory_gib.map_or_else(
            || split(memory, &|p| p.memory_gib.map(gib), MIN_MEMORY_BYTES),
            gib,
        ),
        cpu_millis: vcpus
            .map_or_else(
                || split(machine.cpu_millis, &|p| p.vcpus.map(millis), MIN_CPU_MILLIS),
                millis,
            )
            .max(MIN_CPU_MILLIS),
        pids: max_pids.unwrap_or(DEFAULT_MAX_PIDS),
    }
}

/// The control group of the server's instance `id`. A host runs in its instance's group; the
/// group outlives the attempt, empty, and the next attempt on the instance takes it over: a
/// cgroup v1 group is a directory of dozens of files in each of five trees, and making and
/// removing one per attempt cost the supervisor about 0.7 ms of CPU (perf, in a drain of
/// trivial jobs).
pub(crate) fn instance_group(id: usize) -> String {
    format!("qm-instance-{id}")
}

/// The groups of `instances`, in their order.
pub(crate) fn instance_groups(instances: &[usize]) -> Vec<String> {
    instances.iter().map(|&i| instance_group(i)).collect()
}

/// The control groups of an attempt placed on `instances`: each instance's own group, unless
/// a live attempt runs in it (one adopted after the pools changed, whose groups are named after
/// the instances it was launched on): then one of this attempt's own, removed at the next
/// start. `taken`: the groups live attempts run in.
pub(crate) fn names_for<'a>(
    instances: &[usize],
    taken: impl IntoIterator<Item = &'a String>,
    attempt: AttemptId,
) -> Vec<String> {
    let taken: std::collections::BTreeSet<&String> = taken.into_iter().collect();
    instances
        .iter()
        .map(|&i| {
            let name = instance_group(i);
            if taken.contains(&name) {
                format!("{name}-attempt-{attempt}")
            } else {
                name
            }
        })
        .collect()
}

/// One host's control group.
#[derive(Debug)]
pub(crate) struct Group {
    hierarchy: Hierarchy,
    name: String,
    /// The group's OOM kills when it was taken: the kernel's count never goes back.
    oom_baseline: u64,
    /// Where the attempt's peak memory is read: the group's peak since it was taken.
    peak: Peak,
}

/// How a group's peak memory since it was taken can be read.
#[derive(Debug)]
enum Peak {
    /// From its peak file: v1 resets it on a write of 0, and a new v2 group's starts at 0.
    File,
    /// Through this descriptor of v2's `memory.peak`, reset through it (kernel 6.12 and
    /// later keep a peak per open file).
    Reset(fs::File),
    /// Not at all: a v2 group taken again on an older kernel.
    Unknown,
}

/// What the thread that spawns a host's process does to enter the host's group under v1:
/// write itself into each tree's `tasks` (nothing under v2). Owned, so that the thread can be
/// set up before the attempt may start and spawn at the go.
#[derive(Debug)]
pub(crate) struct ThreadEntry(Vec<PathBuf>);

impl ThreadEntry {
    /// Moves the calling thread into the group, in every tree.
    pub(crate) fn enter(&self) -> io::Result<()> {
        // `0`, the calling thread, rather than its tid: the kernel then moves the thread
        // without taking the global threadgroup lock, whose first write after a quiet spell
        // waits out an RCU grace period (about 1 ms per tree on this 2-core VM, 6 ms a spawn;
        // `0` costs 0.07 ms a tree).
        self.0.iter().try_for_each(|tasks| write(tasks, "0"))
    }
}

impl Group {
    /// The group `name` under `hierarchy`, made or not.
    pub fn named(hierarchy: &Hierarchy, name: &str) -> Self {
        Self {
            hierarchy: hierarchy.clone(),
            name: name.to_string(),
            oom_baseline: 0,
            peak: Peak::Unknown,
        }
    }

    /// [`Group::take_kept`] of a group whose limits nobody vouches for.
    #[cfg(test)]
    pub(crate) fn take(hierarchy: &Hierarchy, name: &str, limits: &Limits) -> io::Result<Self> {
        Self::take_kept(hierarchy, name, limits, false)
    }

    /// Takes the group `name` for a host: makes it if it is new, sets `limits` and notes its
    /// OOM count. The device rules go with a new group only: they follow the instance, whose
    /// GPUs never change while the group exists (a start removes every group no attempt holds,
    /// and a group taken half-way is removed). A group that still holds a process (something
    /// an earlier attempt left, that outlived its kills) is killed first, and refused if it
    /// does not empty: the host would share its limits with it.
    ///
    /// With `kept`, the server knows the group to hold `limits` already
    /// ([`crate::supervisor::protocol::Launch::limits_kept`]): unless it has to be made, it is
    /// left as it is (no limit file read back or written).
    pub fn take_kept(
        hierarchy: &Hierarchy,
        name: &str,
        limits: &Limits,
        kept: bool,
    ) -> io::Result<Self> {
        let mut group = Self::named(hierarchy, name);
        let mut new = false;
        for dir in group.dirs() {
            new |= make_dir(&dir)?;
        }
        let limited = if new || !kept {
            group.limit(limits, new)
        } else {
            Ok(())
        };
        if let Err(e) = limited {
            if new {
                let _ = group.remove();
            }
            return Err(e);
        }
        if !new && !group.is_vacant() {
            let _ = group.kill();
            let vacated = (0..TAKE_WAITS).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                group.is_vacant()
            });
            if !vacated {
                return Err(io::Error::other(format!(
                    "{name} still holds a process of an earlier attempt after a SIGKILL"
                )));
            }
        }
        group.oom_baseline = group.oom_count();
        group.peak = group.reset_peak(new);
        Ok(group)
    }

    /// Starts the group's peak memory again, for the attempt taking it.
    fn reset_peak(&self, new: bool) -> Peak {
        match &self.hierarchy {
            Hierarchy::V1 { dirs } => {
                let file = dirs
                    .memory
                    .join(&self.name)
                    .join("memory.max_usage_in_bytes");
                match write(&file, "0") {
                    Ok(()) => Peak::File,
                    Err(_) => Peak::Unknown,
                }
            }
            Hierarchy::V2 { dir, .. } => {
                let file = dir.join(&self.name).join("memory.peak");
                let reset = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(file)
                    .and_then(|mut f| io::Write::write_all(&mut f, b"reset\n").map(|()| f));
                match reset {
                    Ok(f) => Peak::Reset(f),
                    Err(_) if new => Peak::File,
                    Err(_) => Peak::Unknown,
                }
            }
        }
    }

    /// The most memory the group's processes held at once since it was taken (bytes), where
    /// the kernel says.
    pub fn peak_memory_bytes(&self) -> Option<u64> {
        match (&self.peak, &self.hierarchy) {
            (Peak::Unknown, _) => None,
            (Peak::Reset(f), _) => {
                let mut buf = [0u8; 32];
                let n = rustix::io::pread(f, &mut buf, 0).unwrap_or(0);
                std::str::from_utf8(&buf[..n])
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
            }
            (Peak::File, Hierarchy::V1 { dirs }) => read_last_u64(
                &dirs
                    .memory
                    .join(&self.name)
                    .join("memory.max_usage_in_bytes"),
            ),
            (Peak::File, Hierarchy::V2 { dir, .. }) => {
                read_last_u64(&dir.join(&self.name).join("memory.peak"))
            }
        }
    }

    /// The group's directories: one (v2), one per mounted v1 tree.
    pub fn dirs(&self) -> Vec<PathBuf> {
        match &self.hierarchy {
            Hierarchy::V2 { dir, .. } => vec![dir.join(&self.name)],
            Hierarchy::V1 { dirs } => dirs.all().iter().map(|d| d.join(&self.name)).collect(),
        }
    }

    /// Writes every limit that differs from what the group holds (a group taken again mostly
    /// holds them already, and a CFS quota write costs the kernel a pass over every CPU), and
    /// the device rules: v1's if `devices` (a new group), v2's program unless one is attached.
    fn limit(&self, limits: &Limits, devices: bool) -> io::Result<()> {
        // The kernel keeps memory limits in whole pages, and reads them back so.
        let memory = (limits.memory_bytes & !(PAGE - 1)).to_string();
        let quota = (limits.cpu_millis > 0).then(|| limits.cpu_millis * CPU_PERIOD_US / 1000);
        match &self.hierarchy {
            Hierarchy::V2 { dir, fence_devices } => {
                let dir = dir.join(&self.name);
                update(&dir.join("memory.max"), &memory)?;
                update(&dir.join("memory.swap.max"), "0")?;
                let cpu = match quota {
                    Some(q) => format!("{q} {CPU_PERIOD_US}"),
                    None => format!("max {CPU_PERIOD_US}"),
                };
                update(&dir.join("cpu.max"), &cpu)?;
                update(&dir.join("pids.max"), &limits.pids.to_string())?;
                // Looked at whenever the limits are (one system call): a group made by a
                // build that attached no program may be taken again after an upgrade, whose
                // restart leaves no limits vouched for (`Launch::limits_kept`).
                if *fence_devices {
                    devices::fence_v2(&dir, &limits.gpus)?;
                }
                Ok(())
            }
            Hierarchy::V1 { dirs } => {
                let memory_dir = dirs.memory.join(&self.name);
                let limit = memory_dir.join("memory.limit_in_bytes");
                let memsw = memory_dir.join("memory.memsw.limit_in_bytes");
                // The swap limit (memsw) may never be below the memory limit: lowered, memory
                // goes first; raised (a reload gave the instance more), the kernel refuses
                // memory above memsw, so memsw goes first.
                if !memsw.exists() {
                    update(&limit, &memory)?;
                } else if update(&limit, &memory).is_ok() {
                    update(&memsw, &memory)?;
                } else {
                    update(&memsw, &memory)?;
                    update(&limit, &memory)?;
                }
                let cpu = dirs.cpu.join(&self.name);
                update(&cpu.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                let quota = quota.map_or_else(|| "-1".to_string(), |q| q.to_string());
                update(&cpu.join("cpu.cfs_quota_us"), &quota)?;
                update(
                    &dirs.pids.join(&self.name).join("pids.max"),
                    &limits.pids.to_string(),
                )?;
                if devices {
                    devices::deny_v1(&dirs.devices.join(&self.name), &limits.gpus)?;
                }
                Ok(())
            }
        }
    }

    /// Makes what `command` spawns start in the group. Under v1 the spawning thread joins the
    /// group (what the returned [`ThreadEntry`] does), so spawn from a thread that only spawns:
    /// a child starts in its parent thread's groups. Under v2, where only whole processes
    /// move, the child moves itself between fork and exec, and the entry does nothing.
    pub fn enrol(&self, command: &mut Command) -> io::Result<ThreadEntry> {
        match &self.hierarchy {
            Hierarchy::V1 { .. } => Ok(ThreadEntry(
                self.dirs().iter().map(|d| d.join("tasks")).collect(),
            )),
            Hierarchy::V2 { dir, .. } => {
                let procs = fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join(&self.name).join("cgroup.procs"))
                    .map_err(|e| at(&dir.join(&self.name), e))?;
                enter::move_child_v2(command, procs);
                Ok(ThreadEntry(Vec::new()))
            }
        }
    }

    /// The pids in the group and in any group below it (podman's), this process aside (see
    /// [`not_ours`]).
    pub fn procs(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        collect_procs(&self.main_dir(), &mut pids);
        pids.retain(|&p| not_ours(p));
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Whether no process but this one is in the group itself (one read: what a host leaves
    /// behind is in its group, not below it, but for podman's containers, which podman
    /// removes).
    pub fn is_vacant(&self) -> bool {
        fs::read_to_string(self.main_dir().join("cgroup.procs")).map_or(true, |t| {
            !t.lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .any(not_ours)
        })
    }

    /// The directory whose `cgroup.procs` lists the group's processes: the group's own
    /// (v2), its memory tree's (v1; every v1 tree lists the same).
    fn main_dir(&self) -> PathBuf {
        match &self.hierarchy {
            Hierarchy::V2 { dir, .. } => dir.join(&self.name),
            Hierarchy::V1 { dirs } => dirs.memory.join(&self.name),
        }
    }

    /// SIGKILLs every process of the group at once. v2 has `cgroup.kill`; under v1 the group
    /// is frozen first, so that nothing forks or exits (and frees its pid for reuse) between
    /// reading its pids and killing them, then thawed, and the kills land.
    pub fn kill(&self) -> io::Result<()> {
        match &self.hierarchy {
            Hierarchy::V2 { dir, .. } => write(&dir.join(&self.name).join("cgroup.kill"), "1"),
            Hierarchy::V1 { .. } if self.procs().is_empty() => Ok(()),
            Hierarchy::V1 { dirs } => {
                let freezer = dirs.freezer.join(&self.name);
                let state = freezer.join("freezer.state");
                write(&state, "FROZEN")?;
                // FREEZING until every task stopped; a task in an uninterruptible sleep can
                // hold it there, so the kill goes on after a bounded wait.
                for _ in 0..100 {
                    if fs::read_to_string(&state).is_ok_and(|s| s.trim() == "FROZEN") {
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                for pid in self.procs() {
                    // Frozen, so still the group's: its pid cannot have been reused.
                    crate::group::signal_pid(pid, nix::sys::signal::Signal::SIGKILL);
                }
                write(&state, "THAWED")
            }
        }
    }

    /// How many times the kernel's OOM killer killed a process of the group for its limit
    /// since the group was taken.
    pub fn oom_kills(&self) -> u64 {
        self.oom_count().saturating_sub(self.oom_baseline)
    }

    /// The kernel's count of the group's OOM kills.
    fn oom_count(&self) -> u64 {
        let (file, key) = match &self.hierarchy {
            Hierarchy::V2 { dir, .. } => (dir.join(&self.name).join("memory.events"), "oom_kill"),
            Hierarchy::V1 { dirs } => (
                dirs.memory.join(&self.name).join("memory.oom_control"),
                "oom_kill",
            ),
        };
        read_key(&file, key).unwrap_or(0)
    }

    /// Removes the group (and any group below it); an error when a process is still in it.
    /// A group already gone is removed.
    pub fn remove(&self) -> io::Result<()> {
        for dir in self.dirs() {
            remove_tree(&dir)?;
        }
        Ok(())
    }
}

/// Writes `value` to the control file `path`, as `echo value > path` would: in one write,
/// with a newline (which every control file strips). Opened for appending: the kernel ignores
/// it, and a fake tree's plain file keeps every value written, for the tests to read.
fn write(path: &Path, value: &str) -> io::Result<()> {
    let mut file = fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| at(path, e))?;
    file.write_all(format!("{value}\n").as_bytes())
        .map_err(|e| at(path, e))
}

/// The last line of `path`, trimmed (a control file holds one value; a fake tree's keeps every
/// value written).
fn last_line(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    Some(text.lines().last()?.trim().to_string())
}

/// The number on the last line of `path`.
fn read_last_u64(path: &Path) -> Option<u64> {
    last_line(path)?.parse().ok()
}

/// [`write`]s `value` unless `path` holds it already (its [`last_line`]).
fn update(path: &Path, value: &str) -> io::Result<()> {
    if last_line(path).as_deref() == Some(value) {
        return Ok(());
    }
    write(path, value)
}

/// The kernel's page size for memory limits (4 KiB on every architecture GPUs come with).
const PAGE: u64 = 4096;

/// An error that names the file it is about.
fn at(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The value of `key` in a flat-keyed file (`key value` lines).
fn read_key(path: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Whether `pid` is not this process. Under v1 a supervisor's spawning thread joins the
/// host's group to start the job there and exits at once, but the kernel lists a thread by its
/// process's id until the thread is gone: the supervisor would otherwise find its own pid in
/// the group it is vacating, and SIGKILL itself (losing the attempt it was about to report).
fn not_ours(pid: u32) -> bool {
    pid != std::process::id()
}

/// The pids of `dir`'s `cgroup.procs` and of every group below it.
fn collect_procs(dir: &Path, pids: &mut Vec<u32>) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_procs(&entry.path(), pids);
        }
    }
}

/// Removes the group `dir` and the groups below it, deepest first (a group's control files
/// go with its directory: `rmdir`, never a recursive delete).
fn remove_tree(dir: &Path) -> io::Result<()> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(at(dir, e)),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(at(dir, e)),
    }
}

#[cfg(test)]
mod tests;
