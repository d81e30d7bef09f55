//! `qm serve` configuration: an optional TOML file, with command-line flags winning over it,
//! and embedded defaults for everything so that `qm serve` alone starts a working server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::ServerError;

/// `[executor] max_lost_attempts` unless set.
pub const DEFAULT_MAX_LOST_ATTEMPTS: u32 = 3;
/// Default listen address (`--listen`).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7611";
/// Default data directory (`--data-dir`).
pub const DEFAULT_DATA_DIR: &str = qm_api::qm::DEFAULT_DATA_DIR;

/// The config file, as written by the user. Unknown keys are refused so that a typo does not
/// silently fall back to a default.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Listen address, e.g. `127.0.0.1:7611`.
    pub listen: Option<String>,
    /// Data directory.
    pub data_dir: Option<PathBuf>,
    /// Region written into ARNs.
    pub region: Option<String>,
    /// Account id written into ARNs (12 digits).
    pub account_id: Option<String>,
    /// Executor settings.
    #[serde(default)]
    pub executor: ExecutorSection,
    /// Scheduler knobs.
    #[serde(default)]
    pub scheduler: SchedulerSection,
    /// Snapshots of the state.
    #[serde(default)]
    pub state: StateSection,
    /// How long finished jobs stay.
    #[serde(default)]
    pub retention: RetentionSection,
    /// Authentication.
    #[serde(default)]
    pub auth: AuthSection,
    /// TLS.
    #[serde(default)]
    pub tls: TlsSection,
    /// Bounds on what clients can make the server hold or wait for.
    #[serde(default)]
    pub limits: LimitsSection,
    /// Where jobs' channels, checkpoints and models are stored.
    #[serde(default)]
    pub storage: StorageSection,
    /// Whose credentials attempts get.
    #[serde(default)]
    pub credentials: CredentialsSection,
}

/// `[credentials]`: each attempt gets the credentials of its job's `RoleArn` (docs/security.md).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialsSection {
    /// `assume_role` (STS AssumeRole of the job's role) or `profiles` (a profile per role
    /// ARN); unset: attempts get no credentials and transfers use the server's.
    pub source: Option<String>,
    /// STS's endpoint (default `AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`, else AWS's
    /// regional one).
    pub sts_endpoint: Option<String>,
    /// How long assumed credentials last (1,800 to 43,200 seconds, default 3,600); they are
    /// assumed again 15 minutes before they expire.
    pub duration_seconds: Option<u32>,
    /// The shared credentials file of `profiles` (default the server's:
    /// `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`).
    pub profiles_file: Option<PathBuf>,
    /// Role ARN to profile name, for `profiles`.
    #[serde(default)]
    pub roles: std::collections::BTreeMap<String, String>,
    /// Quota share to the role ARNs (`*` matches any run of characters) its jobs may act as;
    /// `"*"` as a share name applies to every share. A role no entry allows gets nothing:
    /// anyone who may submit could otherwise name any role the server can assume.
    #[serde(default)]
    pub shares: std::collections::BTreeMap<String, Vec<String>>,
    /// `block` (default): attempts under their own uids cannot reach the instance metadata
    /// service (169.254.169.254), which would answer with the machine's role; `allow`.
    pub metadata: Option<String>,
}

/// `[storage]`: S3 (and local roots) for SageMaker channels, checkpoints and models
/// (docs/sagemaker.md). Unset keys come from the server's AWS environment.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSection {
    /// S3's endpoint URL (default: `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, else AWS).
    pub endpoint: Option<String>,
    /// The signing region (default: `AWS_REGION`, `AWS_DEFAULT_REGION`, else us-east-1).
    pub region: Option<String>,
    /// The shared-credentials profile (default: the environment's keys, `AWS_PROFILE`, then
    /// the instance role).
    pub profile: Option<String>,
    /// Directories `file://` URIs may name (default: none, `file://` refused).
    #[serde(default)]
    pub file_roots: Vec<PathBuf>,
    /// How long one S3 request is retried before the transfer fails (default 30).
    pub retry_seconds: Option<f64>,
}

/// `[limits]` (defaults: [`crate::limits::Limits::DEFAULT`]; docs/security.md).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// RUNNABLE jobs one quota share may hold.
    pub queued_jobs_per_share: Option<u64>,
    /// RUNNABLE jobs one job queue may hold.
    pub queued_jobs_per_queue: Option<u64>,
    /// Connections open at once.
    pub max_connections: Option<u64>,
    /// Seconds a request's headers may take, and a keep-alive connection may sit idle.
    pub header_timeout_seconds: Option<f64>,
    /// Seconds a request's body may take.
    pub body_timeout_seconds: Option<f64>,
    /// Bytes of stdout (and of stderr) an attempt may write before its log is rotated.
    pub log_bytes_per_attempt: Option<u64>,
}

/// `[tls]`: serve HTTPS with this certificate chain and key (PEM files).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// The private key.
    pub key: Option<PathBuf>,
}

/// `[auth]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// Host names clients may address the server by, beyond loopback names and IP addresses
    /// (requests for any other `Host` are refused: DNS rebinding).
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Whether `/metrics` may be scraped without signing (default: no).
    pub public_metrics: Option<bool>,
}

/// `[retention]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSection {
    /// Days a finished job stays describable before it moves to the archive (fractions
    /// allowed).
    pub finished_jobs_days: Option<f64>,
    /// Whether a retired job's directory (its attempts' logs, outcomes and checkpoints) is
    /// deleted with it; off by default, since outputs may live there.
    pub delete_job_dirs: Option<bool>,
    /// Audit entries kept in the state; older ones move to the archive.
    pub audit_entries: Option<u64>,
}

/// Days a finished job stays by default.
pub const DEFAULT_RETENTION_DAYS: f64 = 30.0;

/// Audit entries the state keeps by default: at most 100,000 × 257 KiB, about 1 KiB each in
/// practice (an entry records one changing request).
pub const DEFAULT_AUDIT_ENTRIES: u64 = 100_000;

