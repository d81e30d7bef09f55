//! What the server logs: every accepted request that changes state and every report of the
//! executor, as one serializable [`Command`]. Replaying the commands of the log, batch by
//! batch, through [`crate::state::State`] rebuilds exactly the state the server had (the core is
//! deterministic), which is how a restart recovers.
//!
//! Reads are [`crate::request::Query`]s: answered from memory, never logged.

use std::collections::BTreeMap;

use qm_api::*;
use qm_core::{AttemptId, JobId};
use serde::{Deserialize, Serialize};

/// Who sent a client's command: the principal the request's signature proved, with the
/// groups and admin flag it had then (logged, so that a replay checks the same permissions).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// The principal's name.
    pub name: String,
    /// Its groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Whether it may do everything.
    #[serde(default)]
    pub admin: bool,
}

/// A state change, as logged. Ids that must not change on replay (job ids) are assigned before
/// the command is logged.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", content = "body")]
pub enum Command {
    /// CreateServiceEnvironment.
    CreateServiceEnvironment(CreateServiceEnvironmentRequest),
    /// UpdateServiceEnvironment.
    UpdateServiceEnvironment(UpdateServiceEnvironmentRequest),
    /// DeleteServiceEnvironment.
    DeleteServiceEnvironment(DeleteServiceEnvironmentRequest),
    /// CreateJobQueue.
    CreateJobQueue(CreateJobQueueRequest),
    /// UpdateJobQueue.
    UpdateJobQueue(UpdateJobQueueRequest),
    /// DeleteJobQueue.
    DeleteJobQueue(DeleteJobQueueRequest),
    /// CreateSchedulingPolicy.
    CreateSchedulingPolicy(CreateSchedulingPolicyRequest),
    /// UpdateSchedulingPolicy.
    UpdateSchedulingPolicy(UpdateSchedulingPolicyRequest),
    /// DeleteSchedulingPolicy.
    DeleteSchedulingPolicy(DeleteSchedulingPolicyRequest),
    /// CreateQuotaShare.
    CreateQuotaShare(CreateQuotaShareRequest),
    /// UpdateQuotaShare.
    UpdateQuotaShare(UpdateQuotaShareRequest),
    /// DeleteQuotaShare.
    DeleteQuotaShare(DeleteQuotaShareRequest),
    /// SubmitServiceJob, with the job id the server drew for it.
    SubmitServiceJob {
        /// The new job's id (a UUID).
        job_id: String,
        /// The request as received.
        request: SubmitServiceJobRequest,
        /// Who submitted it: the access key id the request was signed with (see
        /// docs/server.md, "Usage accounting"); absent in logs of older builds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
    },
    /// UpdateServiceJob.
    UpdateServiceJob(UpdateServiceJobRequest),
    /// TerminateServiceJob.
    TerminateServiceJob(TerminateServiceJobRequest),
    /// TerminateServiceJobs.
    TerminateServiceJobs(TerminateServiceJobsRequest),
    /// `POST /qm/v1/jobs/{job}/preempt` (`qm preempt`): a drill, stopping a running job as
    /// a reclaim would.
    PreemptServiceJob {
        /// The job's id (or ARN) as the client sent it.
        job_id: String,
        /// Who asked and why, as the attempt's status reason will say.
        reason: String,
    },
    /// `POST /qm/v1/drain` (`qm drain`, admins): nothing starts on this server's executor
    /// until [`Command::EndDrain`]; with `requeue` the running attempts are stopped and their
    /// jobs queued again.
    Drain {
        /// Who asked, and why, as the waiting jobs' status reason will say.
        reason: String,
        /// Whether the running attempts are stopped and queued again.
        requeue: bool,
    },
    /// `POST /qm/v1/drain {cancel: true}` (`qm drain --cancel`): the drain ends.
    EndDrain,
    /// `PUT /qm/v1/queues/{queue}/groups`: a job queue's group definitions.
    PutQueueGroups {
        /// The queue's name or ARN as the client sent it.
        queue: String,
        /// The definitions, replacing the queue's.
        groups: qm_api::qm::QueueGroups,
    },
    /// TagResource.
    TagResource(TagResourceRequest),
    /// UntagResource.
    UntagResource(UntagResourceRequest),
    /// The executor spawned every process of an attempt.
    AttemptRunning {
        /// Core attempt id.
        attempt: AttemptId,
        /// Process (group) ids of its hosts.
        pids: Vec<u32>,
        /// GPU indices handed to it.
        gpus: Vec<u32>,
        /// Its supervisor (local executor): what a restarted server finds it by, and checks
        /// before it believes or signals anything (boot id, pid, start time).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        supervisor: Option<qm_executor::supervisor::Identity>,
        /// When its processes were spawned (epoch ms, the executor's clock): the job's
        /// `startedAt`. Absent in logs of builds before it, and for a report that has no
        /// time: then the batch's time stands for it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at_ms: Option<i64>,
    },
    /// The cluster accepted an attempt, which waits to start (Slurm executor); sent again when
    /// the reason it waits changes.
    AttemptStarting {
        /// Core attempt id.
        attempt: AttemptId,
        /// Why the cluster has not started it yet, as its status reason.
        #[serde(default)]
        reason: Option<String>,
    },
    /// The job wrote into its checkpoint directory.
    AttemptCheckpoint {
        /// Core attempt id.
        attempt: AttemptId,
    },
    /// The steps an attempt reported in its progress file moved (at most one a scan of the
    /// executor, however fast the job writes).
    AttemptProgress {
        /// Core attempt id.
        attempt: AttemptId,
        /// Everything it reported so far.
        #[serde(default)]
        steps: qm_executor::Steps,
    },
    /// Every process of an attempt is gone.
    AttemptExited {
        /// Core attempt id.
        attempt: AttemptId,
        /// How it ended.
        outcome: ExitRecord,
        /// What it used, where the executor counted it (absent in logs of earlier releases).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<qm_executor::Usage>,
    },
    /// The executor's instances per type (logged at start when they changed).
    SetCapacity {
        /// Instances per instance type.
        capacity: BTreeMap<String, u32>,
    },
    /// Someone changed the configuration with `qm apply` (the audit log).
    Audit(AuditEntry),
    /// A client's command and who sent it: applied when the caller may send it
    /// (`ops::permit`). Logs of builds before permissions hold the commands bare.
    As {
        /// Who sent it.
        caller: Caller,
        /// What it asks.
        command: Box<Command>,
        /// The audit entry of the change, recorded when the command is applied — in its
        /// batch, by construction — with the before and after of the tags it changes. Absent
        /// for a submit, and in logs of builds that logged the entry as a command of its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        audit: Option<AuditEntry>,
    },
    /// A queue's `jobStateTimeLimitActions` fired for a job at the head of its share.
    TimeLimitAction {
        /// The job.
        job_id: String,
        /// The reason code that held it.
        reason: String,
    },
    /// Finished jobs past their retention leave the state (they were archived first).
    RetireJobs {
        /// The jobs, by id.
        job_ids: Vec<String>,
    },
    /// The audit entries numbered below `upto` leave the state (they were archived first):
    /// `[retention] audit_entries` bounds how many the state keeps.
    RetireAudit {
        /// The number of the first entry that stays (entries are numbered from 0 in the
        /// order they were recorded).
        upto: u64,
    },
    /// The instant the core asked to be passed again at has come
    /// (`qm_core::Scheduler::next_wakeup`: a job's patience with its victims ran out, or a
    /// running job's thrash protection ended while jobs wait). It
    /// changes nothing itself; its batch's pass runs at its time.
    Wake,
}

