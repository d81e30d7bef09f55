//! The module over fake trees of plain files (every value written is appended, so a test
//! reads the whole sequence), and detection over mount tables of real machines.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

/// The files the kernel makes in a new v2 group, empty.
const V2_FILES: [&str; 10] = [
    "cgroup.procs",
    "cgroup.kill",
    "cgroup.subtree_control",
    "memory.max",
    "memory.swap.max",
    "memory.events",
    "memory.peak",
    "cpu.max",
    "cpu.stat",
    "pids.max",
];

/// A fake group directory with `files`, empty.
fn fake_group(dir: &Path, files: &[&str]) {
    fs::create_dir_all(dir).unwrap();
    for f in files {
        fs::write(dir.join(f), "").unwrap();
    }
}

fn read(path: PathBuf) -> String {
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The v2 hierarchy of a fake tree at `root`.
fn v2(root: &Path) -> Hierarchy {
    Hierarchy::V2 {
        dir: root.join("qm-k"),
        fence_devices: true,
    }
}

fn limits(gpus: Vec<u32>) -> Limits {
    Limits {
        memory_bytes: 2 << 30,
        cpu_millis: 1500,
        pids: 4096,
        gpus,
    }
}

/// A v1 tree with a directory per controller, and the group `name` in each.
fn fake_v1(root: &Path, name: &str) -> Hierarchy {
    let dir = |c: &str| root.join(c).join("qm-k");
    let files: [(&str, &[&str]); 5] = [
        (
            "memory",
            &[
                "cgroup.procs",
                "tasks",
                "memory.limit_in_bytes",
                "memory.memsw.limit_in_bytes",
                "memory.oom_control",
                "memory.max_usage_in_bytes",
            ],
        ),
        ("pids", &["cgroup.procs", "tasks", "pids.max"]),
        (
            "cpu",
            &[
                "cgroup.procs",
                "tasks",
                "cpu.cfs_period_us",
                "cpu.cfs_quota_us",
            ],
        ),
        ("devices", &["cgroup.procs", "tasks", "devices.deny"]),
        ("freezer", &["cgroup.procs", "tasks", "freezer.state"]),
    ];
    for (controller, files) in files {
        fake_group(&dir(controller).join(name), files);
    }
    Hierarchy::V1 {
        dirs: V1Dirs {
            memory: dir("memory"),
            pids: dir("pids"),
            cpu: dir("cpu"),
            devices: dir("devices"),
            freezer: dir("freezer"),
        },
    }
}

#[test]
fn a_v2_group_gets_its_memory_without_swap_its_cpu_quota_and_its_pids_limit() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/qm-instance-0");
    fake_group(&g, &V2_FILES);
    Group::take(&h, "qm-instance-0", &limits(vec![0])).unwrap();
    assert_eq!(read(g.join("memory.max")), "2147483648\n");
    assert_eq!(read(g.join("memory.swap.max")), "0\n");
    assert_eq!(read(g.join("cpu.max")), "150000 100000\n");
    assert_eq!(read(g.join("pids.max")), "4096\n");
}

#[test]
fn a_v2_group_without_a_cpu_quota_says_max() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/g");
    fake_group(&g, &V2_FILES);
    let mut l = limits(vec![]);
    l.cpu_millis = 0;
    Group::take(&h, "g", &l).unwrap();
    assert_eq!(read(g.join("cpu.max")), "max 100000\n");
}

#[test]
fn a_v1_group_gets_memory_then_memsw_the_cfs_quota_and_the_pids_limit() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    Group::take(&h, "g", &limits(vec![1])).unwrap();
    let d = |c: &str| root.path().join(c).join("qm-k/g");
    assert_eq!(
        read(d("memory").join("memory.limit_in_bytes")),
        "2147483648\n"
    );
    assert_eq!(
        read(d("memory").join("memory.memsw.limit_in_bytes")),
        "2147483648\n"
    );
    assert_eq!(read(d("cpu").join("cpu.cfs_period_us")), "100000\n");
    assert_eq!(read(d("cpu").join("cpu.cfs_quota_us")), "150000\n");
    assert_eq!(read(d("pids").join("pids.max")), "4096\n");
}

#[test]
fn a_v1_group_without_swap_accounting_still_gets_its_memory_limit() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    let memsw = root
        .path()
        .join("memory/qm-k/g/memory.memsw.limit_in_bytes");
    fs::remove_file(&memsw).unwrap();
    Group::take(&h, "g", &limits(vec![])).unwrap();
    assert!(!memsw.exists());
    let limit = root.path().join("memory/qm-k/g/memory.limit_in_bytes");
    assert_eq!(read(limit), "2147483648\n");
}

