//! `qm workload export` and `qm workload calibrate`: a server's real jobs of a window in the
//! simulator's workload schema (`GET /qm/v1/workload`), to replay under a proposed policy
//! with `qm simulate`, and the calibration line that says how far to trust that replay
//! (docs/workload-export.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use qm_cli::client::time::{now_ms, utc, window};
use qm_cli::client::workload::WorkloadCsv;
use qm_cli::client::{Client, ClientError};

use super::simulate::Model;

/// Which window of which server.
#[derive(Debug, clap::Args)]
pub struct Window {
    /// The server's URL [default: $QM_ENDPOINT, else http://127.0.0.1:7611].
    #[arg(long)]
    endpoint: Option<String>,
    /// Jobs submitted from: now, an age (36h, 7d, 2w), a UTC date (2026-11-01) or time
    /// (2026-11-01T12:00:00Z) [default: 7 days before --until].
    #[arg(long)]
    since: Option<String>,
    /// Jobs submitted before (exclusive), in the same forms [default: now].
    #[arg(long)]
    until: Option<String>,
    /// Only the jobs of this job queue (name or ARN); the export names shares, not queues,
    /// so give it when shares of several queues have the same name [default: every queue].
    #[arg(long)]
    queue: Option<String>,
}

/// Arguments of `qm workload export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The server and the window.
    #[command(flatten)]
    window: Window,
    /// The workload CSV to write (replaced only once the export is complete).
    #[arg(long, value_name = "FILE.csv")]
    out: PathBuf,
}

/// Arguments of `qm workload calibrate`.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    /// The server and the window (unless --workload is given).
    #[command(flatten)]
    window: Window,
    /// A workload written by `qm workload export`, instead of asking the server.
    #[arg(long, value_name = "FILE.csv")]
    workload: Option<PathBuf>,
    /// The cluster file of the policy that really ran in the window.
    #[arg(long = "policy", value_name = "FILE.yaml")]
    policy: PathBuf,
    /// The checkpoint model and the scheduler's knobs (set them as the server ran).
    #[command(flatten)]
    model: Model,
}

/// `qm workload export`: exit code 0, or 1 when the server refuses or cannot be reached, or
/// the file cannot be written.
pub fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    report(run_export(args))
}

/// `qm workload calibrate`: prints the calibration line; exit code as for export.
pub fn calibrate(args: CalibrateArgs) -> anyhow::Result<ExitCode> {
    report(run_calibrate(args))
}

fn report(result: anyhow::Result<()>) -> anyhow::Result<ExitCode> {
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("error: {}", crate::describe(&e));
            Ok(ExitCode::from(1))
        }
    }
}

/// Asks the server for the window's jobs, saying what it asks and what was left out.
fn fetch(w: &Window) -> anyhow::Result<WorkloadCsv> {
    let (since, until) =
        window(w.since.as_deref(), w.until.as_deref(), now_ms(), 7).map_err(ClientError::Usage)?;
    let client = Client::for_endpoint(w.endpoint.as_deref())?;
    eprintln!(
        "qm workload: asking {} for the jobs submitted {} .. {}",
        client.endpoint(),
        utc(since),
        utc(until)
    );
    let export = client.workload(since, until, w.queue.as_deref())?;
    if export.unfinished + export.never_ran > 0 {
        eprintln!(
            "  left out: {} unfinished job(s) (their work is not known yet), {} that never ran",
            export.unfinished, export.never_ran
        );
    }
    Ok(export)
}

fn run_export(args: ExportArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    // The file is written beside its final name and renamed when complete, so an unwritable
    // --out fails before the server is asked, and a failure never leaves half a workload.
    let partial = partial_path(&args.out);
    let mut file = std::fs::File::create(&partial).map_err(|e| {
        anyhow::anyhow!(
            "--out {}: cannot write there ({e}); give a file in a folder that exists and you may write to",
            args.out.display()
        )
    })?;
    let written = fetch(&args.window).and_then(|export| {
        file.write_all(&export.csv)
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", partial.display()))?;
        std::fs::rename(&partial, &args.out)
            .with_context(|| format!("renaming {} to {}", partial.display(), args.out.display()))?;
        Ok(export.jobs)
    });
    let jobs = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })?;
    eprintln!(
        "wrote {jobs} job(s) to {} in {:.1} s; replay them with: qm simulate --workload {} --policy CURRENT.yaml --policy PROPOSED.yaml",
        args.out.display(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}

fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

fn run_calibrate(args: CalibrateArgs) -> anyhow::Result<()> {
    let cluster = qm_cli::cluster::load(&args.policy)?.cluster();
    let jobs = match &args.workload {
        Some(path) => qm_sim::read_workload(path)?,
        None => {
            let export = fetch(&args.window)?;
            qm_sim::parse_workload(&export.csv[..], "the server's export")?
        }
    };
    let calibration = qm_sim::calibrate(&jobs, &cluster, &args.model.options())
        .with_context(|| format!("simulating {} under {}", jobs.len(), args.policy.display()))?;
    println!("{calibration}");
    Ok(())
}
