//! What the driver is asked and answers: reads ([`Query`] and [`Answer`], whose API responses
//! are [`Reply`] values) and the requests that carry them or a write ([`Request`]). They live
//! apart from the logged vocabulary (`command`), which imports nothing above it; these name
//! the facts of the modules that answer (usage, workload, review, history).

use std::time::Duration;

use qm_api::*;

use crate::command::{AuditEntry, Command};
use crate::facts::UsageFacts;
pub use crate::reply::Reply;

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
    /// `GET /qm/v1/drain`: whether the executor is drained.
    Drain,
    /// `GET /qm/v1/queues/{queue}/groups`: the queue's group definitions.
    QueueGroups {
        /// The queue's name or ARN.
        queue: String,
    },
    /// `GET /qm/v1/audit`: at most `max` entries from the `start`-th (oldest first).
    Audit {
        /// The first entry's index (a page token).
        start: usize,
        /// The page size.
        max: usize,
    },
    /// `POST /qm/v1/what-if`.
    WhatIf(qm_api::qm::WhatIfRequest),
    /// Where an attempt's logs are: the job's id and the attempt number (latest if `None`).
    LogInfo {
        /// Job id.
        job_id: String,
        /// Attempt number.
        attempt: Option<u32>,
    },
    /// `GET /qm/v1/jobs/{job}/attempt`: the attempt holding capacity now.
    RunningAttempt {
        /// Job id.
        job_id: String,
    },
    /// Whose role attempt `attempt` acts as, while it holds capacity (the credentials
    /// endpoint, `credentials.rs`).
    AttemptRole {
        /// Core attempt id.
        attempt: qm_core::AttemptId,
    },
    /// `GET /metrics`, the parts the state knows.
    Metrics,
    /// One sample of the dashboard's history (`history.rs`).
    Sample,
    /// The facts usage accounting needs from the state: the jobs that may have held capacity
    /// at or after `since`, and every share's entitlement history.
    UsageFacts {
        /// Window start (epoch ms).
        since: i64,
    },
    /// The facts a workload export needs from the state: the jobs submitted in
    /// `[since, until)` (to `queue` only, if given) and the queues' classes.
    WorkloadFacts {
        /// Window start (epoch ms).
        since: i64,
        /// Window end (epoch ms, exclusive).
        until: i64,
        /// Only this queue's jobs.
        queue: Option<String>,
    },
    /// The policy review's facts (`review.rs`), answered as [`Answer::ReviewFacts`].
    ReviewFacts {
        /// Window start (epoch ms).
        since: i64,
    },
}

/// What the driver answers: a typed response for the API (encoded to JSON by the HTTP
/// layer), or a typed value for the HTTP layer's own use (so nothing is encoded to JSON only
/// to be decoded again).
#[derive(Debug)]
pub enum Answer {
    /// An API response, typed.
    Reply(Reply),
    /// See [`Query::LogInfo`].
    LogInfo(LogInfo),
    /// See [`Query::UsageFacts`].
    UsageFacts(Box<UsageFacts>),
    /// See [`Query::WorkloadFacts`].
    WorkloadFacts(Box<crate::facts::WorkloadFacts>),
    /// See [`Query::ReviewFacts`].
    ReviewFacts(Box<crate::facts::ReviewFacts>),
    /// See [`Query::Sample`].
    Sample(Box<crate::facts::Sample>),
    /// See [`Query::AttemptRole`]: `None` when the attempt holds no capacity.
    AttemptRole(Option<AttemptRole>),
    /// See [`Query::Metrics`]: a registry for one scrape, to which the HTTP layer adds its
    /// own families before encoding it.
    Metrics(Box<prometheus_client::registry::Registry>),
}

impl Answer {
    /// The API response of an answer; an answer for the HTTP layer's own use has none
    /// (asking for one is a bug in the HTTP layer, answered as a server error rather than a
    /// panic).
    pub fn into_reply(self) -> Result<Reply, ApiError> {
        match self {
            Answer::Reply(r) => Ok(r),
            other => Err(ApiError::server(format!(
                "internal: a typed answer ({}) where a response body was expected",
                other.kind()
            ))),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Answer::Reply(_) => "body",
            Answer::LogInfo(_) => "log info",
            Answer::UsageFacts(_) => "usage facts",
            Answer::WorkloadFacts(_) => "workload facts",
            Answer::ReviewFacts(_) => "review facts",
            Answer::Sample(_) => "history sample",
            Answer::AttemptRole(_) => "attempt role",
            Answer::Metrics(_) => "metrics registry",
        }
    }
}

/// Whose role a live attempt acts as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptRole {
    /// The payload's `RoleArn`, if it named one.
    pub role_arn: Option<String>,
    /// The job's id.
    pub job_id: String,
    /// The job's SageMaker name (the STS session is named after it).
    pub job_name: String,
    /// The job's quota share, whose allowed roles bound the job's.
    pub share: String,
}

/// Where an attempt's logs are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogInfo {
    /// The id the server issued (a UUID), never the client's spelling: no path tricks.
    pub job_id: String,
    /// The attempt number.
    pub attempt: u32,
    /// Whether the attempt has ended (its log will not grow).
    pub finished: bool,
}

/// Anything a client asks.
#[derive(Clone, Debug)]
pub enum Request {
    /// Changes state; logged.
    Command(Command),
    /// Reads state.
    Query(Query),
    /// A reload (`crate::reload`): the driver's new settings, applied with the reload's
    /// audit entry in one batch.
    Reload(Box<Reloaded>),
}

/// What a reload changes in the driver: its cadence and the bounds on new submits (neither
/// is logged: replays never depend on them), and the audit entry that records the reload.
#[derive(Clone, Debug)]
pub struct Reloaded {
    /// The driver's periodic work (`since_snapshot` is ignored).
    pub cadence: Cadence,
    /// Bounds on queued jobs and `file://` roots for new submits.
    pub admission: Admission,
    /// Who reloaded, and what changed.
    pub audit: AuditEntry,
}

/// How often the driver does its periodic work.
#[derive(Clone, Copy, Debug)]
pub struct Cadence {
    /// The scheduling pass runs at least this often while jobs wait.
    pub tick: Duration,
    /// A snapshot is written after this many logged commands (0: only at shutdown).
    pub snapshot_every: u64,
    /// Commands already logged since the last snapshot (those the start replayed).
    pub since_snapshot: u64,
    /// How long finished jobs stay before they are archived and leave the state.
    pub retention: Duration,
    /// Whether a retired job's directory is deleted once its retirement is durable.
    pub delete_job_dirs: bool,
    /// `[executor] max_lost_attempts`: lost attempts of a job in a row queued again for free.
    pub max_lost_attempts: u32,
    /// `[retention] audit_entries`: audit entries the state keeps; older ones are archived.
    pub audit_entries: usize,
}

/// `[limits] queued_jobs_per_share` and `queued_jobs_per_queue`, and `[storage] file_roots`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// RUNNABLE jobs per quota share.
    pub per_share: u64,
    /// RUNNABLE jobs per job queue.
    pub per_queue: u64,
    /// The directories `file://` URIs of a payload may name (the executor checks again, links
    /// included, when it transfers).
    pub file_roots: Vec<std::path::PathBuf>,
    /// Whether the executor runs images (`[executor] runtime = "podman"`): a payload without
    /// `ContainerEntrypoint` runs the image's own entrypoint; otherwise it is refused.
    pub runs_images: bool,
}