/// `[state]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateSection {
    /// A snapshot is written after this many logged commands (or four times as many
    /// as the last snapshot had jobs, if more), at shutdown, and after an upgrade; 0 writes only those two.
    pub snapshot_every_commands: Option<u64>,
}

/// Commands between two snapshots by default: a restart replays at most about this many
/// (about a second's worth at full submit rate), whatever the history.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 50_000;

/// `[executor]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorSection {
    /// `local` (default): processes on this machine; `slurm`: jobs of a Slurm cluster.
    pub kind: Option<String>,
    /// SIGTERM, then SIGKILL after this many seconds (SageMaker gives 120).
    pub stop_grace_seconds: Option<f64>,
    /// How often checkpoint directories are scanned, in seconds.
    pub checkpoint_poll_seconds: Option<f64>,
    /// Lost attempts of one job in a row (the server or node went away under it) that are
    /// queued again without using a retry; the next one lost fails the job. Default 3.
    pub max_lost_attempts: Option<u32>,
    /// `auto` (default): when the server is root, each attempt of the local executor runs
    /// under a uid of its own (`uid`); otherwise as the server's user (`none`). `uid` refuses
    /// to start where it cannot be done.
    pub isolation: Option<String>,
    /// The uids attempts run as under isolation, `FIRST-LAST` (default
    /// 1879048192-1879113727).
    pub job_uids: Option<String>,
    /// Where the local executor keeps job directories (`<work_dir>/jobs/<job id>`) and its
    /// supervisors' sockets. Default: the data dir, or, when isolated jobs could not reach
    /// it, `/var/lib/qm-jobs/<key>`.
    pub work_dir: Option<PathBuf>,
    /// `auto` (default): each host of a local attempt runs in a control group of its own,
    /// holding it to its instance's GPUs, memory, CPUs and processes; a root server refuses to
    /// start where that cannot be done, another runs jobs unconfined and says so. `cgroup`:
    /// confined, or refuse to start. `none`: never.
    pub confinement: Option<String>,
    /// `auto` (default): each process sees its job directory at `/opt/ml` when the server is
    /// root; `required`: or refuse to start; `off`: never.
    pub opt_ml: Option<String>,
    /// How often a running attempt's changed checkpoints are uploaded to
    /// `CheckpointConfig.S3Uri` (default 30).
    pub checkpoint_sync_seconds: Option<f64>,
    /// How often the GPUs of running attempts are sampled with `nvidia-smi` for their usage
    /// (default 10; 0: never).
    pub gpu_sample_seconds: Option<f64>,
    /// `host` (default): `ContainerEntrypoint` runs on the host; `podman`: the job's image runs.
    pub runtime: Option<String>,
    /// `[executor.podman]`: how podman is run (runtime = "podman").
    pub podman: Option<PodmanSection>,
    /// `[executor.images]`: `TrainingImage` patterns (`*` = anything) to local images.
    #[serde(default)]
    pub images: std::collections::BTreeMap<String, String>,
    /// The instances this machine offers. Empty = detect GPUs with nvidia-smi, else four
    /// simulated `ml.g5.xlarge`.
    #[serde(default)]
    pub pool: Vec<PoolEntry>,
    /// `[executor.slurm]`: how to reach the Slurm cluster (kind = "slurm").
    pub slurm: Option<SlurmSection>,
}

/// `[executor.podman]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodmanSection {
    /// The podman program (default `podman`, found on PATH).
    pub program: Option<PathBuf>,
    /// Arguments before `run`, e.g. `["--runtime", "runc"]`.
    #[serde(default)]
    pub global_args: Vec<String>,
    /// Extra arguments of `podman run`, before the image.
    #[serde(default)]
    pub run_args: Vec<String>,
}

/// `[executor] confinement`: whether attempts run in control groups of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// Control groups where they can be used; a root server refuses to start without them.
    Auto,
    /// Control groups, or the server refuses to start.
    Cgroup,
    /// No control groups.
    None,
}

/// `[executor] isolation`: whether attempts run under uids of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    /// Own uids when the server is root and the data dir is reachable; else the server's.
    Auto,
    /// Own uids, or the server refuses to start.
    Uid,
    /// The server's user.
    None,
}

/// `[executor.slurm]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    /// Job directories (scripts, logs, checkpoints) go under `shared_dir/jobs`; every node
    /// must see it at the same path. Default: the data dir.
    pub shared_dir: Option<PathBuf>,
    /// How often `squeue --json` and `sinfo` are read, in seconds (default 1).
    pub poll_seconds: Option<f64>,
    /// Where sbatch, squeue, sinfo and scancel are; default: PATH.
    pub bin_dir: Option<PathBuf>,
    /// `sbatch --account`.
    pub account: Option<String>,
    /// More sbatch arguments for every job, e.g. `["--qos=ml", "--time=7-0"]`.
    #[serde(default)]
    pub extra_sbatch_args: Vec<String>,
    /// The instance types and the nodes that provide them.
    #[serde(default)]
    pub instance: Vec<SlurmInstanceEntry>,
}

/// `[[executor.slurm.instance]]`: the Slurm executor's own type.
pub use qm_executor::slurm::SlurmInstance as SlurmInstanceEntry;

/// The resolved `[executor.slurm]`.
#[derive(Clone, Debug)]
pub struct SlurmSettings {
    /// Shared directory; `None` = the data dir.
    pub shared_dir: Option<PathBuf>,
    /// Poll period.
    pub poll: Duration,
    /// Slurm commands' directory.
    pub bin_dir: Option<PathBuf>,
    /// `--account`.
    pub account: Option<String>,
    /// Extra sbatch arguments.
    pub extra_sbatch_args: Vec<String>,
    /// Instance types.
    pub instances: Vec<SlurmInstanceEntry>,
}

