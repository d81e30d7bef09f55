//! `qm simulate`: replay a workload through the scheduling core under several policies and
//! write `metrics.json` and `report.html`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use qm_sim::{
    render_html, run_variant, validate, CheckpointSettings, Cluster, Metrics, SimOptions,
    VariantRun,
};

/// A baseline derived from the first policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Baseline {
    /// Every share RESERVE: strict isolation, no lending or borrowing.
    Strict,
    /// One pool with no quotas, first come first served.
    Pooled,
    /// One pool with no quotas as a Slurm-like cluster runs it: priority then submission
    /// order, the first waiting job reserves at once, and only jobs that end (by their trace
    /// duration, taken as an exact runtime estimate) before it could start pass it (EASY
    /// backfill); nothing is preempted.
    PooledBackfill,
}

/// How a variant's jobs are scheduled, beyond its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The policy file's own rules.
    Policy,
    /// First come first served.
    Fifo,
    /// See [`Baseline::PooledBackfill`].
    EasyOnly,
}

/// How jobs are simulated: the checkpoint model and the server's scheduler knobs (shared by
/// `qm simulate` and `qm workload calibrate`).
#[derive(Debug, clap::Args)]
pub struct Model {
    /// Seed of the per-job checkpoint phases.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The capacity unit of workload rows that name none (`gpus` counts its instances).
    #[arg(long, default_value = "gpu")]
    instance_type: String,
    /// Seconds of work between checkpoints (a row's checkpoint_interval_s wins).
    #[arg(long, default_value_t = 1800)]
    checkpoint_interval: u64,
    /// Seconds a restarted attempt spends loading its checkpoint.
    #[arg(long, default_value_t = 60)]
    restart_overhead: u64,
    /// Seconds a preempted attempt keeps its instances before it is gone.
    #[arg(long, default_value_t = 120)]
    stop_grace: u64,
    /// The starvation guard (as `[scheduler] reserve_after_seconds` of the server): seconds
    /// after which a share's waiting head reserves its share's capacity (jobs that start on
    /// it meanwhile are backfilled: preemptible for that head).
    #[arg(long, default_value_t = 600)]
    reserve_after: u64,
    /// Reclaim patience (as `[scheduler] reclaim_patience_seconds`): seconds an owner that
    /// could reclaim from jobs that checkpoint waits for them to checkpoint (0 = at once).
    #[arg(long, default_value_t = 300)]
    reclaim_patience: u64,
    /// Backfill patience (as `[scheduler] backfill_patience_seconds`): seconds an aged head
    /// lets the jobs backfilled onto its reservation finish before it preempts them.
    #[arg(long, default_value_t = 1800)]
    backfill_patience: u64,
}

impl Model {
    /// The checkpoint model.
    pub fn checkpoint(&self) -> CheckpointSettings {
        CheckpointSettings {
            interval_s: self.checkpoint_interval,
            restart_overhead_s: self.restart_overhead,
            stop_grace_s: self.stop_grace,
        }
    }

    /// A policy variant's options, as the server would run it.
    pub fn options(&self) -> SimOptions {
        SimOptions {
            instance_type: self.instance_type.clone(),
            checkpoint: self.checkpoint(),
            seed: self.seed,
            core: qm_core::Policy {
                reserve_after_ms: self.reserve_after.saturating_mul(1000),
                reclaim_patience_ms: self.reclaim_patience.saturating_mul(1000),
                backfill_patience_ms: self.backfill_patience.saturating_mul(1000),
                ..Default::default()
            },
            ..SimOptions::default()
        }
    }
}

