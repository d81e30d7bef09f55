//! Transfers against `file://` roots: the same code paths as S3 but for the client, which the
//! end-to-end tests drive against moto's S3 server (tests/e2e/test_sagemaker_sdk.py).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use qm_storage::{Settings, Storage, StorageConfig, StorageError, SyncState};

fn storage(root: &Path) -> Storage {
    let cfg = StorageConfig {
        file_roots: vec![root.to_path_buf()],
        ..Default::default()
    };
    Storage::new(Settings::resolve(&cfg, &BTreeMap::new()))
}

fn plain(p: &Path) -> std::io::Result<fs::File> {
    fs::File::open(p)
}

fn uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

#[tokio::test]
async fn a_prefix_downloads_as_a_tree_with_progress_up_to_the_total() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data/train");
    fs::create_dir_all(data.join("sub")).unwrap();
    fs::write(data.join("a.csv"), "1,2\n").unwrap();
    fs::write(data.join("sub/b.csv"), "3,4,5\n").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let mut seen = Vec::new();
    let t = storage(root.path())
        .download(&uri(&data), dest.path(), None, &mut |p| seen.push(p))
        .await
        .unwrap();
    assert_eq!((t.files, t.bytes), (2, 10));
    assert_eq!(
        fs::read_to_string(dest.path().join("sub/b.csv")).unwrap(),
        "3,4,5\n"
    );
    let last = seen.last().unwrap();
    assert_eq!(
        (last.done, last.total, last.files, last.of_files),
        (10, 10, 2, 2)
    );
}

#[tokio::test]
async fn one_object_keeps_its_name_and_an_empty_location_says_so() {
    let root = tempfile::tempdir().unwrap();
    fs::write(root.path().join("only.bin"), "x").unwrap();
    let dest = tempfile::tempdir().unwrap();
    let s = storage(root.path());
    s.download(
        &uri(&root.path().join("only.bin")),
        dest.path(),
        None,
        &mut |_| {},
    )
    .await
    .unwrap();
    assert!(dest.path().join("only.bin").is_file());
    let err = s
        .download(
            &uri(&root.path().join("nothing")),
            dest.path(),
            None,
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Empty(_)), "{err}");
    assert!(err.to_string().contains("no objects found"), "{err}");
}

#[tokio::test]
async fn file_uris_outside_the_roots_and_links_inside_them_are_refused() {
    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/etc", root.path().join("etc")).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let s = storage(root.path());
    let err = s
        .download("file:///etc/passwd", dest.path(), None, &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("file_roots"), "{err}");
    let err = s
        .download(
            &uri(&root.path().join("etc/passwd")),
            dest.path(),
            None,
            &mut |_| {},
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::UnsafePath { .. }), "{err}");
    assert_eq!(
        fs::read_dir(dest.path()).unwrap().count(),
        0,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_manifest_names_keys_relative_to_its_prefix() {
    let root = tempfile::tempdir().unwrap();
    let bucket = root.path().join("bucket");
    fs::create_dir_all(bucket.join("images/cats")).unwrap();
    fs::write(bucket.join("images/cats/1.jpg"), "cat").unwrap();
    fs::write(bucket.join("images/dog.jpg"), "dog").unwrap();
    fs::write(bucket.join("images/unlisted.jpg"), "no").unwrap();
    let manifest = root.path().join("train.manifest");
    fs::write(
        &manifest,
        format!(
            r#"[{{"prefix": "{}/images/"}}, "cats/1.jpg", "dog.jpg"]"#,
            uri(&bucket)
        ),
    )
    .unwrap();
    let dest = tempfile::tempdir().unwrap();
    let t = storage(root.path())
        .download_manifest(&uri(&manifest), dest.path(), None, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(t.files, 2);
    assert_eq!(
        fs::read_to_string(dest.path().join("cats/1.jpg")).unwrap(),
        "cat"
    );
    assert!(!dest.path().join("unlisted.jpg").exists());
    fs::write(&manifest, r#"["no prefix"]"#).unwrap();
    let err = storage(root.path())
        .download_manifest(&uri(&manifest), dest.path(), None, &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("prefix"), "{err}");
}

#[tokio::test]
async fn a_sync_uploads_only_what_changed_and_a_restore_brings_it_back() {
    let root = tempfile::tempdir().unwrap();
    let remote = uri(&root.path().join("ckpt/job-1"));
    let local = tempfile::tempdir().unwrap();
    fs::create_dir(local.path().join("step")).unwrap();
    fs::write(local.path().join("step/model.pt"), "epoch 1").unwrap();
    fs::write(local.path().join("meta.json"), "{}").unwrap();
    let s = storage(root.path());
    let mut state = SyncState::default();
    assert_eq!(
        s.sync_up(local.path(), &remote, &mut state, &plain)
            .await
            .unwrap()
            .files,
        2
    );
    assert_eq!(
        s.sync_up(local.path(), &remote, &mut state, &plain)
            .await
            .unwrap()
            .files,
        0,
        "nothing changed"
    );
    fs::write(local.path().join("step/model.pt"), "epoch 2, longer").unwrap();
    assert_eq!(
        s.sync_up(local.path(), &remote, &mut state, &plain)
            .await
            .unwrap()
            .files,
        1
    );
    let restored = tempfile::tempdir().unwrap();
    s.download(&remote, restored.path(), None, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        fs::read_to_string(restored.path().join("step/model.pt")).unwrap(),
        "epoch 2, longer"
    );
    assert_eq!(SyncState::of(restored.path()).unwrap().files(), 2);
}

#[tokio::test]
async fn an_uploaded_file_lands_at_its_uri_replacing_the_old_one() {
    let root = tempfile::tempdir().unwrap();
    let src = tempfile::NamedTempFile::new().unwrap();
    fs::write(src.path(), "model bytes").unwrap();
    let target = root.path().join("out/job/output/model.tar.gz");
    let s = storage(root.path());
    assert_eq!(
        s.upload_file(fs::File::open(src.path()).unwrap(), &uri(&target))
            .await
            .unwrap(),
        11
    );
    fs::write(src.path(), "new").unwrap();
    s.upload_file(fs::File::open(src.path()).unwrap(), &uri(&target))
        .await
        .unwrap();
    assert_eq!(fs::read_to_string(&target).unwrap(), "new");
}

#[tokio::test]
async fn a_manifest_larger_than_the_bound_is_refused_before_it_is_parsed() {
    let root = tempfile::tempdir().unwrap();
    let manifest = root.path().join("huge.manifest");
    let f = fs::File::create(&manifest).unwrap();
    f.set_len(qm_storage::MAX_MANIFEST_BYTES + 1).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let err = storage(root.path())
        .download_manifest(&uri(&manifest), dest.path(), None, &mut |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
}
