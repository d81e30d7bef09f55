//! Typed reasons why a RUNNABLE job is not running (DESIGN.md §2 rule 11).
//!
//! Every reason has a stable machine code (what `qm check` scenarios, the API's `statusReason`
//! prefix and the CLI show) and a sentence with the numbers behind it. The AWS codes
//! (`MISCONFIGURATION:...`, `CAPACITY:...`) keep their AWS spelling so that
//! `jobStateTimeLimitActions` can match them.

use std::fmt;

use crate::model::JobId;
use crate::time::utc;

/// Why a job can never run with the current configuration (DESIGN.md §2 rule 10).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Misconfiguration {
    /// More instances than the service environment's limit for the type.
    EnvironmentMax,
    /// RESERVE or LEND share: more than the share's limit (or the type is not in its limits).
    ShareLimit,
    /// LEND_AND_BORROW: more than the limit plus the borrow allowance.
    ShareAndBorrowLimit,
    /// LEND_AND_BORROW: more than the limit plus everything the other shares could ever lend.
    BorrowableCapacity,
    /// More instances than physically exist for the type.
    PhysicalMax,
}

impl Misconfiguration {
    /// The AWS reason code.
    pub fn code(self) -> &'static str {
        match self {
            Misconfiguration::EnvironmentMax => "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
            Misconfiguration::ShareLimit
            | Misconfiguration::ShareAndBorrowLimit
            | Misconfiguration::BorrowableCapacity => {
                "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED"
            }
            Misconfiguration::PhysicalMax => "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
        }
    }

    /// Every misconfiguration.
    pub const ALL: [Misconfiguration; 5] = [
        Misconfiguration::EnvironmentMax,
        Misconfiguration::ShareLimit,
        Misconfiguration::ShareAndBorrowLimit,
        Misconfiguration::BorrowableCapacity,
        Misconfiguration::PhysicalMax,
    ];

    /// The misconfiguration a job's `statusReason` reports, if it reports one: how a client
    /// tells "never runs as configured" from a wait (`CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY`
    /// is also the code of a transient shortage; only the full sentence tells them apart).
    pub fn from_status_reason(reason: &str) -> Option<Misconfiguration> {
        Self::ALL.into_iter().find(|m| m.status_reason() == reason)
    }

    /// The AWS status reason text (code, dash, explanation).
    pub fn status_reason(self) -> String {
        let text = match self {
            Misconfiguration::EnvironmentMax => "Service environment(s) associated with the job queue cannot meet the capacity requirement of the job.",
            Misconfiguration::ShareLimit => "Job requirements exceed quota share capacity limits.",
            Misconfiguration::ShareAndBorrowLimit => {
                "Job requirements exceed quota share capacity limits and borrow limits."
            }
            Misconfiguration::BorrowableCapacity => {
                "Job requires borrowing that exceeds all configured borrowable capacity."
            }
            Misconfiguration::PhysicalMax => {
                "Unable to provision requested compute resources: more instances than the executor has."
            }
        };
        format!("{} - {}", self.code(), text)
    }
}

