//! Where `qm` finds the access key it signs its requests with, and how it writes one a server
//! has just issued.
//!
//! The lookup is the AWS SDKs' standard chain, so that one `export` serves `qm`, boto3 and the
//! AWS CLI alike: the `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` pair; else the profile
//! `AWS_PROFILE` (`default` when unset) of the shared credentials file
//! (`AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`). One step is ours: when the user
//! has chosen nothing (neither the key pair nor `AWS_PROFILE`, and the shared credentials file
//! has no `default` profile), the key the local server wrote
//! for its first admin, profile `qm-admin` of `<data-dir>/credentials`, so that `qm serve` and
//! `qm submit` in the same folder work together out of the box. With no key at all the client
//! sends unsigned requests, which a `qm serve --no-auth` accepts.
//!
//! The environment is an input (a lookup function), not read here, so the tests can set it
//! without touching the process environment that parallel tests share.
//!
//! Writing keeps the rest of the file as it was (comments, other profiles, their order): only
//! the one profile's section is appended or replaced, and the new file replaces the old one in
//! a single rename, so a crash cannot leave half a credentials file.

use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use ini::{Ini, ParseOption};
use qm_api::sigv4::Credentials;

/// The profile of the first admin, in the server's `<data-dir>/credentials`.
pub const LOCAL_PROFILE: &str = qm_api::qm::ADMIN;

/// The region when nothing names one (the server's default too).
pub const DEFAULT_REGION: &str = "us-east-1";

/// The server's default `--data-dir`, where its credentials file lives.
pub const DEFAULT_DATA_DIR: &str = qm_api::qm::DEFAULT_DATA_DIR;

/// The profile read when `AWS_PROFILE` is unset.
const DEFAULT_PROFILE: &str = "default";

/// Where a key came from, so that a refusal can say which credentials the server refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    Environment,
    /// A profile of a shared credentials file (the user's, or the local server's).
    Profile {
        /// The file.
        file: PathBuf,
        /// The profile (section) in it.
        profile: String,
    },
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Environment => write!(f, "AWS_ACCESS_KEY_ID"),
            Source::Profile { file, profile } => {
                write!(f, "profile [{profile}] of {}", file.display())
            }
        }
    }
}

/// A key to sign with, the region to sign for, and where both came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signing {
    /// The access key pair.
    pub credentials: Credentials,
    /// The region of the signature's scope; it must be the server's.
    pub region: String,
    /// Where the key came from.
    pub source: Source,
}

/// Credentials that were asked for but cannot be used. Each message names the file, the
/// profile or the variable, and what to change.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// One half of the environment's key pair.
    #[error("{set} is set but {unset} is not: set both, or unset {set} to use a credentials file")]
    PartialEnvironment {
        /// The variable that is set.
        set: &'static str,
        /// The one that is missing.
        unset: &'static str,
    },
    /// `AWS_PROFILE` names a profile, but no file to read it from can be found.
    #[error(
        "AWS_PROFILE={profile} but there is no credentials file to read it from: HOME is not \
         set; point AWS_SHARED_CREDENTIALS_FILE at one"
    )]
    NoFile {
        /// The profile asked for.
        profile: String,
    },
    /// A file that must be read cannot be.
    #[error("{}: cannot read: {source}{}", file.display(), profile_hint(profile))]
    Unreadable {
        /// The file.
        file: PathBuf,
        /// The profile asked for, when one was.
        profile: Option<String>,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file is not INI.
    #[error("{}: not a credentials file (INI): {detail}", file.display())]
    Malformed {
        /// The file.
        file: PathBuf,
        /// The parser's message.
        detail: String,
    },
    /// `AWS_PROFILE` names a profile the file does not have.
    #[error("{}: no profile [{profile}] (it has: {}); fix AWS_PROFILE", file.display(), list(available))]
    NoProfile {
        /// The file.
        file: PathBuf,
        /// The profile asked for.
        profile: String,
        /// The profiles it has.
        available: Vec<String>,
    },
    /// The profile lacks a key.
    #[error("{}: profile [{profile}] has no {key}", file.display())]
    IncompleteProfile {
        /// The file.
        file: PathBuf,
        /// The profile.
        profile: String,
        /// The missing key.
        key: &'static str,
    },
    /// `create --credentials-file` would overwrite a profile of the same name.
    #[error(
        "{}: already has a profile [{profile}]; remove it, or pick another --credentials-file",
        file.display()
    )]
    ProfileExists {
        /// The file.
        file: PathBuf,
        /// The profile.
        profile: String,
    },
    /// The file cannot be written.
    #[error("{}: cannot write: {source}", file.display())]
    Unwritable {
        /// The file.
        file: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
}

