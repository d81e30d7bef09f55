//! Retention: a finished job stays describable for `[retention] finished_jobs_days`, then
//! leaves the state (and with it memory, snapshots and the core) for the archive
//! ([`crate::archive`]). Which jobs leave is a logged command naming them, so a replay
//! retires exactly the same ones; the driver archives them before it logs the command.
//! Audit entries beyond `[retention] audit_entries` leave the same way, oldest first.

use qm_api::ApiError;

use crate::archive::{ArchivedAttempt, ArchivedAudit, ArchivedJob};
use crate::reply::{reply, Reply, Retired};
use crate::state::{AttemptRec, JobRec, State};

impl ArchivedAttempt {
    /// The archive's record of attempt `a`.
    pub fn of(a: &AttemptRec) -> Self {
        ArchivedAttempt {
            number: a.number,
            instance_type: a.instance_type.clone(),
            count: a.count,
            started_at: a.started_at,
            running_at: a.running_at,
            stopped_at: a.stopped_at,
            preempted: a.preempted,
            status_reason: a.status_reason.clone().or_else(|| a.stop_reason.clone()),
            stop_at: a.stop_at,
            checkpoint_at: a.checkpoint_at,
            preempted_for: a.preempted_for.clone(),
            steps: a.steps,
            checkpoints: a.checkpoints,
            usage: a.usage,
        }
    }
}

impl ArchivedJob {
    /// The archive's record of `rec`: its ended attempts (a retired job has no other).
    pub fn of(rec: &JobRec) -> Self {
        let mut attempts: Vec<ArchivedAttempt> = rec
            .attempts
            .iter()
            .chain(rec.preempted.iter())
            .map(ArchivedAttempt::of)
            .collect();
        attempts.sort_by_key(|a| a.number);
        attempts.dedup_by_key(|a| a.number);
        ArchivedJob {
            job_id: rec.id.clone(),
            job_name: rec.request.job_name.clone(),
            job_queue: rec.queue.to_string(),
            quota_share_name: rec.share.to_string(),
            status: rec.status.as_str().to_string(),
            status_reason: rec.status_reason.clone(),
            scheduling_priority: rec.priority,
            created_at: rec.created_at,
            stopped_at: rec.stopped_at,
            attempts,
            preempted_count: rec.preempted_count,
            tags: rec.tags.clone(),
            principal: rec.principal.clone(),
        }
    }
}

impl State {
    /// The oldest audit entries beyond the newest `keep`, numbered, at most `max` of them.
    pub fn audit_retirable(&self, keep: usize, max: usize) -> Vec<ArchivedAudit> {
        let over = self.audit.len().saturating_sub(keep).min(max);
        self.audit[..over]
            .iter()
            .enumerate()
            .map(|(i, e)| ArchivedAudit {
                seq: self.audit_first + i as u64,
                entry: e.clone(),
            })
            .collect()
    }

    /// Drops the audit entries numbered below `upto`.
    pub(crate) fn retire_audit(&mut self, upto: u64) -> Result<Reply, ApiError> {
        let n = upto
            .saturating_sub(self.audit_first)
            .min(self.audit.len() as u64);
        self.audit.drain(..n as usize);
        self.audit_first += n;
        reply(Retired { retired: n })
    }

    /// The audit entries numbered from `start` (or the oldest kept, if those were retired),
    /// at most `max` of them.
    pub(crate) fn audit_page(&self, start: usize, max: usize) -> qm_api::qm::AuditLog {
        let first = self.audit_first as usize;
        let from = start.saturating_sub(first).min(self.audit.len());
        let to = from.saturating_add(max).min(self.audit.len());
        qm_api::qm::AuditLog {
            entries: self.audit[from..to].to_vec(),
            next_token: (to < self.audit.len()).then(|| (first + to).to_string()),
            archived: self.audit_first,
        }
    }

    /// Finished jobs that stopped at or before `before` (epoch ms), oldest first, at most
    /// `max` of them.
    pub fn retirable(&self, before: i64, max: usize) -> Vec<&JobRec> {
        self.finished
            .range(..=(before, qm_core::JobId::MAX))
            .take(max)
            .filter_map(|(_, core)| self.jobs.get(core).map(|r| &**r))
            .collect()
    }

    /// Removes the named jobs from the state; a job that is unknown or not finished is left
    /// alone (it cannot be: the driver names only retirable jobs, but a replay must not fail).
    pub(crate) fn retire_jobs(&mut self, ids: &[String]) -> Result<Reply, ApiError> {
        let mut retired = 0u64;
        for id in ids {
            let Some(&core) = self.by_id.get(id) else {
                continue;
            };
            if !self.core.forget(core) {
                continue;
            }
            let rec = self.jobs.remove(&core).expect("by_id names a job record");
            self.by_status.remove(&rec);
            self.by_id.remove(id);
            self.finished
                .remove(&(rec.stopped_at.unwrap_or(rec.created_at), core));
            if let Some(token) = &rec.request.client_token {
                if self.tokens.get(token) == Some(&core) {
                    self.tokens.remove(token);
                }
            }
            retired += 1;
        }
        reply(Retired { retired })
    }
}
