//! `/opt/ml` as the attempt's own directory: each host's process starts in a private mount
//! namespace where the job's directory is bind-mounted at `/opt/ml` (and host algo-i's own
//! config directory at `/opt/ml/input/config`), so scripts that open `/opt/ml/...` directly —
//! the SageMaker SDK's `sm_train.sh` does — work without a container, and concurrent jobs never
//! see each other's. The rest of the file system is the host's.
//!
//! The namespace is made by the short-lived thread that spawns the process
//! (`unshare(CLONE_NEWNS)` is per thread; the child inherits it), before that thread drops
//! root for the job's uid. Propagation is made private first, so nothing mounted here reaches
//! the host. It needs root (CAP_SYS_ADMIN); `probe` finds out once, at start-up.

use std::io;
use std::path::{Path, PathBuf};

use std::os::fd::AsRawFd;

use nix::fcntl::{open, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::Mode;

/// Where SageMaker's containers find their files.
pub const OPT_ML: &str = "/opt/ml";

/// What to bind for one host's process.
#[derive(Debug, Clone)]
pub(crate) struct Binds {
    /// The job's directory, at `/opt/ml`.
    pub(crate) job: PathBuf,
    /// This host's config directory, at `/opt/ml/input/config` (hosts 2 and up).
    pub(crate) config: Option<PathBuf>,
}

/// Enters a new mount namespace on the calling thread and makes the binds. Only for a thread
/// that spawns one process and ends.
///
/// Each bind goes through descriptors opened without following a link in the last component:
/// `input/` belongs to the job, whose other hosts already run, and a link it put at
/// `input/config` would otherwise make the kernel mount the job's files over, say, `/etc` in
/// this namespace (where a setuid program would trust them).
pub(crate) fn enter(binds: &Binds) -> io::Result<()> {
    let err = |what: &str, e: nix::Error| io::Error::other(format!("{what}: {e}"));
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| err("unshare(CLONE_NEWNS)", e))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| err("making / private", e))?;
    bind(&binds.job, Path::new(OPT_ML))?;
    if let Some(config) = &binds.config {
        bind(config, &Path::new(OPT_ML).join("input/config"))?;
    }
    Ok(())
}

/// Binds the directory `source` at the directory `target`, neither reached through a link
/// in its last component; without setuid programs or devices.
fn bind(source: &Path, target: &Path) -> io::Result<()> {
    let open = |p: &Path| {
        open(
            p,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            io::Error::other(format!(
                "opening '{}': {e} (a link where a directory belongs?)",
                p.display()
            ))
        })
    };
    let (src, dst) = (open(source)?, open(target)?);
    let fd_path = |fd: &std::os::fd::OwnedFd| format!("/proc/self/fd/{}", fd.as_raw_fd());
    mount(
        Some(fd_path(&src).as_str()),
        fd_path(&dst).as_str(),
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(|e| {
        io::Error::other(format!(
            "binding {} at {}: {e}",
            source.display(),
            target.display()
        ))
    })
}

/// Whether attempts can get `/opt/ml`: creates the empty mount point if it is missing (as
/// root) and tries a namespace with a bind of `scratch` in a throwaway thread. `Err` says why
/// not.
pub(crate) fn probe(scratch: &Path) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("the server is not root, and a mount namespace needs root".into());
    }
    let opt_ml = Path::new(OPT_ML);
    match std::fs::symlink_metadata(opt_ml) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{OPT_ML} exists and is not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(opt_ml)
                .map_err(|e| format!("cannot create the mount point {OPT_ML}: {e}"))?;
            tracing::info!("created {OPT_ML}, the empty mount point of each attempt's own /opt/ml");
        }
        Err(e) => return Err(format!("{OPT_ML}: {e}")),
    }
    let binds = Binds {
        job: scratch.to_path_buf(),
        config: None,
    };
    std::thread::scope(|s| s.spawn(|| enter(&binds)).join())
        .map_err(|_| "the probing thread panicked".to_string())?
        .map_err(|e| e.to_string())
}
