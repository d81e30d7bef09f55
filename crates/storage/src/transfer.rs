//! The transfers an attempt needs: a channel or the checkpoints downloaded into a directory
//! (a key prefix, one object, or a SageMaker manifest), one file uploaded (`model.tar.gz`),
//! and a directory synced up (the checkpoints: only files whose size or mtime changed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use object_store::buffered::BufWriter;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::local::{self, FileEntry};
use crate::uri::plain_component;
use crate::{s3, Location, Settings, StorageError, StorageUri};

/// Opens a local file for reading, with whatever rights the caller chooses (the job's, for a
/// job's files: the server may be root, and the job must not make it read what it cannot).
pub type Opener<'a> = &'a (dyn Fn(&Path) -> std::io::Result<std::fs::File> + Sync);

/// How far a download is, for progress lines and status reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes written so far.
    pub done: u64,
    /// Bytes to write in all.
    pub total: u64,
    /// Files finished.
    pub files: usize,
    /// Files in all.
    pub of_files: usize,
}

/// What a transfer moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Transfer {
    /// Files.
    pub files: usize,
    /// Bytes.
    pub bytes: u64,
}

/// What a directory synced up last held: size and mtime per file, so that the next sync
/// uploads only what changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncState {
    seen: BTreeMap<Vec<String>, (u64, i128)>,
}

impl SyncState {
    /// The state of `dir` as it is now (right after a restore: nothing to upload).
    pub fn of(dir: &Path) -> Result<SyncState, StorageError> {
        Ok(SyncState {
            seen: local::walk(dir)?
                .into_iter()
                .map(|f| (f.rel, (f.len, f.mtime_ns)))
                .collect(),
        })
    }

    /// How many files it knows.
    pub fn files(&self) -> usize {
        self.seen.len()
    }
}

/// The most objects one location may hold for a download: a listing is kept in memory
/// (about a hundred bytes an object), and a job should not make the server hold more.
pub const MAX_OBJECTS: usize = 1_000_000;

/// The largest manifest read (it is parsed in memory).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// One object to fetch and where it goes, relative to the destination.
struct Item {
    from: Source,
    rel: Vec<String>,
    len: u64,
}

enum Source {
    S3(Arc<dyn ObjectStore>, object_store::path::Path),
    File(PathBuf),
}

/// The S3 clients (one per bucket, made on first use) and the allowed local roots.
#[derive(Debug)]
pub struct Storage {
    settings: Settings,
    clients: Mutex<BTreeMap<String, Arc<dyn ObjectStore>>>,
}

