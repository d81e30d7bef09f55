//! Reload (SIGHUP, `qm reload`): the config file is read again and what can change while the
//! server runs is applied — pools and instances (grown at once; a removed instance that runs
//! an attempt goes when the attempt ends), stop grace, scans, retention, limits on queued jobs
//! and logs, storage, the Slurm executor's options, the driver's cadence. What takes a restart
//! (the listen address, the data dir, the executor's kind, isolation, TLS, the scheduler's
//! pinned settings...) is refused, naming each key; a refused reload (a key that takes a
//! restart, a file that does not parse or check, an executor change it cannot make) changes
//! nothing and says why. (One that fails after the executor took it — the server is stopping —
//! leaves the executor's part applied and the driver's not.) A capacity change reaches the log as `SetCapacity` (the executor
//! reports it), so replays stay deterministic; every reload is audited.
//!
//! Settings of a running attempt stay as it was launched with; new attempts take the new ones.
//! The GPUs per instance type that usage reports count are added to (never taken from).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};

use qm_api::qm::ReloadResponse;
use qm_api::ApiError;
use qm_executor::{JobUids, PoolSpec, Runtime};
use tokio::sync::{mpsc, oneshot, Mutex};

use crate::command::AuditEntry;
use crate::config::{Config, Flags};
use crate::driver::Envelope;
use crate::exec::Executor;
use crate::request::{Reloaded, Request};

/// One configuration key: how to read it off a [`Config`] (compared, never shown: values may
/// hold secrets) and whether a running server can take a change of it.
struct Key {
    name: &'static str,
    live: bool,
    of: fn(&Config) -> String,
}

macro_rules! key {
    ($name:literal, $live:literal, |$c:ident| $e:expr) => {
        Key {
            name: $name,
            live: $live,
            of: |$c: &Config| format!("{:?}", $e),
        }
    };
}

/// Every key, once: the single list of what a reload may change.
#[expect(
    clippy::too_many_lines,
    reason = "the table of reloadable keys, one line per key"
)]
fn keys() -> Vec<Key> {
    vec![
        key!("listen", false, |c| c.listen),
        key!("data_dir", false, |c| c.data_dir),
        key!("region", false, |c| c.region),
        key!("account_id", false, |c| c.account_id),
        key!("executor.kind", false, |c| c.slurm.is_some()),
        key!("executor.isolation", false, |c| c.isolation),
        key!("executor.work_dir", false, |c| c.work_dir),
        key!("executor.job_uids", false, |c| c.job_uids),
        key!("executor.confinement", false, |c| c.confinement),
        key!("credentials", false, |c| c.credentials),
        key!("credentials.metadata", false, |c| c.metadata_allowed),
        key!("executor.opt_ml", false, |c| c.opt_ml),
        key!("executor.runtime", false, |c| c.runtime.runs_images()),
        key!("executor.slurm.shared_dir", false, |c| c
            .slurm
            .as_ref()
            .map(|s| &s.shared_dir)),
        key!("executor.slurm.bin_dir", false, |c| c
            .slurm
            .as_ref()
            .map(|s| &s.bin_dir)),
        key!("scheduler.reserve_after_seconds", false, |c| c
            .reserve_after),
        key!("scheduler.reclaim_patience_seconds", false, |c| c
            .reclaim_patience),
        key!("scheduler.backfill_patience_seconds", false, |c| c
            .backfill_patience),
        key!("scheduler.history_sample_seconds", false, |c| c
            .history_sample),
        key!("--no-auth", false, |c| c.auth),
        key!("auth.hosts", false, |c| c.hosts),
        key!("auth.public_metrics", false, |c| c.public_metrics),
        key!("tls", false, |c| c.tls),
        key!("limits.max_connections", false, |c| c
            .limits
            .max_connections),
        key!("limits.header_timeout_seconds", false, |c| c
            .limits
            .header_timeout),
        key!("limits.body_timeout_seconds", false, |c| c
            .limits
            .body_timeout),
        key!("executor.pool", true, |c| c.pool),
        key!("executor.stop_grace_seconds", true, |c| c.stop_grace),
        key!("executor.checkpoint_poll_seconds", true, |c| c
            .checkpoint_poll),
        key!("executor.checkpoint_sync_seconds", true, |c| c
            .checkpoint_sync),
        key!("executor.gpu_sample_seconds", true, |c| c.gpu_sample),
        key!("executor.max_lost_attempts", true, |c| c.max_lost_attempts),
        key!("executor.podman", true, |c| match &c.runtime {
            Runtime::Podman(p) => Some((&p.program, &p.global_args, &p.run_args)),
            Runtime::Host => None,
        }),
        key!("executor.images", true, |c| match &c.runtime {
            Runtime::Podman(p) => Some(&p.images),
            Runtime::Host => None,
        }),
        key!("executor.slurm", true, |c| c.slurm.as_ref().map(|s| (
            &s.poll,
            &s.account,
            &s.extra_sbatch_args,
            &s.instances
        ))),
        key!("scheduler.tick_seconds", true, |c| c.tick),
        key!("state.snapshot_every_commands", true, |c| c.snapshot_every),
        key!("retention.finished_jobs_days", true, |c| c.retention),
        key!("retention.delete_job_dirs", true, |c| c.delete_job_dirs),
        key!("retention.audit_entries", true, |c| c.audit_entries),
        key!("limits.queued_jobs_per_share", true, |c| c
            .limits
            .queued_per_share),
        key!("limits.queued_jobs_per_queue", true, |c| c
            .limits
            .queued_per_queue),
        key!("limits.log_bytes_per_attempt", true, |c| c
            .limits
            .log_bytes_per_attempt),
        key!("storage", true, |c| c.storage),
    ]
}

