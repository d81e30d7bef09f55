//! Policy-as-code commands: `qm plan`, `qm apply` and `qm audit` (the work is in
//! `qm_cli::policy`). Exit codes follow terraform's detailed exit code: 0 no changes (or
//! success), 2 changes planned, 1 error.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use qm_cli::client::Client;
use qm_cli::policy::{apply, audit, live, plan, whatif, Desired, Error};

/// How to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// For people.
    #[value(alias = "text")]
    Table,
    /// For programs.
    Json,
}

/// Where the server is.
#[derive(Debug, clap::Args)]
pub struct Server {
    /// The server's URL [default: $QM_ENDPOINT, else http://127.0.0.1:7611].
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
}

impl Server {
    fn client(&self) -> Result<Client, qm_cli::client::ClientError> {
        Client::for_endpoint(self.endpoint.as_deref())
    }
}

/// The policy commands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Show what `qm apply` would change on the server to match a cluster file, and which
    /// running jobs each change that lowers a limit would expose to preemption.
    ///
    /// Exit code: 0 when the server matches the file, 2 when there are changes, 1 on error.
    Plan {
        /// The cluster file (the `qm check` format plus `job_queue`, and optionally
        /// `service_environment` and `scheduling_policy`).
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        #[command(flatten)]
        server: Server,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        output: Output,
    },
    /// Make the server match a cluster file (exactly the plan `qm plan` shows) and record it
    /// in the audit log. Asks for confirmation unless --yes.
    Apply {
        /// The cluster file.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        file: PathBuf,
        #[command(flatten)]
        server: Server,
        /// Apply without asking.
        #[arg(long)]
        yes: bool,
    },
    /// List the audit log: who applied what, and when.
    Audit {
        #[command(flatten)]
        server: Server,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        output: Output,
    },
}

/// Runs a policy command; errors print here and exit 1 (2 means "changes" for plan).
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match run_inner(cmd) {
        Ok(code) => Ok(code),
        Err(e) => {
            eprintln!("error: {}", crate::describe(&e));
            Ok(ExitCode::from(1))
        }
    }
}

/// The plan, with what the server's scheduler would preempt once it is applied (asked only
/// when there is a change to a queue that exists).
fn planned(client: &Client, desired: &Desired, live: &live::Live) -> Result<plan::Plan, Error> {
    let mut plan = plan::diff(desired, live);
    if !plan.is_empty() && live.queue.is_some() {
        plan.foresee(&whatif::read(client, desired)?, desired, live);
    }
    Ok(plan)
}

fn run_inner(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Plan {
            file,
            server,
            output,
        } => run_plan(&file, &server, output),
        Command::Apply { file, server, yes } => run_apply(&file, &server, yes),
        Command::Audit { server, output } => run_audit(&server, output),
    }
}

/// `qm plan`: prints the plan; exit code 2 when it has changes.
fn run_plan(file: &Path, server: &Server, output: Output) -> anyhow::Result<ExitCode> {
    let desired = Desired::load(file)?;
    let client = server.client()?;
    let live = live::read(&client, &desired)?;
    let plan = planned(&client, &desired, &live)?;
    match output {
        Output::Table => print!("{}", plan::render(&plan, &file.display().to_string())),
        Output::Json => println!("{}", serde_json::to_string_pretty(&plan)?),
    }
    Ok(ExitCode::from(if plan.is_empty() { 0 } else { 2 }))
}

/// `qm apply`: prints the plan, asks, applies it and records what happened in the audit log.
fn run_apply(file: &Path, server: &Server, yes: bool) -> anyhow::Result<ExitCode> {
    let desired = Desired::load(file)?;
    let client = server.client()?;
    let live = live::read(&client, &desired)?;
    let plan = planned(&client, &desired, &live)?;
    let source = file.display().to_string();
    let text = plan::render(&plan, &source);
    print!("{text}");
    if plan.is_empty() {
        println!("Nothing to apply.");
        return Ok(ExitCode::SUCCESS);
    }
    if !yes && !confirm()? {
        anyhow::bail!("apply cancelled: nothing was changed (pass --yes to skip the question)");
    }
    let applied = apply::apply(&client, &desired, &live, &plan);
    // Whatever happened, what changed on the server is audited: a failed apply may
    // have made some of the changes before the one that was refused.
    let after = plan::diff(&desired, &live::read(&client, &desired)?);
    let outcome = match (&applied, after.is_empty()) {
        (Ok(()), true) => None,
        (Ok(()), false) => Some(format!(
            "applied, but the server still differs from {source}:\n{}",
            plan::render(&after, &source)
        )),
        (Err(e), _) => Some(format!("applying the plan failed part way: {e}")),
    };
    let details = match &outcome {
        None => text.clone(),
        Some(failure) => format!(
            "{text}\nFAILED: {failure}\nStill to apply:\n{}",
            plan::render(&after, &source)
        ),
    };
    apply::record(&client, &apply::actor(), &plan, &details)
        .context("recording the apply in the audit log failed")?;
    if let Some(failure) = outcome {
        anyhow::bail!("{failure}");
    }
    println!("Applied: {}.", plan.summary());
    Ok(ExitCode::SUCCESS)
}

/// `qm audit`: lists the audit log, and says where its archived entries are.
fn run_audit(server: &Server, output: Output) -> anyhow::Result<ExitCode> {
    let (entries, archived) = audit::read(&server.client()?)?;
    match output {
        Output::Table => print!("{}", audit::render(&entries)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "entries": entries, "archivedEntries": archived })
            )?
        ),
    }
    if archived > 0 {
        eprintln!(
            "({archived} older entries are in the server's <data-dir>/archive/audit-YYYY-MM.jsonl: [retention] audit_entries)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn confirm() -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        anyhow::bail!("apply needs confirmation: run it in a terminal or pass --yes");
    }
    print!("Apply these changes? [y/N] ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    stdin.lock().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}