#[test]
fn a_v1_host_may_open_only_its_own_gpus_and_the_shared_nodes() {
    let root = tempfile::tempdir().unwrap();
    fake_v1(root.path(), "g");
    let dir = root.path().join("devices/qm-k/g");
    devices::deny_v1(&dir, &[1, 3]).unwrap();
    let denied: Vec<String> = read(root.path().join("devices/qm-k/g/devices.deny"))
        .lines()
        .map(str::to_string)
        .collect();
    // Every GPU minor below the shared nodes (254, 255) but the host's own.
    assert_eq!(denied.len(), 254 - 2);
    assert_eq!(denied[0], "c 195:0 rwm");
    assert_eq!(denied[1], "c 195:2 rwm");
    assert_eq!(denied.last().unwrap(), "c 195:253 rwm");
    for own in [
        "c 195:1 rwm",
        "c 195:3 rwm",
        "c 195:254 rwm",
        "c 195:255 rwm",
    ] {
        assert!(!denied.iter().any(|d| d == own), "{own} denied");
    }
}

/// What the device program answers for a character device `major:minor` (or a block device),
/// run by an interpreter of the few instructions it uses.
fn device_program_allows(insns: &[bpf::Insn], char_device: bool, major: u32, minor: u32) -> bool {
    let ctx = [
        if char_device {
            2 | (3 << 16)
        } else {
            1 | (3 << 16)
        },
        major,
        minor,
    ];
    let mut r = [0u64; 11];
    let mut pc = 0usize;
    loop {
        let i = insns[pc];
        let (dst, imm) = (usize::from(i.regs & 0xf), i64::from(i.imm) as u64);
        let jump = |taken: bool| if taken { i.off as usize } else { 0 };
        pc += 1 + match i.code {
            0x61 => {
                assert_eq!(i.regs >> 4, 1, "loads read the context");
                r[dst] = u64::from(ctx[i.off as usize / 4]);
                0
            }
            0x57 => {
                r[dst] &= imm;
                0
            }
            0xb7 => {
                r[dst] = imm;
                0
            }
            0x15 => jump(r[dst] == imm),
            0x35 => jump(r[dst] >= imm),
            0x55 => jump(r[dst] != imm),
            0x95 => return r[0] == 1,
            code => panic!("unexpected opcode {code:#x}"),
        };
    }
}

#[test]
fn a_v2_host_s_device_program_allows_its_own_gpus_the_shared_nodes_and_other_devices() {
    let program = devices::program(&[3, 1, 3, 300]);
    for minor in 0..256 {
        let allowed = device_program_allows(&program, true, 195, minor);
        assert_eq!(allowed, [1, 3, 254, 255].contains(&minor), "195:{minor}");
    }
    // Another major (nvidia-uvm's, /dev/null's), a block device of major 195: not GPUs.
    assert!(device_program_allows(&program, true, 1, 3));
    assert!(device_program_allows(&program, true, 510, 0));
    assert!(device_program_allows(&program, false, 195, 0));
    let none = devices::program(&[]);
    assert!(!(0..254).any(|m| device_program_allows(&none, true, 195, m)));
    assert!(device_program_allows(&none, true, 195, 255));
}

/// The mounted cgroup v2 tree, where a test may load device programs into it (as root); else
/// `None`, having said why the test is skipped.
fn kernel_v2_tree() -> Option<detect::Mount> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some(mount) = detect::parse_mounts(&mountinfo)
        .into_iter()
        .find(|m| m.is_v2())
    else {
        eprintln!("skipped: no cgroup v2 tree is mounted here");
        return None;
    };
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: loading a device program needs root");
        return None;
    }
    Some(mount)
}

