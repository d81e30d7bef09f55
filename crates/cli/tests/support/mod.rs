//! What the end-to-end tests share: running `qm` (and the in-process client) as a chosen
//! principal of the server under test, and as nobody else.
//!
//! A developer's own AWS settings (`AWS_PROFILE`, `~/.aws/credentials`, `AWS_REGION`...) and a
//! `./qm-data` where the tests run must not reach the `qm` under test: it would sign with
//! those and the server would refuse them. So every setting the credentials chain reads is
//! cleared, and only the profile a test names is set.

// Each test binary uses its part of this.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use qm_cli::client::credentials::{resolve, LOCAL_PROFILE};
use qm_cli::client::Client;

/// Every variable the credentials chain (and the endpoint lookup) reads.
const CHAIN_VARS: [&str; 10] = [
    "AWS_CA_BUNDLE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "QM_DATA_DIR",
    "QM_ENDPOINT",
];

/// A profile of a credentials file: who a `qm` signs as.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The shared credentials file.
    pub file: PathBuf,
    /// The profile in it.
    pub name: String,
}

impl Profile {
    /// The first admin's key, which the server writes to `<data-dir>/credentials` on its
    /// first start; `None` when it wrote none (a server without authentication).
    pub fn admin(data_dir: &Path) -> Option<Profile> {
        let file = data_dir.join("credentials");
        file.exists().then(|| Profile {
            file,
            name: LOCAL_PROFILE.to_string(),
        })
    }

    /// Profile `name` of `file`.
    pub fn new(file: &Path, name: &str) -> Profile {
        Profile {
            file: file.to_path_buf(),
            name: name.to_string(),
        }
    }
}

/// The `qm` under test, signing as `profile` (unsigned without one), with no other
/// credentials to find.
pub fn qm(profile: Option<&Profile>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qm"));
    for var in CHAIN_VARS {
        cmd.env_remove(var);
    }
    cmd.env("HOME", "/nonexistent/home")
        .env("QM_DATA_DIR", "/nonexistent/qm-data");
    if let Some(p) = profile {
        cmd.env("AWS_SHARED_CREDENTIALS_FILE", &p.file)
            .env("AWS_PROFILE", &p.name);
    }
    cmd
}

/// Stops the running attempts of the server of `endpoint` and `data_dir` (`qm drain
/// --requeue` as `admin`: jobs outlive a stopped server) and waits, a few seconds at most,
/// until none runs: each attempt's socket in `supervisors/` is renamed `free-<pid>.sock` once
/// its end is acknowledged. A server that then stops with no attempt removes its control
/// groups, which no later server of this data dir would.
pub fn stop_attempts(endpoint: &str, admin: Option<&Profile>, data_dir: &Path) {
    let _ = qm(admin)
        .args([
            "drain",
            "--endpoint",
            endpoint,
            "--requeue",
            "--reason",
            "the test ends",
        ])
        .output();
    let sockets = data_dir.join("supervisors");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let attempts = std::fs::read_dir(&sockets).into_iter().flatten().flatten();
        let live = attempts
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(".sock") && !name.starts_with("free-")
            })
            .count();
        if live == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// An in-process client of `endpoint` signing as `profile` (unsigned without one).
pub fn client(endpoint: &str, profile: Option<&Profile>) -> Client {
    let client = Client::new(endpoint);
    let Some(p) = profile else {
        return client;
    };
    let file = p.file.display().to_string();
    let env = |name: &str| match name {
        "AWS_SHARED_CREDENTIALS_FILE" => Some(file.clone()),
        "AWS_PROFILE" => Some(p.name.clone()),
        _ => None,
    };
    match resolve(&env).expect("the test's profile can be read") {
        Some(signing) => client.signed(signing),
        None => client,
    }
}
