//! Retention: a finished job stays describable for `[retention] finished_jobs_days`, then
//! leaves the state (and with it memory, snapshots and the core) for the archive
//! ([`crate::archive`]). Which jobs leave is a logged command naming them, so a replay
//! retires exactly the same ones; the driver archives them before it logs the command.
//! Audit entries beyond `[retention] audit_entries` leave the same way, oldest first.

use qm_api::ApiError;
use serde::{Deserialize, Serialize};

use crate::state::{body, AttemptRec, JobRec, State};

/// One retired job, as the archive keeps it: what accounting needs, in a documented shape
/// (docs/server.md, "Retention and archive").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedJob {
    /// The job id.
    pub job_id: String,
    /// The job name.
    pub job_name: String,
    /// Queue name.
    pub job_queue: String,
    /// Quota share name.
    pub quota_share_name: String,
    /// SUCCEEDED or FAILED.
    pub status: String,
    /// Final status reason.
    pub status_reason: Option<String>,
    /// Scheduling priority at the end.
    pub scheduling_priority: i32,
    /// Submitted (epoch ms).
    pub created_at: i64,
    /// Finished (epoch ms).
    pub stopped_at: Option<i64>,
    /// Every attempt, preempted ones included (the latest `PREEMPTED_WINDOW` of those).
    pub attempts: Vec<ArchivedAttempt>,
    /// Times preempted in all.
    pub preempted_count: u32,
    /// The job's tags.
    pub tags: std::collections::BTreeMap<String, String>,
    /// Who submitted it, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// One attempt of a retired job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchivedAttempt {
    /// 1, 2, ... in start order.
    pub number: u32,
    /// Instance type.
    pub instance_type: String,
    /// Instances held.
    pub count: u32,
    /// Capacity held from (epoch ms).
    pub started_at: i64,
    /// Processes running from, when they got that far.
    pub running_at: Option<i64>,
    /// Capacity released at.
    pub stopped_at: Option<i64>,
    /// Ended by a preemption.
    pub preempted: bool,
    /// How it ended.
    pub status_reason: Option<String>,
    /// When the core decided to stop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_at: Option<i64>,
    /// The last checkpoint it reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_at: Option<i64>,
    /// For a preemption: the share and the job it was preempted for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_for: Option<(String, String)>,
    /// The steps it reported in its progress file (first, last, last checkpoint; absent in
    /// older archives): the policy review classifies the resumes of retired jobs from them as
    /// `resume.rs` does for live ones, and the workload export counts recomputed work.
    #[serde(default, skip_serializing_if = "qm_executor::Steps::is_empty")]
    pub steps: qm_executor::Steps,
    /// Checkpoints it reported (absent in older archives, and when none).
    #[serde(default, skip_serializing_if = "crate::workload::is_zero")]
    pub checkpoints: u32,
    /// What it used (absent in older archives, and where the executor did not count it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<qm_executor::Usage>,
}

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
            job_queue: rec.queue.clone(),
            quota_share_name: rec.share.clone(),
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

    /// What usage accounting needs of it.
    pub fn usage(&self) -> crate::usage::UsageJob {
        crate::usage::UsageJob {
            id: self.job_id.clone(),
            queue: self.job_queue.clone(),
            share: self.quota_share_name.clone(),
            principal: self.principal.clone(),
            created_at: self.created_at,
            attempts: self
                .attempts
                .iter()
                .map(|a| crate::usage::UsageAttempt {
                    instance_type: a.instance_type.clone(),
                    count: a.count,
                    started_at: a.started_at,
                    running_at: a.running_at,
                    stopped_at: a.stopped_at,
                    stop_at: a.stop_at,
                    checkpoint_at: a.checkpoint_at,
                    preempted: a.preempted,
                    preempted_for: a.preempted_for.clone(),
                    usage: a.usage,
                })
                .collect(),
        }
    }
}

/// One retired audit entry, as the archive keeps it: its number in the log (a crash between
/// archiving and retiring may write an entry twice; the number tells the copies apart).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ArchivedAudit {
    /// The entry's number (the first entry ever recorded is 0).
    pub seq: u64,
    /// The entry.
    #[serde(flatten)]
    pub entry: crate::command::AuditEntry,
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
    pub(crate) fn retire_audit(&mut self, upto: u64) -> Result<Vec<u8>, ApiError> {
        let n = upto
            .saturating_sub(self.audit_first)
            .min(self.audit.len() as u64);
        self.audit.drain(..n as usize);
        self.audit_first += n;
        body(&serde_json::json!({ "retired": n }))
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
            .range(..=(before, u64::MAX))
            .take(max)
            .filter_map(|(_, core)| self.jobs.get(core).map(|r| &**r))
            .collect()
    }

    /// Removes the named jobs from the state; a job that is unknown or not finished is left
    /// alone (it cannot be: the driver names only retirable jobs, but a replay must not fail).
    pub(crate) fn retire_jobs(&mut self, ids: &[String]) -> Result<Vec<u8>, ApiError> {
        let mut retired = 0u64;
        for id in ids {
            let Some(&core) = self.by_id.get(id) else {
                continue;
            };
            if !self.core.forget(qm_core::JobId(core)) {
                continue;
            }
            let rec = self.jobs.remove(&core).expect("by_id names a job record");
            self.by_status.remove(&rec);
            self.by_id.remove(id);
            self.finished
                .remove(&(rec.stopped_at.unwrap_or(rec.created_at), core));
            if let Some(token) = &rec.request.client_token {
                if self.tokens.get(token).is_some_and(|(c, _)| *c == core) {
                    self.tokens.remove(token);
                }
            }
            retired += 1;
        }
        body(&serde_json::json!({ "retired": retired }))
    }
}
