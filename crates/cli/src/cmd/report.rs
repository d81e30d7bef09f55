//! `qm report usage`: who used, borrowed and lent what over a window, from a running server's
//! attempt records and archive (`GET /qm/v1/usage/report`); `qm report review`: the policy
//! review of a window (`GET /qm/v1/review`, docs/review.md). Exit code 0, or 1 when the server
//! refuses or cannot be reached.

use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use qm_api::qm::{UsageBy, UsageEvery};
use qm_cli::client::report::{usage_csv, usage_table};
use qm_cli::client::review::{review_html, review_table};
use qm_cli::client::time::now_ms;
use qm_cli::client::{Client, ClientError};

/// The reports.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per share (or principal, or instance type): instance- and GPU-hours used within
    /// entitlement, borrowed, lent out and idle; preemptions suffered and caused; work lost to
    /// preemption; queueing delay percentiles.
    Usage(UsageArgs),
    /// The quarterly policy review, per share and class: completion times of jobs on own
    /// capacity against jobs that borrowed, time lost to reclaims, owners' reclaim delay,
    /// preemptions and resume outcomes, priority and policy changes (docs/review.md).
    Review(ReviewArgs),
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
    let result = match cmd {
        Command::Usage(args) => usage(args),
        Command::Review(args) => review(args),
    };
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: {}", crate::describe(&e));
            Ok(ExitCode::from(1))
        }
    }
}

/// `[since, until)` from the flags: `until` defaults to now, `since` to `default_days` before.
fn window(
    since: Option<&str>,
    until: Option<&str>,
    default_days: i64,
) -> anyhow::Result<(i64, i64)> {
    Ok(
        qm_cli::client::time::window(since, until, now_ms(), default_days)
            .map_err(ClientError::Usage)?,
    )
}

fn usage(args: UsageArgs) -> anyhow::Result<()> {
    let (since, until) = window(args.since.as_deref(), args.until.as_deref(), 7)?;
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

/// How the review is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReviewOutput {
    /// Aligned columns for people.
    Table,
    /// The review as the server sends it (keys: docs/review.md).
    Json,
    /// One self-contained HTML page with charts (write it with `> review.html`).
    Html,
}

/// `qm report review`.
#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// The server's URL [default: $QM_ENDPOINT, else http://127.0.0.1:7611].
    #[arg(long)]
    endpoint: Option<String>,
    /// Start of the window: an age (90d, 13w), a UTC date (2026-07-01) or time
    /// [default: 91 days before --until].
    #[arg(long)]
    since: Option<String>,
    /// End of the window (exclusive), in the same forms [default: now].
    #[arg(long)]
    until: Option<String>,
    /// Only this quota share's jobs.
    #[arg(long)]
    share: Option<String>,
    /// How to print the review.
    #[arg(long, value_enum, default_value_t = ReviewOutput::Table)]
    output: ReviewOutput,
    /// The cluster file of the policy that ran in the window: the review then replays the
    /// window's finished jobs under it (`qm workload calibrate`) and prints the simulated
    /// figures beside the real ones, so that you know how far to trust `qm simulate`.
    #[arg(long = "policy", value_name = "FILE.yaml")]
    policy: Option<std::path::PathBuf>,
    /// The checkpoint model and the scheduler's knobs of the calibration (as the server ran).
    #[command(flatten)]
    model: super::simulate::Model,
}

fn review(args: ReviewArgs) -> anyhow::Result<()> {
    let (since, until) = window(args.since.as_deref(), args.until.as_deref(), 91)?;
    let client = Client::for_endpoint(args.endpoint.as_deref())?;
    let report = client.review(since, until, args.share.as_deref())?;
    let calibration = match &args.policy {
        Some(policy) => Some(calibration(&client, since, until, policy, &args.model)),
        None => None,
    };
    // A calibration that could not be made is said, not fatal: the review stands alone.
    let line = calibration.as_ref().map(|c| match c {
        Ok(c) => c.to_string(),
        Err(e) => format!("calibration: not made: {e:#}"),
    });
    match args.output {
        ReviewOutput::Table => {
            print!("{}", review_table(&report));
            if let Some(line) = &line {
                println!("\n{line}");
            }
        }
        ReviewOutput::Json => {
            let mut json = serde_json::to_value(&report)?;
            if let (Some(Ok(c)), Some(map)) = (&calibration, json.as_object_mut()) {
                map.insert("calibration".into(), serde_json::to_value(c)?);
            }
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        ReviewOutput::Html => {
            let html = review_html(&report);
            match &line {
                Some(line) => print!("{}", with_calibration(&html, line)),
                None => print!("{html}"),
            }
        }
    }
    Ok(())
}

/// The window's finished jobs replayed under `policy` beside what really happened to them.
fn calibration(
    client: &Client,
    since: i64,
    until: i64,
    policy: &std::path::Path,
    model: &super::simulate::Model,
) -> anyhow::Result<qm_sim::Calibration> {
    let cluster = qm_cli::cluster::load(policy)?.cluster();
    let export = client.workload(since, until, None)?;
    let jobs = qm_sim::parse_workload(&export.csv[..], "the server's export")?;
    Ok(qm_sim::calibrate(&jobs, &cluster, &model.options())?)
}

/// The review page with the calibration line before its end.
fn with_calibration(html: &str, line: &str) -> String {
    let escaped = line
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    let p = format!("<p class=\"calibration\" data-testid=\"calibration\">{escaped}</p>\n");
    match html.rfind("</body>") {
        Some(i) => format!("{}{p}{}", &html[..i], &html[i..]),
        None => format!("{html}{p}"),
    }
}
