//! The wire types of the policy review (`GET /qm/v1/review`, `qm report review`): what the
//! team brings to its quarterly quota review — whether jobs that borrowed finished later than
//! jobs that did not, what reclaiming cost, how long owners waited for capacity they had lent,
//! how well jobs recovered from preemption, and how stable priorities and policies were.
//!
//! Every key is defined in docs/review.md; the doc comments here say the same in short.
//! Durations are seconds, work is hours, instants are epoch milliseconds. A percentile of
//! nothing is absent rather than 0, so that "no job" cannot read as "no delay".

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The review of `[since, until)`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewReport {
    /// Start of the window (epoch ms, inclusive).
    pub since: i64,
    /// End of the window (epoch ms, exclusive).
    pub until: i64,
    /// The quota share the review was restricted to (`--share`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// One group per (queue, share, class), sorted.
    pub groups: Vec<ReviewGroup>,
    /// Figures from the audit log that belong to no one share.
    pub policy: PolicyStability,
    /// Over all groups: samples of the owners' reclaim delay's cumulative distribution,
    /// `[seconds, fraction of delays at most that]`, at most 200 points, for the HTML chart.
    pub owner_reclaim_delay_cdf: Vec<(f64, f64)>,
    /// Own against borrowed use per period (UTC days; weeks for windows over 62 days).
    pub use_over_time: Vec<UsePeriod>,
    /// Preemptions and resume outcomes per week (from Monday 00:00 UTC).
    pub weeks: Vec<RecoveryWeek>,
    /// What the reader should know about the figures.
    pub notes: Vec<String>,
}

/// The figures of one (queue, share, class).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewGroup {
    /// The job queue.
    pub job_queue: String,
    /// The quota share.
    pub quota_share_name: String,
    /// The jobs' class (`qm:class`, else the share's `qm:default-class`); absent: no class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Completion time of the jobs that ran only on their share's own capacity.
    pub own_only: Completion,
    /// Completion time of the jobs that borrowed at some point.
    pub borrowed: Completion,
    /// What reclaims cost the group's jobs.
    pub reclaim_loss: ReclaimLoss,
    /// From an owner's submission while its capacity was lent to the job running.
    pub owner_reclaim_delay: Delay,
    /// Preemptions and how jobs came back from them.
    pub recovery: Recovery,
    /// Priority changes and terminations of the group's jobs.
    pub stability: JobStability,
}

/// Completion times (submitted to SUCCEEDED) of jobs that succeeded in the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Completion {
    /// How many.
    pub jobs: u64,
    /// Median, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_seconds: Option<f64>,
    /// 95th percentile, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_seconds: Option<f64>,
}

/// Time lost to reclaims (cross-share preemptions) decided in the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimLoss {
    /// Reclaims.
    pub reclaims: u64,
    /// Jobs reclaimed at least once.
    pub jobs: u64,
    /// Hours the reclaimed jobs waited re-queued, until their next attempt started (or the
    /// data's time, for a job still waiting).
    pub requeued_hours: f64,
    /// Wall-clock hours of work done again after them.
    pub recomputed_hours: f64,
}

/// A delay's distribution.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delay {
    /// Delays measured (owners that got running).
    pub count: u64,
    /// Owners submitted while lending that had not run by the data's time (not in the
    /// percentiles).
    pub still_waiting: u64,
    /// Median, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_seconds: Option<f64>,
    /// 95th percentile, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_seconds: Option<f64>,
    /// Longest, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<f64>,
}

/// Preemptions decided in the window and the resumes that followed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recovery {
    /// Attempts preempted, all causes.
    pub preemptions: u64,
    /// Of those, reclaimed by another share.
    pub reclaims: u64,
    /// Of those, preempted by a higher-priority job of the same share.
    pub in_share: u64,
    /// Of those, drills (`qm preempt`).
    pub drills: u64,
    /// Attempts after a preemption, started in the window, that went on from the checkpoint.
    pub resumed: u64,
    /// ... that started over.
    pub restarted: u64,
    /// ... that could not be classified (no progress reported).
    pub unknown: u64,
    /// GPU-hours done again after those preemptions.
    pub recomputed_gpu_hours: f64,
    /// Jobs that failed in the window because they reached their preemption limit.
    pub reached_preemption_limit: u64,
    /// Jobs preempted in the window that have been preempted three times or more in all.
    pub preempted_three_times_or_more: u64,
}

/// Changes made to a group's jobs, from the audit log.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStability {
    /// Priority changes (UpdateServiceJob).
    pub priority_changes: u64,
    /// Of those, to a priority above the class's `max-priority` or the share's
    /// `qm:max-priority` (the submitters' ceiling).
    pub priority_changes_above_default: u64,
    /// Priority changes per principal that made them.
    pub priority_changes_by: BTreeMap<String, u64>,
    /// Jobs terminated by a principal other than their submitter.
    pub terminations_by_others: u64,
}

/// Figures of the audit log as a whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStability {
    /// Policy edits: created, updated, deleted or tagged environments, queues, scheduling
    /// policies and quota shares.
    pub policy_edits: u64,
    /// Policy edits per principal.
    pub policy_edits_by: BTreeMap<String, u64>,
    /// Policy edits per action (the operation).
    pub policy_edits_by_action: BTreeMap<String, u64>,
    /// `qm apply` runs (each also records one entry per call it makes, counted above).
    pub applies: u64,
    /// Priority changes of jobs the review has no record of (retired before the window).
    pub priority_changes_unattributed: u64,
    /// Limit changes after which running work was preempted at once.
    pub limit_changes_that_preempted: Vec<LimitChange>,
}

/// A limit change that preempted running work.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitChange {
    /// When it was recorded (epoch ms).
    pub at: i64,
    /// Who made it.
    pub actor: String,
    /// The operation.
    pub action: String,
    /// Its summary, as the audit log keeps it.
    pub summary: String,
    /// Attempts preempted by the scheduling pass that applied it.
    pub preemptions: u64,
}

/// Own against borrowed use in one period.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsePeriod {
    /// Start (epoch ms).
    pub period_start: i64,
    /// End (epoch ms, exclusive).
    pub period_end: i64,
    /// Instance-hours used within the shares' entitlements.
    pub own_instance_hours: f64,
    /// Instance-hours used on borrowed capacity.
    pub borrowed_instance_hours: f64,
}

/// Preemptions and resume outcomes in one week.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryWeek {
    /// Start (epoch ms; the window's start for a first partial week).
    pub week_start: i64,
    /// Preemptions decided in it.
    pub preemptions: u64,
    /// Resumes in it, by outcome.
    pub resumed: u64,
    /// See [`Recovery::restarted`].
    pub restarted: u64,
    /// See [`Recovery::unknown`].
    pub unknown: u64,
}
