//! The executor started: local processes (isolated and confined as the config asks and the
//! machine allows) or a Slurm cluster, with the banner's lines about what jobs can reach.

use qm_executor::slurm::SlurmExecutor;
use qm_executor::LocalExecutor;
use qm_store::SqliteLog;
use tokio::sync::mpsc;

use crate::config::{self, Config, SlurmSettings};
use crate::error::ServerError;
use crate::{credentials, exec, reload};
use crate::{local_config, local_pools, pool_gpus, slurm_config, slurm_gpus, storage};

use super::pinned;

/// A started executor and what the banner, the HTTP layer and reloads need from its start.
pub(super) struct StartedExecutor {
    pub(super) executor: exec::Executor,
    /// A line per pool or instance type.
    pub(super) instances: Vec<String>,
    /// GPUs per instance type.
    pub(super) gpus: std::collections::BTreeMap<String, u32>,
    /// The banner's `jobs:` line (and more).
    pub(super) jobs_line: String,
    /// What a reload builds the executor's settings from again.
    pub(super) found: reload::Found,
}

/// Starts the executor `config` names, unless it is not the one the `live` attempts started
/// under; a local one keeps where its job directories are.
pub(super) fn start(
    config: &Config,
    log: &mut SqliteLog,
    live: usize,
    events_tx: mpsc::UnboundedSender<qm_executor::ExecEvent>,
) -> Result<StartedExecutor, ServerError> {
    pinned::check_executor_switch(log, config, live)?;
    let started = match &config.slurm {
        None => local_executor(config, events_tx)?,
        Some(settings) => slurm_executor(config, settings, log, events_tx)?,
    };
    if config.slurm.is_none() {
        pinned::pin_work_dir(log, config, &started.found.work_dir, live)?;
    }
    Ok(started)
}

/// The local executor of `config`: its pools (configured, else detected GPUs, else four
/// simulated instances) and a line per pool for the banner.
fn local_executor(
    config: &Config,
    events_tx: mpsc::UnboundedSender<qm_executor::ExecEvent>,
) -> Result<StartedExecutor, ServerError> {
    let (pools, gpu_indices) = local_pools(config);
    let (isolation, work_dir, mut jobs_line) = job_isolation(config)?;
    if let Some(uids) = isolation.filter(|_| !config.metadata_allowed) {
        let line = credentials::fence_metadata(uids)
            .map_err(|e| ServerError::Config(format!("credentials.metadata: {e}")))?;
        jobs_line = format!("{jobs_line}\n{line}");
    }
    let (confinement, confined_line) = job_confinement(config)?;
    let found = reload::Found {
        detected: (pools.clone(), gpu_indices.clone()),
        isolation,
        work_dir,
        confinement,
        slurm_tag: None,
    };
    let jobs_line = format!("{jobs_line}\n{confined_line}");
    let cfg = local_config(config, pools.clone(), gpu_indices, &found);
    let storage_line = cfg
        .storage
        .as_ref()
        .map(|s| s.settings().describe())
        .unwrap_or_default();
    let executor =
        LocalExecutor::new(cfg, events_tx).map_err(|e| ServerError::Executor(e.to_string()))?;
    let opt_ml = if let qm_executor::Runtime::Podman(p) = &config.runtime {
        format!(
            "runs each job's TrainingImage with {} ({} image mapping(s))",
            p.program.display(),
            p.images.len()
        )
    } else if executor.opt_ml() {
        "each attempt sees its job directory at /opt/ml".to_string()
    } else {
        "no /opt/ml (not root, or [executor] opt_ml = \"off\"): jobs use the SM_* paths".to_string()
    };
    let jobs_line = format!("{jobs_line}\nsagemaker: {opt_ml}; {storage_line}");

    let described = pools
        .iter()
        .map(|p| {
            format!(
                "{} x {} ({} GPU each)",
                p.count, p.instance_type, p.gpus_per_instance
            )
        })
        .collect();
    let gpus = pool_gpus(&pools);
    Ok(StartedExecutor {
        executor: exec::Executor::Local(executor),
        instances: described,
        gpus,
        jobs_line,
        found,
    })
}

