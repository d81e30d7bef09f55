//! The server's own life, for admins: `qm drain` (stop starting attempts, and with
//! `--requeue` stop the running ones and queue them again), `qm drain --cancel`, and
//! `qm reload` (read the config file again, as SIGHUP does).
//!
//! Exit codes: 0 on success, 1 when the server refuses or cannot be reached.

use std::process::ExitCode;

use clap::Args;
use qm_api::qm::{DrainRequest, DrainStatus, ReloadResponse};

use super::client::{exit_code, print_json, Common, Output};

/// `qm drain`.
#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    common: Common,
    /// Also stop the running attempts as a preemption would (SIGTERM, the stop grace) and
    /// queue their jobs again; no retry and no preemption is counted against them.
    #[arg(long, conflicts_with_all = ["cancel", "status"])]
    requeue: bool,
    /// End the drain: attempts start again.
    #[arg(long, conflicts_with = "status")]
    cancel: bool,
    /// Only say whether the executor is drained.
    #[arg(long)]
    status: bool,
    /// Why (in the waiting jobs' status reason and the audit log).
    #[arg(long)]
    reason: Option<String>,
}

/// Runs `qm drain`.
pub fn drain(args: DrainArgs) -> anyhow::Result<ExitCode> {
    exit_code((|| {
        let client = args.common.client()?;
        let answer = if args.status {
            client.drain_status()?
        } else {
            client.drain(&DrainRequest {
                requeue: args.requeue,
                cancel: args.cancel,
                reason: args.reason.clone(),
            })?
        };
        match args.common.output() {
            Output::Table => print!("{}", drain_text(&answer)),
            Output::Json => print_json(&answer)?,
        }
        Ok(())
    })())
}

fn drain_text(s: &DrainStatus) -> String {
    let mut out = String::new();
    for job in &s.requeued {
        out.push_str(&format!(
            "requeued {} ({}): stopping, then back in its queue\n",
            job.job_id, job.job_name
        ));
    }
    match &s.reason {
        Some(reason) => out.push_str(&format!(
            "drained ({reason}): no attempt starts until `qm drain --cancel`; {} attempt(s) still hold capacity\n",
            s.attempts_holding
        )),
        None => out.push_str(&format!(
            "not drained: attempts start as the scheduler decides; {} attempt(s) hold capacity\n",
            s.attempts_holding
        )),
    }
    out
}

/// `qm reload`.
#[derive(Debug, Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    common: Common,
}

/// Runs `qm reload`.
pub fn reload(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    exit_code((|| {
        let answer = args.common.client()?.reload()?;
        match args.common.output() {
            Output::Table => print!("{}", reload_text(&answer)),
            Output::Json => print_json(&answer)?,
        }
        Ok(())
    })())
}

fn reload_text(r: &ReloadResponse) -> String {
    let file = r.config_file.as_deref().unwrap_or("the embedded defaults");
    let changed = if r.changed.is_empty() {
        "nothing changed".to_string()
    } else {
        format!("applied {}", r.changed.join(", "))
    };
    let capacity: Vec<String> = r
        .capacity
        .iter()
        .map(|(t, n)| format!("{n} x {t}"))
        .collect();
    format!(
        "reloaded {file}: {changed}\ninstances: {}\n",
        capacity.join(", ")
    )
}
