//! Which control-group interface this machine offers the server, found from the mount table
//! (`/proc/self/mountinfo`) and the server's own groups (`/proc/self/cgroup`). cgroup v2 is
//! used when its tree has the memory, cpu and pids controllers for the server's group; else v1
//! when memory, pids, cpu, devices and freezer are each mounted; else none.

use std::path::{Path, PathBuf};

use super::{Hierarchy, V1Dirs};

/// The v2 controllers attempts' groups need.
const V2_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// What [`detect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Attempts' groups go there.
    Usable(Hierarchy),
    /// Neither interface can be used; why, in words an operator can act on.
    Unusable(String),
}

/// Finds where attempts' groups of the server with key `key` ([`key_for`]) go, from the text
/// of `/proc/self/mountinfo` and `/proc/self/cgroup`.
pub fn detect(mountinfo: &str, self_cgroup: &str, key: &str) -> Found {
    let mounts = parse_mounts(mountinfo);
    let groups = parse_groups(self_cgroup);
    let leaf = format!("qm-{key}");
    let mut why = Vec::new();
    if let Some(mount) = mounts.iter().find(|m| m.is_v2()) {
        match v2_dir(mount, &groups) {
            Ok(dir) => {
                return Found::Usable(Hierarchy::V2 {
                    dir: dir.join(&leaf),
                    fence_devices: true,
                })
            }
            Err(e) => why.push(e),
        }
    }
    let v1 = |controller: &str| -> Result<PathBuf, String> {
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.controllers.iter().any(|c| c == controller))
            .ok_or_else(|| format!("cgroup v1 has no '{controller}' hierarchy mounted"))?;
        let own = groups
            .iter()
            .find(|(cs, _)| cs.iter().any(|c| c == controller))
            .map(|(_, path)| path.as_str())
            .unwrap_or("/");
        Ok(under(mount, own).join(&leaf))
    };
    let dirs = (|| {
        Ok::<_, String>(V1Dirs {
            memory: v1("memory")?,
            pids: v1("pids")?,
            cpu: v1("cpu")?,
            devices: v1("devices")?,
            freezer: v1("freezer")?,
        })
    })();
    match dirs {
        Ok(dirs) => Found::Usable(Hierarchy::V1 { dirs }),
        Err(e) => {
            why.push(e);
            Found::Unusable(why.join("; "))
        }
    }
}

/// A stable name for the server whose data dir is `data_dir` (FNV-1a, 64 bits, in hex): the
/// same after every restart and upgrade, different for two servers on one machine.
pub fn key_for(data_dir: &Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in data_dir.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// The server's v2 group, if its tree offers the controllers attempts need.
fn v2_dir(mount: &Mount, groups: &[(Vec<String>, String)]) -> Result<PathBuf, String> {
    let own = groups
        .iter()
        .find(|(cs, _)| cs.is_empty())
        .map(|(_, p)| p.as_str())
        .unwrap_or("/");
    let dir = under(mount, own);
    let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
    let missing: Vec<&str> = V2_CONTROLLERS
        .into_iter()
        .filter(|c| !controllers.split_whitespace().any(|have| have == *c))
        .collect();
    if missing.is_empty() {
        Ok(dir)
    } else {
        Err(format!(
            "cgroup v2 at {} does not offer {} to this server's group",
            dir.display(),
            missing.join(", ")
        ))
    }
}

/// Where the group `own` (a path from `/proc/self/cgroup`) of `mount`'s tree is.
fn under(mount: &Mount, own: &str) -> PathBuf {
    // `/proc/self/cgroup` paths are from the tree's root; the mount may show a subtree.
    let rel = own
        .strip_prefix(mount.root.as_str())
        .unwrap_or(own)
        .trim_start_matches('/');
    if rel.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rel)
    }
}

/// One cgroup mount.
#[derive(Debug)]
pub(super) struct Mount {
    /// The tree's path shown at the mount point (`/` unless a subtree is mounted).
    root: String,
    /// Where it is mounted.
    pub(super) point: PathBuf,
    /// `cgroup` (v1) or `cgroup2`.
    fstype: String,
    /// The v1 controllers of the tree (its super options).
    controllers: Vec<String>,
}

impl Mount {
    /// Whether it is the unified (v2) tree.
    pub(super) fn is_v2(&self) -> bool {
        self.fstype == "cgroup2"
    }
}

/// The cgroup mounts of a mountinfo text (proc(5): `id parent dev root point options
/// [optional...] - fstype source superoptions`).
pub(super) fn parse_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?;
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            let options = right.nth(1).unwrap_or_default();
            Some(Mount {
                root: unescape(left.get(3)?),
                point: PathBuf::from(unescape(left.get(4)?)),
                fstype: fstype.to_string(),
                controllers: options.split(',').map(str::to_string).collect(),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(c) => {
                out.push(char::from(c));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// `/proc/self/cgroup` lines `id:controllers:path` as (controllers, path); v2's has none.
/// Named v1 hierarchies (`name=systemd`) count as controllers that nothing looks for.
fn parse_groups(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some((controllers, path.to_string()))
        })
        .collect()
}