/// The uids attempts run under, if they run apart from the server, where their job
/// directories go, and the banner's line saying what a job can reach. Where the isolation the
/// config asks for cannot be set up, the server refuses to start: jobs run as the server's
/// user only when the config says so (or the server is not root and `isolation = "auto"`).
fn job_isolation(
    config: &Config,
) -> Result<(Option<qm_executor::JobUids>, std::path::PathBuf, String), ServerError> {
    let range = config.job_uids;
    let shared = |why: &str| {
        format!(
            "jobs: run as this server's user (uid {}): {why}; a job can then read and write everything this user can, the data dir's database and keys included, and signal the server (docs/security.md)",
            nix::unistd::geteuid()
        )
    };
    let unisolated_dir = || config.work_dir.clone().unwrap_or(config.data_dir.clone());
    let root = nix::unistd::geteuid().is_root();
    match config.isolation {
        config::Isolation::None => Ok((
            None,
            unisolated_dir(),
            shared("[executor] isolation = \"none\""),
        )),
        config::Isolation::Auto if !root => Ok((
            None,
            unisolated_dir(),
            shared("the server does not run as root, so it cannot start jobs under other uids"),
        )),
        _ => {
            let dir = qm_executor::isolation::reachable_work_dir(&config.data_dir, config.work_dir.as_deref())
                .map_err(|why| ServerError::Config(format!(
                    "executor.isolation: attempts cannot run under uids of their own: {why}. Set [executor] work_dir to a directory that other users can traverse to (e.g. /var/lib/qm-jobs/<name>), or set [executor] isolation = \"none\" to run jobs as this server's user"
                )))?;
            let line = format!(
                "jobs: each attempt runs under a uid of its own ({}-{}), its directory under {}: it cannot read the data dir's database and keys or other jobs' directories, nor signal the server or other jobs",
                range.first, range.last, dir.join("jobs").display()
            );
            Ok((Some(range), dir, line))
        }
    }
}

/// Where attempts' control groups go, if they are confined, and the banner's line saying
/// what a job may use. Refuses where `config` requires confinement and it cannot be set up.
fn job_confinement(
    config: &Config,
) -> Result<(Option<qm_executor::cgroup::Hierarchy>, String), ServerError> {
    use qm_executor::cgroup::{self, Found};
    let unconfined = |why: &str| {
        format!("confinement: none ({why}): a job can use every GPU, all the memory and every CPU of this machine (docs/security.md)")
    };
    if config.confinement == config::Confinement::None {
        return Ok((None, unconfined("[executor] confinement = \"none\"")));
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let key = cgroup::key_for(&config.data_dir);
    let found = cgroup::detect(
        &read("/proc/self/mountinfo"),
        &read("/proc/self/cgroup"),
        &key,
    );
    let required =
        config.confinement == config::Confinement::Cgroup || nix::unistd::geteuid().is_root();
    let prepared = match found {
        Found::Usable(h) => h.prepare().map(|()| h).map_err(|e| e.to_string()),
        Found::Unusable(why) => Err(why),
    };
    // GPU nodes unfenced are a reason to refuse where confinement is required; elsewhere (a
    // server that is not root) the memory, CPU and process limits still hold.
    let prepared = prepared.and_then(|h| match h.fence_probe() {
        Ok(()) => Ok(h),
        Err(e) if required => Err(e.to_string()),
        Err(e) => {
            tracing::warn!("{e}");
            Ok(h.without_device_fence())
        }
    });
    match prepared {
        Ok(h) => {
            let line = format!("confinement: each host of an attempt runs in a control group of its own ({}): its instance's GPUs, memory, CPUs and processes, no more", h.describe());
            Ok((Some(h), line))
        }
        Err(why) if required => Err(ServerError::Config(format!(
            "executor.confinement: attempts cannot run in control groups of their own: {why}. Mount cgroup v2 (or the v1 memory, pids, cpu, devices and freezer hierarchies) and run the server where it may make groups (as root, or in a delegated group: systemd Delegate=yes), or set [executor] confinement = \"none\" to run jobs unconfined"
        ))),
        Err(why) => Ok((None, unconfined(&format!("not root, and {why}")))),
    }
}

/// The Slurm executor of `config` and a line per instance type for the banner.
fn slurm_executor(
    config: &Config,
    settings: &SlurmSettings,
    log: &mut SqliteLog,
    events_tx: mpsc::UnboundedSender<qm_executor::ExecEvent>,
) -> Result<StartedExecutor, ServerError> {
    let tag = pinned::slurm_tag(log)?;
    let cfg = slurm_config(config, settings, &tag);
    let storage = storage(config);
    let storage_line = storage.settings().describe();
    let slurm = SlurmExecutor::with_storage(cfg, events_tx, Some(std::sync::Arc::new(storage)))
        .map_err(|e| ServerError::Executor(e.to_string()))?;
    let described = settings
        .instances
        .iter()
        .map(|i| {
            let mut at = Vec::new();
            if let Some(p) = &i.partition {
                at.push(format!("partition {p}"));
            }
            if let Some(f) = &i.feature {
                at.push(format!("feature {f}"));
            }
            format!(
                "{} = Slurm nodes of {} ({} GPU each)",
                i.instance_type,
                at.join(", "),
                i.gpus_per_instance
            )
        })
        .collect();
    let gpus = slurm_gpus(settings);
    let jobs_line = format!("jobs: run by Slurm as this server's user, in the directories of executor.slurm.shared_dir (docs/slurm.md)\n\
         sagemaker: channels, checkpoints and models transferred by this server into and out of the shared directory (no /opt/ml on the nodes); {storage_line}");
    Ok(StartedExecutor {
        executor: exec::Executor::Slurm(slurm),
        instances: described,
        gpus,
        jobs_line,
        found: reload::Found {
            detected: (Vec::new(), None),
            isolation: None,
            work_dir: config.data_dir.clone(),
            confinement: None,
            slurm_tag: Some(tag),
        },
    })
}