/// The kernel's own answer, where this test may ask it: as root, with a cgroup v2 tree
/// mounted (a hybrid machine's `unified` will do; device programs need no controller).
#[test]
fn a_v2_host_opens_its_own_gpu_node_and_is_refused_another() {
    let Some(mount) = kernel_v2_tree() else {
        return;
    };
    let group = mount
        .point
        .join(format!("qm-test-devices-{}", std::process::id()));
    if let Err(e) = fs::create_dir(&group) {
        eprintln!("skipped: cannot make a group in the v2 tree here: {e}");
        return;
    }
    // Removed however the test ends.
    struct Remove<'a>(&'a Path);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = fs::remove_dir(self.0);
        }
    }
    let _remove = Remove(&group);
    let nodes = tempfile::tempdir().unwrap();
    for minor in [0, 1, 255] {
        let dev = nix::sys::stat::makedev(195, minor);
        let path = nodes.path().join(format!("nvidia{minor}"));
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
        if let Err(e) = nix::sys::stat::mknod(&path, nix::sys::stat::SFlag::S_IFCHR, mode, dev) {
            eprintln!("skipped: cannot make device nodes here: {e}");
            return;
        }
    }
    devices::fence_v2(&group, &[1]).unwrap();
    // Taken again: the group has its program, and taking it again is no error.
    devices::fence_v2(&group, &[1]).unwrap();
    let mut command = std::process::Command::new("sh");
    command.current_dir(nodes.path()).args([
        "-c",
        "for n in nvidia0 nvidia1 nvidia255; do (exec 3<$n) 2>&1 | sed \"s/.*$n: /$n: /\"; done",
    ]);
    let procs = fs::OpenOptions::new()
        .write(true)
        .open(group.join("cgroup.procs"))
        .unwrap();
    enter::move_child_v2(&mut command, procs);
    let out = command.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("Permission denied") {
        eprintln!("skipped: device nodes cannot be opened here at all (nodev): {text}");
        return;
    }
    // The program refuses nvidia0; nvidia1 and nvidia255 get past it and then find no device
    // (no driver here), or open (a driver is loaded: a shell that opens prints nothing).
    assert!(
        text.contains("nvidia0: ") && text.contains("not permitted"),
        "{text}"
    );
    for allowed in ["nvidia1: ", "nvidia255: "] {
        let line = text.lines().find(|l| l.starts_with(allowed));
        assert!(line.is_none_or(|l| l.contains("No such device")), "{text}");
    }
}

/// The start's probe on the kernel, where this test may: it fences a group of its own, finds
/// the program there and leaves nothing behind.
#[test]
fn the_start_probe_fences_a_group_of_its_own_and_removes_it() {
    // Outside a cgroup v2 tree (a fake tree) nothing is asked, root or not.
    let root = tempfile::tempdir().unwrap();
    devices::probe_v2(&root.path().join("probe")).unwrap();
    let Some(mount) = kernel_v2_tree() else {
        return;
    };
    let probe = mount
        .point
        .join(format!("qm-test-probe-{}", std::process::id()));
    devices::probe_v2(&probe).unwrap();
    assert!(!probe.exists(), "the probe's group is left behind");
}

#[test]
fn a_gpu_s_device_minor_is_the_driver_s_in_pci_order_else_its_index() {
    let root = tempfile::tempdir().unwrap();
    // Probed out of bus order: the second GPU on the bus got minor 0.
    for (bus, minor) in [
        ("0000:3b:00.0", 1),
        ("0000:1a:00.0", 2),
        ("0000:5e:00.0", 0),
    ] {
        let dir = root.path().join(bus);
        fs::create_dir(&dir).unwrap();
        fs::write(
            dir.join("information"),
            format!("Model: \t\t NVIDIA A10G\nDevice Minor: \t {minor}\nBus Location: \t {bus}\n"),
        )
        .unwrap();
    }
    // nvidia-smi's index 0 is the lowest bus address, 1a.
    assert_eq!(devices::minors_in(root.path(), &[0, 1, 2]), vec![2, 1, 0]);
    // An index the driver does not list, or no driver at all: the index.
    assert_eq!(devices::minors_in(root.path(), &[7]), vec![7]);
    assert_eq!(
        devices::minors_in(&root.path().join("none"), &[0, 3]),
        vec![0, 3]
    );
}

#[test]
fn a_v1_host_without_gpus_may_open_no_gpu_node() {
    let root = tempfile::tempdir().unwrap();
    fake_v1(root.path(), "g");
    devices::deny_v1(&root.path().join("devices/qm-k/g"), &[]).unwrap();
    let deny = root.path().join("devices/qm-k/g/devices.deny");
    assert_eq!(read(deny), "c 195:* rwm\n");
}