/// Why a RUNNABLE job is waiting. The `Display` form is the full sentence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// The job can never fit with the current configuration.
    Misconfigured(Misconfiguration),
    /// The share's own capacity is held by its own jobs, which this job may not preempt
    /// (in-share preemption off, or none of strictly lower priority), and the share does not
    /// borrow.
    OwnQuotaFull {
        /// Instances the job needs.
        needs: u32,
        /// The share's usage of the unit.
        usage: u32,
        /// Its entitlement.
        entitlement: u32,
    },
    /// The job may not be interrupted, so it runs only within its share's own quota, and the
    /// share's other jobs that may not be interrupted already hold it.
    NotInterruptible {
        /// Instances the job needs.
        needs: u32,
        /// Instances the share's non-interruptible jobs hold.
        firm: u32,
        /// The share's entitlement.
        entitlement: u32,
    },
    /// The job's class borrows only after a verified resume and none was seen
    /// ([`crate::JobSpec::borrows`]): it runs only within its share's own quota, where the
    /// share's other jobs that may not borrow (or be interrupted) already hold it.
    ResumeUnverified {
        /// Instances the job needs.
        needs: u32,
        /// Instances the share's jobs that run only within its own quota hold.
        held: u32,
        /// The share's entitlement.
        entitlement: u32,
    },
    /// Borrowing the rest would take the share beyond its borrow limit.
    BorrowLimitReached {
        /// Instances the share would borrow with this job.
        would_borrow: u32,
        /// Its borrow allowance.
        allowance: u32,
    },
    /// Not enough idle capacity in LEND / LEND_AND_BORROW shares to borrow from.
    NothingToBorrow {
        /// Instances the job would borrow.
        needs: u32,
        /// Idle lendable instances not already lent.
        lendable: u32,
    },
    /// Preempted attempts (for this job or another) are still stopping; the capacity comes
    /// back when their processes exit.
    WaitingForRelease {
        /// Instances being released.
        instances: u32,
    },
    /// The service environment's limit for the unit is reached by other shares' own usage
    /// (the shares' limits add up to more than the environment).
    EnvironmentFull {
        /// The limit.
        limit: u32,
    },
    /// The executor has no free physical instance of the type (shared with other queues).
    InsufficientCapacity,
    /// An older or higher-priority job is waiting for this capacity: an aged head letting the
    /// jobs backfilled onto its reservation finish (`Policy::backfill_patience_ms`), or a job
    /// patient with the jobs it would preempt (`Policy::reclaim_patience_ms`), so nothing new
    /// may start on it.
    HeldForOlderJob {
        /// The shell's id of that job.
        job: JobId,
    },
    /// The job waited past the starvation guard and holds a reservation; it could start by
    /// preempting jobs backfilled onto it, and gives them until `until` to finish (taking each
    /// that checkpoints meanwhile) before it preempts them.
    BackfillFinishing {
        /// Instances of backfilled jobs it would preempt.
        instances: u32,
        /// When its patience runs out (shell milliseconds).
        until: u64,
    },
    /// It could reclaim its capacity from jobs that report checkpoints, and waits until
    /// `until` for them (taking each as it checkpoints, so that it loses no work) or for
    /// capacity that frees up on its own, before it preempts them.
    WaitingForCheckpoint {
        /// Instances it would preempt.
        instances: u32,
        /// When its patience runs out (shell milliseconds).
        until: u64,
    },
    /// It could preempt, but the jobs it would take are protected from preemption until
    /// `until` (their share's `qm:min-runtime-seconds` or `qm:max-preemptions-per-hour`).
    VictimsProtected {
        /// When the last of them may be preempted again (shell milliseconds).
        until: u64,
    },
    /// What it would borrow is kept for another share: that share's waiting owner needs its
    /// idle capacity, or a job of it preempted for capacity and waits for its victims to exit.
    ReservedForOthers,
    /// Its share's group would hold more than the group's limit for the type (a ceiling on
    /// the members' total usage).
    GroupLimitReached {
        /// The group.
        group: String,
        /// Instances the job needs.
        needs: u32,
        /// Instances the members hold (or have claimed).
        usage: u32,
        /// The group's limit.
        limit: u32,
    },
    /// Under `FAIR_SHARE` idle assignment, it waits to borrow while another share with a
    /// lower weighted borrowed share also waits: that share's jobs get idle capacity first.
    BehindFairShare {
        /// Why it cannot start now.
        reason: Box<PendingReason>,
        /// Its share (or, when the two are in different groups, `group NAME`).
        share: String,
        /// Its weighted borrowed share, in thousandths.
        weighted: u32,
        /// The share (or group) that goes first.
        ahead: String,
        /// That one's weighted borrowed share, in thousandths.
        ahead_weighted: u32,
    },
    /// The job's previous attempt has not exited yet.
    PreviousAttemptStopping,
    /// Its lane changed since the last scheduling pass; the next pass decides.
    AwaitingPass,
    /// The executor is drained (`qm drain`): nothing starts until the drain ends.
    Drained {
        /// Who drained it, and why.
        reason: String,
    },
    /// The job waits for `reason`, and has waited past the starvation guard: capacity is
    /// reserved for it, and `backfilled` instances run on it meanwhile, preemptible for it.
    /// Its code is `reason`'s, so that `jobStateTimeLimitActions` see the same codes.
    Reserved {
        /// Why it cannot start yet.
        reason: Box<PendingReason>,
        /// Since when it holds the reservation (shell milliseconds).
        since: u64,
        /// Instances of jobs backfilled onto it.
        backfilled: u32,
    },
}