impl Storage {
    /// A storage with `settings`; S3 clients are built on first use of each bucket.
    pub fn new(settings: Settings) -> Storage {
        // object_store signs with ring; TLS needs a process-wide provider (the server installs
        // the same one; whichever comes first wins, and both are ring).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Storage {
            settings,
            clients: Mutex::new(BTreeMap::new()),
        }
    }

    /// The resolved settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Parses `uri` and checks that it may be used: a `file://` path must lie under a root.
    pub fn check(&self, uri: &str) -> Result<StorageUri, StorageError> {
        let parsed = StorageUri::parse(uri)?;
        if let Location::File(path) = &parsed.location {
            local::check_under_roots(uri, path, &self.settings.file_roots)?;
        }
        Ok(parsed)
    }

    fn client(&self, bucket: &str) -> Result<Arc<dyn ObjectStore>, StorageError> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = clients.get(bucket) {
            return Ok(c.clone());
        }
        let c = s3::client(&self.settings, bucket)?;
        clients.insert(bucket.to_string(), c.clone());
        Ok(c)
    }

    /// Downloads what `uri` names into `dest` (an empty directory the caller made): every
    /// object under the prefix (as a directory: `s3://b/data` takes `data/...`), or the one
    /// object the URI names, kept under its own name. New files and directories go to `owner`.
    /// `progress` is called after each chunk.
    pub async fn download(
        &self,
        uri: &str,
        dest: &Path,
        owner: Option<u32>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Transfer, StorageError> {
        let parsed = self.check(uri)?;
        let items = self.list(&parsed).await?;
        if items.is_empty() {
            return Err(StorageError::Empty(uri.to_string()));
        }
        self.fetch(uri, items, dest, owner, progress).await
    }

    /// Downloads the objects a SageMaker manifest lists: a JSON array whose first element is
    /// `{"prefix": "s3://..."}` and whose others are keys relative to it; each goes to its
    /// relative path under `dest`.
    pub async fn download_manifest(
        &self,
        uri: &str,
        dest: &Path,
        owner: Option<u32>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Transfer, StorageError> {
        let manifest = self.check(uri)?;
        let bytes = self.read_all(&manifest).await?;
        let bad = |why: &str| StorageError::Manifest {
            uri: uri.to_string(),
            why: why.to_string(),
        };
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| bad(&format!("not JSON: {e}")))?;
        let list = value.as_array().ok_or_else(|| bad("not a JSON array"))?;
        let prefix = list
            .first()
            .and_then(|p| p.get("prefix"))
            .and_then(|p| p.as_str())
            .ok_or_else(|| bad("its first element must be {\"prefix\": \"s3://...\"}"))?;
        let mut items = Vec::new();
        for key in &list[1..] {
            let key = key
                .as_str()
                .ok_or_else(|| bad("every element after the first must be a key"))?;
            let object = self.check(&format!("{}/{}", prefix.trim_end_matches('/'), key))?;
            let rel: Vec<String> = key
                .split('/')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect();
            let mut found = self.list_one(&object).await?;
            let Some(mut item) = found.pop() else {
                return Err(StorageError::Empty(object.text));
            };
            item.rel = rel;
            items.push(item);
        }
        if items.is_empty() {
            return Err(bad("it lists no keys"));
        }
        self.fetch(uri, items, dest, owner, progress).await
    }

    /// Uploads the open file `src` to the object (or `file://` path) `uri`. The caller opens
    /// it, so that a job's file is read with the job's rights ([`Opener`]).
    pub async fn upload_file(&self, src: std::fs::File, uri: &str) -> Result<u64, StorageError> {
        let target = self.check(uri)?;
        match &target.location {
            Location::S3 { bucket, key } => {
                let store = self.client(bucket)?;
                let mut input = tokio::fs::File::from_std(src);
                let mut writer = BufWriter::new(store, s3::path(key));
                let copied = tokio::io::copy(&mut input, &mut writer).await;
                let n = match copied {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = writer.abort().await;
                        return Err(upload_error(uri, e));
                    }
                };
                writer.shutdown().await.map_err(|e| upload_error(uri, e))?;
                Ok(n)
            }
            Location::File(path) => {
                let root = self.root_of(path)?;
                let rel = rel_components(path, &root);
                tokio::task::spawn_blocking(move || local::copy_into(src, &root, &rel))
                    .await
                    .map_err(|e| StorageError::io(path, std::io::Error::other(e)))?
            }
        }
    }

    /// Uploads the files of `dir` whose size or mtime differ from `state` to `uri/<relative
    /// path>`, and records them. Objects of files deleted locally are left in place, as
    /// SageMaker leaves them.
    pub async fn sync_up(
        &self,
        dir: &Path,
        uri: &str,
        state: &mut SyncState,
        open: Opener<'_>,
    ) -> Result<Transfer, StorageError> {
        let base = self.check(uri)?;
        let owned = dir.to_path_buf();
        let files: Vec<FileEntry> = tokio::task::spawn_blocking(move || local::walk(&owned))
            .await
            .map_err(|e| StorageError::io(dir, std::io::Error::other(e)))??;
        let mut done = Transfer::default();
        for f in files {
            if state.seen.get(&f.rel) == Some(&(f.len, f.mtime_ns)) {
                continue;
            }
            let parts: Vec<&str> = f.rel.iter().map(String::as_str).collect();
            let target = base.join(&parts)?;
            let mut src = dir.to_path_buf();
            src.extend(&f.rel);
            let file = match open(&src) {
                Ok(file) => file,
                // Gone since the walk (the job rotates its checkpoints): not an error.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // One file the job made unreadable must not keep the others from storage.
                Err(e) => {
                    tracing::warn!(path = %src.display(), error = %e, "a checkpoint file cannot be read: not uploaded");
                    continue;
                }
            };
            done.bytes += self.upload_file(file, &target.text).await?;
            done.files += 1;
            state.seen.insert(f.rel, (f.len, f.mtime_ns));
        }
        Ok(done)
    }

    /// The allowed root `path` lies under.
    fn root_of(&self, path: &Path) -> Result<PathBuf, StorageError> {
        self.settings
            .file_roots
            .iter()
            .find(|r| path.starts_with(r))
            .cloned()
            .ok_or_else(|| StorageError::NotAllowed {
                uri: path.display().to_string(),
                roots: "see [storage] file_roots".into(),
            })
    }

    /// The objects under `uri` as a directory, or the one object it names.
    async fn list(&self, uri: &StorageUri) -> Result<Vec<Item>, StorageError> {
        match &uri.location {
            Location::S3 { bucket, key } => {
                let store = self.client(bucket)?;
                let prefix = s3::path(key);
                let mut listing = store.list(Some(&prefix));
                let mut items = Vec::new();
                while let Some(meta) = listing.next().await {
                    let meta = meta.map_err(|source| s3_error(uri, source))?;
                    if items.len() >= MAX_OBJECTS {
                        return Err(too_many(uri));
                    }
                    let Some(parts) = meta.location.prefix_match(&prefix) else {
                        continue;
                    };
                    let rel: Vec<String> = parts.map(|p| p.as_ref().to_string()).collect();
                    if rel.is_empty() {
                        continue;
                    }
                    items.push(Item {
                        from: Source::S3(store.clone(), meta.location.clone()),
                        rel,
                        len: meta.size,
                    });
                }
                if items.is_empty() {
                    return self.list_one(uri).await;
                }
                Ok(items)
            }
            Location::File(path) => {
                match std::fs::symlink_metadata(path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => return self.list_one(uri).await,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(StorageError::io(path, e)),
                }
                let owned = path.clone();
                let files = tokio::task::spawn_blocking(move || local::walk(&owned))
                    .await
                    .map_err(|e| StorageError::io(path, std::io::Error::other(e)))??;
                if files.len() > MAX_OBJECTS {
                    return Err(too_many(uri));
                }
                Ok(files
                    .into_iter()
                    .map(|f| {
                        let mut p = path.clone();
                        p.extend(&f.rel);
                        Item {
                            from: Source::File(p),
                            rel: f.rel,
                            len: f.len,
                        }
                    })
                    .collect())
            }
        }
    }

    /// The one object `uri` names, under its last component; none if it does not exist.
    async fn list_one(&self, uri: &StorageUri) -> Result<Vec<Item>, StorageError> {
        match &uri.location {
            Location::S3 { bucket, key } => {
                let Some(name) = key.last() else {
                    return Ok(Vec::new());
                };
                let store = self.client(bucket)?;
                let path = s3::path(key);
                match store.head(&path).await {
                    Ok(meta) => Ok(vec![Item {
                        from: Source::S3(store, path),
                        rel: vec![name.clone()],
                        len: meta.size,
                    }]),
                    Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
                    Err(source) => Err(s3_error(uri, source)),
                }
            }
            Location::File(path) => match std::fs::symlink_metadata(path) {
                Ok(m) if m.is_file() => Ok(vec![Item {
                    from: Source::File(path.clone()),
                    rel: vec![path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()],
                    len: m.len(),
                }]),
                Ok(_) => Ok(Vec::new()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(StorageError::io(path, e)),
            },
        }
    }

    /// The whole content of one small object (a manifest).
    async fn read_all(&self, uri: &StorageUri) -> Result<Vec<u8>, StorageError> {
        match &uri.location {
            Location::S3 { bucket, key } => {
                let store = self.client(bucket)?;
                let got = store
                    .get(&s3::path(key))
                    .await
                    .map_err(|e| s3_error(uri, e))?;
                if got.meta.size > MAX_MANIFEST_BYTES {
                    return Err(manifest_too_large(uri));
                }
                Ok(got.bytes().await.map_err(|e| s3_error(uri, e))?.to_vec())
            }
            Location::File(path) => {
                let f = tokio::fs::File::from_std(local::open_plain(path)?);
                let mut buf = Vec::new();
                f.take(MAX_MANIFEST_BYTES + 1)
                    .read_to_end(&mut buf)
                    .await
                    .map_err(|e| StorageError::io(path, e))?;
                if buf.len() as u64 > MAX_MANIFEST_BYTES {
                    return Err(manifest_too_large(uri));
                }
                Ok(buf)
            }
        }
    }

    /// Writes `items` under `dest`.
    async fn fetch(
        &self,
        uri: &str,
        items: Vec<Item>,
        dest: &Path,
        owner: Option<u32>,
        progress: &mut (dyn FnMut(Progress) + Send),
    ) -> Result<Transfer, StorageError> {
        let mut p = Progress {
            done: 0,
            total: items.iter().map(|i| i.len).sum(),
            files: 0,
            of_files: items.len(),
        };
        progress(p);
        for item in items {
            if !item.rel.iter().all(|c| plain_component(c)) {
                return Err(StorageError::UnsafePath {
                    path: format!("{uri}: {}", item.rel.join("/")),
                    why: "an object's key has a component that is not a plain file name".into(),
                });
            }
            let (name, dirs) = item.rel.split_last().expect("checked non-empty");
            let dir = local::make_dirs(dest, dirs, owner)?;
            let path = dir.join(name);
            let mut out = tokio::fs::File::from_std(local::create_new(&path, owner)?);
            match item.from {
                Source::S3(store, key) => {
                    let at = format!("{uri} ({key})");
                    let got = store.get(&key).await.map_err(|source| StorageError::S3 {
                        uri: at.clone(),
                        source,
                    })?;
                    let mut stream = got.into_stream();
                    while let Some(chunk) = stream.next().await {
                        let chunk = chunk.map_err(|source| StorageError::S3 {
                            uri: at.clone(),
                            source,
                        })?;
                        out.write_all(&chunk)
                            .await
                            .map_err(|e| StorageError::io(&path, e))?;
                        p.done += chunk.len() as u64;
                        progress(p);
                    }
                }
                Source::File(src) => {
                    let mut input = tokio::fs::File::from_std(local::open_plain(&src)?);
                    let mut buf = vec![0u8; 1 << 20];
                    loop {
                        let n = input
                            .read(&mut buf)
                            .await
                            .map_err(|e| StorageError::io(&src, e))?;
                        if n == 0 {
                            break;
                        }
                        out.write_all(&buf[..n])
                            .await
                            .map_err(|e| StorageError::io(&path, e))?;
                        p.done += n as u64;
                        progress(p);
                    }
                }
            }
            out.flush().await.map_err(|e| StorageError::io(&path, e))?;
            p.files += 1;
            progress(p);
        }
        Ok(Transfer {
            files: p.files,
            bytes: p.done,
        })
    }
}

fn too_many(uri: &StorageUri) -> StorageError {
    StorageError::UnsafePath {
        path: uri.text.clone(),
        why: format!("it holds more than {MAX_OBJECTS} objects: split the data into channels, or pack it into fewer, larger files"),
    }
}

fn manifest_too_large(uri: &StorageUri) -> StorageError {
    StorageError::Manifest {
        uri: uri.text.clone(),
        why: format!(
            "it is larger than {MAX_MANIFEST_BYTES} bytes: split it into several channels"
        ),
    }
}

fn s3_error(uri: &StorageUri, source: object_store::Error) -> StorageError {
    StorageError::S3 {
        uri: uri.text.clone(),
        source,
    }
}

fn upload_error(uri: &str, e: std::io::Error) -> StorageError {
    StorageError::Upload {
        uri: uri.to_string(),
        source: e,
    }
}

/// The components of `path` below `root`.
fn rel_components(path: &Path, root: &Path) -> Vec<String> {
    path.strip_prefix(root)
        .map(|r| {
            r.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
