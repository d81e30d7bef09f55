//! What the server logs: every accepted request that changes state and every report of the
//! executor, as one serializable [`Command`]. Replaying the commands of the log, batch by
//! batch, through [`crate::state::State`] rebuilds exactly the state the server had (the core is
//! deterministic), which is how a restart recovers.
//!
//! Reads are [`Query`]s: answered from memory, never logged.

use std::collections::BTreeMap;

use qm_api::*;
use serde::{Deserialize, Serialize};

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
    },
    /// UpdateServiceJob.
    UpdateServiceJob(UpdateServiceJobRequest),
    /// TerminateServiceJob.
    TerminateServiceJob(TerminateServiceJobRequest),
    /// TerminateServiceJobs.
    TerminateServiceJobs(TerminateServiceJobsRequest),
    /// TagResource.
    TagResource(TagResourceRequest),
    /// UntagResource.
    UntagResource(UntagResourceRequest),
    /// The executor spawned every process of an attempt.
    AttemptRunning {
        /// Core attempt id.
        attempt: u64,
        /// Process (group) ids, kept so that a restarted server can stop them.
        pids: Vec<u32>,
        /// GPU indices handed to it.
        gpus: Vec<u32>,
    },
    /// The cluster accepted an attempt, which waits to start (Slurm executor); sent again when
    /// the reason it waits changes.
    AttemptStarting {
        /// Core attempt id.
        attempt: u64,
        /// Why the cluster has not started it yet, as its status reason.
        #[serde(default)]
        reason: Option<String>,
    },
    /// The job wrote into its checkpoint directory.
    AttemptCheckpoint {
        /// Core attempt id.
        attempt: u64,
    },
    /// Every process of an attempt is gone.
    AttemptExited {
        /// Core attempt id.
        attempt: u64,
        /// How it ended.
        outcome: ExitRecord,
    },
    /// The executor's instances per type (logged at start when they changed).
    SetCapacity {
        /// Instances per instance type.
        capacity: BTreeMap<String, u32>,
    },
    /// Someone changed the configuration with `qm apply` (the audit log).
    Audit(AuditEntry),
    /// A queue's `jobStateTimeLimitActions` fired for a job at the head of its share.
    TimeLimitAction {
        /// The job.
        job_id: String,
        /// The reason code that held it.
        reason: String,
    },
}

/// How an attempt ended, as logged.
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
    },
}

impl ExitRecord {
    /// The core's view.
    pub fn to_core(&self) -> qm_core::Exit {
        match self {
            ExitRecord::Succeeded => qm_core::Exit::Succeeded,
            ExitRecord::Failed { reason, retryable } => qm_core::Exit::Failed {
                reason: reason.clone(),
                retryable: *retryable,
            },
            ExitRecord::Lost { reason } => qm_core::Exit::Lost {
                reason: reason.clone(),
            },
        }
    }
}

/// One entry of the audit log (`POST /qm/v1/audit`); `at` is set by the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When it was recorded (epoch ms); ignored on input.
    #[serde(default)]
    pub at: i64,
    /// Who (e.g. `alice@host`).
    pub actor: String,
    /// What kind of change (`apply`).
    pub action: String,
    /// One line.
    pub summary: String,
    /// The full plan that was applied.
    #[serde(default)]
    pub details: String,
}

/// A read: answered from the state in memory after the batch it arrived in has committed.
#[derive(Clone, Debug)]
pub enum Query {
    /// DescribeServiceEnvironments.
    DescribeServiceEnvironments(DescribeServiceEnvironmentsRequest),
    /// DescribeJobQueues.
    DescribeJobQueues(DescribeJobQueuesRequest),
    /// DescribeSchedulingPolicies.
    DescribeSchedulingPolicies(DescribeSchedulingPoliciesRequest),
    /// ListSchedulingPolicies.
    ListSchedulingPolicies(ListSchedulingPoliciesRequest),
    /// DescribeQuotaShare.
    DescribeQuotaShare(DescribeQuotaShareRequest),
    /// ListQuotaShares.
    ListQuotaShares(ListQuotaSharesRequest),
    /// DescribeServiceJob.
    DescribeServiceJob(DescribeServiceJobRequest),
    /// ListServiceJobs.
    ListServiceJobs(ListServiceJobsRequest),
    /// GetJobQueueSnapshot.
    GetJobQueueSnapshot(GetJobQueueSnapshotRequest),
    /// ListTagsForResource.
    ListTagsForResource(ListTagsForResourceRequest),
    /// `GET /qm/v1/usage`: per queue, share and type, what the core accounts.
    Usage,
    /// `GET /qm/v1/audit`.
    Audit,
    /// Where an attempt's logs are: the job's id and the attempt number (latest if `None`).
    LogInfo {
        /// Job id.
        job_id: String,
        /// Attempt number.
        attempt: Option<u32>,
    },
    /// `GET /metrics`, the parts the state knows.
    Metrics,
}

/// Anything a client asks.
#[derive(Clone, Debug)]
pub enum Request {
    /// Changes state; logged.
    Command(Command),
    /// Reads state.
    Query(Query),
}
