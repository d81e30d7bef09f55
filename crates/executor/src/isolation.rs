//! Jobs run apart from the server and from each other. When the server runs as root, every
//! attempt of the local executor runs under a uid of its own, taken from [`JobUids`] (as
//! systemd's DynamicUser does): one shared job user would let every job signal and read every
//! other job. A uid without a passwd entry is enough for the kernel; the job gets `USER`,
//! `LOGNAME` and `HOME` from its environment.
//!
//! What the server hands the attempt's uid, and what it keeps:
//!
//! ```text
//! data_dir/                 root 0711   traversable, not listable; qm.sqlite3, keys: 0600
//!   jobs/                   root 0711
//!     <job_id>/             root 0711   the job cannot rename what is in it
//!       attempts/           root 0700   logs (the job writes them through its fds), outcomes
//!       checkpoints/ model/ output/ work/ root/   the attempt's uid, 0700
//! ```
//!
//! The server (root) never follows a link the job made: the job's directories are made real
//! again before each attempt, the tree is handed to the new uid without following links, and
//! only entries some job uid owned change hands (a hard link to a root file stays root's).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The uids attempts run as, first to last inclusive. Default [`JobUids::DEFAULT`]: 65,536
/// uids just above systemd's container range, which no passwd entry, DynamicUser or subuid
/// allocation uses by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobUids {
    /// The first uid.
    pub first: u32,
    /// The last uid.
    pub last: u32,
}

impl JobUids {
    /// 1879048192-1879113727 (0x70000000 + 65,535).
    pub const DEFAULT: JobUids = JobUids {
        first: 0x7000_0000,
        last: 0x7000_0000 + 65_535,
    };

    /// `FIRST-LAST`, e.g. `1879048192-1879113727`; refuses root, an empty range and one that
    /// reaches the uids Linux reserves (`u32::MAX` is "no uid").
    pub fn parse(text: &str) -> Result<JobUids, String> {
        let bad = || {
            format!(
                "'{text}' is not a uid range: write FIRST-LAST, e.g. \"{}-{}\" (two uids above 999, FIRST <= LAST)",
                Self::DEFAULT.first,
                Self::DEFAULT.last
            )
        };
        let (a, b) = text.trim().split_once('-').ok_or_else(bad)?;
        let first: u32 = a.trim().parse().map_err(|_| bad())?;
        let last: u32 = b.trim().parse().map_err(|_| bad())?;
        if first < 1000 || first > last || last >= u32::MAX - 1 {
            return Err(bad());
        }
        Ok(JobUids { first, last })
    }

    /// Whether `uid` is one of the range's.
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    fn len(&self) -> u64 {
        u64::from(self.last - self.first) + 1
    }
}

/// The uids of running attempts. Uids are handed out round robin, so one comes back only
/// after every other was used; when it does, processes it still has (a daemon that left its
/// attempt's process group) are killed first, so they cannot reach the next job.
#[derive(Debug)]
pub(crate) struct UidPool {
    range: JobUids,
    /// Offset of the next uid to try.
    next: u64,
    /// Whether the round robin went past the end once (uids may have stragglers).
    wrapped: bool,
    in_use: BTreeSet<u32>,
}

impl UidPool {
    pub(crate) fn new(range: JobUids) -> Self {
        UidPool {
            range,
            next: 0,
            wrapped: false,
            in_use: BTreeSet::new(),
        }
    }

    /// A uid no running attempt has, or `None` when every one is in use.
    pub(crate) fn take(&mut self) -> Option<u32> {
        let len = self.range.len();
        for _ in 0..len.min(self.in_use.len() as u64 + 1) {
            let uid = self.range.first + self.next as u32;
            self.next += 1;
            if self.next == len {
                self.next = 0;
                self.wrapped = true;
            }
            if self.in_use.insert(uid) {
                if self.wrapped {
                    kill_processes_of(uid);
                }
                return Some(uid);
            }
        }
        None
    }

    /// Marks `uid` in use by an attempt that runs already (adopted after a restart).
    pub(crate) fn hold(&mut self, uid: u32) {
        if self.range.contains(uid) {
            self.in_use.insert(uid);
        }
    }

    pub(crate) fn give_back(&mut self, uid: u32) {
        self.in_use.remove(&uid);
    }
}

