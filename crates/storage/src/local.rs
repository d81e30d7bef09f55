//! The local side of every transfer, and `file://` locations. The server may be root and the
//! paths come from a job, so nothing here follows a link: directories are created one
//! component at a time and a link where one belongs is an error, files are created new with
//! `O_NOFOLLOW`, and a walk skips links (logged). Whatever is created is handed to the job's
//! uid through its own descriptor.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::uri::plain_component;
use crate::StorageError;

/// A regular file found by [`walk`]: its path relative to the walked directory, size and
/// modification time (nanoseconds since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Plain components.
    pub rel: Vec<String>,
    /// Bytes.
    pub len: u64,
    /// Modification time, ns.
    pub mtime_ns: i128,
}

/// The regular files under `dir`, sorted; links and special files are skipped. A missing
/// `dir` has none.
pub fn walk(dir: &Path) -> Result<Vec<FileEntry>, StorageError> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), Vec::<String>::new())];
    while let Some((path, rel)) = stack.pop() {
        let entries = match fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound && rel.is_empty() => continue,
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| StorageError::io(&path, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let child = entry.path();
            let m = fs::symlink_metadata(&child).map_err(|e| StorageError::io(&child, e))?;
            let mut child_rel = rel.clone();
            child_rel.push(name);
            if m.is_dir() {
                stack.push((child, child_rel));
            } else if m.is_file() {
                out.push(FileEntry {
                    rel: child_rel,
                    len: m.len(),
                    mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
                });
            } else {
                tracing::warn!(path = %child.display(), "not a regular file or directory (a link?): skipped");
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// Creates the directories `rel` (plain components) under `base`, which must exist; an
/// existing real directory is kept, a link or file where a directory belongs is an error.
/// New directories go to `owner`.
pub fn make_dirs(base: &Path, rel: &[String], owner: Option<u32>) -> Result<PathBuf, StorageError> {
    let mut path = base.to_path_buf();
    for part in rel {
        if !plain_component(part) {
            return Err(StorageError::UnsafePath {
                path: path.join(part).display().to_string(),
                why: "not a plain name".into(),
            });
        }
        path.push(part);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => {
                return Err(StorageError::UnsafePath {
                    path: path.display().to_string(),
                    why: "a link or a file stands where a directory belongs".into(),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&path, e)),
        }
        match fs::create_dir(&path) {
            Ok(()) => {}
            // Made meanwhile by a concurrent transfer (two jobs' uploads under one prefix):
            // fine if it is a real directory.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                match fs::symlink_metadata(&path) {
                    Ok(m) if m.is_dir() => continue,
                    _ => return Err(StorageError::io(&path, e)),
                }
            }
            Err(e) => return Err(StorageError::io(&path, e)),
        }
        if let Some(uid) = owner {
            // Through the directory itself, never a link put there since the mkdir.
            let dir = OpenOptions::new()
                .read(true)
                .custom_flags(libc_o_nofollow() | rustix::fs::OFlags::DIRECTORY.bits() as i32)
                .open(&path)
                .map_err(|e| StorageError::io(&path, e))?;
            std::os::unix::fs::fchown(&dir, Some(uid), Some(uid))
                .map_err(|e| StorageError::io(&path, e))?;
        }
    }
    Ok(path)
}

/// Creates `path`, which must not exist (not even as a link), for writing; handed to `owner`.
pub fn create_new(path: &Path, owner: Option<u32>) -> Result<File, StorageError> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc_o_nofollow())
        .open(path)
        .map_err(|e| StorageError::io(path, e))?;
    if let Some(uid) = owner {
        std::os::unix::fs::fchown(&file, Some(uid), Some(uid))
            .map_err(|e| StorageError::io(path, e))?;
    }
    Ok(file)
}

/// Opens an existing regular file for reading without following a link in its last component,
/// and without blocking on a FIFO put where the file was (`O_NONBLOCK` means nothing to a
/// regular file).
pub fn open_plain(path: &Path) -> Result<File, StorageError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_nofollow() | rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
        .map_err(|e| StorageError::io(path, e))?;
    let m = file.metadata().map_err(|e| StorageError::io(path, e))?;
    if !m.is_file() {
        return Err(StorageError::UnsafePath {
            path: path.display().to_string(),
            why: "not a regular file".into(),
        });
    }
    Ok(file)
}