fn profile_hint(profile: &Option<String>) -> String {
    match profile {
        Some(p) => format!(" (AWS_PROFILE={p} is read from it)"),
        None => String::new(),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// The process environment, for [`resolve`] outside tests.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A variable's value; an empty one counts as unset, as `export AWS_PROFILE=` means "none".
fn var(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|v| !v.is_empty())
}

/// The key to sign with, found along the chain (see the module doc); `None` when there is
/// none anywhere, and requests go unsigned. An error is a choice the user made (a variable
/// set, a profile named) that cannot be honoured: falling back to another key then would
/// sign as someone else.
pub fn resolve(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Signing>, CredentialsError> {
    let region = |profile_region: Option<String>| region(env, profile_region);

    match (
        var(env, "AWS_ACCESS_KEY_ID"),
        var(env, "AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(access_key_id), Some(secret_access_key)) => {
            return Ok(Some(Signing {
                credentials: Credentials {
                    access_key_id,
                    secret_access_key,
                },
                region: region(None),
                source: Source::Environment,
            }))
        }
        (Some(_), None) => {
            return Err(CredentialsError::PartialEnvironment {
                set: "AWS_ACCESS_KEY_ID",
                unset: "AWS_SECRET_ACCESS_KEY",
            })
        }
        (None, Some(_)) => {
            return Err(CredentialsError::PartialEnvironment {
                set: "AWS_SECRET_ACCESS_KEY",
                unset: "AWS_ACCESS_KEY_ID",
            })
        }
        (None, None) => {}
    }

    let shared = shared_file(env);
    if let Some(profile) = var(env, "AWS_PROFILE") {
        let file = shared.ok_or(CredentialsError::NoFile {
            profile: profile.clone(),
        })?;
        return Ok(read_profile(&file, &profile, true)?.map(|found| found.signing(region)));
    }
    if let Some(file) = shared {
        if let Some(found) = read_profile(&file, DEFAULT_PROFILE, false)? {
            return Ok(Some(found.signing(region)));
        }
    }

    let data_dir = var(env, "QM_DATA_DIR").unwrap_or_else(|| DEFAULT_DATA_DIR.to_string());
    let local = Path::new(&data_dir).join("credentials");
    Ok(read_profile(&local, LOCAL_PROFILE, false)?.map(|found| found.signing(region)))
}

/// The region to sign for: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the `region` of the
/// profile the key came from, else [`DEFAULT_REGION`].
pub fn region(env: &dyn Fn(&str) -> Option<String>, profile_region: Option<String>) -> String {
    var(env, "AWS_REGION")
        .or_else(|| var(env, "AWS_DEFAULT_REGION"))
        .or(profile_region)
        .unwrap_or_else(|| DEFAULT_REGION.to_string())
}

/// The shared credentials file: `AWS_SHARED_CREDENTIALS_FILE` (with `~` expanded, as the
/// SDKs do), else `~/.aws/credentials`; `None` without HOME to find it.
fn shared_file(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    let home = var(env, "HOME");
    if let Some(file) = var(env, "AWS_SHARED_CREDENTIALS_FILE") {
        return Some(match (file.strip_prefix("~/"), &home) {
            (Some(rest), Some(home)) => Path::new(home).join(rest),
            _ => PathBuf::from(file),
        });
    }
    home.map(|h| Path::new(&h).join(".aws").join("credentials"))
}

/// A profile's keys as read from a file.
struct Found {
    credentials: Credentials,
    region: Option<String>,
    source: Source,
}

impl Found {
    fn signing(self, region: impl Fn(Option<String>) -> String) -> Signing {
        Signing {
            credentials: self.credentials,
            region: region(self.region),
            source: self.source,
        }
    }
}

/// Reads `profile` of `file`. When the profile is not `required`, a missing file or profile
/// is `None` (the chain goes on); a malformed file or a profile without its keys is an error
/// either way, since the user would not want it silently skipped.
fn read_profile(
    file: &Path,
    profile: &str,
    required: bool,
) -> Result<Option<Found>, CredentialsError> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(_) if !required => return Ok(None),
        Err(source) => {
            return Err(CredentialsError::Unreadable {
                file: file.to_path_buf(),
                profile: Some(profile.to_string()),
                source,
            })
        }
    };
    let ini = parse(file, &text)?;
    let Some(section) = ini.section(Some(profile)) else {
        if !required {
            return Ok(None);
        }
        return Err(CredentialsError::NoProfile {
            file: file.to_path_buf(),
            profile: profile.to_string(),
            available: ini.sections().flatten().map(str::to_string).collect(),
        });
    };
    let key = |key: &'static str| {
        section
            .get(key)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or_else(|| CredentialsError::IncompleteProfile {
                file: file.to_path_buf(),
                profile: profile.to_string(),
                key,
            })
    };
    Ok(Some(Found {
        credentials: Credentials {
            access_key_id: key("aws_access_key_id")?,
            secret_access_key: key("aws_secret_access_key")?,
        },
        region: section
            .get("region")
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string),
        source: Source::Profile {
            file: file.to_path_buf(),
            profile: profile.to_string(),
        },
    }))
}