/// The keys whose values differ: (those that take a restart, those a reload applies).
fn differences(old: &Config, new: &Config) -> (Vec<&'static str>, Vec<&'static str>) {
    let mut restart = Vec::new();
    let mut live = Vec::new();
    for k in keys() {
        if (k.of)(old) != (k.of)(new) {
            // The Slurm executor transfers through the storage it was started with.
            if k.live && !(k.name == "storage" && new.slurm.is_some()) {
                live.push(k.name);
            } else {
                restart.push(k.name);
            }
        }
    }
    (restart, live)
}

/// What start-up found that a reload builds the executor's settings from again.
pub struct Found {
    /// The local pools start-up laid out and their GPUs: detected ones, when the config named
    /// none (a reload uses them while it still names none).
    pub detected: (Vec<PoolSpec>, Option<Vec<u32>>),
    /// The uids attempts run under, if apart from the server.
    pub isolation: Option<JobUids>,
    /// Where the local executor keeps job directories (`[executor] work_dir`, the data dir, or
    /// the fallback for isolated jobs).
    pub work_dir: std::path::PathBuf,
    /// Where attempts' control groups go, if they are confined.
    pub confinement: Option<qm_executor::cgroup::Hierarchy>,
    /// The Slurm executor's tag.
    pub slurm_tag: Option<String>,
}

/// Reloads, one at a time.
pub struct Reloader {
    current: Mutex<Current>,
}

struct Current {
    flags: Flags,
    config: Config,
    executor: Executor,
    found: Found,
    /// GPUs per instance type, which the usage report and the review read.
    gpus: Arc<RwLock<BTreeMap<String, u32>>>,
    /// To the driver; weak, so that the driver still ends once the HTTP server is gone.
    requests: mpsc::WeakSender<Envelope>,
}

impl Reloader {
    /// A reloader of the server started with `flags` and `config`.
    pub fn new(
        flags: Flags,
        config: Config,
        executor: Executor,
        found: Found,
        gpus: Arc<RwLock<BTreeMap<String, u32>>>,
        requests: mpsc::WeakSender<Envelope>,
    ) -> Self {
        Reloader {
            current: Mutex::new(Current {
                flags,
                config,
                executor,
                found,
                gpus,
                requests,
            }),
        }
    }

