//! `qm backup`: a consistent copy of a data dir's store, taken while the server runs or not
//! (the work is `qm_store::backup`; restoring is in docs/server.md, "Backup and restore").

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `qm backup`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server's data directory, whose qm.sqlite3 is copied [default: ./qm-data].
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The backup file to write: one SQLite file, restored as the qm.sqlite3 of a data dir.
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
}

/// Progress lines are for copies long enough to wonder about; a quick one prints only the
/// summary.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Copies the store and prints what the copy holds.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let data_dir = args
        .data_dir
        .unwrap_or_else(|| PathBuf::from(qm_server::config::DEFAULT_DATA_DIR));
    // The server's file name for its store (qm_server::serve).
    let store = data_dir.join("qm.sqlite3");
    let options = qm_store::BackupOptions {
        overwrite: args.force,
        ..qm_store::BackupOptions::default()
    };
    let started = Instant::now();
    let mut last_line = started;
    let mut on_progress = |p: qm_store::BackupProgress| {
        if last_line.elapsed() >= PROGRESS_EVERY {
            last_line = Instant::now();
            eprintln!(
                "qm backup: {} of {} pages copied ({:.0} %)",
                p.pages_copied,
                p.pages_total,
                100.0 * p.pages_copied as f64 / p.pages_total.max(1) as f64
            );
        }
    };
    let summary = qm_store::backup(&store, &args.to, &options, &mut on_progress)?;
    eprintln!(
        "qm backup: wrote {} ({}, {} batches, schema {}) in {:.2} s",
        args.to.display(),
        qm_cli::client::format::memory(summary.bytes),
        summary.batches,
        summary.schema_version,
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}