/// How the decisions of a batch are encoded in the log ([`qm_store::Writer::format`]): 0 was
/// the core's `Debug` text, one effect a line (schema 1, up to release 7368e83); 1 is a JSON
/// array of [`Decision`].
pub const DECISIONS_FORMAT: u32 = 1;

/// One decision of the core as logged: [`qm_core::Effect`] in a shape of its own, so that a
/// change to the core's types (a renamed field, a new variant) does not change how the
/// decisions already in a log read back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect")]
pub enum Decision {
    /// An attempt starts.
    Start {
        /// Core job id.
        job: JobId,
        /// The new attempt.
        attempt: AttemptId,
        /// Instance type.
        unit: String,
        /// Instances.
        count: u32,
    },
    /// An attempt is stopped.
    Stop {
        /// Core job id.
        job: JobId,
        /// The attempt.
        attempt: AttemptId,
        /// Why.
        cause: StopRecord,
    },
    /// A job reached a final status.
    Finished {
        /// Core job id.
        job: JobId,
        /// `SUCCEEDED` or `FAILED`.
        status: String,
        /// Status reason.
        reason: String,
    },
    /// A job went back to RUNNABLE.
    Requeued {
        /// Core job id.
        job: JobId,
        /// Why it waits again.
        reason: String,
    },
}

/// Why an attempt was stopped, as logged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum StopRecord {
    /// Another share reclaimed its capacity.
    Reclaim {
        /// The job that needed it.
        for_job: JobId,
        /// The reclaiming share.
        by_share: String,
    },
    /// A higher-priority job of the same share.
    InShare {
        /// The job that preempted.
        for_job: JobId,
    },
    /// Terminated by a user or a share deletion.
    Terminated {
        /// The user's reason.
        reason: String,
    },
    /// A drill (`qm preempt`).
    Drill {
        /// Who asked, and why.
        reason: String,
    },
    /// A drain's requeue (`qm drain --requeue`).
    Requeue {
        /// Who asked, and why.
        reason: String,
    },
}