#[test]
fn a_v1_thread_enrols_in_every_tree_once_even_where_two_controllers_share_one() {
    let root = tempfile::tempdir().unwrap();
    let Hierarchy::V1 { mut dirs } = fake_v1(root.path(), "g") else {
        unreachable!()
    };
    // `memory` and `pids` mounted together (`cpu,cpuacct` is the common case; cpuacct is not
    // joined).
    dirs.pids = dirs.memory.clone();
    let h = Hierarchy::V1 { dirs };
    let g = Group::named(&h, "g");
    assert_eq!(g.dirs().len(), 4);
    let entry = g.enrol(&mut std::process::Command::new("true")).unwrap();
    entry.enter().unwrap();
    // `0`, the calling thread: the kernel's fast path for a thread moving itself.
    for c in ["memory", "cpu", "devices", "freezer"] {
        let tasks = root.path().join(c).join("qm-k/g/tasks");
        assert_eq!(read(tasks), "0\n", "{c}");
    }
    // Entered through memory's directory, once.
    assert_eq!(read(root.path().join("pids/qm-k/g/tasks")), "");
}

#[test]
fn a_v2_kill_writes_cgroup_kill_and_a_v1_kill_freezes_then_thaws() {
    let root = tempfile::tempdir().unwrap();
    let h2 = v2(&root.path().join("v2"));
    fake_group(&root.path().join("v2/qm-k/g"), &V2_FILES);
    Group::named(&h2, "g").kill().unwrap();
    assert_eq!(read(root.path().join("v2/qm-k/g/cgroup.kill")), "1\n");
    let h1 = fake_v1(&root.path().join("v1"), "g");
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let procs = root.path().join("v1/memory/qm-k/g/cgroup.procs");
    fs::write(&procs, format!("{}\n", sleeper.id())).unwrap();
    Group::named(&h1, "g").kill().unwrap();
    let state = root.path().join("v1/freezer/qm-k/g/freezer.state");
    assert_eq!(read(state), "FROZEN\nTHAWED\n");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(sleeper.wait().unwrap().signal(), Some(9));
}

#[test]
fn a_v1_group_that_lists_only_its_supervisor_is_vacant_and_never_killed() {
    // The supervisor's spawning thread, on its way out, still shows as the process's id.
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    let procs = root.path().join("memory/qm-k/g/cgroup.procs");
    fs::write(&procs, format!("{}\n", std::process::id())).unwrap();
    let g = Group::named(&h, "g");
    assert!(g.is_vacant());
    assert!(g.procs().is_empty());
    g.kill().unwrap();
    // Nothing to freeze: this test process lives on.
    assert_eq!(read(root.path().join("freezer/qm-k/g/freezer.state")), "");
    fs::write(&procs, format!("{}\n1234567\n", std::process::id())).unwrap();
    assert!(!g.is_vacant());
}

#[test]
fn oom_kills_are_read_from_either_interface() {
    let root = tempfile::tempdir().unwrap();
    let h2 = v2(&root.path().join("v2"));
    let g2 = root.path().join("v2/qm-k/g");
    fake_group(&g2, &V2_FILES);
    fs::write(
        g2.join("memory.events"),
        "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n",
    )
    .unwrap();
    let g = Group::named(&h2, "g");
    assert_eq!(g.oom_kills(), 1);

    let h1 = fake_v1(&root.path().join("v1"), "g");
    let m = root.path().join("v1/memory/qm-k/g");
    fs::write(
        m.join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    )
    .unwrap();
    let g = Group::named(&h1, "g");
    assert_eq!(g.oom_kills(), 2);
}

#[test]
fn a_group_without_an_oom_file_reads_as_no_oom_kill() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = Group::named(&h, "gone");
    assert_eq!(g.oom_kills(), 0);
    assert!(g.is_vacant());
    g.remove().unwrap();
}

#[test]
fn procs_include_the_groups_below_a_hosts_group() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/g");
    fake_group(&g, &V2_FILES);
    fake_group(&g.join("libpod-abc"), &["cgroup.procs"]);
    fs::write(g.join("cgroup.procs"), "12\n40\n").unwrap();
    fs::write(g.join("libpod-abc/cgroup.procs"), "13\n12\n").unwrap();
    assert_eq!(Group::named(&h, "g").procs(), vec![12, 13, 40]);
}

#[test]
fn prepare_enables_the_v2_controllers_for_the_servers_groups() {
    let root = tempfile::tempdir().unwrap();
    fake_group(root.path(), &["cgroup.subtree_control", "cgroup.procs"]);
    fake_group(&root.path().join("qm-k"), &["cgroup.subtree_control"]);
    let h = v2(root.path());
    h.prepare().unwrap();
    for dir in [root.path().to_path_buf(), root.path().join("qm-k")] {
        let control = dir.join("cgroup.subtree_control");
        assert_eq!(read(control), "+memory +cpu +pids\n");
    }
    // The server could enable them where it is: it stayed.
    assert!(!root.path().join("qm-k-server").exists());
}