/// The access key id profile `profile` of `file` holds now, if it holds one: to tell whether
/// a file still has a key that was just rotated away.
pub fn key_id_in(file: &Path, profile: &str) -> Option<String> {
    read_profile(file, profile, false)
        .ok()
        .flatten()
        .map(|found| found.credentials.access_key_id)
}

/// Parses as botocore does: no quoting and no backslash escapes, so a value reads exactly as
/// written.
fn parse(file: &Path, text: &str) -> Result<Ini, CredentialsError> {
    let options = ParseOption {
        enabled_quote: false,
        enabled_escape: false,
        ..ParseOption::default()
    };
    Ini::load_from_str_opt(text, options).map_err(|e| CredentialsError::Malformed {
        file: file.to_path_buf(),
        detail: e.to_string(),
    })
}

/// The profile block a server-issued key is written as (and shown as, when no file is
/// given): the three keys the SDKs read.
pub fn profile_block(profile: &str, credentials: &Credentials, region: &str) -> String {
    format!(
        "[{profile}]\naws_access_key_id = {}\naws_secret_access_key = {}\nregion = {region}\n",
        credentials.access_key_id, credentials.secret_access_key
    )
}

/// What writing a profile should do when the file already has one of that name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Refuse ([`CredentialsError::ProfileExists`]): a new principal's key must not overwrite
    /// a key the user may still need (of another server, say).
    Refuse,
    /// Replace it: a rotated key supersedes the old one, which no longer works.
    Replace,
}

/// What [`write_profile`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Created the file (mode 0600) with the profile in it.
    NewFile,
    /// Added the profile at the end of the file.
    Appended,
    /// Replaced the profile's section.
    Replaced,
}

/// Checks, before a key is issued, that [`write_profile`] with `existing` will be able to put
/// `profile` into `file`; a key issued and then not written would be lost.
pub fn check_writable(
    file: &Path,
    profile: &str,
    existing: Existing,
) -> Result<(), CredentialsError> {
    let Some(text) = read_existing(file)? else {
        return Ok(());
    };
    let ini = parse(file, &text)?;
    if existing == Existing::Refuse && ini.section(Some(profile)).is_some() {
        return Err(CredentialsError::ProfileExists {
            file: file.to_path_buf(),
            profile: profile.to_string(),
        });
    }
    Ok(())
}

/// Puts `block` (from [`profile_block`]) into `file` as profile `profile`: appended, or in
/// place of the profile's section when it has one and `existing` allows; a new file is
/// created with mode 0600, as it holds a secret.
pub fn write_profile(
    file: &Path,
    profile: &str,
    block: &str,
    existing: Existing,
) -> Result<Written, CredentialsError> {
    let old = read_existing(file)?;
    let (text, written) = match &old {
        None => (block.to_string(), Written::NewFile),
        Some(old) => {
            check_writable(file, profile, existing)?;
            match replace_section(old, profile, block) {
                Some(text) => (text, Written::Replaced),
                None => (append_section(old, block), Written::Appended),
            }
        }
    };
    replace_file(file, &text).map_err(|source| CredentialsError::Unwritable {
        file: file.to_path_buf(),
        source,
    })?;
    Ok(written)
}

