//! `qm workload generate`: a synthetic workload calibrated to published trace statistics
//! (docs/workload-generator.md), in the workload CSV schema `qm simulate` reads; `export` and
//! `calibrate` are in `workload_export.rs`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// `qm workload ...`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a synthetic workload CSV (heavy-tailed durations, the Philly GPU-count mix,
    /// bursty arrivals) with a given offered load.
    Generate(GenerateArgs),
    /// Write a server's finished jobs submitted in a window as a workload CSV (share as
    /// tenant, the work each really needed, instances, class, checkpoint interval seen, and
    /// what really happened to it), to replay with `qm simulate`.
    Export(super::workload_export::ExportArgs),
    /// Replay a window's real jobs under the policy that ran and print the simulated figures
    /// beside the real ones: completion p50/p95, utilization, preemptions.
    Calibrate(super::workload_export::CalibrateArgs),
}

/// Arguments of `qm workload generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// Number of jobs.
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Number of tenants (t00, t01, ...), with a skewed share of the jobs each.
    #[arg(long, default_value_t = 8)]
    tenants: usize,
    /// Seed: the same options and seed give the same file, byte for byte.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Offered load: GPU-seconds asked per second over the capacity (0.8 = 80 % busy).
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// The capacity (GPUs) the load is relative to.
    #[arg(long, default_value_t = 512)]
    capacity: u32,
    /// Output CSV.
    #[arg(long, value_name = "FILE.csv")]
    out: PathBuf,
}

/// Runs the subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Export(a) => super::workload_export::export(a),
        Command::Calibrate(a) => super::workload_export::calibrate(a),
        Command::Generate(a) => {
            let jobs = qm_sim::generate::generate(&qm_sim::generate::GenerateOptions {
                jobs: a.jobs,
                tenants: a.tenants,
                seed: a.seed,
                load: a.load,
                capacity_gpus: a.capacity,
            })?;
            if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let file = std::fs::File::create(&a.out)
                .with_context(|| format!("creating {}", a.out.display()))?;
            qm_sim::write_workload(std::io::BufWriter::new(file), &jobs)?;
            eprintln!(
                "wrote {} jobs of {} tenants to {}",
                jobs.len(),
                a.tenants,
                a.out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