#[test]
fn prepare_makes_every_v1_directory() {
    let root = tempfile::tempdir().unwrap();
    let dir = |c: &str| root.path().join(c).join("qm-k");
    for c in ["memory", "pids", "cpu", "devices", "freezer"] {
        fs::create_dir(root.path().join(c)).unwrap();
    }
    let h = Hierarchy::V1 {
        dirs: V1Dirs {
            memory: dir("memory"),
            pids: dir("pids"),
            cpu: dir("cpu"),
            devices: dir("devices"),
            freezer: dir("freezer"),
        },
    };
    h.prepare().unwrap();
    // Without fair group scheduling (no `cpu.shares`) there is no weight to set.
    assert!(!dir("cpu").join("cpu.shares").exists());
    fs::write(dir("cpu").join("cpu.shares"), "1024\n").unwrap();
    h.prepare().unwrap();
    for c in ["memory", "pids", "cpu", "devices", "freezer"] {
        assert!(dir(c).is_dir(), "{c}");
    }
    let shares = v1_shares(Machine::this().cpu_millis).to_string();
    assert_eq!(
        read(dir("cpu").join("cpu.shares")),
        format!("1024\n{shares}\n")
    );
    // A start that finds the weight set writes nothing.
    h.prepare().unwrap();
    assert_eq!(
        read(dir("cpu").join("cpu.shares")),
        format!("1024\n{shares}\n")
    );
}

#[test]
fn a_weight_the_server_may_not_write_is_left_and_confinement_goes_on() {
    // A directory where the file should be: the write fails (not NotFound); `prepare` does
    // not, since the weight limits nothing.
    let root = tempfile::tempdir().unwrap();
    fake_group(root.path(), &["cgroup.subtree_control", "cgroup.procs"]);
    fake_group(&root.path().join("qm-k"), &["cgroup.subtree_control"]);
    fs::create_dir(root.path().join("qm-k/cpu.weight")).unwrap();
    v2(root.path()).prepare().unwrap();
    assert!(root.path().join("qm-k/cpu.weight").is_dir());
}

#[test]
fn the_servers_attempts_together_weigh_in_proportion_to_the_machines_cpus() {
    // v1: four default tasks per CPU, a 2-core VM's jobs as eight busy threads of the
    // server's group, a 64-CPU box's as many as v1 allows. v2: one default group per CPU
    // against the server's, which holds all its supervisors too.
    assert_eq!(v1_shares(2_000), 8_192);
    assert_eq!(v1_shares(16_000), 65_536);
    assert_eq!(v1_shares(64_000), 262_144);
    assert_eq!(v1_shares(1), 4);
    assert_eq!(v2_weight(2_000), 200);
    assert_eq!(v2_weight(1), 1);
    assert_eq!(v2_weight(128_000), 10_000);
    let root = tempfile::tempdir().unwrap();
    fake_group(root.path(), &["cgroup.subtree_control", "cgroup.procs"]);
    fake_group(
        &root.path().join("qm-k"),
        &["cgroup.subtree_control", "cpu.weight"],
    );
    v2(root.path()).prepare().unwrap();
    let weight = v2_weight(Machine::this().cpu_millis);
    assert_eq!(
        read(root.path().join("qm-k/cpu.weight")),
        format!("{weight}\n")
    );
}

/// This test machine's table: v1 controllers, and a unified tree with no controller of use.
const HYBRID_MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory
34 30 0:30 / /sys/fs/cgroup/pids rw,relatime shared:14 - cgroup cgroup rw,pids
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/devices rw,relatime shared:16 - cgroup cgroup rw,devices
37 30 0:33 / /sys/fs/cgroup/freezer rw,relatime shared:17 - cgroup cgroup rw,freezer
38 30 0:34 / /sys/fs/cgroup/systemd rw,relatime shared:18 - cgroup cgroup rw,name=systemd
";

const HYBRID_CGROUP: &str = "\
9:name=systemd:/
8:pids:/
6:freezer:/
5:devices:/
4:memory:/process_api/a669
2:cpu,cpuacct:/
0::/
";

#[test]
fn a_hybrid_machine_without_v2_controllers_uses_v1_with_the_servers_own_groups() {
    let found = detect::detect(HYBRID_MOUNTINFO, HYBRID_CGROUP, "k");
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(
        found,
        Found::Usable(Hierarchy::V1 {
            dirs: V1Dirs {
                memory: p("/sys/fs/cgroup/memory/process_api/a669/qm-k"),
                pids: p("/sys/fs/cgroup/pids/qm-k"),
                cpu: p("/sys/fs/cgroup/cpu,cpuacct/qm-k"),
                devices: p("/sys/fs/cgroup/devices/qm-k"),
                freezer: p("/sys/fs/cgroup/freezer/qm-k"),
            }
        })
    );
}