/// SIGKILL to every process whose real uid is `uid` (read from /proc).
fn kill_processes_of(uid: u32) {
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if entry.metadata().is_ok_and(|m| m.uid() == uid) {
            tracing::warn!(
                pid,
                uid,
                "killing a process left by an earlier attempt under the uid about to be reused"
            );
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// Why attempts cannot run under uids of their own with this data dir, if they cannot: the
/// server is not root, or a directory above the data dir is closed to other users (a job
/// could not reach its own directory).
pub fn why_not(data_dir: &Path) -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some(
            "the server does not run as root, so it cannot start jobs under other uids".into(),
        );
    }
    let data_dir = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    for dir in data_dir.ancestors().skip(1) {
        match fs::metadata(dir) {
            Ok(m) if m.mode() & 0o001 == 0 => {
                return Some(format!(
                    "'{}' (mode {:o}) is closed to other users, so jobs running under their own uids cannot reach their directories in {}: chmod o+x '{}', or put them elsewhere ([executor] work_dir)",
                    dir.display(),
                    m.mode() & 0o777,
                    data_dir.display(),
                    dir.display()
                ))
            }
            Ok(_) => {}
            Err(e) => return Some(format!("cannot read '{}': {e}", dir.display())),
        }
    }
    None
}

/// Where the job directories of a data dir go by default when isolated jobs could not reach
/// them in it (a data dir under `/root`, or under any other directory closed to other
/// users): the server owns and opens this root, and names it after the data dir so that a
/// restart finds its attempts again.
pub const FALLBACK_WORK_ROOT: &str = "/var/lib/qm-jobs";

/// Where attempts' job directories go when they run under their own uids: `configured`, else
/// the data dir, else [`FALLBACK_WORK_ROOT`]`/<key of the data dir>`. Makes the directory
/// chosen (0711, owned by this user) and refuses one that job uids still could not reach or
/// that another user could change, saying how to fix it. Jobs never fall back to running as
/// the server's user.
pub fn reachable_work_dir(data_dir: &Path, configured: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(dir) = configured {
        make_own_dir(dir, true)?;
        return match why_not(dir) {
            None => Ok(dir.to_path_buf()),
            Some(why) => Err(why),
        };
    }
    let Some(closed) = why_not(data_dir) else {
        return Ok(data_dir.to_path_buf());
    };
    let canonical = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let fallback = Path::new(FALLBACK_WORK_ROOT).join(crate::cgroup::key_for(&canonical));
    let made = make_own_dir(Path::new(FALLBACK_WORK_ROOT), false)
        .and_then(|()| make_own_dir(&fallback, false));
    match made.map(|()| why_not(&fallback)) {
        Ok(None) => Ok(fallback),
        Ok(Some(why)) | Err(why) => Err(format!(
            "{closed}; and the job directories cannot go to '{}' instead: {why}",
            fallback.display()
        )),
    }
}