impl PendingReason {
    /// The stable machine code.
    pub fn code(&self) -> &'static str {
        match self {
            PendingReason::Reserved { reason, .. } => reason.code(),
            PendingReason::Misconfigured(m) => m.code(),
            PendingReason::OwnQuotaFull { .. } => "OWN_QUOTA_FULL",
            PendingReason::NotInterruptible { .. } => "NOT_INTERRUPTIBLE",
            PendingReason::ResumeUnverified { .. } => "RESUME_UNVERIFIED",
            PendingReason::BorrowLimitReached { .. } => "BORROW_LIMIT_REACHED",
            PendingReason::NothingToBorrow { .. } => "NOTHING_TO_BORROW",
            PendingReason::WaitingForRelease { .. } => "WAITING_FOR_RELEASE",
            PendingReason::EnvironmentFull { .. } => "ENVIRONMENT_FULL",
            PendingReason::InsufficientCapacity => "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
            PendingReason::HeldForOlderJob { .. } => "HELD_FOR_OLDER_JOB",
            PendingReason::BackfillFinishing { .. } => "BACKFILL_FINISHING",
            PendingReason::WaitingForCheckpoint { .. } => "WAITING_FOR_CHECKPOINT",
            PendingReason::VictimsProtected { .. } => "VICTIMS_PROTECTED",
            PendingReason::ReservedForOthers => "RESERVED_FOR_OTHERS",
            PendingReason::GroupLimitReached { .. } => "GROUP_LIMIT_REACHED",
            PendingReason::BehindFairShare { .. } => "BEHIND_FAIR_SHARE",
            PendingReason::PreviousAttemptStopping => "PREVIOUS_ATTEMPT_STOPPING",
            PendingReason::AwaitingPass => "AWAITING_PASS",
            PendingReason::Drained { .. } => "DRAINED",
        }
    }

    /// Every code, for documentation and validation of scenario files.
    pub const CODES: &'static [&'static str] = &[
        "MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE",
        "MISCONFIGURATION:QUOTA_MANAGEMENT_LIMIT_EXCEEDED",
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
        "OWN_QUOTA_FULL",
        "NOT_INTERRUPTIBLE",
        "RESUME_UNVERIFIED",
        "BORROW_LIMIT_REACHED",
        "NOTHING_TO_BORROW",
        "WAITING_FOR_RELEASE",
        "ENVIRONMENT_FULL",
        "HELD_FOR_OLDER_JOB",
        "BACKFILL_FINISHING",
        "WAITING_FOR_CHECKPOINT",
        "VICTIMS_PROTECTED",
        "RESERVED_FOR_OTHERS",
        "GROUP_LIMIT_REACHED",
        "BEHIND_FAIR_SHARE",
        "PREVIOUS_ATTEMPT_STOPPING",
        "AWAITING_PASS",
        "DRAINED",
    ];
}