#[test]
fn a_unified_tree_with_memory_cpu_and_pids_is_used() {
    let root = tempfile::tempdir().unwrap();
    let own = root.path().join("system.slice/qm.service");
    fake_group(&own, &[]);
    fs::write(
        own.join("cgroup.controllers"),
        "cpuset cpu io memory pids\n",
    )
    .unwrap();
    let mountinfo = format!(
        "25 1 0:22 / {} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
        root.path().display()
    );
    let found = detect::detect(&mountinfo, "0::/system.slice/qm.service\n", "k");
    assert_eq!(
        found,
        Found::Usable(Hierarchy::V2 {
            dir: own.join("qm-k"),
            fence_devices: true,
        })
    );
}

#[test]
fn a_unified_tree_without_the_memory_controller_is_named_in_the_refusal() {
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("cgroup.controllers"), "cpu pids\n").unwrap();
    let mountinfo = format!(
        "25 1 0:22 / {} rw - cgroup2 cgroup2 rw\n",
        root.path().display()
    );
    let Found::Unusable(why) = detect::detect(&mountinfo, "0::/\n", "k") else {
        panic!("usable")
    };
    assert!(why.contains("does not offer memory"), "{why}");
    assert!(why.contains("no 'memory' hierarchy"), "{why}");
}

#[test]
fn mount_points_with_escaped_spaces_are_read_back() {
    let mountinfo = "33 30 0:29 / /mnt/cg\\040v1/memory rw - cgroup cgroup rw,memory\n";
    let mounts = detect::parse_mounts(mountinfo);
    assert_eq!(mounts[0].point, PathBuf::from("/mnt/cg v1/memory"));
}

#[test]
fn the_server_key_is_stable_and_differs_by_data_dir() {
    let a = key_for(Path::new("/var/lib/qm"));
    assert_eq!(a, key_for(Path::new("/var/lib/qm")));
    assert_ne!(a, key_for(Path::new("/var/lib/qm2")));
    assert_eq!(a.len(), 16);
    // FNV-1a 64 of the bytes: a fixed value, so a new build finds an old build's groups.
    assert_eq!(key_for(Path::new("")), "cbf29ce484222325");
}

#[test]
fn instances_that_do_not_say_share_what_the_machine_has_left_after_the_server_reserve() {
    let machine = Machine {
        memory_bytes: 17 << 30,
        cpu_millis: 8000,
    };
    let mut big = crate::PoolSpec::new("ml.p4d.24xlarge", 1, 8);
    big.memory_gib = Some(8.0);
    big.vcpus = Some(4.0);
    big.max_pids = Some(100);
    let small = crate::PoolSpec::new("ml.g5.xlarge", 4, 0);
    let pools = [big, small];
    let p4 = share(&pools, machine, "ml.p4d.24xlarge");
    assert_eq!(
        (p4.memory_bytes, p4.cpu_millis, p4.pids),
        (8 << 30, 4000, 100)
    );
    // 17 GiB less 1 GiB for the server, less the 8 GiB given: 8 GiB among four instances.
    let g5 = share(&pools, machine, "ml.g5.xlarge");
    assert_eq!(
        (g5.memory_bytes, g5.cpu_millis, g5.pids),
        (2 << 30, 1000, DEFAULT_MAX_PIDS)
    );
}

#[test]
fn a_machine_cut_into_many_instances_still_gives_each_a_usable_floor() {
    let machine = Machine {
        memory_bytes: 2 << 30,
        cpu_millis: 2000,
    };
    let pools = [crate::PoolSpec::new("ml.g5.xlarge", 1000, 0)];
    let each = share(&pools, machine, "ml.g5.xlarge");
    assert_eq!(each.memory_bytes, MIN_MEMORY_BYTES);
    assert_eq!(each.cpu_millis, MIN_CPU_MILLIS);
}

#[test]
fn a_v2_child_writes_itself_into_its_group_before_it_runs_anything() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/g");
    fake_group(&g, &V2_FILES);
    let mut command = std::process::Command::new("true");
    Group::named(&h, "g").enrol(&mut command).unwrap();
    assert!(command.status().unwrap().success());
    // `0`: the writer itself, the child, between fork and exec.
    assert_eq!(read(g.join("cgroup.procs")), "0");
}