/// Makes `dir` (its parents too when `parents`) if it is missing, and checks that it is a
/// real directory of this user that no one else may write to, then opens it to traversal.
fn make_own_dir(dir: &Path, parents: bool) -> Result<(), String> {
    if parents {
        make_parents(dir)?;
    }
    if let Err(e) = fs::create_dir(dir) {
        if e.kind() != io::ErrorKind::AlreadyExists {
            return Err(format!("cannot make '{}': {e}", dir.display()));
        }
    }
    let meta =
        fs::symlink_metadata(dir).map_err(|e| format!("cannot read '{}': {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "'{}' is not a directory of uid {me} that only it may write to (owner {}, mode {:o}): remove it or choose another",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    set_mode(dir, 0o711).map_err(|e| format!("cannot set the mode of '{}': {e}", dir.display()))
}

/// Makes the missing directories above `dir` (0711: the server's umask would close them to
/// the job uids) and checks every one above it: another user who owns one, or may write to
/// one that is not sticky (`/tmp` is), could swap what lies below for links of their own.
fn make_parents(dir: &Path) -> Result<(), String> {
    let me = nix::unistd::geteuid().as_raw();
    let mut above: Vec<&Path> = dir.ancestors().skip(1).collect();
    above.reverse();
    for parent in above {
        if fs::symlink_metadata(parent).is_err() {
            fs::create_dir(parent)
                .and_then(|()| set_mode(parent, 0o711))
                .map_err(|e| format!("cannot make '{}': {e}", parent.display()))?;
        }
        let meta = fs::symlink_metadata(parent)
            .map_err(|e| format!("cannot read '{}': {e}", parent.display()))?;
        let sticky = meta.mode() & 0o1000 != 0;
        let owner_ok = meta.uid() == 0 || meta.uid() == me;
        if !meta.is_dir() || !owner_ok || (meta.mode() & 0o022 != 0 && !sticky) {
            return Err(format!(
                "'{}' (owner {}, mode {:o}) is not a directory that only root or this server's user may change: choose a work_dir below directories they own",
                parent.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

/// Checks that attempts can run under `range` (see [`why_not`]; one uid per instance at
/// least) and opens the work dir (the data dir, or `[executor] work_dir`) and its `jobs/` to
/// traversal (0711: not to listing).
pub(crate) fn check_usable(
    range: JobUids,
    data_dir: &Path,
    instances: u32,
) -> Result<(), crate::ExecError> {
    let refuse = |m: String| crate::ExecError::Isolation(m);
    if let Some(why) = why_not(data_dir) {
        return Err(refuse(why));
    }
    if range.len() < u64::from(instances) {
        return Err(refuse(format!(
            "job_uids {}-{} has {} uids but the pools have {instances} instances, and every running attempt needs its own: widen the range",
            range.first, range.last, range.len()
        )));
    }
    if let Some((name, uid)) = account_in(
        range,
        &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
    ) {
        return Err(refuse(format!(
            "job_uids {}-{} holds uid {uid} of the account '{name}' (/etc/passwd): a job would run as that account; choose a range no account uses",
            range.first, range.last
        )));
    }
    for dir in [data_dir.to_path_buf(), data_dir.join("jobs")] {
        set_mode(&dir, 0o711).map_err(|e| {
            refuse(format!(
                "cannot set the mode of '{}' to 0711: {e}",
                dir.display()
            ))
        })?;
    }
    Ok(())
}

/// The first account of `passwd` (the text of /etc/passwd) whose uid lies in `range`.
fn account_in(range: JobUids, passwd: &str) -> Option<(String, u32)> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let uid: u32 = fields.nth(1)?.parse().ok()?;
        range.contains(uid).then(|| (name.to_string(), uid))
    })
}

/// `base` joined with `requested`, `..` resolved without touching the file system; `None`
/// when the path would leave `base`. An absolute `requested` counts from `base` too (it is
/// re-rooted, as a container's file system would be).
pub fn confine(base: &Path, requested: &Path) -> Option<PathBuf> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for c in requested.components() {
        match c {
            Component::Normal(p) => parts.push(p),
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let mut path = base.to_path_buf();
    path.extend(parts);
    Some(path)
}

/// Makes `base/rel` a chain of real directories. A component that is a link or a file is
/// removed and made a directory when `replace` (the executor's own directories, which the job
/// must not redirect); otherwise it is an error (a path the job chose, which root must not
/// follow). Directories created are handed to `owner` when given.
pub(crate) fn real_dirs(
    base: &Path,
    rel: &Path,
    replace: bool,
    owner: Option<u32>,
) -> io::Result<()> {
    let mut path = base.to_path_buf();
    for c in rel.components() {
        let Component::Normal(part) = c else {
            return Err(io::Error::other(format!(
                "'{}' is not a plain relative path",
                rel.display()
            )));
        };
        path.push(part);
        // Made first and looked at only if something is there: most are new.
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let m = fs::symlink_metadata(&path)?;
                if m.is_dir() {
                    continue;
                }
                if !replace {
                    return Err(io::Error::other(format!(
                        "'{}' is a link or a file, not a directory",
                        path.display()
                    )));
                }
                fs::remove_file(&path)?;
                fs::create_dir(&path)?;
            }
            Err(e) => return Err(e),
        }
        if let Some(uid) = owner {
            own_dir(&path, uid)?;
        }
    }
    Ok(())
}

/// Hands the directory `path` (never a link's target) to `uid`, its owner's only (0700).
pub(crate) fn own_dir(path: &Path, uid: u32) -> io::Result<()> {
    // Through the directory itself: a path-based chmod would follow a link put there since
    // the directory was made.
    let dir = open_dir(path)?;
    std::os::unix::fs::fchown(&dir, Some(uid), Some(uid))?;
    dir.set_permissions(fs::Permissions::from_mode(0o700))
}

/// Hands the directory `path` to `uid`, its owner's only (0700), by its path: only for a
/// directory in a tree no one but the server can have reached since it was made (see
/// [`own_dir`] for any other).
pub(crate) fn own_private_dir(path: &Path, uid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid))?;
    set_mode(path, 0o700)
}

/// Opens the directory `path` itself, never a link's target.
fn open_dir(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_DIRECTORY | nix::libc::O_NOFOLLOW)
        .open(path)
}

