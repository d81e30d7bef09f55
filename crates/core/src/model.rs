//! The vocabulary of the core: ids, the specs that shells hand in (queues, shares, jobs) and
//! the records the core keeps about jobs and attempts.
//!
//! Specs use plain names (`String`) because that is what shells have; the core interns them
//! into small indices ([`UnitIx`], [`ShareIx`], [`QueueIx`]) so that the hot path compares
//! integers, never strings.

use std::collections::BTreeMap;

/// Milliseconds on the shell's clock. The core never reads a clock; every input carries `now`.
pub type Millis = u64;

/// A job, as numbered by the shell. The server maps its UUIDs onto these; the simulator and
/// scenarios number jobs in submission order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct JobId(pub u64);

impl JobId {
    /// Above every job id: the end of a range over jobs.
    pub const MAX: JobId = JobId(u64::MAX);
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One execution of a job. Numbered by the core from a counter that is part of its state, so
/// the same inputs always give the same ids.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct AttemptId(pub u64);

impl std::fmt::Display for AttemptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Interned instance type (capacity unit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitIx(pub u16);

/// A quota share's position inside its queue; stable for the share's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShareIx(pub u16);

/// A job queue's position in the scheduler; stable for the queue's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueIx(pub u32);

/// How a share treats its idle capacity (AWS `resourceSharingConfiguration.strategy`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Strategy {
    /// Idle capacity stays with the share; it neither lends nor borrows.
    Reserve,
    /// Idle capacity may be lent; the share never borrows.
    Lend,
    /// Lends idle capacity and borrows others' idle capacity up to the borrow limit.
    LendAndBorrow,
}

impl Strategy {
    /// Whether other shares may borrow this share's idle capacity.
    pub fn lends(self) -> bool {
        !matches!(self, Strategy::Reserve)
    }

    /// Whether this share may run beyond its entitlement on others' idle capacity.
    pub fn borrows(self) -> bool {
        matches!(self, Strategy::LendAndBorrow)
    }

    /// The AWS wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Reserve => "RESERVE",
            Strategy::Lend => "LEND",
            Strategy::LendAndBorrow => "LEND_AND_BORROW",
        }
    }
}

/// How idle lendable capacity goes to the shares that wait to borrow it (the scheduling
/// policy's `idleResourceAssignmentStrategy`; `FAIR_SHARE` is a qm extension).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum IdleAssignment {
    /// First come, first served across shares (AWS's only strategy).
    #[default]
    Fifo,
    /// The waiting borrower whose share's weighted borrowed share would be lowest after the
    /// admission goes first (docs/scheduling.md "Fair sharing").
    FairShare,
}

impl IdleAssignment {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleAssignment::Fifo => "FIFO",
            IdleAssignment::FairShare => "FAIR_SHARE",
        }
    }

    /// Parses the wire spelling (case-sensitive, as AWS enums are).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "FIFO" => Some(IdleAssignment::Fifo),
            "FAIR_SHARE" => Some(IdleAssignment::FairShare),
            _ => None,
        }
    }
}

/// A group of a queue's shares (a department): its members lend to each other before they
/// lend to the rest of the queue, its optional capacity limits cap the members' total usage,
/// and its weight counts when idle capacity is shared fairly between groups.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupSpec {
    /// Unique name within the queue.
    pub name: String,
    /// Member shares, by name; a share belongs to at most one group. A name that is not (yet)
    /// a share of the queue is allowed and counts for nothing until the share exists.
    pub shares: Vec<String>,
    /// Instance type -> the most instances the members may hold together; a type missing
    /// from the map is not capped by the group.
    #[serde(default)]
    pub limits: BTreeMap<String, u32>,
    /// Weight between groups (and ungrouped shares) under `FAIR_SHARE`; at least 1.
    #[serde(default = "one")]
    pub weight: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// A job queue with its service environment (the most instances of each type that may be in