/// Arguments of `qm simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Workload CSV: job_id, tenant, submit_time_s, duration_s, gpus, status (the schema of the
    /// shared traces), optionally priority, instance_type, checkpoint_interval_s, class
    /// (interruptible or non-interruptible); `qm workload export` writes one.
    #[arg(long, value_name = "FILE.csv")]
    workload: PathBuf,
    /// A cluster file (environment, shares, optional tenants): the `qm check` scenario format
    /// without steps. Repeat to compare policies; the first one's shares group the per-share
    /// statistics of every variant. Variants may differ in anything, down to only
    /// `idle_assignment`, `fair_reclaim`, share weights or groups (each is named after its
    /// file's stem).
    #[arg(long = "policy", value_name = "FILE.yaml", required = true)]
    policies: Vec<PathBuf>,
    /// Add a baseline derived from the first policy (repeatable).
    #[arg(long = "baseline", value_enum)]
    baselines: Vec<Baseline>,
    /// Where metrics.json and report.html go.
    #[arg(long, value_name = "DIR", default_value = "qm-simulation")]
    out: PathBuf,
    /// The checkpoint model and the scheduler's knobs.
    #[command(flatten)]
    model: Model,
    /// Give the policies' jobs their trace duration (plus the restart overhead) as a runtime
    /// bound, as `MaxRuntimeInSeconds` does on the server: jobs that end before an aged head
    /// could start are then EASY-backfilled, not preemptible for it. (The pooled-backfill
    /// baseline always has them.)
    #[arg(long)]
    runtime_bounds: bool,
}

/// Runs the simulation, prints the table and writes the outputs.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let jobs = qm_sim::read_workload(&args.workload)?;
    if jobs.is_empty() {
        bail!("{}: the workload has no job", args.workload.display());
    }
    let variants = variants(&args)?;
    let reference = variants[0].1.clone();
    eprintln!(
        "qm simulate: {} jobs from {}, {} variant(s)",
        jobs.len(),
        args.workload.display(),
        variants.len()
    );
    // Every variant is checked before any runs: a mistake in the last policy should not
    // surface after minutes of simulating the first ones.
    for (name, cluster, mode) in &variants {
        validate(cluster, &reference, &jobs, &variant_options(&args, *mode))
            .with_context(|| format!("variant {name}"))?;
    }
    let mut runs: Vec<VariantRun> = Vec::new();
    for (name, cluster, mode) in &variants {
        let opts = variant_options(&args, *mode);
        runs.push(run_with_progress(name, cluster, &reference, &jobs, &opts)?);
    }
    write_outputs(&args, &jobs, &runs)?;

    let mut out = std::io::stdout().lock();
    write!(out, "{}", table(&runs))?;
    writeln!(
        out,
        "\nwrote {} and {} in {:.1} s",
        args.out.join("metrics.json").display(),
        args.out.join("report.html").display(),
        started.elapsed().as_secs_f64()
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `base`, or `base-2`, `base-3`, ... when a variant already has that name.
fn unique_name(variants: &[(String, Cluster, Mode)], base: String) -> String {
    let taken = |n: &str| variants.iter().any(|(v, _, _)| v == n);
    let mut name = base.clone();
    let mut k = 2;
    while taken(&name) {
        name = format!("{base}-{k}");
        k += 1;
    }
    name
}

/// The variants to run: each policy file, named after its stem, then each baseline once,
/// derived from the first policy.
fn variants(args: &Args) -> anyhow::Result<Vec<(String, Cluster, Mode)>> {
    let mut variants: Vec<(String, Cluster, Mode)> = Vec::new();
    for path in &args.policies {
        let file = qm_cli::cluster::load(path)?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "policy".into());
        let name = unique_name(&variants, stem);
        variants.push((name, file.cluster(), Mode::Policy));
    }
    let reference = variants[0].1.clone();
    let mut baselines: Vec<Baseline> = Vec::new();
    for b in &args.baselines {
        if !baselines.contains(b) {
            baselines.push(*b);
        }
    }
    for b in baselines {
        let (base, cluster, mode) = match b {
            Baseline::Strict => ("strict", reference.strict(), Mode::Policy),
            Baseline::Pooled => ("pooled", reference.pooled(), Mode::Fifo),
            Baseline::PooledBackfill => ("pooled-backfill", reference.pooled(), Mode::EasyOnly),
        };
        let name = unique_name(&variants, base.to_string());
        variants.push((name, cluster, mode));
    }
    Ok(variants)
}

