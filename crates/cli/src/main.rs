//! The `qm` binary: argument parsing and one module per command under `cmd/`. The work is done
//! by the `qm_cli` library and the scheduling core; this file only dispatches and maps errors
//! to exit codes.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmd;

/// Quartermaster: a GPU quota-share scheduler with the AWS Batch quota-management model.
#[derive(Debug, Parser)]
#[command(name = "qm", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play policy scenario files through the scheduling core and check their expectations.
    ///
    /// Prints PASS or FAIL per scenario (with a diff for each failure) and a summary line.
    /// Exit code: 0 when every scenario passes, 1 when one fails, 2 when a file cannot be read
    /// or is malformed (the other files are still checked).
    Check(cmd::check::Args),
    /// Run the server: the AWS Batch quota-management API (point boto3 or the AWS CLI at it
    /// with endpoint_url), state in SQLite under --data-dir, attempts run as local processes.
    Serve(cmd::serve::Args),
    /// Replay a workload through the scheduling core under several policies and compare them:
    /// completion time, waiting, preemptions, lost work, utilization. Writes metrics.json and a
    /// self-contained report.html to --out.
    Simulate(cmd::simulate::Args),
    /// Workload files for `qm simulate`.
    #[command(subcommand)]
    Workload(cmd::workload::Command),
    /// Talk to a running server: submit, list and inspect jobs, logs, explain, shares, watch.
    #[command(flatten)]
    Client(cmd::client::Command),
    /// Policy as code: plan, apply and audit a cluster file against a running server.
    #[command(flatten)]
    Policy(cmd::policy::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(args) => cmd::check::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Workload(cmd) => cmd::workload::run(cmd),
        Command::Client(cmd) => cmd::client::run(cmd),
        Command::Policy(cmd) => cmd::policy::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