/// use at once; a type missing from the map has a limit of zero) and its scheduling policy's
/// rules for idle capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueSpec {
    /// Unique name of the queue.
    pub name: String,
    /// Instance type -> maximum instances (the service environment's capacity limits).
    pub environment: BTreeMap<String, u32>,
    /// How idle lendable capacity is assigned to waiting borrowers.
    #[serde(default)]
    pub idle_assignment: IdleAssignment,
    /// Whether a waiting borrower may preempt jobs another share runs on borrowed capacity
    /// when, after the preemption, its weighted borrowed share is at most that share's and
    /// below that share's before it (docs/scheduling.md "Fair sharing and groups").
    #[serde(default)]
    pub fair_reclaim: bool,
    /// Groups of the queue's shares (one level).
    #[serde(default)]
    pub groups: Vec<GroupSpec>,
}

impl QueueSpec {
    /// A queue with FIFO idle assignment, no fair reclaim and no groups.
    pub fn new(name: impl Into<String>, environment: BTreeMap<String, u32>) -> Self {
        QueueSpec {
            name: name.into(),
            environment,
            ..Default::default()
        }
    }
}

/// A quota share as configured by its owner.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShareSpec {
    /// Unique name within the queue.
    pub name: String,
    /// Instance type -> entitlement (instances usable without borrowing).
    pub limits: BTreeMap<String, u32>,
    /// What the share does with idle capacity.
    pub strategy: Strategy,
    /// Percent of the entitlement that may be borrowed on top of it, per type; `-1` = unlimited.
    /// Only meaningful for [`Strategy::LendAndBorrow`].
    pub borrow_limit_percent: i32,
    /// Whether a higher-priority job may preempt strictly lower-priority jobs of this share.
    pub in_share_preemption: bool,
    /// DISABLED shares accept no new jobs but still run, lend and finish what they have.
    pub enabled: bool,
    /// Thrash protection (a qm extension, share tag `qm:min-runtime-seconds`): a job of this
    /// share that started less than this long ago is preempted by nobody. 0 = off.
    #[serde(default)]
    pub min_runtime_ms: Millis,
    /// Thrash protection (share tag `qm:max-preemptions-per-hour`): a job of this share that
    /// was preempted this many times in the last hour is preempted by nobody until the oldest
    /// of those is an hour old. 0 = no cap.
    #[serde(default)]
    pub max_preemptions_per_hour: u32,
    /// Weight under `FAIR_SHARE` idle assignment (share tag `qm:weight`): a share's borrowed
    /// instances count `1/weight` against it. At least 1.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub weight: u32,
}

impl ShareSpec {
    /// A share with the AWS defaults: LEND, unlimited borrow limit, no in-share preemption,
    /// ENABLED, and no limits yet.
    pub fn new(name: impl Into<String>) -> Self {
        ShareSpec {
            name: name.into(),
            limits: BTreeMap::new(),
            strategy: Strategy::Lend,
            borrow_limit_percent: -1,
            in_share_preemption: false,
            enabled: true,
            min_runtime_ms: 0,
            max_preemptions_per_hour: 0,
            weight: 1,
        }
    }

    /// How many instances of a type with entitlement `entitlement` this share may borrow on top
    /// of it; `None` = unlimited. Percentages round down (quota 1 at 50 % borrows nothing).
    pub fn borrow_allowance(&self, entitlement: u32) -> Option<u32> {
        if !self.strategy.borrows() {
            return Some(0);
        }
        if self.borrow_limit_percent < 0 {
            return None;
        }
        let allowance = u64::from(entitlement) * self.borrow_limit_percent as u64 / 100;
        Some(allowance.min(u64::from(u32::MAX)) as u32)
    }
}

/// What to do when an attempt fails with a matching status reason (`evaluateOnExit`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExitRule {
    /// RETRY (true) or EXIT (false).
    pub retry: bool,
    /// Glob against the attempt's status reason; an optional trailing `*` matches any suffix.
    pub on_status_reason: String,
}