/// The options a variant of `mode` runs with.
fn variant_options(args: &Args, mode: Mode) -> SimOptions {
    let mut o = SimOptions {
        ignore_priorities: mode == Mode::Fifo,
        runtime_bounds: args.runtime_bounds,
        ..args.model.options()
    };
    if mode == Mode::EasyOnly {
        o.core.reserve_after_ms = 0;
        o.core.preemptible_backfill = false;
        o.runtime_bounds = true;
    }
    o
}

/// Runs one variant behind a progress bar, then prints its one-line outcome.
fn run_with_progress(
    name: &str,
    cluster: &Cluster,
    reference: &Cluster,
    jobs: &[qm_sim::WorkloadJob],
    opts: &SimOptions,
) -> anyhow::Result<VariantRun> {
    let bar = ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>16} [{bar:30}] {pos}/{len} jobs done, {msg} ({elapsed})",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_prefix(name.to_string());
    let t = Instant::now();
    let run = run_variant(
        name,
        cluster,
        reference,
        jobs,
        opts,
        &mut |events, done, _| {
            bar.set_position(done as u64);
            bar.set_message(format!("{events} events"));
        },
    )
    .with_context(|| format!("variant {name}"))?;
    bar.finish_and_clear();
    eprintln!(
        "  {name}: {} of {} jobs completed, {} preemptions, {:.2} s",
        run.metrics.overall.completed,
        run.metrics.overall.jobs,
        run.metrics.overall.preemptions,
        t.elapsed().as_secs_f64()
    );
    Ok(run)
}

/// Writes `metrics.json` and `report.html` into the output directory.
fn write_outputs(
    args: &Args,
    jobs: &[qm_sim::WorkloadJob],
    runs: &[VariantRun],
) -> anyhow::Result<()> {
    let checkpoint = args.model.checkpoint();
    let metrics = Metrics {
        workload: args.workload.display().to_string(),
        jobs: jobs.len(),
        seed: args.model.seed,
        checkpoint: checkpoint.clone(),
        variants: runs.iter().map(|r| r.metrics.clone()).collect(),
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let json = serde_json::to_string_pretty(&metrics)? + "\n";
    write(&args.out.join("metrics.json"), json.as_bytes())?;
    let notes = report_notes(args, jobs, &checkpoint);
    let html = render_html("Quartermaster policy simulation", runs, &notes);
    write(&args.out.join("report.html"), html.as_bytes())
}

/// The report's notes: the workload, the checkpoint model, the policies and the data's
/// licence.
fn report_notes(
    args: &Args,
    jobs: &[qm_sim::WorkloadJob],
    checkpoint: &CheckpointSettings,
) -> Vec<String> {
    let mut notes = vec![
        format!(
            "Workload: {} ({} jobs)",
            args.workload.display(),
            jobs.len()
        ),
        format!(
            "Checkpoint model: every {} s of work, {} s restart overhead, {} s stop grace; seed {}",
            checkpoint.interval_s,
            checkpoint.restart_overhead_s,
            checkpoint.stop_grace_s,
            args.model.seed
        ),
        format!(
            "Policies: {}",
            args.policies
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ];
    if jobs.iter().any(|j| j.job_id.starts_with("philly-")) {
        notes.push(
            "Workload data: Microsoft Philly trace (msr-fiddle/philly-traces), CC BY 4.0.".into(),
        );
    }
    notes
}

fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// How one row of the table shows a statistic.
type Cell = Box<dyn Fn(&qm_sim::Stats) -> String>;

/// The side-by-side table printed at the end.
pub fn table(runs: &[VariantRun]) -> String {
    let rows = overall_rows();
    let mut labels: Vec<&str> = rows.iter().map(|(l, _)| *l).collect();
    let mut cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, f)| runs.iter().map(|r| f(&r.metrics.overall)).collect())
        .collect();
    for (label, row) in variant_rows(runs) {
        labels.push(label);
        cells.push(row);
    }
    layout(runs, &labels, &cells)
}

