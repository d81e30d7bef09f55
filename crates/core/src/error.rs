//! The core's one error type. Expected conditions (no quota, a job that must wait) are never
//! errors: they are decisions and pending reasons. Errors are inputs the core refuses, and each
//! message names the field and what to change.

use crate::model::{AttemptId, JobId};

/// An input the core refuses; the state is unchanged when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// A state image (a snapshot) that does not hold together.
    #[error("the snapshot cannot be loaded: {0}; keep the data dir as it is and report it (the store keeps the snapshot before it, which recovery tries next)")]
    BadImage(String),
    /// No queue of that name.
    #[error("job queue '{0}' does not exist: create it first or check the name")]
    UnknownQueue(String),
    /// No share of that name in the queue.
    #[error("quota share '{share}' does not exist in job queue '{queue}': create it first or check the name")]
    UnknownShare {
        /// Queue name.
        queue: String,
        /// Share name.
        share: String,
    },
    /// Submission to a DISABLED share.
    #[error("quota share '{share}' in job queue '{queue}' is DISABLED and accepts no new jobs: set its state to ENABLED")]
    ShareDisabled {
        /// Queue name.
        queue: String,
        /// Share name.
        share: String,
    },
    /// Deleting a share that is still ENABLED.
    #[error("quota share '{share}' in job queue '{queue}' must be DISABLED before it is deleted: update its state to DISABLED first")]
    ShareNotDisabled {
        /// Queue name.
        queue: String,
        /// Share name.
        share: String,
    },
    /// The job id is already taken.
    #[error("job {0} already exists: every submission needs a new id")]
    DuplicateJob(JobId),
    /// No job with that id.
    #[error("job {0} does not exist")]
    UnknownJob(JobId),
    /// A drill of a job that may not be interrupted.
    #[error("job {0} may not be interrupted (its class is not interruptible), so it is never preempted, not even for a drill")]
    NotInterruptible(JobId),
    /// A drill of a job that holds no running attempt.
    #[error("job {0} is not running (or is already stopping): only a running job can be preempted for a drill")]
    NotRunning(JobId),
    /// No attempt with that id (or it already exited).
    #[error("attempt {0} does not exist or has already exited")]
    UnknownAttempt(AttemptId),
    /// Priority outside 0..=9999.
    #[error("schedulingPriority {0} is out of range: use a value from 0 to 9999")]
    InvalidPriority(u32),
    /// Instance count of zero.
    #[error("instance count must be at least 1 (ResourceConfig.InstanceCount)")]
    InvalidCount,
    /// retryStrategy.attempts outside 1..=10.
    #[error("retryStrategy.attempts {0} is out of range: use a value from 1 to 10")]
    InvalidAttempts(u32),
    /// A limit was zero where at least one is needed, or a bound was exceeded.
    #[error("{what} allows at most {max}; got {got}")]
    TooMany {
        /// What is bounded.
        what: &'static str,
        /// The bound.
        max: usize,
        /// What was asked for.
        got: usize,
    },
    /// A borrow limit below -1.
    #[error("borrowLimit {0} is invalid: use -1 for unlimited or a percentage of at least 0")]
    InvalidBorrowLimit(i32),
    /// A weight of zero.
    #[error("the weight of {what} is 0: use a whole number of at least 1 (the default)")]
    InvalidWeight {
        /// Whose weight.
        what: String,
    },
    /// A group of shares that does not hold together.
    #[error("group '{group}' is invalid: {why}")]
    InvalidGroup {
        /// The group's name.
        group: String,
        /// What to fix.
        why: String,
    },
    /// The priority of a job that already finished.
    #[error("job {0} has already finished; its priority can no longer change")]
    JobFinished(JobId),
    /// A logged decision that cannot be applied to the state the log built (replay of a batch
    /// another build wrote, [`crate::Scheduler::apply_logged`]).
    #[error("a logged decision does not fit the state the log built: {0}")]
    Replay(String),
}