/// A job as submitted.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobSpec {
    /// The shell's id for the job; must be new.
    pub id: JobId,
    /// Queue name.
    pub queue: String,
    /// Quota share name within the queue.
    pub share: String,
    /// 0..=9999, higher runs first within the share.
    pub priority: u32,
    /// The capacity unit (instance type).
    pub instance_type: String,
    /// Instances needed at once; at least 1.
    pub count: u32,
    /// `preemptionRetriesBeforeTermination`: N re-queues allowed, the next preemption fails the
    /// job. `None` = unlimited.
    pub preemption_retries: Option<u32>,
    /// `retryStrategy.attempts`: total tries, 1..=10.
    pub attempts: u32,
    /// `retryStrategy.evaluateOnExit`, first match wins.
    pub evaluate_on_exit: Vec<ExitRule>,
    /// The longest an attempt holds its instances (`MaxRuntimeInSeconds` or the queue's
    /// attempt timeout, which the executor enforces), if bounded: a job whose bound ends
    /// before an aged head could start runs without being preemptible for it (EASY backfill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_limit_ms: Option<Millis>,
    /// Whether the job may be interrupted (issue 19's interruption contracts, the job's
    /// class). A job that may not runs only within its share's own quota, counted before the
    /// share's interruptible jobs, and is never a victim: no reclaim, no in-share preemption,
    /// no starvation guard, no drill.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub interruptible: bool,
    /// Whether the job may run on borrowed capacity (issue 19: a class that borrows only
    /// after a verified resume, while none was seen). One that may not is admitted like a job
    /// that may not be interrupted — within its share's own quota, counted first — but stays
    /// preemptible. Changed while it waits with [`crate::Input::SetBorrows`].
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub borrows: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl JobSpec {
    /// Whether the job runs only within its share's own quota: it may not be interrupted, or
    /// may not borrow.
    pub fn own_only(&self) -> bool {
        !self.interruptible || !self.borrows
    }

    /// A one-instance job with the AWS defaults (priority 0, one attempt, unlimited preemption
    /// re-queues).
    pub fn new(
        id: JobId,
        queue: impl Into<String>,
        share: impl Into<String>,
        instance_type: impl Into<String>,
    ) -> Self {
        JobSpec {
            id,
            queue: queue.into(),
            share: share.into(),
            priority: 0,
            instance_type: instance_type.into(),
            count: 1,
            preemption_retries: None,
            attempts: 1,
            evaluate_on_exit: Vec::new(),
            runtime_limit_ms: None,
            interruptible: true,
            borrows: true,
        }
    }
}

/// Where a job is in its life, as the core sees it. The server refines `Dispatched` into
/// SCHEDULED / STARTING / RUNNING from what the executor reports.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum JobStatus {
    /// Waiting for capacity.
    Runnable,
    /// An attempt holds capacity.
    Dispatched,
    /// The last attempt exited 0.
    Succeeded,
    /// Terminated, out of retries, or out of preemption retries.
    Failed,
}

impl JobStatus {
    /// Whether the job will never run again.
    pub fn is_final(self) -> bool {
        matches!(self, JobStatus::Succeeded | JobStatus::Failed)
    }
}

/// How an attempt ended, as reported by the shell once its processes are really gone: what
/// the executor reports (and its supervisors write in their outcome files, in this shape) and
/// the core consumes. The log keeps its own versioned encoding of it (the server's
/// `ExitRecord`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Exit {
    /// Exit code 0.
    Succeeded,
    /// Anything else. `retryable = false` for timeouts, which are never retried.
    Failed {
        /// Matched by `evaluateOnExit` globs.
        reason: String,
        /// Whether `retryStrategy` may re-queue the job.
        retryable: bool,
    },
    /// The attempt disappeared for a reason that is not the job's fault (the server restarted
    /// and found the process gone). The job returns to RUNNABLE without using a retry.
    Lost {
        /// Shown in the job's status reason.
        reason: String,
        /// How many attempts of a job in a row may be lost and queued again for free; the
        /// next one lost fails the job (a job that kills its server or node must not loop).
        /// `None`: no limit (logs written before the limit existed replay as they did).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_in_a_row: Option<u32>,
    },
}

