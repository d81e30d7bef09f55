//! `qm report usage`: who used, borrowed and lent what over a window, from a running server's
//! attempt records and archive (`GET /qm/v1/usage/report`). Exit code 0, or 1 when the server
//! refuses or cannot be reached.

use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use qm_api::qm::{UsageBy, UsageEvery};
use qm_cli::client::report::{usage_csv, usage_table};
use qm_cli::client::time::{now_ms, window};
use qm_cli::client::{Client, ClientError};

/// The reports.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per share (or principal, or instance type): instance- and GPU-hours used within
    /// entitlement, borrowed, lent out and idle; preemptions suffered and caused; work lost to
    /// preemption; queueing delay percentiles.
    Usage(UsageArgs),
}

/// How the rows are grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// One row per queue and quota share.
    Share,
    /// One row per principal (the access key that signed the submission).
    Principal,
    /// One row per instance type.
    InstanceType,
}

/// Period length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Every {
    /// UTC hours.
    Hour,
    /// UTC days.
    Day,
    /// Weeks from Monday 00:00 UTC.
    Week,
}

/// How the report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Aligned columns for people.
    Table,
    /// The report as the server sends it.
    Json,
    /// One line per row, every figure in a column, for spreadsheets.
    Csv,
}

/// `qm report usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The server's URL [default: $QM_ENDPOINT, else http://127.0.0.1:7611].
    #[arg(long)]
    endpoint: Option<String>,
    /// Start of the window: now, an age (36h, 7d, 2w), a UTC date (2026-11-01) or time
    /// (2026-11-01T12:00:00Z) [default: 7 days before --until].
    #[arg(long)]
    since: Option<String>,
    /// End of the window (exclusive), in the same forms [default: now].
    #[arg(long)]
    until: Option<String>,
    /// How rows are grouped.
    #[arg(long, value_enum, default_value_t = By::Share)]
    by: By,
    /// Split the window into periods.
    #[arg(long, value_enum)]
    every: Option<Every>,
    /// How to print the report.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

/// Runs a report command.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let Command::Usage(args) = cmd;
    match usage(args) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: {}", crate::describe(&e));
            Ok(ExitCode::from(1))
        }
    }
}

fn usage(args: UsageArgs) -> anyhow::Result<()> {
    let (since, until) = window(args.since.as_deref(), args.until.as_deref(), now_ms())
        .map_err(ClientError::Usage)?;
    let by = match args.by {
        By::Share => UsageBy::Share,
        By::Principal => UsageBy::Principal,
        By::InstanceType => UsageBy::InstanceType,
    };
    let every = args.every.map(|e| match e {
        Every::Hour => UsageEvery::Hour,
        Every::Day => UsageEvery::Day,
        Every::Week => UsageEvery::Week,
    });
    let client = Client::for_endpoint(args.endpoint.as_deref())?;
    let report = client.usage_report(since, until, by, every)?;
    match args.output {
        Output::Table => print!("{}", usage_table(&report)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Csv => print!("{}", usage_csv(&report)?),
    }
    Ok(())
}