/// `O_NOFOLLOW`, which std has no constant for.
fn libc_o_nofollow() -> i32 {
    rustix::fs::OFlags::NOFOLLOW.bits() as i32
}

/// Checks that `path` lies under one of `roots` and that no component from the root down is a
/// link (a missing tail is fine: uploads create it).
pub fn check_under_roots(uri: &str, path: &Path, roots: &[PathBuf]) -> Result<(), StorageError> {
    let not_allowed = || StorageError::NotAllowed {
        uri: uri.to_string(),
        roots: if roots.is_empty() {
            "none".to_string()
        } else {
            roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
    };
    let root = roots
        .iter()
        .find(|r| path.starts_with(r))
        .ok_or_else(not_allowed)?;
    let mut at = root.clone();
    let rest = path.strip_prefix(root).map_err(|_| not_allowed())?;
    for c in rest.components() {
        at.push(c);
        match fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(StorageError::UnsafePath {
                    path: at.display().to_string(),
                    why: "a link inside a file root is never followed".into(),
                })
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => break,
            Err(e) => return Err(StorageError::io(&at, e)),
        }
    }
    Ok(())
}

/// Writes `src` to `rel` under `root` (an allowed root) as a new file renamed into place,
/// creating the directories on the way without following links.
pub fn copy_into(mut src: File, root: &Path, rel: &[String]) -> Result<u64, StorageError> {
    let Some((name, dirs)) = rel.split_last() else {
        return Err(StorageError::UnsafePath {
            path: root.display().to_string(),
            why: "no file name".into(),
        });
    };
    let dir = make_dirs(root, dirs, None)?;
    // Unique per upload: two jobs may upload to one name at once.
    static UPLOADS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = UPLOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.qm-partial-{}-{n}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    let mut out = create_new(&tmp, None)?;
    let n = io::copy(&mut src, &mut out).map_err(|e| StorageError::io(&tmp, e))?;
    out.sync_all().map_err(|e| StorageError::io(&tmp, e))?;
    let dest = dir.join(name);
    fs::rename(&tmp, &dest).map_err(|e| StorageError::io(&dest, e))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_lists_regular_files_and_skips_links() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("a/b")).unwrap();
        fs::write(dir.path().join("a/b/x"), "12345").unwrap();
        fs::write(dir.path().join("top"), "1").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join("dirlink")).unwrap();
        let files = walk(dir.path()).unwrap();
        let rels: Vec<String> = files.iter().map(|f| f.rel.join("/")).collect();
        assert_eq!(rels, ["a/b/x", "top"]);
        assert_eq!(files[0].len, 5);
        assert!(walk(&dir.path().join("missing")).unwrap().is_empty());
    }

    #[test]
    fn make_dirs_and_create_new_never_follow_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("planted")).unwrap();
        assert!(make_dirs(dir.path(), &["planted".into(), "x".into()], None).is_err());
        std::os::unix::fs::symlink(outside.path().join("f"), dir.path().join("file-link")).unwrap();
        assert!(create_new(&dir.path().join("file-link"), None).is_err());
        assert!(!outside.path().join("f").exists() && !outside.path().join("x").exists());
        let made = make_dirs(dir.path(), &["new".into(), "deeper".into()], None).unwrap();
        assert!(made.is_dir());
    }

    #[test]
    fn only_paths_under_a_root_without_links_are_allowed() {
        let root = tempfile::tempdir().unwrap();
        let roots = vec![root.path().to_path_buf()];
        fs::create_dir(root.path().join("data")).unwrap();
        std::os::unix::fs::symlink("/etc", root.path().join("etc")).unwrap();
        check_under_roots("u", &root.path().join("data/new/file"), &roots).unwrap();
        assert!(matches!(
            check_under_roots("u", Path::new("/etc/shadow"), &roots),
            Err(StorageError::NotAllowed { .. })
        ));
        assert!(matches!(
            check_under_roots("u", &root.path().join("etc/shadow"), &roots),
            Err(StorageError::UnsafePath { .. })
        ));
        assert!(check_under_roots("u", Path::new("/x"), &[]).is_err());
    }
}