/// `[[executor.pool]]`: the local executor's own type.
pub use qm_executor::PoolSpec as PoolEntry;

/// `[scheduler]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSection {
    /// Starvation guard: a share's head job that waited this long holds capacity for itself.
    pub reserve_after_seconds: Option<u64>,
    /// How long an owner that could reclaim from jobs that checkpoint waits for them to
    /// checkpoint before it preempts them (0 = at once).
    pub reclaim_patience_seconds: Option<u64>,
    /// How long an aged head lets the jobs backfilled onto its reservation finish (0 = none).
    pub backfill_patience_seconds: Option<u64>,
    /// How often the server re-runs the scheduling pass while jobs wait, in seconds.
    pub tick_seconds: Option<f64>,
    /// How often the dashboard's history is sampled, in seconds (default 10).
    pub history_sample_seconds: Option<f64>,
}

/// Flags given on the command line; `None` = not given.
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--config`.
    pub config: Option<PathBuf>,
    /// `--no-auth`: no authentication (loopback listen addresses only).
    pub no_auth: bool,
    /// `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`.
    pub tls_key: Option<PathBuf>,
}

/// The effective configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where state, logs and checkpoints live.
    pub data_dir: PathBuf,
    /// ARN region.
    pub region: String,
    /// ARN account id.
    pub account_id: String,
    /// Grace between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// Checkpoint scan period.
    pub checkpoint_poll: Duration,
    /// Configured pool; empty = detect.
    pub pool: Vec<PoolEntry>,
    /// Starvation guard.
    pub reserve_after: Duration,
    /// `[scheduler] reclaim_patience_seconds` (default 300).
    pub reclaim_patience: Duration,
    /// `[scheduler] backfill_patience_seconds` (default 1800).
    pub backfill_patience: Duration,
    /// Pass period while jobs wait.
    pub tick: Duration,
    /// `[scheduler] history_sample_seconds` (default 10, at least 0.1).
    pub history_sample: Duration,
    /// `[executor] max_lost_attempts` (default 3).
    pub max_lost_attempts: u32,
    /// `[executor] isolation`.
    pub isolation: Isolation,
    /// `[executor] job_uids`.
    pub job_uids: qm_executor::JobUids,
    /// `[executor] work_dir`, if set.
    pub work_dir: Option<PathBuf>,
    /// `[executor] confinement`.
    pub confinement: Confinement,
    /// `[credentials]`: where attempts' credentials come from; `None`: they get none.
    pub credentials: Option<crate::credentials::Settings>,
    /// `[credentials] metadata = "allow"`: attempts may reach the instance metadata service.
    pub metadata_allowed: bool,
    /// Logged commands between two snapshots (0: only at start and shutdown).
    pub snapshot_every: u64,
    /// How long a finished job stays before it is archived.
    pub retention: Duration,
    /// Whether retiring a job deletes its directory.
    pub delete_job_dirs: bool,
    /// Audit entries kept before the oldest are archived.
    pub audit_entries: usize,
    /// `Some` when `executor.kind = "slurm"`.
    pub slurm: Option<SlurmSettings>,
    /// Whether requests must be signed (`--no-auth` turns it off).
    pub auth: bool,
    /// `[auth] hosts`.
    pub hosts: Vec<String>,
    /// `[auth] public_metrics`.
    pub public_metrics: bool,
    /// `Some((cert, key))`: serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `[limits]`.
    pub limits: crate::limits::Limits,
    /// `[storage]`, before the environment is applied (at start-up, in `serve`).
    pub storage: qm_executor::StorageConfig,
    /// `[executor] opt_ml`.
    pub opt_ml: qm_executor::OptMl,
    /// `[executor] checkpoint_sync_seconds`.
    pub checkpoint_sync: Duration,
    /// `[executor] gpu_sample_seconds` (zero: never).
    pub gpu_sample: Duration,
    /// `[executor] runtime`, with `[executor.podman]` and `[executor.images]`.
    pub runtime: qm_executor::Runtime,
}

impl Config {
    /// The configuration a file with `text` gives, without flags (tests).
    #[cfg(test)]
    pub(crate) fn from_text(text: &str) -> Result<Config, ServerError> {
        let file: FileConfig =
            toml::from_str(text).map_err(|e| ServerError::Config(e.to_string()))?;
        Config::resolve(file, &Flags::default())
    }

    /// Reads the config file (if any) and applies the flags over it.
    pub fn load(flags: &Flags) -> Result<Config, ServerError> {
        let file = match &flags.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        Config::resolve(file, flags)
    }

    /// Applies defaults and flags to a parsed file; checks every value.
    pub fn resolve(file: FileConfig, flags: &Flags) -> Result<Config, ServerError> {
        let listen = resolve_listen(&file, flags)?;
        let region = resolve_region(&file)?;
        let account_id = resolve_account_id(&file)?;
        let kind = resolve_kind(&file.executor)?;
        let (stop_grace, checkpoint_poll) = resolve_attempt_periods(&file.executor)?;
        let (tick, history_sample) = resolve_scheduler_periods(&file.scheduler)?;
        check_pools(&file.executor.pool)?;
        let slurm = resolve_slurm_section(kind, &file.executor)?;
        let data_dir = flags
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        Ok(Config {
            listen,
            data_dir,
            region,
            account_id,
            stop_grace,
            checkpoint_poll,
            pool: file.executor.pool.clone(),
            reserve_after: Duration::from_secs(file.scheduler.reserve_after_seconds.unwrap_or(600)),
            reclaim_patience: Duration::from_secs(
                file.scheduler.reclaim_patience_seconds.unwrap_or(300),
            ),
            backfill_patience: Duration::from_secs(
                file.scheduler.backfill_patience_seconds.unwrap_or(1800),
            ),
            tick,
            history_sample,
            max_lost_attempts: file
                .executor
                .max_lost_attempts
                .unwrap_or(DEFAULT_MAX_LOST_ATTEMPTS),
            isolation: resolve_isolation(&file.executor)?,
            confinement: resolve_confinement(&file.executor)?,
            job_uids: resolve_job_uids(&file.executor)?,
            work_dir: file.executor.work_dir.clone(),
            retention: resolve_retention(&file.retention)?,
            delete_job_dirs: file.retention.delete_job_dirs.unwrap_or(false),
            audit_entries: resolve_audit_entries(&file.retention)?,
            snapshot_every: file
                .state
                .snapshot_every_commands
                .unwrap_or(DEFAULT_SNAPSHOT_EVERY),
            credentials: resolve_credentials(&file.credentials)?,
            metadata_allowed: resolve_metadata(&file.credentials)?,
            slurm,
            auth: !flags.no_auth,
            hosts: resolve_hosts(&file.auth.hosts)?,
            public_metrics: file.auth.public_metrics.unwrap_or(false),
            tls: resolve_tls(&file.tls, flags)?,
            limits: resolve_limits(&file.limits, seconds)?,
            storage: resolve_storage(&file.storage, seconds)?,
            opt_ml: resolve_opt_ml(&file.executor)?,
            runtime: resolve_runtime(&file.executor, kind)?,
            checkpoint_sync: resolve_checkpoint_sync(&file.executor)?,
            gpu_sample: resolve_gpu_sample(&file.executor)?,
        })
    }
}

/// The error of a config value: the key, then what is wrong with it and what to write.
fn bad(key: &str, msg: String) -> ServerError {
    ServerError::Config(format!("{key}: {msg}"))
}

/// A number of seconds from 0 to 86,400, `default` where unset.
fn seconds(key: &str, v: Option<f64>, default: f64) -> Result<Duration, ServerError> {
    let v = v.unwrap_or(default);
    if !v.is_finite() || !(0.0..=86_400.0).contains(&v) {
        return Err(bad(
            key,
            format!("{v} is out of range; use 0 to 86400 seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(v))
}

/// `--listen`, else `listen`, else [`DEFAULT_LISTEN`].
fn resolve_listen(file: &FileConfig, flags: &Flags) -> Result<SocketAddr, ServerError> {
    let listen_text = flags
        .listen
        .clone()
        .or(file.listen.clone())
        .unwrap_or_else(|| DEFAULT_LISTEN.to_string());
    listen_text.parse().map_err(|e| {
        bad(
            "listen",
            format!("'{listen_text}' is not an address ({e}); write it as HOST:PORT, e.g. {DEFAULT_LISTEN}"),
        )
    })
}

/// `region`: an AWS region's name, us-east-1 where unset.
fn resolve_region(file: &FileConfig) -> Result<String, ServerError> {
    let region = file.region.clone().unwrap_or_else(|| "us-east-1".into());
    if region.is_empty()
        || !region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(bad(
            "region",
            format!("'{region}' is not a region name; use lower-case letters, digits and '-', e.g. us-east-1"),
        ));
    }
    Ok(region)
}

/// `account_id`: 12 digits, 123456789012 where unset.
fn resolve_account_id(file: &FileConfig) -> Result<String, ServerError> {
    let account_id = file
        .account_id
        .clone()
        .unwrap_or_else(|| "123456789012".into());
    if account_id.len() != 12 || !account_id.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad(
            "account_id",
            format!("'{account_id}' is not an account id; use exactly 12 digits"),
        ));
    }
    Ok(account_id)
}

/// `[executor] kind`: `local` (the default) or `slurm`.
fn resolve_kind(e: &ExecutorSection) -> Result<&str, ServerError> {
    let kind = e.kind.as_deref().unwrap_or("local");
    if kind != "local" && kind != "slurm" {
        return Err(bad(
            "executor.kind",
            format!("'{kind}' is not supported; use kind = \"local\" (processes on this machine) or \"slurm\""),
        ));
    }
    Ok(kind)
}

/// `[executor] stop_grace_seconds` (default 120) and `checkpoint_poll_seconds` (default 1,
/// at least 0.05).
fn resolve_attempt_periods(e: &ExecutorSection) -> Result<(Duration, Duration), ServerError> {
    let stop_grace = seconds("executor.stop_grace_seconds", e.stop_grace_seconds, 120.0)?;
    let checkpoint_poll = seconds(
        "executor.checkpoint_poll_seconds",
        e.checkpoint_poll_seconds,
        1.0,
    )?
    .max(Duration::from_millis(50));
    Ok((stop_grace, checkpoint_poll))
}

/// `[scheduler] tick_seconds` (default 1, at least 0.05) and `history_sample_seconds`
/// (default 10, at least 0.1).
fn resolve_scheduler_periods(s: &SchedulerSection) -> Result<(Duration, Duration), ServerError> {
    let tick =
        seconds("scheduler.tick_seconds", s.tick_seconds, 1.0)?.max(Duration::from_millis(50));
    let history_sample = seconds(
        "scheduler.history_sample_seconds",
        s.history_sample_seconds,
        10.0,
    )?
    .max(Duration::from_millis(100));
    Ok((tick, history_sample))
}

/// `[executor] job_uids`.
fn resolve_job_uids(e: &ExecutorSection) -> Result<qm_executor::JobUids, ServerError> {
    match &e.job_uids {
        None => Ok(qm_executor::JobUids::DEFAULT),
        Some(text) => qm_executor::JobUids::parse(text).map_err(|m| bad("executor.job_uids", m)),
    }
}

/// `[executor] checkpoint_sync_seconds` (default 30, at least 1).
fn resolve_checkpoint_sync(e: &ExecutorSection) -> Result<Duration, ServerError> {
    Ok(seconds(
        "executor.checkpoint_sync_seconds",
        e.checkpoint_sync_seconds,
        30.0,
    )?
    .max(Duration::from_secs(1)))
}

/// `[executor] gpu_sample_seconds` (default [`qm_executor::DEFAULT_GPU_SAMPLE`]).
fn resolve_gpu_sample(e: &ExecutorSection) -> Result<Duration, ServerError> {
    Ok(gpu_sample(seconds(
        "executor.gpu_sample_seconds",
        e.gpu_sample_seconds,
        qm_executor::DEFAULT_GPU_SAMPLE.as_secs_f64(),
    )?))
}

/// Refuses a `[[executor.pool]]` entry without an instance type or instances.
fn check_pools(pool: &[PoolEntry]) -> Result<(), ServerError> {
    for (i, p) in pool.iter().enumerate() {
        if p.instance_type.is_empty() {
            return Err(bad(
                &format!("executor.pool[{i}].instance_type"),
                "is empty; name a SageMaker instance type, e.g. ml.g5.xlarge".into(),
            ));
        }
        if p.count == 0 {
            return Err(bad(
                &format!("executor.pool[{i}].count"),
                "is 0; give at least 1 instance or remove the entry".into(),
            ));
        }
    }
    Ok(())
}

/// `[executor.slurm]`: there exactly when `kind` is `slurm`.
fn resolve_slurm_section(
    kind: &str,
    e: &ExecutorSection,
) -> Result<Option<SlurmSettings>, ServerError> {
    match (kind, &e.slurm) {
        ("local", None) => Ok(None),
        ("local", Some(_)) => Err(bad(
            "executor.slurm",
            "is set but executor.kind is \"local\"; set kind = \"slurm\" to use the cluster, or remove [executor.slurm]".into(),
        )),
        (_, None) => Err(bad(
            "executor.slurm",
            "is missing; kind = \"slurm\" needs [[executor.slurm.instance]] entries naming the partition or feature of each instance type".into(),
        )),
        (_, Some(section)) => Ok(Some(resolve_slurm(section, &e.pool, seconds)?)),
    }
}

/// `[executor] isolation`.
fn resolve_isolation(e: &ExecutorSection) -> Result<Isolation, ServerError> {
    match e.isolation.as_deref().unwrap_or("auto") {
        "auto" => Ok(Isolation::Auto),
        "uid" => Ok(Isolation::Uid),
        "none" => Ok(Isolation::None),
        other => Err(bad(
            "executor.isolation",
            format!("'{other}' is not a mode; use \"auto\" (own uids when root), \"uid\" (own uids, or refuse to start) or \"none\" (jobs run as the server's user)"),
        )),
    }
}

/// `[executor] confinement`.
fn resolve_confinement(e: &ExecutorSection) -> Result<Confinement, ServerError> {
    match e.confinement.as_deref().unwrap_or("auto") {
        "auto" => Ok(Confinement::Auto),
        "cgroup" => Ok(Confinement::Cgroup),
        "none" => Ok(Confinement::None),
        other => Err(bad(
            "executor.confinement",
            format!("'{other}' is not a mode; use \"auto\" (control groups where they can be used; required when root), \"cgroup\" (or refuse to start) or \"none\" (jobs may use the whole machine)"),
        )),
    }
}

/// `[retention] finished_jobs_days`, as a duration.
fn resolve_retention(r: &RetentionSection) -> Result<Duration, ServerError> {
    let days = r.finished_jobs_days.unwrap_or(DEFAULT_RETENTION_DAYS);
    if !(0.0..=36_500.0).contains(&days) {
        return Err(bad(
            "retention.finished_jobs_days",
            format!("is {days}; give a number of days from 0 to 36500, e.g. 30"),
        ));
    }
    Ok(Duration::from_secs_f64(days * 86_400.0))
}

/// `[retention] audit_entries`.
fn resolve_audit_entries(r: &RetentionSection) -> Result<usize, ServerError> {
    match r.audit_entries.unwrap_or(DEFAULT_AUDIT_ENTRIES) {
        n @ 1..=100_000_000 => Ok(n as usize),
        n => Err(bad(
            "retention.audit_entries",
            format!("is {n}; give a count from 1 to 100000000, e.g. 100000"),
        )),
    }
}

/// `[credentials] metadata`: whether attempts may reach the instance metadata service.
fn resolve_metadata(c: &CredentialsSection) -> Result<bool, ServerError> {
    match c.metadata.as_deref().unwrap_or("block") {
        "block" => Ok(false),
        "allow" => Ok(true),
        other => Err(bad(
            "credentials.metadata",
            format!("'{other}' is not a choice; use \"block\" (attempts under their own uids cannot reach 169.254.169.254) or \"allow\""),
        )),
    }
}

/// `--tls-cert` and `--tls-key` over `[tls]`: both or neither.
fn resolve_tls(tls: &TlsSection, flags: &Flags) -> Result<Option<(PathBuf, PathBuf)>, ServerError> {
    match (
        flags.tls_cert.clone().or(tls.cert.clone()),
        flags.tls_key.clone().or(tls.key.clone()),
    ) {
        (Some(c), Some(k)) => Ok(Some((c, k))),
        (None, None) => Ok(None),
        (Some(_), None) => Err(bad(
            "tls.key",
            "is missing: a certificate needs its private key (--tls-key FILE)".into(),
        )),
        (None, Some(_)) => Err(bad(
            "tls.cert",
            "is missing: a private key needs its certificate chain (--tls-cert FILE)".into(),
        )),
    }
}

/// `[executor] opt_ml`.
fn resolve_opt_ml(e: &ExecutorSection) -> Result<qm_executor::OptMl, ServerError> {
    match e.opt_ml.as_deref().unwrap_or("auto") {
        "auto" => Ok(qm_executor::OptMl::Auto),
        "required" => Ok(qm_executor::OptMl::Required),
        "off" => Ok(qm_executor::OptMl::Off),
        other => Err(bad(
            "executor.opt_ml",
            format!("'{other}' is not a mode; use \"auto\" (/opt/ml per attempt when root), \"required\" (or refuse to start) or \"off\""),
        )),
    }
}

/// `[executor] gpu_sample_seconds`: zero turns sampling off; otherwise at least a second
/// (each `nvidia-smi` call costs tens of milliseconds of CPU).
fn gpu_sample(every: Duration) -> Duration {
    if every.is_zero() {
        every
    } else {
        every.max(Duration::from_secs(1))
    }
}

/// `[executor] runtime`: podman only for the local executor; `[executor.podman]` and
/// `[executor.images]` only with it.
fn resolve_runtime(e: &ExecutorSection, kind: &str) -> Result<qm_executor::Runtime, ServerError> {
    let bad = |key: &str, msg: &str| ServerError::Config(format!("executor.{key}: {msg}"));
    match e.runtime.as_deref().unwrap_or("host") {
        "host" => {
            if e.podman.is_some() || !e.images.is_empty() {
                return Err(bad("runtime", "is \"host\" but [executor.podman] or [executor.images] is set; set runtime = \"podman\" to run images, or remove them"));
            }
            Ok(qm_executor::Runtime::Host)
        }
        "podman" if kind == "local" => {
            let p = e.podman.clone().unwrap_or_default();
            for (pattern, image) in &e.images {
                if pattern.is_empty() || image.trim().is_empty() {
                    return Err(bad("images", "every entry maps a non-empty TrainingImage pattern to a non-empty local image, e.g. \"763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*\" = \"localhost/pytorch:2.5\""));
                }
            }
            Ok(qm_executor::Runtime::Podman(qm_executor::Podman {
                program: p.program.unwrap_or_else(|| PathBuf::from("podman")),
                global_args: p.global_args,
                run_args: p.run_args,
                images: e.images.clone(),
            }))
        }
        "podman" => Err(bad("runtime", "\"podman\" is for the local executor; on Slurm jobs run on the nodes' hosts")),
        other => Err(bad("runtime", &format!("'{other}' is not a runtime; use \"host\" (ContainerEntrypoint on this machine) or \"podman\" (the job's TrainingImage)"))),
    }
}

/// `[credentials]`, its defaults from the server's environment (the region is the storage's,
/// resolved with it).
fn resolve_credentials(
    c: &CredentialsSection,
) -> Result<Option<crate::credentials::Settings>, ServerError> {
    use crate::credentials::Source;
    let bad = |key: &str, msg: String| ServerError::Config(format!("credentials.{key}: {msg}"));
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let source = match c.source.as_deref() {
        None => return Ok(None),
        Some("assume_role") => {
            let endpoint = c
                .sts_endpoint
                .clone()
                .or_else(|| env("AWS_ENDPOINT_URL_STS"))
                .or_else(|| env("AWS_ENDPOINT_URL"));
            if let Some(e) = endpoint.as_ref().filter(|e| !(e.starts_with("http://") || e.starts_with("https://"))) {
                return Err(bad("sts_endpoint", format!("'{e}' is not a URL; write it as http(s)://HOST[:PORT]")));
            }
            let duration_seconds = c.duration_seconds.unwrap_or(3_600);
            if !(1_800..=43_200).contains(&duration_seconds) {
                return Err(bad("duration_seconds", format!("is {duration_seconds}; give 1800 to 43200 (credentials are assumed again 15 minutes before they expire)")));
            }
            Source::AssumeRole {
                endpoint,
                duration_seconds,
            }
        }
        Some("profiles") => {
            if c.roles.is_empty() {
                return Err(bad("roles", "is empty; map each role ARN jobs may name to a profile, e.g. \"arn:aws:iam::123456789012:role/team-a\" = \"team-a\"".into()));
            }
            let file = c
                .profiles_file
                .clone()
                .or_else(|| qm_storage::settings::shared_credentials_file(env))
                .ok_or_else(|| bad("profiles_file", "is not set and there is no HOME to find ~/.aws/credentials in".into()))?;
            Source::Profiles {
                file,
                roles: c.roles.clone(),
            }
        }
        Some(other) => {
            return Err(bad(
                "source",
                format!("'{other}' is not a source; use \"assume_role\" (STS AssumeRole of the job's RoleArn) or \"profiles\" (a profile per role ARN)"),
            ))
        }
    };
    Ok(Some(crate::credentials::Settings {
        source,
        shares: shares(c)?,
    }))
}

/// `[credentials.shares]`, which must allow something.
fn shares(
    c: &CredentialsSection,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, ServerError> {
    if c.shares.values().all(Vec::is_empty) {
        return Err(ServerError::Config(
            "credentials.shares: is empty; say which roles each quota share's jobs may act as, e.g. \"team-a\" = [\"arn:aws:iam::123456789012:role/team-a\"] (\"*\" as a share name: every share)".into(),
        ));
    }
    Ok(c.shares.clone())
}

/// `[storage]`: an endpoint is a URL, file roots are absolute directories (taken as they
/// resolve now, so that a link in the operator's own path is followed once, here).
fn resolve_storage(
    s: &StorageSection,
    seconds: impl Fn(&str, Option<f64>, f64) -> Result<Duration, ServerError>,
) -> Result<qm_executor::StorageConfig, ServerError> {
    let bad = |key: &str, msg: String| ServerError::Config(format!("storage.{key}: {msg}"));
    if let Some(e) = &s.endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return Err(bad(
                "endpoint",
                format!("'{e}' is not a URL; write it as http(s)://HOST:PORT, e.g. http://127.0.0.1:9000"),
            ));
        }
    }
    let mut roots = Vec::new();
    for (i, root) in s.file_roots.iter().enumerate() {
        let resolved = root
            .canonicalize()
            .ok()
            .filter(|r| root.is_absolute() && r.is_dir() && r != Path::new("/"))
            .ok_or_else(|| {
                bad(
                    &format!("file_roots[{i}]"),
                    format!("'{}' is not an existing absolute directory other than /; name the directory jobs may read and write with file:// URIs", root.display()),
                )
            })?;
        roots.push(resolved);
    }
    Ok(qm_executor::StorageConfig {
        endpoint: s.endpoint.clone(),
        region: s.region.clone(),
        profile: s.profile.clone(),
        file_roots: roots,
        retry_timeout: Some(seconds("storage.retry_seconds", s.retry_seconds, 30.0)?),
    })
}

/// `[limits]`: every count at least 1, every timeout at least a second.
fn resolve_limits(
    l: &LimitsSection,
    seconds: impl Fn(&str, Option<f64>, f64) -> Result<Duration, ServerError>,
) -> Result<crate::limits::Limits, ServerError> {
    let d = crate::limits::Limits::DEFAULT;
    let count = |key: &str, v: Option<u64>, default: u64| match v {
        Some(0) => Err(ServerError::Config(format!(
            "limits.{key}: is 0; give at least 1 (the default is {default})"
        ))),
        v => Ok(v.unwrap_or(default)),
    };
    let timeout = |key: &str, v: Option<f64>, default: Duration| {
        let t = seconds(&format!("limits.{key}"), v, default.as_secs_f64())?;
        if t < Duration::from_secs(1) {
            return Err(ServerError::Config(format!(
                "limits.{key}: is under a second; give at least 1 (the default is {})",
                default.as_secs()
            )));
        }
        Ok(t)
    };
    Ok(crate::limits::Limits {
        queued_per_share: count(
            "queued_jobs_per_share",
            l.queued_jobs_per_share,
            d.queued_per_share,
        )?,
        queued_per_queue: count(
            "queued_jobs_per_queue",
            l.queued_jobs_per_queue,
            d.queued_per_queue,
        )?,
        max_connections: count(
            "max_connections",
            l.max_connections,
            d.max_connections as u64,
        )?
        .min(1 << 20) as usize,
        header_timeout: timeout(
            "header_timeout_seconds",
            l.header_timeout_seconds,
            d.header_timeout,
        )?,
        body_timeout: timeout(
            "body_timeout_seconds",
            l.body_timeout_seconds,
            d.body_timeout,
        )?,
        log_bytes_per_attempt: count(
            "log_bytes_per_attempt",
            l.log_bytes_per_attempt,
            d.log_bytes_per_attempt,
        )?
        .max(4096),
    })
}

/// `[auth] hosts`: plain DNS names, compared case-insensitively.
fn resolve_hosts(hosts: &[String]) -> Result<Vec<String>, ServerError> {
    hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let ok = !h.is_empty()
                && h.len() <= 253
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
            if ok {
                Ok(h.trim_end_matches('.').to_ascii_lowercase())
            } else {
                Err(ServerError::Config(format!(
                    "auth.hosts[{i}]: '{h}' is not a host name; list names like \"gpu-box.example.com\" (IP addresses need no entry)"
                )))
            }
        })
        .collect()
}

impl SlurmSettings {
    /// The shared directory: as configured, else the data dir.
    pub fn shared_dir_or(&self, data_dir: &Path) -> PathBuf {
        self.shared_dir
            .clone()
            .unwrap_or_else(|| data_dir.to_path_buf())
    }
}

fn resolve_slurm(
    section: &SlurmSection,
    pool: &[PoolEntry],
    seconds: impl Fn(&str, Option<f64>, f64) -> Result<Duration, ServerError>,
) -> Result<SlurmSettings, ServerError> {
    let bad = |key: &str, msg: &str| ServerError::Config(format!("{key}: {msg}"));
    if !pool.is_empty() {
        return Err(bad(
            "executor.pool",
            "describes local instances, but kind = \"slurm\" takes its nodes from Slurm; use [[executor.slurm.instance]] instead",
        ));
    }
    if section.instance.is_empty() {
        return Err(bad(
            "executor.slurm.instance",
            "is empty; add [[executor.slurm.instance]] with instance_type and a partition and/or feature",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, inst) in section.instance.iter().enumerate() {
        let key = |k: &str| format!("executor.slurm.instance[{i}].{k}");
        if inst.instance_type.is_empty() {
            return Err(bad(
                &key("instance_type"),
                "is empty; name a SageMaker instance type, e.g. ml.g5.xlarge",
            ));
        }
        if !seen.insert(inst.instance_type.as_str()) {
            return Err(bad(
                &key("instance_type"),
                "appears twice; give each instance type one entry",
            ));
        }
        if inst.partition.is_none() && inst.feature.is_none() {
            return Err(bad(
                &key("partition"),
                "and feature are both missing; say which nodes provide this type (a partition, a node feature, or both)",
            ));
        }
    }
    let poll = seconds("executor.slurm.poll_seconds", section.poll_seconds, 1.0)?
        .max(Duration::from_millis(100));
    Ok(SlurmSettings {
        shared_dir: section.shared_dir.clone(),
        poll,
        bin_dir: section.bin_dir.clone(),
        account: section.account.clone(),
        extra_sbatch_args: section.extra_sbatch_args.clone(),
        instances: section.instance.clone(),
    })
}

fn read_file(path: &Path) -> Result<FileConfig, ServerError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ServerError::Config(format!("cannot read config file {}: {e}", path.display()))
    })?;
    toml::from_str(&text)
        .map_err(|e| ServerError::Config(format!("config file {}: {e}", path.display())))
}

impl Config {
    /// The driver's periodic work under this config, `since_snapshot` commands after the last
    /// snapshot (0 for a reload, which does not move the snapshot count).
    pub fn cadence(&self, since_snapshot: u64) -> crate::request::Cadence {
        crate::request::Cadence {
            tick: self.tick,
            snapshot_every: self.snapshot_every,
            since_snapshot,
            retention: self.retention,
            delete_job_dirs: self.delete_job_dirs,
            max_lost_attempts: self.max_lost_attempts,
            audit_entries: self.audit_entries,
        }
    }

    /// The bounds new submits must respect under this config.
    pub fn admission(&self) -> crate::request::Admission {
        crate::request::Admission {
            per_share: self.limits.queued_per_share,
            per_queue: self.limits.queued_per_queue,
            file_roots: self.storage.file_roots.clone(),
            runs_images: self.runtime.runs_images(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ServerError> {
        Config::from_text(text)
    }

    #[test]
    fn the_issue_example_parses() {
        let c = parse(
            r#"
region = "us-east-1"
account_id = "123456789012"
[executor]
kind = "local"
stop_grace_seconds = 120
[[executor.pool]]
instance_type = "ml.g5.xlarge"
count = 4
gpus_per_instance = 1
"#,
        )
        .unwrap();
        assert_eq!(c.stop_grace, Duration::from_secs(120));
        assert_eq!(c.pool.len(), 1);
        assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    }

    #[test]
    fn flags_win_over_the_file() {
        let file: FileConfig = toml::from_str("listen = \"127.0.0.1:1\"").unwrap();
        let flags = Flags {
            listen: Some("127.0.0.1:2".into()),
            ..Flags::default()
        };
        assert_eq!(Config::resolve(file, &flags).unwrap().listen.port(), 2);
    }

    #[test]
    fn limits_default_parse_and_refuse_zero_and_sub_second_timeouts() {
        assert_eq!(parse("").unwrap().limits, crate::limits::Limits::DEFAULT);
        let c = parse("[limits]\nqueued_jobs_per_share = 7\nheader_timeout_seconds = 3\n").unwrap();
        assert_eq!(c.limits.queued_per_share, 7);
        assert_eq!(c.limits.header_timeout, Duration::from_secs(3));
        let e = parse("[limits]\nmax_connections = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limits.max_connections") && e.contains("at least 1"),
            "{e}"
        );
        let e = parse("[limits]\nbody_timeout_seconds = 0.5\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limits.body_timeout_seconds") && e.contains("under a second"),
            "{e}"
        );
        let e = parse("[limits]\nqueued_jobs = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("queued_jobs"), "{e}");
    }

    #[test]
    fn the_runtime_storage_and_opt_ml_parse_and_bad_ones_name_the_fix() {
        let c = parse(
            "[executor]\nruntime = \"podman\"\nopt_ml = \"off\"\n[executor.podman]\nglobal_args = [\"--runtime\", \"runc\"]\n\
             [executor.images]\n\"*/pytorch:*\" = \"localhost/pytorch:2.5\"\n[storage]\nendpoint = \"http://127.0.0.1:9000\"\nfile_roots = [\"/tmp\"]",
        )
        .unwrap();
        let qm_executor::Runtime::Podman(p) = &c.runtime else {
            panic!("{:?}", c.runtime)
        };
        assert_eq!(p.global_args, ["--runtime", "runc"]);
        assert_eq!(p.image_for("x/pytorch:1"), "localhost/pytorch:2.5");
        assert_eq!(c.opt_ml, qm_executor::OptMl::Off);
        assert_eq!(c.storage.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(parse("").unwrap().runtime, qm_executor::Runtime::Host);
        for (text, key) in [
            ("[executor]\nruntime = \"docker\"", "executor.runtime"),
            ("[executor.images]\n\"a\" = \"b\"", "executor.runtime"),
            ("[executor]\nopt_ml = \"yes\"", "executor.opt_ml"),
            ("[storage]\nendpoint = \"minio:9000\"", "storage.endpoint"),
            (
                "[storage]\nfile_roots = [\"relative\"]",
                "storage.file_roots[0]",
            ),
            ("[storage]\nfile_roots = [\"/\"]", "storage.file_roots[0]"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let e = parse("account_id = \"12\"").unwrap_err().to_string();
        assert!(e.contains("account_id") && e.contains("12 digits"), "{e}");
        let e = parse("[executor]\nkind = \"pbs\"").unwrap_err().to_string();
        assert!(e.contains("executor.kind"), "{e}");
        let e = parse("[executor]\nkind = \"slurm\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("executor.slurm") && e.contains("instance"),
            "{e}"
        );
        let e = parse("[executor]\nkind = \"slurm\"\n[[executor.slurm.instance]]\ninstance_type = \"ml.g5.xlarge\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("executor.slurm.instance[0].partition"), "{e}");
        let e = parse("[executor.slurm]\nshared_dir = \"/x\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kind = \"slurm\""), "{e}");
        let e = parse("[[executor.pool]]\ninstance_type = \"ml.g5.xlarge\"\ncount = 0")
            .unwrap_err()
            .to_string();
        assert!(e.contains("executor.pool[0].count"), "{e}");
        let e = parse("[retention]\naudit_entries = 0")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("retention.audit_entries") && e.contains("from 1"),
            "{e}"
        );
        assert_eq!(
            parse("").unwrap().audit_entries,
            DEFAULT_AUDIT_ENTRIES as usize
        );
    }

    #[test]
    fn a_slurm_executor_section_parses() {
        let c = parse(
            r#"
[executor]
kind = "slurm"
stop_grace_seconds = 30
[executor.slurm]
shared_dir = "/shared/qm"
poll_seconds = 0.5
account = "ml"
extra_sbatch_args = ["--time=7-0"]
[[executor.slurm.instance]]
instance_type = "ml.p4d.24xlarge"
partition = "gpu"
feature = "a100"
gpus_per_instance = 8
"#,
        )
        .unwrap();
        let s = c.slurm.unwrap();
        assert_eq!(s.poll, Duration::from_millis(500));
        assert_eq!(s.instances[0].gpus_per_instance, 8);
        assert_eq!(s.shared_dir.unwrap(), PathBuf::from("/shared/qm"));
        assert_eq!(c.stop_grace, Duration::from_secs(30));
    }

    #[test]
    fn an_unknown_key_is_refused() {
        let e = toml::from_str::<FileConfig>("regoin = \"x\"").unwrap_err();
        assert!(e.to_string().contains("regoin"), "{e}");
    }
}