/// Makes the calling thread (only it: the syscalls are per thread) `uid`, with gid `uid` and
/// no supplementary groups, for good. Only for a thread that ends soon after.
pub(crate) fn become_job(uid: u32) -> io::Result<()> {
    use rustix::thread::{set_thread_groups, set_thread_res_gid, set_thread_res_uid, Gid, Uid};
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(uid));
    set_thread_groups(&[])?;
    set_thread_res_gid(gid, gid, gid)?;
    set_thread_res_uid(uid, uid, uid)?;
    Ok(())
}

/// Runs `work` on a thread of its own that has taken `uid` (uid and gid, no supplementary
/// groups) for good: what it opens, reads or spawns, it does with the job's rights, while the
/// server's other threads stay root. The thread ends with `work`.
pub(crate) fn as_job<T: Send>(
    uid: u32,
    work: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            become_job(uid)?;
            work()
        });
        thread.join().unwrap_or_else(|_| {
            Err(io::Error::other(
                "a thread running as the job's uid panicked",
            ))
        })
    })
}

/// Hands the trees under `dirs` to `uid` (uid and gid), without following links. The roots
/// change hands whoever owns them (the server made them); below, only entries that a job uid
/// of `range` owns, so a hard link to someone else's file is left alone.
pub(crate) fn hand_over(dirs: &[&Path], uid: u32, range: JobUids) -> io::Result<()> {
    let mut stack: Vec<(PathBuf, bool)> = dirs.iter().map(|d| (d.to_path_buf(), true)).collect();
    while let Some((path, root)) = stack.pop() {
        let m = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !(root || range.contains(m.uid())) {
            continue;
        }
        if m.uid() != uid || m.gid() != uid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(uid))?;
        }
        if m.is_dir() {
            // No directory stays writable to other uids (a process of an earlier attempt's
            // uid could otherwise swap entries under the server's feet).
            let mode = m.permissions().mode() & 0o7777;
            let want = if root { 0o700 } else { mode & !0o022 };
            if mode != want {
                open_dir(&path)?.set_permissions(fs::Permissions::from_mode(want))?;
            }
            for entry in fs::read_dir(&path)? {
                stack.push((entry?.path(), false));
            }
        }
    }
    Ok(())
}

