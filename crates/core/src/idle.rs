//! Idle while jobs wait (issue 20): instances that are free right now while a RUNNABLE job
//! that would fit them waits, and the dominant reason why. It is the figure that tells an
//! admin a policy wastes the cluster: quotas, RESERVE shares, borrow limits or reservations
//! that keep free capacity away from the jobs that queue for it.
//!
//! The rule for *why* a job waits lives in one place, [`Scheduler::explain`]; this module only
//! asks it and sorts the answers into a few [`IdleCause`]s. It is a query: the server calls it
//! at scrape time, the simulator after every pass, and it decides nothing.

use std::collections::BTreeMap;

use crate::model::*;
use crate::reason::PendingReason;
use crate::scheduler::{Queue, Scheduler};

/// Why free instances stay idle while a job that fits them waits: a coarse grouping of
/// [`PendingReason`], in the order that breaks ties (the earlier cause wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IdleCause {
    /// The capacity is held for another job: an aged head's reservation
    /// (`HELD_FOR_OLDER_JOB`, `BACKFILL_FINISHING`) or another share's waiting owner
    /// (`RESERVED_FOR_OTHERS`).
    Reservation,
    /// The free capacity is not lendable (`NOTHING_TO_BORROW`): it belongs to a RESERVE share,
    /// which never lends, or to no share (environment capacity beyond the shares' limits).
    Reserve,
    /// The waiting job's share has reached its borrow limit (`BORROW_LIMIT_REACHED`).
    BorrowLimit,
    /// The waiting job's share's group is at its ceiling (`GROUP_LIMIT_REACHED`).
    GroupLimit,
    /// The waiting job's share is full and its strategy (RESERVE or LEND) never borrows
    /// (`OWN_QUOTA_FULL`).
    NoBorrowing,
    /// The job can never run with this configuration (`MISCONFIGURATION:...`), although the
    /// instances it needs are free.
    NeverFits,
    /// Anything else: a preemption under way (victims stopping, patient or protected), a pass
    /// not run yet, capacity other queues hold, a drained executor (`DRAINED`).
    Other,
}

impl IdleCause {
    /// The stable machine code, as `metrics.json` and the server's gauge label spell it.
    pub fn code(self) -> &'static str {
        match self {
            IdleCause::Reservation => "reservation",
            IdleCause::Reserve => "reserve",
            IdleCause::BorrowLimit => "borrow_limit",
            IdleCause::GroupLimit => "group_limit",
            IdleCause::NoBorrowing => "no_borrowing",
            IdleCause::NeverFits => "never_fits",
            IdleCause::Other => "other",
        }
    }

    /// Every cause, in tie-breaking order.
    pub const ALL: [IdleCause; 7] = [
        IdleCause::Reservation,
        IdleCause::Reserve,
        IdleCause::BorrowLimit,
        IdleCause::GroupLimit,
        IdleCause::NoBorrowing,
        IdleCause::NeverFits,
        IdleCause::Other,
    ];

    /// The cause a waiting job's reason belongs to. A head holding a reservation waits for
    /// its own reason, which is what keeps it off the free capacity.
    pub fn of(reason: &PendingReason) -> IdleCause {
        match reason {
            PendingReason::Reserved { reason, .. }
            | PendingReason::BehindFairShare { reason, .. } => IdleCause::of(reason),
            PendingReason::HeldForOlderJob { .. }
            | PendingReason::BackfillFinishing { .. }
            | PendingReason::ReservedForOthers => IdleCause::Reservation,
            PendingReason::NothingToBorrow { .. } => IdleCause::Reserve,
            PendingReason::BorrowLimitReached { .. } => IdleCause::BorrowLimit,
            PendingReason::GroupLimitReached { .. } => IdleCause::GroupLimit,
            PendingReason::OwnQuotaFull { .. }
            | PendingReason::NotInterruptible { .. }
            | PendingReason::ResumeUnverified { .. } => IdleCause::NoBorrowing,
            PendingReason::Misconfigured(_) => IdleCause::NeverFits,
            PendingReason::WaitingForRelease { .. }
            | PendingReason::WaitingForCheckpoint { .. }
            | PendingReason::VictimsProtected { .. }
            | PendingReason::PreviousAttemptStopping
            | PendingReason::AwaitingPass
            | PendingReason::Drained { .. }
            | PendingReason::EnvironmentFull { .. }
            | PendingReason::InsufficientCapacity => IdleCause::Other,
        }
    }
}

