//! The data dir made ready: its files its owner's only, and locked against a second server.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::ServerError;

use super::io;

/// Makes the data dir (the database, the admin's keys, the jobs' files) ready and locks it;
/// the lock holds while the file returned is open.
pub(super) fn prepare(dir: &Path) -> Result<std::fs::File, ServerError> {
    // Files the server makes are its own only (the database's WAL, the lock, archives); jobs
    // inherit it, which keeps their files from each other too.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let existed = dir.exists();
    std::fs::create_dir_all(dir).map_err(io(format!("creating data dir {}", dir.display())))?;
    make_private(dir, existed)?;
    private_files(dir);
    lock_data_dir(dir)
}

/// The data dir holds the database, the admin's keys and the jobs' files: its owner only.
/// One that `existed` is the user's to set (it may be a directory shared on purpose): a
/// warning only.
fn make_private(dir: &Path, existed: bool) -> Result<(), ServerError> {
    if !existed {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(
            format!("making data dir {} private (mode 0700)", dir.display()),
        ))?;
    } else if let Ok(m) = std::fs::metadata(dir) {
        // Traversal (0711) is what isolated jobs need to reach their directories.
        if m.permissions().mode() & 0o066 != 0 {
            eprintln!(
                "qm: warning: data dir {} is readable by other users (mode {:o}); it holds the database and its secrets: chmod 700 it",
                dir.display(),
                m.permissions().mode() & 0o777
            );
        }
    }
    Ok(())
}

/// Makes the files directly in the data dir (database, WAL, lock, keys) its owner's only:
/// data dirs of earlier releases may have them 0644, and isolated jobs can traverse the dir.
fn private_files(data_dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
            let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600));
        }
    }
}

/// Two servers on one data directory would both replay the log and both run its jobs: the
/// first takes an exclusive lock (released by the kernel however it dies) and the second is
/// refused.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, ServerError> {
    let path = dir.join("qm.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| ServerError::Io {
            context: format!("opening {}", path.display()),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => {
            Err(ServerError::DataDirInUse(dir.display().to_string()))
        }
        Err(std::fs::TryLockError::Error(source)) => Err(ServerError::Io {
            context: format!("locking {}", path.display()),
            source,
        }),
    }
}