/// Sets `path`'s mode (the job directory and the dirs above it: traversable, not listable).
pub(crate) fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configured_work_dir_is_made_opened_to_traversal_and_used() {
        let top = tempfile::tempdir().unwrap();
        set_mode(top.path(), 0o711).unwrap();
        let dir = top.path().join("a/work");
        let got = reachable_work_dir(Path::new("/nonexistent/data"), Some(&dir));
        if !nix::unistd::geteuid().is_root() {
            // Only a root server isolates jobs (and asks).
            assert!(got.unwrap_err().contains("not run as root"));
            return;
        }
        assert_eq!(got.unwrap(), dir);
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o711);
    }

    #[test]
    fn a_configured_work_dir_under_a_closed_directory_is_refused_saying_which() {
        let top = tempfile::tempdir().unwrap();
        set_mode(top.path(), 0o700).unwrap();
        let err = reachable_work_dir(Path::new("/x"), Some(&top.path().join("work"))).unwrap_err();
        if nix::unistd::geteuid().is_root() {
            assert!(err.contains(&top.path().display().to_string()), "{err}");
            assert!(err.contains("work_dir"), "{err}");
        } else {
            assert!(err.contains("not run as root"), "{err}");
        }
    }

    #[test]
    fn missing_parents_of_a_work_dir_are_made_open_to_traversal_whatever_the_umask() {
        // Made 0711 explicitly: the server's umask (077) would close them, the tests' (022)
        // open them to listing; neither may decide.
        let top = tempfile::tempdir().unwrap();
        set_mode(top.path(), 0o711).unwrap();
        make_own_dir(&top.path().join("a/b/work"), true).unwrap();
        for d in ["a", "a/b", "a/b/work"] {
            let mode = fs::metadata(top.path().join(d)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o711, "{d}");
        }
    }

    #[test]
    fn a_work_dir_below_a_directory_others_may_write_to_is_refused() {
        let top = tempfile::tempdir().unwrap();
        set_mode(top.path(), 0o777).unwrap();
        let err = make_own_dir(&top.path().join("work"), true).unwrap_err();
        assert!(err.contains("only root or this server's user"), "{err}");
    }

    #[test]
    fn a_work_dir_others_may_write_to_is_refused() {
        let top = tempfile::tempdir().unwrap();
        set_mode(top.path(), 0o711).unwrap();
        let dir = top.path().join("shared");
        fs::create_dir(&dir).unwrap();
        set_mode(&dir, 0o777).unwrap();
        let err = reachable_work_dir(Path::new("/x"), Some(&dir)).unwrap_err();
        assert!(err.contains("only it may write"), "{err}");
        assert_eq!(
            fs::metadata(&dir).unwrap().mode() & 0o777,
            0o777,
            "left as it was"
        );
    }

    #[test]
    fn paths_that_leave_their_base_are_refused_and_the_others_resolved() {
        let base = Path::new("/d/jobs/j/work");
        assert_eq!(confine(base, Path::new("a/../b")), Some(base.join("b")));
        assert_eq!(
            confine(base, Path::new("/opt/ml/checkpoints")),
            Some(base.join("opt/ml/checkpoints"))
        );
        assert_eq!(confine(base, Path::new("../../../../x")), None);
        assert_eq!(confine(base, Path::new("a/../../x")), None);
        assert_eq!(confine(base, Path::new("/../etc")), None);
        assert_eq!(confine(base, Path::new(".")), Some(base.to_path_buf()));
    }

    #[test]
    fn a_range_that_holds_an_account_is_found() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        let range = |first, last| JobUids { first, last };
        assert_eq!(
            account_in(range(900, 1000), passwd),
            Some(("alice".into(), 1000))
        );
        assert_eq!(account_in(range(1001, 2000), passwd), None);
    }

    #[test]
    fn uid_ranges_parse_and_refuse_root_and_empty_ranges() {
        assert_eq!(
            JobUids::parse("2000-2009"),
            Ok(JobUids {
                first: 2000,
                last: 2009
            })
        );
        for bad in ["", "0-10", "10", "5000-4000", "a-b", "2000-4294967295"] {
            assert!(JobUids::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_pool_hands_out_distinct_uids_round_robin_and_reports_exhaustion() {
        let mut pool = UidPool::new(JobUids {
            first: 2000,
            last: 2002,
        });
        let (a, b, c) = (pool.take(), pool.take(), pool.take());
        assert_eq!((a, b, c), (Some(2000), Some(2001), Some(2002)));
        assert_eq!(pool.take(), None);
        pool.give_back(2001);
        assert_eq!(pool.take(), Some(2001));
        pool.give_back(2000);
        pool.give_back(2002);
        // Round robin: 2002 was freed after 2000, but 2002 comes next in turn.
        assert_eq!(pool.take(), Some(2002));
        assert_eq!(pool.take(), Some(2000));
    }

    #[test]
    fn a_link_in_the_executors_own_directories_is_replaced_and_in_a_job_path_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("output")).unwrap();
        real_dirs(dir.path(), Path::new("output/data"), true, None).unwrap();
        assert!(fs::symlink_metadata(dir.path().join("output"))
            .unwrap()
            .is_dir());
        assert!(
            !outside.path().join("data").exists(),
            "the link was followed"
        );

        std::os::unix::fs::symlink(outside.path(), dir.path().join("ckpt")).unwrap();
        assert!(real_dirs(dir.path(), Path::new("ckpt/sub"), false, None).is_err());
        assert!(
            !outside.path().join("sub").exists(),
            "the link was followed"
        );
    }
}