/// Free instances of one queue's instance type that jobs fitting them wait for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleWhileWaiting {
    /// The job queue.
    pub queue: String,
    /// The instance type.
    pub instance_type: String,
    /// Instances nobody holds: the environment's limit (or the physical instances other
    /// queues leave, if fewer) minus what the queue's attempts hold, stopping ones included.
    pub free: u32,
    /// Of those, instances wanted by waiting jobs that fit them: `min(free, Σ demand)`, where
    /// a share's demand is what its RUNNABLE jobs needing at most `free` instances ask for
    /// together (capped at `free`). Always `1..=free`.
    pub wasted: u32,
    /// The cause with the most demand behind it (ties: [`IdleCause::ALL`] order).
    pub cause: IdleCause,
    /// A job waiting for that cause (the first in share order, of the first such share), for
    /// `qm explain`.
    pub job: JobId,
}

impl Scheduler {
    /// Instances left idle while jobs that fit them wait, one entry per queue and instance
    /// type that has any, in queue then type name order; empty when nothing is both free and
    /// wanted.
    ///
    /// Cost: per queue and type with free instances, per share, one look at the pending index
    /// (the first job needing at most `free`, and the share's demand within `free`, both
    /// O(distinct instance counts)) and one [`Scheduler::explain`] of that first job, which
    /// stands for the share's fitting jobs: they wait for the same share's limits. Jobs that
    /// never fit are few (an admin's mistake) and are all looked at. Nothing is cached.
    pub fn idle_while_waiting(&self) -> Vec<IdleWhileWaiting> {
        self.queue_ix
            .keys()
            .flat_map(|name| self.idle_while_waiting_in(name))
            .collect()
    }

    /// [`Scheduler::idle_while_waiting`] for one queue (empty for an unknown one), in type
    /// name order: what a shell answering per queue asks, without looking at the others.
    pub fn idle_while_waiting_in(&self, queue: &str) -> Vec<IdleWhileWaiting> {
        let Some((name, &q)) = self.queue_ix.get_key_value(queue) else {
            return Vec::new();
        };
        let queue = &self.queues[q.0 as usize];
        let mut out: Vec<IdleWhileWaiting> = queue
            .environment
            .keys()
            .filter_map(|&u| self.idle_in(name, queue, q, u))
            .collect();
        out.sort_by(|a, b| a.instance_type.cmp(&b.instance_type));
        out
    }

    /// [`Scheduler::idle_while_waiting`] for one queue's instance type.
    fn idle_in(
        &self,
        name: &str,
        queue: &Queue,
        q: QueueIx,
        u: UnitIx,
    ) -> Option<IdleWhileWaiting> {
        // Most of the time nothing waits: answer that before building the unit's view.
        let waiting = queue
            .units
            .get(&u)
            .is_some_and(|ul| ul.lanes.iter().any(|l| l.pending.len() > 0))
            || queue.parked.iter().any(|id| self.jobs[id].unit == u);
        if !waiting {
            return None;
        }
        let view = self.view(q, u);
        let cap = view
            .ceiling
            .physical_for_queue
            .map_or(view.ceiling.environment, |p| {
                p.min(view.ceiling.environment)
            });
        let held: u32 = view.accounts().iter().map(|a| a.usage).sum();
        let free = cap.saturating_sub(held);
        if free == 0 {
            return None;
        }
        // Per cause: demand and the first job waiting for it (shares in index order, which
        // is creation order: no hash-map order reaches the result).
        let mut by_cause: BTreeMap<IdleCause, (u32, JobId)> = BTreeMap::new();
        let mut note = |cause: IdleCause, demand: u32, job: JobId| {
            let e = by_cause.entry(cause).or_insert((0, job));
            e.0 = e.0.saturating_add(demand);
        };
        if let Some(ul) = queue.units.get(&u) {
            for lane in &ul.lanes {
                let Some((_, key)) = lane.pending.first(free) else {
                    continue;
                };
                if let Some(reason) = self.explain(key.job) {
                    note(
                        IdleCause::of(&reason),
                        lane.pending.demand_within(free),
                        key.job,
                    );
                }
            }
        }
        for &id in &queue.parked {
            let job = &self.jobs[&id];
            if job.unit == u && job.spec.count <= free {
                note(IdleCause::NeverFits, job.spec.count, id);
            }
        }
        let demand = by_cause
            .values()
            .fold(0u32, |sum, (d, _)| sum.saturating_add(*d));
        // Reversed, so that the first maximum in cause order wins a tie.
        let (&cause, &(_, job)) = by_cause.iter().rev().max_by_key(|(_, (d, _))| *d)?;
        Some(IdleWhileWaiting {
            queue: name.to_string(),
            instance_type: self.unit_name(u).to_string(),
            free,
            wasted: demand.min(free),
            cause,
            job,
        })
    }
}
