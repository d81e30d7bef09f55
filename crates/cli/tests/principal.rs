//! End-to-end tests of `qm principal` and `qm whoami`, and of how `qm` signs: the real binary
//! against a real `qm serve` (authentication on, as by default) on a free port with a
//! temporary data directory.
//!
//! Keys are random, so outputs are checked line by line rather than against golden files.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

mod support;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::Profile;

/// A `qm serve` on a free port, stopped (SIGTERM, then SIGKILL) when dropped.
struct Server {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().expect("a temp dir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_qm"))
            .arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start qm serve");
        let server = Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let url = format!("{}/healthz", server.endpoint);
        while !ureq::get(&url).call().is_ok_and(|r| r.status() == 200) {
            assert!(
                Instant::now() < deadline,
                "qm serve did not come up in 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn admin(&self) -> Profile {
        Profile::admin(&self.dir.path().join("data"))
            .expect("the server wrote the first admin's key to <data-dir>/credentials")
    }

    /// Runs `qm ARGS --endpoint <this server>` signing as `profile`.
    fn qm(&self, profile: Option<&Profile>, args: &[&str]) -> Output {
        support::qm(profile)
            .args(args)
            .arg("--endpoint")
            .arg(&self.endpoint)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("run qm")
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The stdout of a command that must succeed.
fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "qm failed ({}): {}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The stderr of a command that must fail with exit code 1.
fn refused(out: Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(1),
        "expected a refusal: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

#[cfg(unix)]
fn mode(path: &str) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path)
        .expect("the file")
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn an_admin_creates_rotates_and_deletes_a_principal_whose_key_works_until_then() {
    let server = Server::start();
    let admin = server.admin();
    assert_eq!(
        ok(server.qm(Some(&admin), &["whoami"])),
        "name    qm-admin\ngroups  -\nadmin   yes\n"
    );

    // Created into a new file: mode 0600, the profile named after the principal.
    let file = server.path("team-credentials");
    let out = ok(server.qm(
        Some(&admin),
        &[
            "principal",
            "create",
            "alice",
            "--group",
            "research",
            "--group",
            "ops",
            "--credentials-file",
            &file,
        ],
    ));
    assert!(
        out.contains("profile [alice] written to the new file"),
        "{out}"
    );
    assert!(out.contains("AWS_PROFILE=alice"), "{out}");
    #[cfg(unix)]
    assert_eq!(mode(&file), 0o600);
    let alice = Profile::new(Path::new(&file), "alice");
    assert_eq!(
        ok(server.qm(Some(&alice), &["whoami"])),
        "name    alice\ngroups  research,ops\nadmin   no\n"
    );

    // Creating it again into the same file is refused before the server is asked.
    let err = refused(server.qm(
        Some(&admin),
        &["principal", "create", "alice", "--credentials-file", &file],
    ));
    assert!(err.contains("already has a profile [alice]"), "{err}");

    // The list shows both; alice, no admin, may not see it.
    let list = ok(server.qm(Some(&admin), &["principal", "list"]));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 3, "{list}");
    assert!(lines[0].starts_with("NAME"), "{list}");
    assert!(lines[0].contains("ACCESS-KEY-ID"), "{list}");
    assert!(lines[1].starts_with("alice"), "{list}");
    assert!(lines[1].contains("research,ops"), "{list}");
    assert!(lines[1].ends_with("no"), "{list}");
    assert!(lines[2].starts_with("qm-admin"), "{list}");
    assert!(lines[2].ends_with("yes"), "{list}");
    let err = refused(server.qm(Some(&alice), &["principal", "list"]));
    assert!(err.starts_with("error: access denied: "), "{err}");
    assert!(err.contains("alice"), "{err}");

    // Rotated in place: the file's new key works.
    let before = std::fs::read_to_string(&file).expect("the file");
    let out = ok(server.qm(
        Some(&admin),
        &["principal", "rotate", "alice", "--credentials-file", &file],
    ));
    assert!(out.contains("profile [alice] replaced in"), "{out}");
    assert_ne!(std::fs::read_to_string(&file).expect("the file"), before);
    assert!(ok(server.qm(Some(&alice), &["whoami"])).starts_with("name    alice\n"));

    // The old key, kept elsewhere, no longer works.
    let old = server.path("old-credentials");
    std::fs::write(&old, &before).expect("write the old key");
    let err = refused(server.qm(Some(&Profile::new(Path::new(&old), "alice")), &["whoami"]));
    assert!(
        err.starts_with("error: authentication failed (UnrecognizedClientException): "),
        "{err}"
    );
    assert!(
        err.contains(&format!("from profile [alice] of {old}")),
        "{err}"
    );

    // Deleted: its key stops working.
    assert_eq!(
        ok(server.qm(Some(&admin), &["principal", "delete", "alice"])),
        "principal alice: deleted\n"
    );
    let err = refused(server.qm(Some(&alice), &["whoami"]));
    assert!(err.contains("UnrecognizedClientException"), "{err}");
}

#[test]
fn without_a_credentials_file_the_key_is_printed_once_as_a_profile() {
    let server = Server::start();
    let admin = server.admin();
    let out = server.qm(Some(&admin), &["principal", "create", "bob"]);
    let stdout = ok(out.clone());
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "[bob]", "{stdout}");
    assert!(lines[1].starts_with("aws_access_key_id = "), "{stdout}");
    assert!(lines[2].starts_with("aws_secret_access_key = "), "{stdout}");
    assert_eq!(lines[3], "region = us-east-1", "{stdout}");
    assert!(text(&out.stderr).contains("shown only once"));

    // What was printed is a working profile.
    let file = server.path("bob");
    std::fs::write(&file, &stdout).expect("save the profile");
    let bob = Profile::new(Path::new(&file), "bob");
    assert!(ok(server.qm(Some(&bob), &["whoami"])).starts_with("name    bob\n"));
}

#[test]
fn an_unsigned_request_says_how_to_point_qm_at_the_servers_key() {
    let server = Server::start();
    let err = refused(server.qm(None, &["whoami"]));
    assert!(
        err.contains("export AWS_SHARED_CREDENTIALS_FILE=<data-dir>/credentials\n"),
        "{err}"
    );
    assert!(err.contains("export AWS_PROFILE=qm-admin\n"), "{err}");
}

#[test]
fn with_nothing_chosen_qm_signs_with_the_local_servers_key() {
    let server = Server::start();
    // As if run in the folder holding the server's data directory.
    let out = support::qm(None)
        .args(["whoami", "--endpoint", &server.endpoint])
        .env("QM_DATA_DIR", server.dir.path().join("data"))
        .output()
        .expect("run qm");
    assert!(ok(out).starts_with("name    qm-admin\n"));
}

#[test]
fn a_profile_aws_profile_names_but_the_file_lacks_is_an_error_before_any_request() {
    let server = Server::start();
    let admin = server.admin();
    let wrong = Profile::new(&admin.file, "nobody");
    let err = refused(server.qm(Some(&wrong), &["jobs"]));
    assert!(err.contains("no profile [nobody]"), "{err}");
    assert!(err.contains("qm-admin"), "{err}");
}
