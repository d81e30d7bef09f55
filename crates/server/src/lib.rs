//! The Quartermaster server: the AWS Batch quota-management API over HTTP, on top of the
//! scheduling core, with durable state and an executor that really runs the attempts.
//!
//! Layout, following the request:
//! - [`http`]: routes; decodes requests, hands them to the driver, encodes its typed replies
//!   ([`reply`]); [`respond`]: the AWS error shape.
//! - [`request`]: what the driver is asked and answers; [`facts`]: the plain data the state
//!   hands to accounting, the export, the review and the history; [`archive`]: retired jobs.
//! - [`driver`]: the one task that owns the state; batches requests and executor reports,
//!   commits each batch to the log (`qm_store`) before answering or acting, then starts and
//!   stops attempts through the executor (`qm_executor`).
//! - [`state`]: resources, job records and the core; deterministic, no IO; `ops` holds one
//!   file per resource family.
//! - [`command`]: what is logged, and so what a restart replays.
//! - [`config`]: the TOML file and flags.
//! - [`exec`]: the executor, local processes or a Slurm cluster.
//! - [`history`]: the recent past in memory, for the dashboard and `/qm/v1/history`.
//! - [`metrics`]: `/metrics`, OpenMetrics or Prometheus text, on `prometheus-client`.
//! - `resume`: whether each attempt after a preemption resumed from its checkpoint, from the
//!   steps the attempts reported (`GET /qm/v1/jobs/{job}/attempt`); `verify`: which jobs of
//!   a class that borrows only after a verified resume may borrow.
//! - [`workload`]: a window's finished jobs in the simulator's workload schema
//!   (`GET /qm/v1/workload`, `qm workload export`), from the state and the archive.
//! - [`review`]: the policy review (`GET /qm/v1/review`), a pure function of attempt records,
//!   entitlements and the audit log.
//!
//! - `serve`: the start, in its steps ([`serve()`]), and the stop.
//!
//! Threads: the HTTP server runs on the tokio runtime; the driver runs on its own thread so
//! that SQLite's fsync never stalls request parsing or process reaping.

pub mod archive;
pub mod auth;
pub mod clock;
pub mod command;
pub mod config;
pub mod credentials;
pub mod driver;
pub mod error;
pub mod exec;
pub mod facts;
pub mod history;
pub mod http;
pub mod index;
mod legacy;
pub mod limits;
pub mod metrics;
mod ops;
pub mod reload;
pub mod reply;
pub mod request;
pub mod respond;
mod resume;
pub mod review;
pub mod secret;
mod serve;
pub mod snapshot;
pub mod state;
pub mod usage;
mod verify;
pub mod watch;
pub mod workload;

use qm_executor::slurm::SlurmConfig;
use qm_executor::{default_pools, detect_gpus, LocalConfig, PoolSpec};

use crate::config::SlurmSettings;

pub use config::{Config, Flags};
pub use error::ServerError;
pub use serve::serve;

/// This build: the package version and the commit it was built from (`build.rs`). The store
/// records it beside every batch, so that recovery knows which batches must replay exactly.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("QM_GIT_COMMIT"));

/// This build as the writer of the batches it appends.
pub fn writer() -> qm_store::Writer {
    qm_store::Writer {
        version: VERSION.into(),
        format: command::DECISIONS_FORMAT,
    }
}

/// Capacity of the driver's inbox; a full inbox makes handlers wait (backpressure).
pub const INBOX: usize = 8192;

// The executor's settings under the config: the start (`serve`) builds them, and `qm reload`
// again from the reloaded config.

/// The local executor's settings under `config`, with the pools and GPUs found at start
/// (`qm reload` builds them again from the reloaded config).
pub(crate) fn local_config(
    config: &Config,
    pools: Vec<PoolSpec>,
    gpu_indices: Option<Vec<u32>>,
    found: &reload::Found,
) -> LocalConfig {
    LocalConfig {
        isolation: found.isolation,
        confinement: found.confinement.clone(),
        data_dir: found.work_dir.clone(),
        stop_grace: config.stop_grace,
        pools,
        gpu_indices,
        checkpoint_poll: config.checkpoint_poll,
        log_bytes_per_attempt: Some(config.limits.log_bytes_per_attempt),
        storage: Some(std::sync::Arc::new(storage(config))),
        checkpoint_sync: config.checkpoint_sync,
        opt_ml: config.opt_ml,
        runtime: config.runtime.clone(),
        supervisor: qm_executor::SupervisorCommand::default(),
        gpu_sample: config.gpu_sample,
        orphan_check: qm_executor::supervisor::DEFAULT_ORPHAN_CHECK,
        // Absolute, as every path of a launch is: supervisors outlive the server's working
        // directory's meaning.
        server_dir: (found.work_dir != config.data_dir)
            .then(|| std::fs::canonicalize(&config.data_dir).unwrap_or(config.data_dir.clone())),
    }
}

/// The local pools: configured, else one instance per GPU `nvidia-smi` finds (with the GPUs'
/// indices, in its order), else four simulated instances.
pub(crate) fn local_pools(config: &Config) -> (Vec<PoolSpec>, Option<Vec<u32>>) {
    let mut gpu_indices = None;
    let pools: Vec<PoolSpec> = if config.pool.is_empty() {
        let gpus = detect_gpus();
        let pools = default_pools(&gpus);
        if !gpus.is_empty() {
            // Hand out the indices nvidia-smi reported, in its order, so that each pool's
            // instances get GPUs of the model the pool was named after.
            gpu_indices = Some(gpus.iter().map(|g| g.index).collect());
        }
        if gpus.is_empty() {
            eprintln!(
                "qm: no GPU found (nvidia-smi); offering {} simulated instance(s) that run on the CPU",
                pools.iter().map(|p| p.count).sum::<u32>()
            );
        }
        pools
    } else {
        config.pool.clone()
    };
    (pools, gpu_indices)
}

/// The storage of `[storage]` and the server's AWS environment.
pub(crate) fn storage(config: &Config) -> qm_executor::Storage {
    qm_executor::Storage::new(storage_settings(config))
}

/// `[storage]` resolved against the server's environment.
pub(crate) fn storage_settings(config: &Config) -> qm_executor::StorageSettings {
    let env: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    qm_executor::StorageSettings::resolve(&config.storage, &env)
}

/// GPUs per instance of each local pool's type (what usage reports count).
pub(crate) fn pool_gpus(pools: &[PoolSpec]) -> std::collections::BTreeMap<String, u32> {
    pools
        .iter()
        .map(|p| (p.instance_type.clone(), p.gpus_per_instance))
        .collect()
}

/// GPUs per instance of each Slurm instance type (what usage reports count).
pub(crate) fn slurm_gpus(settings: &SlurmSettings) -> std::collections::BTreeMap<String, u32> {
    settings
        .instances
        .iter()
        .map(|i| (i.instance_type.clone(), i.gpus_per_instance))
        .collect()
}

/// The Slurm executor's settings under `config`.
pub(crate) fn slurm_config(config: &Config, settings: &SlurmSettings, tag: &str) -> SlurmConfig {
    let mut cfg = SlurmConfig::new(
        settings.shared_dir_or(&config.data_dir),
        settings.instances.clone(),
        tag,
    );
    cfg.stop_grace = config.stop_grace;
    cfg.poll = settings.poll;
    cfg.bin_dir = settings.bin_dir.clone();
    cfg.account = settings.account.clone();
    cfg.extra_sbatch_args = settings.extra_sbatch_args.clone();
    cfg
}