/// The file's text, or `None` when there is no file yet.
fn read_existing(file: &Path) -> Result<Option<String>, CredentialsError> {
    match std::fs::read_to_string(file) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CredentialsError::Unreadable {
            file: file.to_path_buf(),
            profile: None,
            source,
        }),
    }
}

/// The section name of a `[name]` header line.
fn header_name(line: &str) -> Option<&str> {
    let line = line.trim();
    line.strip_prefix('[')?.strip_suffix(']').map(str::trim)
}

/// `text` with every section named `profile` taken out and `block` put where the first one
/// was; `None` when there is no such section.
fn replace_section(text: &str, profile: &str, block: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + block.len());
    let mut in_profile = false;
    let mut replaced = false;
    for line in text.split_inclusive('\n') {
        if let Some(name) = header_name(line) {
            in_profile = name == profile;
            if in_profile && !replaced {
                out.push_str(block);
                replaced = true;
            }
        }
        if !in_profile {
            out.push_str(line);
        }
    }
    replaced.then_some(out)
}

/// `text` with `block` after it, a blank line between them.
fn append_section(text: &str, block: &str) -> String {
    let mut out = text.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !out.trim().is_empty() && !out.ends_with("\n\n") {
        out.push('\n');
    }
    out.push_str(block);
    out
}