impl fmt::Display for PendingReason {
    #[expect(
        clippy::too_many_lines,
        reason = "one match over the pending reasons, one arm per message"
    )]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PendingReason::Misconfigured(m) => write!(f, "{}", m.status_reason()),
            PendingReason::OwnQuotaFull { needs, usage, entitlement } => write!(
                f,
                "OWN_QUOTA_FULL - needs {needs} instance(s); the share uses {usage} of its {entitlement} and cannot borrow or preempt"
            ),
            PendingReason::NotInterruptible { needs, firm, entitlement } => write!(
                f,
                "NOT_INTERRUPTIBLE - needs {needs} instance(s) of its share's own quota, as it may not be interrupted; the share's non-interruptible jobs hold {firm} of its {entitlement}"
            ),
            PendingReason::ResumeUnverified { needs, held, entitlement } => write!(
                f,
                "RESUME_UNVERIFIED - needs {needs} instance(s) of its share's own quota: its class borrows only after one of its jobs was seen resuming from a checkpoint, and none was lately; the share's jobs that may not borrow hold {held} of its {entitlement}"
            ),
            PendingReason::BorrowLimitReached { would_borrow, allowance } => write!(
                f,
                "BORROW_LIMIT_REACHED - would borrow {would_borrow} instance(s); the borrow limit allows {allowance}"
            ),
            PendingReason::NothingToBorrow { needs, lendable } => write!(
                f,
                "NOTHING_TO_BORROW - needs to borrow {needs} instance(s); {lendable} idle instance(s) can be lent"
            ),
            PendingReason::WaitingForRelease { instances } => write!(
                f,
                "WAITING_FOR_RELEASE - {instances} instance(s) are being released by preempted or stopping attempts"
            ),
            PendingReason::EnvironmentFull { limit } => write!(
                f,
                "ENVIRONMENT_FULL - the service environment limit of {limit} is in use by other shares within their own quota"
            ),
            PendingReason::InsufficientCapacity => write!(
                f,
                "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Unable to provision requested compute resources"
            ),
            PendingReason::HeldForOlderJob { job } => write!(
                f,
                "HELD_FOR_OLDER_JOB - capacity is held for job {job}, which is ahead of it: it has waited past the starvation guard, or waits for the jobs it would preempt to checkpoint or finish"
            ),
            PendingReason::BackfillFinishing { instances, until } => write!(
                f,
                "BACKFILL_FINISHING - capacity is reserved for this job: the jobs backfilled onto it (it needs {instances} instance(s) of them and the jobs it waits for) may finish, or are taken as they checkpoint, until {}; then they are preempted for it",
                utc(*until as i64)
            ),
            PendingReason::WaitingForCheckpoint { instances, until } => write!(
                f,
                "WAITING_FOR_CHECKPOINT - it may reclaim {instances} instance(s) from jobs that checkpoint; it takes each as it checkpoints (losing no work), and the rest at {}",
                utc(*until as i64)
            ),
            PendingReason::VictimsProtected { until } => write!(
                f,
                "VICTIMS_PROTECTED - the jobs it would preempt are protected until {} by their share's thrash protection (min-runtime or max-preemptions-per-hour)",
                utc(*until as i64)
            ),
            PendingReason::ReservedForOthers => write!(
                f,
                "RESERVED_FOR_OTHERS - the capacity it would borrow is kept for another share's waiting owner or for a job waiting for its victims to exit"
            ),
            PendingReason::GroupLimitReached { group, needs, usage, limit } => write!(
                f,
                "GROUP_LIMIT_REACHED - needs {needs} instance(s); the shares of group {group} hold {usage} of its limit of {limit}"
            ),
            PendingReason::BehindFairShare { reason, share, weighted, ahead, ahead_weighted } => write!(
                f,
                "BEHIND_FAIR_SHARE - waits: {share}'s weighted share {} is above {ahead}'s {}, which goes first ({reason})",
                figure(*weighted),
                figure(*ahead_weighted)
            ),
            PendingReason::PreviousAttemptStopping => {
                write!(f, "PREVIOUS_ATTEMPT_STOPPING - the previous attempt has not exited yet")
            }
            PendingReason::Reserved {
                reason,
                since,
                backfilled,
            } => write!(
                f,
                "{reason} (capacity is reserved for it since {}: {backfilled} instance(s) backfilled onto it, preemptible for it)",
                utc(*since as i64)
            ),
            PendingReason::AwaitingPass => {
                write!(f, "AWAITING_PASS - submitted or changed; the next scheduling pass decides")
            }
            PendingReason::Drained { reason } => write!(
                f,
                "DRAINED - the executor is drained ({reason}): nothing starts until an admin runs qm drain --cancel"
            ),
        }
    }
}

/// A weighted borrowed share (in thousandths) as people read it: up to two decimals.
fn figure(thousandths: u32) -> String {
    let s = format!("{:.2}", f64::from(thousandths) / 1000.0);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_reason_names_its_misconfiguration_and_a_transient_shortage_none() {
        for m in Misconfiguration::ALL {
            let said = PendingReason::Misconfigured(m).to_string();
            assert_eq!(
                Misconfiguration::from_status_reason(&said),
                Some(m),
                "{said}"
            );
        }
        let shortage = PendingReason::InsufficientCapacity.to_string();
        assert_eq!(
            shortage.split(" - ").next(),
            Some(Misconfiguration::PhysicalMax.code())
        );
        assert_eq!(Misconfiguration::from_status_reason(&shortage), None);
        assert_eq!(
            Misconfiguration::from_status_reason("OWN_QUOTA_FULL - x"),
            None
        );
    }
}
