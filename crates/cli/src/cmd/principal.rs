//! `qm principal create|list|delete|rotate`: managing who may call the server (admins only).
//! The requests and tables live in `qm_cli::client::principal`, the credentials files in
//! `qm_cli::client::credentials`.
//!
//! A new secret is shown once. With `--credentials-file` it goes into that file as a profile
//! named after the principal, and the file is checked before the server is asked, so that a
//! key is not issued only to be lost to a file that cannot take it; without it the profile is
//! printed, for the admin to hand over.
//!
//! Exit codes: 0 on success, 1 when the server refuses or cannot be reached, or the file
//! cannot be written (the message is printed as `error: <message>`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use qm_cli::client::credentials::{
    self, check_writable, profile_block, write_profile, Existing, Source, Written,
};
use qm_cli::client::principal::{principals_table, IssuedKey};
use qm_cli::client::{Client, ClientError};
use serde_json::json;

use super::client::{exit_code, print_json, Common, Output};

/// The principal commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Create a principal and issue its access key pair. The secret is shown once: printed
    /// as a credentials-file profile, or written to --credentials-file.
    Create(CreateArgs),
    /// List the principals: name, groups, access key id, created, admin.
    List(ListArgs),
    /// Delete a principal; its key stops working at once.
    Delete(NameArgs),
    /// Give a principal a new key pair; the old one stops working at once. The secret is
    /// shown once, as for create.
    Rotate(RotateArgs),
}

/// `qm principal create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    common: Common,
    /// The principal's name: 1-64 letters, digits and _ . @ -
    name: String,
    /// A group it belongs to (repeat for several).
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Make it an admin: it may do everything, principals included.
    #[arg(long)]
    admin: bool,
    /// Append the key as profile `[NAME]` to this shared credentials file (created with mode
    /// 0600 if new) instead of printing it.
    #[arg(long, value_name = "FILE")]
    credentials_file: Option<PathBuf>,
}

/// `qm principal list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    common: Common,
}

/// `qm principal delete`.
#[derive(Debug, Args)]
pub struct NameArgs {
    #[command(flatten)]
    common: Common,
    /// The principal's name.
    name: String,
}

/// `qm principal rotate`.
#[derive(Debug, Args)]
pub struct RotateArgs {
    #[command(flatten)]
    common: Common,
    /// The principal's name.
    name: String,
    /// Replace (or add) profile `[NAME]` in this shared credentials file (created with mode
    /// 0600 if new) instead of printing the new key.
    #[arg(long, value_name = "FILE")]
    credentials_file: Option<PathBuf>,
}

/// Runs a principal command.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    exit_code(match cmd {
        Command::Create(args) => create(args),
        Command::List(args) => list(args),
        Command::Delete(args) => delete(args),
        Command::Rotate(args) => rotate(args),
    })
}

fn create(args: CreateArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    if let Some(file) = &args.credentials_file {
        check_writable(file, &args.name, Existing::Refuse).map_err(ClientError::from)?;
    }
    let key = client.create_principal(&args.name, &args.groups, args.admin)?;
    deliver(
        &client,
        &key,
        args.credentials_file.as_deref(),
        Existing::Refuse,
        args.common.output(),
        "created",
    )
}

fn list(args: ListArgs) -> anyhow::Result<()> {
    let principals = args.common.client()?.list_principals()?;
    match args.common.output() {
        Output::Table => print!("{}", principals_table(&principals)),
        Output::Json => print_json(&json!({ "principals": principals }))?,
    }
    Ok(())
}

fn delete(args: NameArgs) -> anyhow::Result<()> {
    args.common.client()?.delete_principal(&args.name)?;
    match args.common.output() {
        Output::Table => println!("principal {}: deleted", args.name),
        Output::Json => print_json(&json!({ "name": args.name, "deleted": true }))?,
    }
    Ok(())
}

fn rotate(args: RotateArgs) -> anyhow::Result<()> {
    let client = args.common.client()?;
    if let Some(file) = &args.credentials_file {
        check_writable(file, &args.name, Existing::Replace).map_err(ClientError::from)?;
    }
    // Asked before: once rotated, the old key cannot ask any more.
    let rotating_own_key = client
        .signing()
        .is_some_and(|_| client.whoami().is_ok_and(|me| me.name == args.name));
    let key = client.rotate_principal(&args.name)?;
    deliver(
        &client,
        &key,
        args.credentials_file.as_deref(),
        Existing::Replace,
        args.common.output(),
        "rotated",
    )?;
    if rotating_own_key {
        warn_if_own_key_is_stale(&client);
    }
    Ok(())
}

/// Hands the new key over: into `file` as profile `[name]`, or printed. A key the server has
/// issued but the file could not take is printed all the same, so it is not lost.
fn deliver(
    client: &Client,
    key: &IssuedKey,
    file: Option<&Path>,
    existing: Existing,
    output: Output,
    done: &str,
) -> anyhow::Result<()> {
    let block = profile_block(&key.name, &key.credentials(), client.region());
    let Some(file) = file else {
        match output {
            Output::Table => print!("{block}"),
            Output::Json => print_json(key)?,
        }
        eprintln!(
            "principal {} {done}: the secret access key is shown only once; save it now \
             (or pass --credentials-file FILE to have it written there)",
            key.name
        );
        return Ok(());
    };
    let written = match write_profile(file, &key.name, &block, existing) {
        Ok(written) => written,
        Err(e) => {
            print!("{block}");
            return Err(ClientError::Usage(format!(
                "principal {} {done}, but its key could not be written: {e}; the profile is \
                 printed above, and its secret is shown only this once",
                key.name
            ))
            .into());
        }
    };
    // The export line is copied into other shells: give it a path that works from anywhere.
    let shown = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    match output {
        Output::Table => {
            let how = match written {
                Written::NewFile => "written to the new file",
                Written::Appended => "appended to",
                Written::Replaced => "replaced in",
            };
            println!(
                "principal {} {done}: key {}, profile [{}] {how} {}",
                key.name,
                key.access_key_id,
                key.name,
                shown.display()
            );
            println!(
                "use it with: export AWS_SHARED_CREDENTIALS_FILE={} AWS_PROFILE={}",
                shown.display(),
                key.name
            );
        }
        Output::Json => print_json(&json!({
            "name": key.name,
            "groups": key.groups,
            "accessKeyId": key.access_key_id,
            "createdAt": key.created_at,
            "credentialsFile": shown,
            "profile": key.name,
        }))?,
    }
    Ok(())
}

/// After a principal rotated its own key: say so when the place `qm` read that key from
/// still holds the old one (the server rewrites its own `<data-dir>/credentials` for
/// `qm-admin`; any other file is the user's to update), since every later command would fail.
fn warn_if_own_key_is_stale(client: &Client) {
    let Some(signing) = client.signing() else {
        return;
    };
    let old = &signing.credentials.access_key_id;
    // A file the new key went into (by --credentials-file, or by the server) no longer
    // holds the old one.
    let stale = match &signing.source {
        Source::Environment => true,
        Source::Profile { file, profile } => {
            credentials::key_id_in(file, profile).as_ref() == Some(old)
        }
    };
    if stale {
        eprintln!(
            "warning: qm signed this request with {old} from {}, the key just rotated away: \
             it no longer works; put the new key there",
            signing.source
        );
    }
}