#[test]
fn a_group_taken_again_keeps_its_device_rules_and_counts_oom_kills_from_then() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    // The group exists (made by the kernel's files here): taken as not new, no device rules.
    Group::take(&h, "g", &limits(vec![1])).unwrap();
    let deny = root.path().join("devices/qm-k/g/devices.deny");
    assert_eq!(read(deny), "");
    let oom = root.path().join("memory/qm-k/g/memory.oom_control");
    fs::write(&oom, "oom_kill_disable 0\noom_kill 3\n").unwrap();
    let g = Group::take(&h, "g", &limits(vec![1])).unwrap();
    assert_eq!(g.oom_kills(), 0);
    fs::write(&oom, "oom_kill_disable 0\noom_kill 4\n").unwrap();
    assert_eq!(g.oom_kills(), 1);
}

/// A group its server knows to hold the attempt's limits is left as it is (nothing read back
/// or written), but a group that has to be made is limited all the same.
#[test]
fn a_group_whose_limits_are_kept_is_left_as_it_is_and_a_new_one_is_limited_all_the_same() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    let limit = root.path().join("memory/qm-k/g/memory.limit_in_bytes");
    fs::write(&limit, "1\n").unwrap();
    Group::take_kept(&h, "g", &limits(vec![1]), true).unwrap();
    assert_eq!(read(limit.clone()), "1\n", "kept: not written");
    Group::take_kept(&h, "g", &limits(vec![1]), false).unwrap();
    // The fake file keeps what was written after what was there (the kernel's replaces it).
    assert_eq!(read(limit), "1\n2147483648\n", "not kept: limited");

    // The fake kernel makes no files in a new directory: a take that limits it fails.
    let err = Group::take_kept(&h, "new", &limits(vec![]), true).unwrap_err();
    assert!(err.to_string().contains("memory.limit_in_bytes"), "{err}");
}

#[test]
fn a_new_group_that_cannot_be_limited_is_removed_so_the_next_take_makes_it_whole() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "old");
    // The fake kernel makes no files in a new directory: the first limit cannot be written.
    let err = Group::take(&h, "new", &limits(vec![])).unwrap_err();
    assert!(err.to_string().contains("memory.limit_in_bytes"), "{err}");
    // Not left half-made (its device rules unwritten) for the next take to reuse.
    for c in ["memory", "pids", "cpu", "devices", "freezer"] {
        assert!(!root.path().join(c).join("qm-k/new").exists(), "{c}");
    }
}

#[test]
fn a_vacant_group_has_no_process_of_its_own() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/g");
    fake_group(&g, &V2_FILES);
    assert!(Group::named(&h, "g").is_vacant());
    fs::write(g.join("cgroup.procs"), "77\n").unwrap();
    assert!(!Group::named(&h, "g").is_vacant());
}

#[test]
fn an_instance_s_group_is_its_own_unless_an_adopted_attempt_runs_in_it() {
    let adopted = vec![instance_group(2)];
    assert_eq!(
        names_for(&[1, 2], &adopted, AttemptId(9)),
        vec!["qm-instance-1", "qm-instance-2-attempt-9"]
    );
    assert_eq!(names_for(&[2], &[], AttemptId(9)), vec!["qm-instance-2"]);
}

#[test]
fn a_start_removes_every_group_no_live_attempt_runs_in_and_nothing_else() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    // Empty directories stand for groups here: rmdir removes them as the kernel would.
    for name in [
        "qm-instance-0",
        "qm-instance-1",
        "qm-instance-1-attempt-4",
        "other",
    ] {
        fs::create_dir_all(root.path().join("qm-k").join(name)).unwrap();
    }
    let left = sweep(&h, &[instance_group(1)]);
    assert!(left.is_empty(), "{left:?}");
    let mut kept: Vec<String> = fs::read_dir(root.path().join("qm-k"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    kept.sort();
    assert_eq!(kept, vec!["other", "qm-instance-1"]);
}

#[test]
fn a_reused_group_that_still_holds_a_process_after_a_kill_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/g");
    fake_group(&g, &V2_FILES);
    // A process the fake kernel never kills.
    fs::write(g.join("cgroup.procs"), "77\n").unwrap();
    let err = Group::take(&h, "g", &limits(vec![])).unwrap_err();
    assert!(err.to_string().contains("still holds a process"), "{err}");
    assert_eq!(read(g.join("cgroup.kill")), "1\n");
}