impl Exit {
    /// An attempt lost through no fault of the job, as an executor reports it: the limit on
    /// lost attempts in a row is the server's to stamp when it logs the exit.
    pub fn lost(reason: impl Into<String>) -> Self {
        Exit::Lost {
            reason: reason.into(),
            max_in_a_row: None,
        }
    }
}

/// Why the core asks the shell to stop an attempt.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StopCause {
    /// Cross-share preemption: the owning share `by_share` needs its capacity for `for_job`.
    Reclaim {
        /// The job that needed the capacity.
        for_job: JobId,
        /// Name of the share that reclaimed.
        by_share: String,
    },
    /// In-share preemption by a strictly higher-priority job of the same share.
    InShare {
        /// The job that preempted.
        for_job: JobId,
    },
    /// A drill (`qm preempt`): stopped exactly as a reclaim would stop it, to check that the
    /// job resumes from its checkpoint.
    Drill {
        /// Who asked, and why.
        reason: String,
    },
    /// TerminateServiceJob or a share deletion.
    Terminated {
        /// The user's reason.
        reason: String,
    },
    /// `qm drain --requeue`: the executor is drained for maintenance. Stopped as a preemption
    /// would stop it and queued again, counted neither as a preemption nor as a retry: the
    /// job did nothing to deserve either.
    Requeue {
        /// Who asked, and why.
        reason: String,
    },
}

impl StopCause {
    /// The status reason recorded for the stopped attempt.
    pub fn describe(&self, job_name: impl Fn(JobId) -> String) -> String {
        match self {
            StopCause::Reclaim { by_share, .. } => {
                format!("Preempted: capacity reclaimed by quota share {by_share}")
            }
            StopCause::InShare { for_job } => {
                format!("Preempted by higher priority job {}", job_name(*for_job))
            }
            StopCause::Drill { reason } => format!("Preempted: drill ({reason})"),
            StopCause::Terminated { reason } => reason.clone(),
            StopCause::Requeue { reason } => format!("Requeued: {reason}"),
        }
    }

    /// Whether the job goes back to the queue once this stop is decided (every stop but a
    /// termination).
    pub fn is_preemption(&self) -> bool {
        !matches!(self, StopCause::Terminated { .. })
    }

    /// Whether this stop counts against the job's preemption retries: every requeueing stop
    /// but a drain's.
    pub fn counts_as_preemption(&self) -> bool {
        !matches!(
            self,
            StopCause::Terminated { .. } | StopCause::Requeue { .. }
        )
    }
}

/// A decision the shell must carry out (after persisting it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Start a new attempt of `job` on `count` instances of `unit`.
    Start {
        /// The job.
        job: JobId,
        /// The new attempt's id.
        attempt: AttemptId,
        /// Instance type.
        unit: String,
        /// Instances.
        count: u32,
    },
    /// Stop the attempt (SIGTERM, grace, SIGKILL) and report [`crate::Input::AttemptExited`]
    /// when its processes are gone; its capacity stays held until then.
    Stop {
        /// The job whose attempt stops.
        job: JobId,
        /// The attempt to stop.
        attempt: AttemptId,
        /// Why.
        cause: StopCause,
    },
    /// The job reached a final status.
    Finished {
        /// The job.
        job: JobId,
        /// Succeeded or Failed.
        status: JobStatus,
        /// Status reason.
        reason: String,
    },
    /// The job went back to RUNNABLE (after a preemption or a retryable failure).
    Requeued {
        /// The job.
        job: JobId,
        /// Why it is waiting again.
        reason: String,
    },
}