    /// Reads the config file again and applies it, or changes nothing and says why.
    pub async fn reload(&self, actor: &str) -> Result<ReloadResponse, ApiError> {
        let mut current = self.current.lock().await;
        let path = current
            .flags
            .config
            .clone()
            .unwrap_or_else(|| PathBuf::from("(no --config: embedded defaults)"));
        let kept = "the configuration in force is kept";
        let new = Config::load(&current.flags)
            .map_err(|e| ApiError::client(format!("{}: {e}; {kept}", path.display())))?;
        let (restart, changed) = differences(&current.config, &new);
        if !restart.is_empty() {
            return Err(ApiError::client(format!(
                "{}: {} cannot change while the server runs (restart it to apply; running jobs go on); {kept}",
                path.display(),
                restart.join(", ")
            )));
        }
        let gpus = current
            .apply_to_executor(&new)
            .await
            .map_err(|e| ApiError::client(format!("{}: {e}; {kept}", path.display())))?;
        current.tell_driver(&new, actor, &path, &changed).await?;
        current.config = new;
        // Added to, never taken from: the attempts of a type the reload removed keep their
        // GPU-hours in reports.
        current
            .gpus
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(gpus);
        Ok(ReloadResponse {
            config_file: current
                .flags
                .config
                .as_ref()
                .map(|p| p.display().to_string()),
            changed: changed.iter().map(|k| k.to_string()).collect(),
            capacity: current.executor.capacity(),
        })
    }
}

impl Current {
    /// Applies `new` to the executor; the GPUs per instance type of what it now offers.
    async fn apply_to_executor(
        &self,
        new: &Config,
    ) -> Result<BTreeMap<String, u32>, qm_executor::ExecError> {
        match (&self.executor, &new.slurm) {
            (Executor::Local(e), _) => {
                let (pools, gpus) = if !new.pool.is_empty() {
                    (new.pool.clone(), None)
                } else if self.config.pool.is_empty() {
                    // What start-up detected: the same machine, the same GPUs.
                    self.found.detected.clone()
                } else {
                    // The configured pools are gone: detected, as a start would.
                    crate::local_pools(new)
                };
                let per_type = crate::pool_gpus(&pools);
                e.reload(crate::local_config(new, pools, gpus, &self.found))?;
                Ok(per_type)
            }
            (Executor::Slurm(e), Some(settings)) => {
                let tag = self.found.slurm_tag.clone().unwrap_or_default();
                e.reload(crate::slurm_config(new, settings, &tag)).await?;
                Ok(crate::slurm_gpus(settings))
            }
            // Refused above: executor.kind changed.
            (Executor::Slurm(_), None) => Ok(BTreeMap::new()),
        }
    }

    async fn tell_driver(
        &self,
        new: &Config,
        actor: &str,
        path: &std::path::Path,
        changed: &[&str],
    ) -> Result<(), ApiError> {
        let summary = match changed {
            [] => format!("{}: nothing changed", path.display()),
            keys => format!("{}: {}", path.display(), keys.join(", ")),
        };
        let reloaded = Reloaded {
            cadence: new.cadence(0),
            admission: new.admission(),
            audit: AuditEntry {
                at: 0,
                actor: actor.to_string(),
                action: "reload".into(),
                summary: summary.clone(),
                details: summary,
                tags: None,
            },
        };
        let stopping = || ApiError::server("the server is stopping; the reload was not recorded");
        let requests = self.requests.upgrade().ok_or_else(stopping)?;
        let (reply, answer) = oneshot::channel();
        requests
            .send(Envelope {
                request: Request::Reload(Box::new(reloaded)),
                reply,
            })
            .await
            .map_err(|_| stopping())?;
        answer.await.map_err(|_| stopping())?.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PODMAN: &str =
        "[executor]\nruntime = \"podman\"\n[executor.podman]\nrun_args = [\"--net=host\"]\n\
                          [executor.images]\n\"*/pytorch:*\" = \"localhost/pytorch:2.5\"\n";

    #[test]
    fn a_changed_image_mapping_and_changed_podman_options_are_named_apart() {
        let old = Config::from_text(PODMAN).unwrap();
        let images = Config::from_text(&PODMAN.replace("2.5", "2.6")).unwrap();
        assert_eq!(
            differences(&old, &images),
            (vec![], vec!["executor.images"])
        );
        let options = Config::from_text(&PODMAN.replace("--net=host", "--net=none")).unwrap();
        assert_eq!(
            differences(&old, &options),
            (vec![], vec!["executor.podman"])
        );
        let host = Config::from_text("").unwrap();
        assert_eq!(differences(&old, &host).0, vec!["executor.runtime"]);
    }
}