#[test]
fn a_v1_attempt_s_peak_is_reset_at_its_take() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    let peak = root.path().join("memory/qm-k/g/memory.max_usage_in_bytes");
    fs::write(&peak, "999999999\n").unwrap();
    let g = Group::take(&h, "g", &limits(vec![])).unwrap();
    // The earlier attempt's peak was reset by a write of 0.
    assert_eq!(read(peak.clone()), "999999999\n0\n");
    fs::write(&peak, "123456789\n").unwrap();
    assert_eq!(g.peak_memory_bytes(), Some(123_456_789));
}

#[test]
fn a_v2_attempt_s_peak_is_read_through_the_descriptor_that_reset_it() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/qm-instance-0");
    fake_group(&g, &V2_FILES);
    fs::write(g.join("memory.peak"), "888888\n").unwrap();
    let group = Group::take(&h, "qm-instance-0", &limits(vec![])).unwrap();
    assert!(read(g.join("memory.peak")).starts_with("reset"));
    fs::write(g.join("memory.peak"), "4096\n").unwrap();
    assert_eq!(group.peak_memory_bytes(), Some(4096));
}

#[test]
fn a_v2_group_taken_again_whose_peak_cannot_be_reset_reports_no_peak() {
    let root = tempfile::tempdir().unwrap();
    let h = v2(root.path());
    let g = root.path().join("qm-k/qm-instance-0");
    let files: Vec<&str> = V2_FILES
        .into_iter()
        .filter(|f| *f != "memory.peak")
        .collect();
    fake_group(&g, &files);
    let group = Group::take(&h, "qm-instance-0", &limits(vec![])).unwrap();
    // An older kernel's peak is the group's since it was made: another attempt's, maybe.
    fs::write(g.join("memory.peak"), "4096\n").unwrap();
    assert_eq!(group.peak_memory_bytes(), None);
}

#[test]
fn a_group_taken_again_with_the_same_limits_is_not_written_again() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "g");
    Group::take(&h, "g", &limits(vec![])).unwrap();
    Group::take(&h, "g", &limits(vec![])).unwrap();
    let quota = root.path().join("cpu/qm-k/g/cpu.cfs_quota_us");
    assert_eq!(read(quota.clone()), "150000\n");
    let memory = root.path().join("memory/qm-k/g/memory.limit_in_bytes");
    assert_eq!(read(memory.clone()), "2147483648\n");
    // A reload that changed the instance's share: written.
    let mut more = limits(vec![]);
    more.cpu_millis = 2000;
    more.memory_bytes = (3 << 30) + 100;
    Group::take(&h, "g", &more).unwrap();
    assert_eq!(read(quota), "150000\n200000\n");
    // In whole pages, as the kernel keeps it.
    assert_eq!(read(memory), "2147483648\n3221225472\n");
}

#[test]
fn a_stop_removes_the_empty_groups_and_keeps_a_busy_one_with_its_parent() {
    let root = tempfile::tempdir().unwrap();
    let h = fake_v1(root.path(), "qm-instance-0");
    // An empty plain directory stands for an empty group (rmdir removes it, as the kernel
    // would); one with a file in it, for a group that holds a process (rmdir refuses).
    for c in ["memory", "pids", "cpu", "devices", "freezer"] {
        let dir = root.path().join(c).join("qm-k");
        for f in fs::read_dir(dir.join("qm-instance-0")).unwrap() {
            fs::remove_file(f.unwrap().path()).unwrap();
        }
        fs::create_dir(dir.join("qm-instance-1")).unwrap();
        fs::create_dir(dir.join("other")).unwrap();
    }
    fs::write(root.path().join("cpu/qm-k/qm-instance-1/tasks"), "77\n").unwrap();
    assert_eq!(remove_empty(&h), 9);
    for c in ["memory", "pids", "devices", "freezer"] {
        let left: Vec<_> = fs::read_dir(root.path().join(c).join("qm-k"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        // Not the server's: left, and its `qm-k` with it.
        assert_eq!(left, vec!["other"], "{c}");
    }
    fs::remove_dir(root.path().join("cpu/qm-k/other")).unwrap();
    assert_eq!(remove_empty(&h), 0);
    assert!(root.path().join("cpu/qm-k/qm-instance-1").is_dir());
    fs::remove_file(root.path().join("cpu/qm-k/qm-instance-1/tasks")).unwrap();
    assert_eq!(remove_empty(&h), 1);
    assert!(!root.path().join("cpu/qm-k").exists());
}