impl From<&qm_core::Effect> for Decision {
    fn from(e: &qm_core::Effect) -> Self {
        use qm_core::{Effect, JobStatus, StopCause};
        match e {
            Effect::Start {
                job,
                attempt,
                unit,
                count,
            } => Decision::Start {
                job: *job,
                attempt: *attempt,
                unit: unit.clone(),
                count: *count,
            },
            Effect::Stop {
                job,
                attempt,
                cause,
            } => Decision::Stop {
                job: *job,
                attempt: *attempt,
                cause: match cause {
                    StopCause::Reclaim { for_job, by_share } => StopRecord::Reclaim {
                        for_job: *for_job,
                        by_share: by_share.clone(),
                    },
                    StopCause::InShare { for_job } => StopRecord::InShare { for_job: *for_job },
                    StopCause::Terminated { reason } => StopRecord::Terminated {
                        reason: reason.clone(),
                    },
                    StopCause::Drill { reason } => StopRecord::Drill {
                        reason: reason.clone(),
                    },
                    StopCause::Requeue { reason } => StopRecord::Requeue {
                        reason: reason.clone(),
                    },
                },
            },
            Effect::Finished {
                job,
                status,
                reason,
            } => Decision::Finished {
                job: *job,
                status: match status {
                    JobStatus::Runnable => "RUNNABLE",
                    JobStatus::Dispatched => "DISPATCHED",
                    JobStatus::Succeeded => "SUCCEEDED",
                    JobStatus::Failed => "FAILED",
                }
                .into(),
                reason: reason.clone(),
            },
            Effect::Requeued { job, reason } => Decision::Requeued {
                job: *job,
                reason: reason.clone(),
            },
        }
    }
}

impl TryFrom<&Decision> for qm_core::Effect {
    type Error = String;

    /// A logged decision as the core's effect, to impose it on replay.
    fn try_from(d: &Decision) -> Result<Self, String> {
        use qm_core::{Effect, JobStatus, StopCause};
        Ok(match d {
            Decision::Start {
                job,
                attempt,
                unit,
                count,
            } => Effect::Start {
                job: *job,
                attempt: *attempt,
                unit: unit.clone(),
                count: *count,
            },
            Decision::Stop {
                job,
                attempt,
                cause,
            } => Effect::Stop {
                job: *job,
                attempt: *attempt,
                cause: match cause {
                    StopRecord::Reclaim { for_job, by_share } => StopCause::Reclaim {
                        for_job: *for_job,
                        by_share: by_share.clone(),
                    },
                    StopRecord::InShare { for_job } => StopCause::InShare { for_job: *for_job },
                    StopRecord::Terminated { reason } => StopCause::Terminated {
                        reason: reason.clone(),
                    },
                    StopRecord::Drill { reason } => StopCause::Drill {
                        reason: reason.clone(),
                    },
                    StopRecord::Requeue { reason } => StopCause::Requeue {
                        reason: reason.clone(),
                    },
                },
            },
            Decision::Finished {
                job,
                status,
                reason,
            } => Effect::Finished {
                job: *job,
                status: match status.as_str() {
                    "SUCCEEDED" => JobStatus::Succeeded,
                    "FAILED" => JobStatus::Failed,
                    other => return Err(format!("job {job} finished with status {other}")),
                },
                reason: reason.clone(),
            },
            Decision::Requeued { job, reason } => Effect::Requeued {
                job: *job,
                reason: reason.clone(),
            },
        })
    }
}

/// How an attempt ended, as logged: the versioned encoding of [`qm_core::Exit`] (the type
/// the executor reports and the core consumes), kept apart so that a change to the core's
/// type does not change how logs already written read back. `From<Exit>` and
/// [`ExitRecord::to_core`] are its only conversions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum ExitRecord {
    /// Exit code 0 everywhere.
    Succeeded,
    /// A failure, with the reason `evaluateOnExit` matches.
    Failed {
        /// Status reason.
        reason: String,
        /// Whether `retryStrategy` may retry it (timeouts may not).
        retryable: bool,
    },
    /// The server restarted and the attempt's processes were gone or had to be stopped.
    Lost {
        /// Status reason.
        reason: String,
        /// `[executor] max_lost_attempts` when it was lost (the decision it leads to is in
        /// the log, whatever the setting later); absent in logs written before the limit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_in_a_row: Option<u32>,
    },
}

/// The logged form of an executor's report: the one conversion into the log's encoding.
impl From<qm_core::Exit> for ExitRecord {
    fn from(exit: qm_core::Exit) -> Self {
        match exit {
            qm_core::Exit::Succeeded => ExitRecord::Succeeded,
            qm_core::Exit::Failed { reason, retryable } => ExitRecord::Failed { reason, retryable },
            qm_core::Exit::Lost {
                reason,
                max_in_a_row,
            } => ExitRecord::Lost {
                reason,
                max_in_a_row,
            },
        }
    }
}

impl ExitRecord {
    /// The core's view: the one conversion out of the log's encoding.
    pub fn to_core(&self) -> qm_core::Exit {
        match self {
            ExitRecord::Succeeded => qm_core::Exit::Succeeded,
            ExitRecord::Failed { reason, retryable } => qm_core::Exit::Failed {
                reason: reason.clone(),
                retryable: *retryable,
            },
            ExitRecord::Lost {
                reason,
                max_in_a_row,
            } => qm_core::Exit::Lost {
                reason: reason.clone(),
                max_in_a_row: *max_in_a_row,
            },
        }
    }
}

pub use qm_api::qm::AuditEntry;