/// Writes `text` to a new file next to `file` (mode 0600, or the old file's mode) and renames
/// it over `file`.
fn replace_file(file: &Path, text: &str) -> std::io::Result<()> {
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = file.file_name().map_or_else(
        || "credentials".into(),
        |n| n.to_string_lossy().into_owned(),
    );
    let tmp = dir.join(format!(".{name}.qm-{}.tmp", std::process::id()));
    let result = (|| {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let mut out = options.open(&tmp)?;
        out.write_all(text.as_bytes())?;
        if let Ok(meta) = std::fs::metadata(file) {
            out.set_permissions(meta.permissions())?;
        }
        out.sync_all()?;
        std::fs::rename(&tmp, file)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// An environment of `(name, value)` pairs, as [`resolve`] reads it.
    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn creds(id: &str, secret: &str) -> Credentials {
        Credentials {
            access_key_id: id.into(),
            secret_access_key: secret.into(),
        }
    }

    /// A temp dir with `home/.aws/credentials`, `data/credentials` (the local server's) and
    /// `other`, each written when its text is given.
    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn new() -> Files {
            Files {
                dir: tempfile::tempdir().expect("a temp dir"),
            }
        }

        fn path(&self, rel: &str) -> PathBuf {
            self.dir.path().join(rel)
        }

        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.path(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
            path
        }

        fn home(&self) -> String {
            self.path("home").display().to_string()
        }

        fn data(&self) -> String {
            self.path("data").display().to_string()
        }
    }

    const USER_FILE: &str = "\
# my keys
[default]
aws_access_key_id = AKDEFAULT
aws_secret_access_key = s3cr3t/with+slash=
region = eu-west-1

[alice]
aws_access_key_id=AKALICE
aws_secret_access_key=alice-secret
";

    const LOCAL_FILE: &str = "[qm-admin]\naws_access_key_id = QMAKADMIN\n\
        aws_secret_access_key = admin-secret\nregion = us-east-1\n";

    #[test]
    fn the_environment_key_pair_comes_first_and_names_its_region() {
        let files = Files::new();
        files.write("home/.aws/credentials", USER_FILE);
        let home = files.home();
        let found = resolve(&env(&[
            ("AWS_ACCESS_KEY_ID", "AKENV"),
            ("AWS_SECRET_ACCESS_KEY", "env-secret"),
            ("AWS_DEFAULT_REGION", "ap-south-1"),
            ("AWS_PROFILE", "alice"),
            ("HOME", &home),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(found.credentials, creds("AKENV", "env-secret"));
        assert_eq!(found.region, "ap-south-1");
        assert_eq!(found.source, Source::Environment);
    }

    #[test]
    fn half_an_environment_key_pair_is_an_error_naming_the_missing_half() {
        let e = resolve(&env(&[("AWS_ACCESS_KEY_ID", "AKENV")])).unwrap_err();
        assert!(
            e.to_string().contains("AWS_SECRET_ACCESS_KEY is not"),
            "{e}"
        );
    }

    #[test]
    fn without_the_pair_the_default_profile_of_the_home_file_is_used_with_its_region() {
        let files = Files::new();
        let file = files.write("home/.aws/credentials", USER_FILE);
        let home = files.home();
        let found = resolve(&env(&[("HOME", &home)])).unwrap().unwrap();
        assert_eq!(found.credentials, creds("AKDEFAULT", "s3cr3t/with+slash="));
        assert_eq!(found.region, "eu-west-1");
        assert_eq!(
            found.source,
            Source::Profile {
                file,
                profile: "default".into()
            }
        );
    }

    #[test]
    fn aws_region_wins_over_aws_default_region_and_the_profile() {
        let files = Files::new();
        files.write("home/.aws/credentials", USER_FILE);
        let home = files.home();
        let found = resolve(&env(&[
            ("HOME", &home),
            ("AWS_REGION", "us-west-2"),
            ("AWS_DEFAULT_REGION", "ap-south-1"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(found.region, "us-west-2");
    }

    #[test]
    fn aws_profile_picks_a_profile_of_the_file_aws_shared_credentials_file_names() {
        let files = Files::new();
        let file = files.write("elsewhere/creds", USER_FILE);
        let found = resolve(&env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &file.display().to_string()),
            ("AWS_PROFILE", "alice"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(found.credentials, creds("AKALICE", "alice-secret"));
        assert_eq!(
            found.region, DEFAULT_REGION,
            "alice's profile names no region"
        );
    }

    #[test]
    fn a_tilde_in_aws_shared_credentials_file_is_the_home_directory() {
        let files = Files::new();
        files.write("home/keys.ini", USER_FILE);
        let home = files.home();
        let found = resolve(&env(&[
            ("HOME", &home),
            ("AWS_SHARED_CREDENTIALS_FILE", "~/keys.ini"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(found.credentials.access_key_id, "AKDEFAULT");
    }

    #[test]
    fn a_profile_aws_profile_names_but_the_file_lacks_is_an_error_listing_what_it_has() {
        let files = Files::new();
        files.write("home/.aws/credentials", USER_FILE);
        files.write("data/credentials", LOCAL_FILE);
        let (home, data) = (files.home(), files.data());
        let e = resolve(&env(&[
            ("HOME", &home),
            ("QM_DATA_DIR", &data),
            ("AWS_PROFILE", "bob"),
        ]))
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("no profile [bob]"), "{msg}");
        assert!(msg.contains("default, alice"), "{msg}");
    }

    #[test]
    fn a_file_aws_profile_needs_but_cannot_read_is_an_error() {
        let files = Files::new();
        let missing = files.path("nope").display().to_string();
        let e = resolve(&env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &missing),
            ("AWS_PROFILE", "qm-admin"),
        ]))
        .unwrap_err();
        assert!(matches!(e, CredentialsError::Unreadable { .. }), "{e}");
        assert!(e.to_string().contains("AWS_PROFILE=qm-admin"), "{e}");
    }

    #[test]
    fn a_profile_without_its_secret_is_an_error_naming_the_key() {
        let files = Files::new();
        files.write(
            "home/.aws/credentials",
            "[default]\naws_access_key_id = AK\n",
        );
        let home = files.home();
        let e = resolve(&env(&[("HOME", &home)])).unwrap_err();
        assert!(
            e.to_string().contains("has no aws_secret_access_key"),
            "{e}"
        );
    }

    #[test]
    fn with_nothing_chosen_the_local_servers_admin_key_is_used() {
        let files = Files::new();
        // A home file without a default profile does not stop the chain.
        files.write("home/.aws/credentials", "[work]\naws_access_key_id = AK\n");
        let local = files.write("data/credentials", LOCAL_FILE);
        let (home, data) = (files.home(), files.data());
        let found = resolve(&env(&[("HOME", &home), ("QM_DATA_DIR", &data)]))
            .unwrap()
            .unwrap();
        assert_eq!(found.credentials, creds("QMAKADMIN", "admin-secret"));
        assert_eq!(
            found.source,
            Source::Profile {
                file: local,
                profile: LOCAL_PROFILE.into()
            }
        );
    }

    #[test]
    fn aws_profile_set_means_the_local_servers_key_is_not_a_fallback() {
        let files = Files::new();
        files.write("data/credentials", LOCAL_FILE);
        let data = files.data();
        let e = resolve(&env(&[("QM_DATA_DIR", &data), ("AWS_PROFILE", "alice")])).unwrap_err();
        assert!(matches!(e, CredentialsError::NoFile { .. }), "{e}");
    }

    #[test]
    fn with_no_key_anywhere_requests_go_unsigned() {
        let files = Files::new();
        let (home, data) = (files.home(), files.data());
        assert_eq!(
            resolve(&env(&[("HOME", &home), ("QM_DATA_DIR", &data)])).unwrap(),
            None
        );
    }

    #[test]
    fn empty_variables_count_as_unset() {
        let files = Files::new();
        files.write("data/credentials", LOCAL_FILE);
        let data = files.data();
        let found = resolve(&env(&[
            ("AWS_ACCESS_KEY_ID", ""),
            ("AWS_PROFILE", ""),
            ("QM_DATA_DIR", &data),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(found.credentials.access_key_id, "QMAKADMIN");
    }

    #[test]
    fn a_new_file_is_created_with_mode_0600_and_reads_back() {
        let files = Files::new();
        let file = files.path("sub/creds");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let block = profile_block("alice", &creds("QMAKA", "sa"), "us-east-1");
        let written = write_profile(&file, "alice", &block, Existing::Refuse).unwrap();
        assert_eq!(written, Written::NewFile);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), block);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let path = file.display().to_string();
        let found = resolve(&env(&[
            ("AWS_SHARED_CREDENTIALS_FILE", &path),
            ("AWS_PROFILE", "alice"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(found.credentials, creds("QMAKA", "sa"));
    }

    #[test]
    fn a_created_profile_is_appended_after_the_files_comments_and_profiles() {
        let files = Files::new();
        let file = files.write("creds", USER_FILE);
        let block = profile_block("bob", &creds("QMAKB", "sb"), "us-east-1");
        let written = write_profile(&file, "bob", &block, Existing::Refuse).unwrap();
        assert_eq!(written, Written::Appended);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text, format!("{USER_FILE}\n{block}"));
    }

    #[test]
    fn creating_a_profile_the_file_has_is_refused_before_and_at_writing() {
        let files = Files::new();
        let file = files.write("creds", USER_FILE);
        let e = check_writable(&file, "alice", Existing::Refuse).unwrap_err();
        assert!(
            e.to_string().contains("already has a profile [alice]"),
            "{e}"
        );
        let block = profile_block("alice", &creds("QMAKA", "sa"), "us-east-1");
        assert!(write_profile(&file, "alice", &block, Existing::Refuse).is_err());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), USER_FILE);
        assert!(check_writable(&file, "alice", Existing::Replace).is_ok());
        assert!(check_writable(&files.path("new"), "alice", Existing::Refuse).is_ok());
    }

    #[test]
    fn a_rotated_key_replaces_only_its_profile_and_keeps_the_files_mode() {
        let files = Files::new();
        let file = files.write("creds", USER_FILE);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        }
        let block = profile_block("default", &creds("QMAKNEW", "new"), "us-east-1");
        let written = write_profile(&file, "default", &block, Existing::Replace).unwrap();
        assert_eq!(written, Written::Replaced);
        let text = std::fs::read_to_string(&file).unwrap();
        let alice = &USER_FILE[USER_FILE.find("[alice]").unwrap()..];
        assert_eq!(text, format!("# my keys\n{block}{alice}"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o640);
        }
    }

    #[test]
    fn rotating_into_a_file_without_the_profile_appends_it() {
        let files = Files::new();
        let file = files.write("creds", "[other]\naws_access_key_id = X"); // no final newline
        let block = profile_block("alice", &creds("QMAKA", "sa"), "us-east-1");
        let written = write_profile(&file, "alice", &block, Existing::Replace).unwrap();
        assert_eq!(written, Written::Appended);
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text, format!("[other]\naws_access_key_id = X\n\n{block}"));
    }

    #[test]
    fn a_malformed_file_is_not_written_over() {
        let files = Files::new();
        let file = files.write("creds", "[unclosed\nkey = v\n");
        let block = profile_block("alice", &creds("QMAKA", "sa"), "us-east-1");
        let e = write_profile(&file, "alice", &block, Existing::Replace).unwrap_err();
        assert!(matches!(e, CredentialsError::Malformed { .. }), "{e}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "[unclosed\nkey = v\n"
        );
    }
}
