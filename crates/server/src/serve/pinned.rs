//! Settings kept with the data dir, which a later start must keep too (or may change only
//! while no attempt runs): those that shape the logged state, where the executor keeps its
//! attempts, and the Slurm executor's mark on its jobs.

use qm_store::SqliteLog;

use crate::config::Config;
use crate::error::ServerError;

/// Settings that shape the logged state: ARNs are in the logged requests, and the starvation
/// guard and the reclaim and backfill patience change the core's decisions. They are fixed when the data directory is created; a
/// later change would make the replay refuse commands or decide differently.
pub(super) fn pin_settings(log: &mut SqliteLog, config: &Config) -> Result<(), ServerError> {
    let settings = [
        ("region", config.region.clone()),
        ("account_id", config.account_id.clone()),
        (
            "scheduler.reserve_after_seconds",
            config.reserve_after.as_secs().to_string(),
        ),
        (
            "scheduler.reclaim_patience_seconds",
            config.reclaim_patience.as_secs().to_string(),
        ),
        (
            "scheduler.backfill_patience_seconds",
            config.backfill_patience.as_secs().to_string(),
        ),
    ];
    for (key, value) in settings {
        keep_setting(log, key, &value, |pinned| {
            Some(ServerError::Config(format!(
                "{key} is '{value}' but the data dir {} was created with '{pinned}', and its state depends on it; \
                 set {key} = \"{pinned}\" or start with a fresh --data-dir",
                config.data_dir.display()
            )))
        })?;
    }
    Ok(())
}

/// Attempts run where the executor that started them put them: local processes are found by
/// the local executor, Slurm jobs by the Slurm executor under its shared directory. Switching
/// either while attempts are live would lose track of them (and run their jobs twice), so it
/// is refused until they are done; with none live the switch is recorded.
pub(super) fn check_executor_switch(
    log: &mut SqliteLog,
    config: &Config,
    live: usize,
) -> Result<(), ServerError> {
    let kind = if config.slurm.is_some() {
        "slurm"
    } else {
        "local"
    };
    let shared = config.slurm.as_ref().map(|s| {
        let dir = s.shared_dir_or(&config.data_dir);
        std::fs::canonicalize(&dir)
            .unwrap_or(dir)
            .to_string_lossy()
            .into_owned()
    });
    let settings = [
        ("executor.kind", Some(kind.to_string())),
        ("executor.slurm.shared_dir", shared),
    ];
    for (key, value) in settings {
        let Some(value) = value else { continue };
        keep_setting(log, key, &value, |old| {
            (live > 0).then(|| {
                ServerError::Config(format!(
                    "{key} is '{value}' but {live} attempt(s) started with '{old}' are still running; \
                     start once more with {key} = \"{old}\" and let them finish (or terminate them), then switch"
                ))
            })
        })?;
    }
    Ok(())
}

/// Keeps where job directories are while attempts run there: a moved work dir (a new
/// `[executor] work_dir`, or an upgrade that moves a closed data dir's jobs to
/// `/var/lib/qm-jobs`) would leave their supervisors unfound and run their jobs twice. Earlier
/// releases kept job directories in the data dir.
pub(super) fn pin_work_dir(
    log: &mut SqliteLog,
    config: &Config,
    work_dir: &std::path::Path,
    live: usize,
) -> Result<(), ServerError> {
    const KEY: &str = "executor.work_dir";
    let canonical = |p: &std::path::Path| {
        std::fs::canonicalize(p)
            .unwrap_or_else(|_| p.to_path_buf())
            .display()
            .to_string()
    };
    let new = canonical(work_dir);
    let old = log
        .meta(KEY)?
        .unwrap_or_else(|| canonical(&config.data_dir));
    if old != new && live > 0 {
        return Err(ServerError::Config(format!(
            "executor.work_dir: job directories would move from {old} to {new} while {live} attempt(s) run there, whose supervisors would then not be found and whose jobs would run twice. Until they end, set [executor] work_dir = \"{old}\" (with isolation = \"none\" if job uids cannot reach it), or stop them first (`qm drain --requeue`, then restart)"
        )));
    }
    Ok(log.set_meta(KEY, &new)?)
}

/// This server's mark on its Slurm jobs, drawn once per data dir and kept in the store, so
/// that a restarted server recognises its jobs and leaves other servers' alone.
pub(super) fn slurm_tag(log: &mut SqliteLog) -> Result<String, ServerError> {
    const KEY: &str = "executor.slurm.tag";
    if let Some(tag) = log.meta(KEY)? {
        return Ok(tag);
    }
    let tag: String = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    log.set_meta(KEY, &tag)?;
    Ok(tag)
}

/// Keeps `value` as the setting `key` stored with the data dir. A different stored value is
/// refused with the error `refuse` gives for it, or replaced when it gives none.
fn keep_setting(
    log: &mut SqliteLog,
    key: &str,
    value: &str,
    refuse: impl Fn(&str) -> Option<ServerError>,
) -> Result<(), ServerError> {
    match log.meta(key)? {
        Some(stored) if stored == value => Ok(()),
        Some(stored) => match refuse(&stored) {
            Some(e) => Err(e),
            None => Ok(log.set_meta(key, value)?),
        },
        None => Ok(log.set_meta(key, value)?),
    }
}