/// The rows that show a statistic of all the variant's jobs.
fn overall_rows() -> Vec<(&'static str, Cell)> {
    let hours = |s: f64| format!("{:.2} h", s / 3600.0);
    vec![
        ("jobs", Box::new(|s| s.jobs.to_string())),
        ("completed", Box::new(|s| s.completed.to_string())),
        ("never started", Box::new(|s| s.never_started.to_string())),
        ("JCT p50", Box::new(move |s| hours(s.jct_s.p50))),
        ("JCT p95", Box::new(move |s| hours(s.jct_s.p95))),
        ("JCT mean", Box::new(move |s| hours(s.jct_s.mean))),
        (
            "queue delay p50",
            Box::new(move |s| hours(s.queue_delay_s.p50)),
        ),
        (
            "queue delay p95",
            Box::new(move |s| hours(s.queue_delay_s.p95)),
        ),
        (
            "queue delay p99",
            Box::new(move |s| hours(s.queue_delay_s.p99)),
        ),
        (
            "queue delay mean",
            Box::new(move |s| hours(s.queue_delay_s.mean)),
        ),
        (
            "slowdown p50",
            Box::new(|s| format!("{:.2}", s.slowdown.p50)),
        ),
        (
            "slowdown mean",
            Box::new(|s| format!("{:.2}", s.slowdown.mean)),
        ),
        (
            "reclaim delay p95",
            Box::new(move |s| hours(s.reclaim_delay_s.p95)),
        ),
        ("preemptions", Box::new(|s| s.preemptions.to_string())),
        (
            "needless preemptions",
            Box::new(|s| s.needless_preemptions.to_string()),
        ),
        (
            "lost GPU-h",
            Box::new(|s| format!("{:.1}", s.lost_gpu_hours)),
        ),
        (
            "restart overhead GPU-h",
            Box::new(|s| format!("{:.1}", s.restart_overhead_gpu_hours)),
        ),
        (
            "borrowed GPU-h",
            Box::new(|s| format!("{:.1}", s.borrowed_gpu_hours)),
        ),
        (
            "utilization",
            Box::new(|s| format!("{:.1} %", s.utilization * 100.0)),
        ),
    ]
}

/// The rows that show a property of each variant as a whole, with their cells.
fn variant_rows(runs: &[VariantRun]) -> Vec<(&'static str, Vec<String>)> {
    // Capacity a policy wastes: a property of the variant, not of a set of jobs.
    fn idle(r: &VariantRun) -> &qm_sim::IdleStats {
        &r.metrics.idle_while_waiting
    }
    let row = |f: &dyn Fn(&VariantRun) -> String| runs.iter().map(f).collect::<Vec<_>>();
    vec![
        (
            "idle while waiting inst-h",
            row(&|r| {
                format!(
                    "{:.1} ({:.1} %)",
                    idle(r).instance_hours,
                    idle(r).fraction * 100.0
                )
            }),
        ),
        (
            "idle while waiting cause",
            row(&|r| idle(r).cause.unwrap_or("-").to_string()),
        ),
        // How evenly idle capacity went to the shares waiting to borrow: also the variant's.
        (
            "Jain index run (contended)",
            row(&|r| {
                let f = &r.metrics.fairness;
                format!("{:.3} ({:.3})", f.jain, f.jain_contended)
            }),
        ),
        (
            "contended h",
            row(&|r| format!("{:.1}", r.metrics.fairness.contended_hours)),
        ),
    ]
}

/// The labelled rows under the variants' names, each column as wide as its widest cell.
fn layout(runs: &[VariantRun], labels: &[&str], cells: &[Vec<String>]) -> String {
    let label_w = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    let col_w: Vec<usize> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            cells
                .iter()
                .map(|row| row[i].len())
                .chain([r.metrics.name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = format!("{:label_w$}", "");
    for (r, w) in runs.iter().zip(&col_w) {
        s += &format!("  {:>w$}", r.metrics.name);
    }
    s.push('\n');
    for (label, row) in labels.iter().zip(cells) {
        s += &format!("{label:label_w$}");
        for (cell, w) in row.iter().zip(&col_w) {
            s += &format!("  {cell:>w$}");
        }
        s.push('\n');
    }
    s
}
