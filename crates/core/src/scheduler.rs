//! The scheduler state and its input handlers: one synchronous function per input, each
//! taking `now` and returning the effects it causes. The scheduling pass itself lives in
//! [`crate::pass`]; [`Scheduler::step`] runs an input and then the pass.
//!
//! State layout: queues hold shares and, per capacity unit, one [`Lane`] per share with the
//! share's usage, its pending jobs (indexed so that a pass never scans them) and its running
//! attempts (indexed in victim order). Jobs and attempts live in hash maps that are only ever
//! looked up by id, never iterated where a decision depends on the order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use crate::error::CoreError;
use crate::model::*;
use crate::reason::Misconfiguration;

/// Most quota shares per queue (AWS limit).
pub const MAX_SHARES_PER_QUEUE: usize = 20;
/// Most capacity limits per share or service environment (AWS limit).
pub const MAX_LIMITS: usize = 5;
/// Highest scheduling priority.
pub const MAX_PRIORITY: u32 = 9999;

/// Knobs of the scheduling policy that AWS does not expose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Starvation guard for best-effort FIFO (DESIGN.md §2 rule 8). A job at the head of its
    /// share that has waited this long reserves its share's capacity on that unit (and, when
    /// it competes with other owners for the environment, every later start): jobs still start
    /// on it, backfilled, and are preempted for it once it could start (docs/scheduling.md).
    /// Before that, smaller jobs may pass it.
    pub reserve_after_ms: Millis,
    /// How long a job that could start by reclaiming capacity from jobs that report
    /// checkpoints waits before it preempts them: meanwhile it takes each victim as it
    /// checkpoints (losing nothing) and capacity that frees up on its own. 0 = at once.
    pub reclaim_patience_ms: Millis,
    /// How long an aged head that could start by preempting the jobs backfilled onto its
    /// reservation lets them finish (taking each as it checkpoints), while nothing new is
    /// backfilled. 0 = at once.
    pub backfill_patience_ms: Millis,
    /// Whether a job that may not pass an aged head starts anyway, preemptible for it, on
    /// capacity the head cannot use yet (the default). Without it, only jobs whose runtime
    /// bound ends before the head could start do (EASY backfill, as Slurm's backfill plugin
    /// does): the simulator's `pooled-backfill` baseline.
    pub preemptible_backfill: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            reserve_after_ms: 10 * 60 * 1000,
            reclaim_patience_ms: 5 * 60 * 1000,
            backfill_patience_ms: 30 * 60 * 1000,
            preemptible_backfill: true,
        }
    }
}

/// Order of pending jobs within a share: priority descending, then submission order (a
/// preempted or retried job keeps its place).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PendKey {
    pub(crate) priority: Reverse<u32>,
    pub(crate) seq: u64,
    pub(crate) job: JobId,
    /// When it became RUNNABLE: carried (after the unique fields, so the order is unchanged)
    /// so that the pass can tell an aged head without looking the job up.
    pub(crate) queued_at: Millis,
    /// Whether the job runs only within its share's own quota ([`JobSpec::own_only`]): it
    /// picks the job's bucket in [`PendingIndex`].
    pub(crate) own_only: bool,
}

/// Pending jobs of one share on one unit, bucketed by instance count so that "the first job
/// in order that needs at most N instances" costs O(distinct counts · log n), not O(n), and
/// O(1) when the share's head itself fits (the pass asks for the head on every nomination).
/// Jobs that run only within their share's own quota (they may not be interrupted, or may not
/// borrow) are bucketed apart, so that a pass that found one of them too large for what is
/// left of the quota skips the larger ones without looking at each.
#[derive(Clone, Debug, Default)]
pub(crate) struct PendingIndex {
    /// Jobs that may borrow, then jobs that run only within the share's own quota.
    by_count: [BTreeMap<u32, BTreeSet<PendKey>>; 2],
    len: usize,
    /// The first job of all, with its count.
    head: Option<(u32, PendKey)>,
}

impl PendingIndex {
    fn class(&mut self, key: &PendKey) -> &mut BTreeMap<u32, BTreeSet<PendKey>> {
        &mut self.by_count[usize::from(key.own_only)]
    }

    pub(crate) fn insert(&mut self, count: u32, key: PendKey) {
        if self.class(&key).entry(count).or_default().insert(key) {
            self.len += 1;
            if self.head.is_none_or(|(_, h)| key < h) {
                self.head = Some((count, key));
            }
        }
    }

    pub(crate) fn remove(&mut self, count: u32, key: &PendKey) -> bool {
        let class = self.class(key);
        let Some(set) = class.get_mut(&count) else {
            return false;
        };
        let removed = set.remove(key);
        if set.is_empty() {
            class.remove(&count);
        }
        if removed {
            self.len -= 1;
            if self.head.is_some_and(|(_, h)| h == *key) {
                self.head = self.scan(u32::MAX);
            }
        }
        removed
    }

    /// The first job in share order among those needing at most `max_count` instances.
    pub(crate) fn first(&self, max_count: u32) -> Option<(u32, PendKey)> {
        match self.head {
            Some((c, k)) if c <= max_count => Some((c, k)),
            None => None,
            Some(_) => self.scan(max_count),
        }
    }

    /// The instances that the jobs needing at most `room` instances ask for together, capped
    /// at `room`: O(distinct counts), stopping once the room is spoken for.
    pub(crate) fn demand_within(&self, room: u32) -> u32 {
        self.demand_within_besides(room, 0)
    }

    /// [`PendingIndex::demand_within`] without `besides` instances of jobs that fit `room`
    /// and are counted elsewhere (a share's reclaimers, whose claims protect their room).
    pub(crate) fn demand_within_besides(&self, room: u32, besides: u32) -> u32 {
        let mut demand = 0u64;
        let cap = u64::from(room) + u64::from(besides);
        for (c, set) in self.by_count.iter().flat_map(|m| m.range(..=room)) {
            demand += u64::from(*c) * set.len() as u64;
            if demand >= cap {
                return room;
            }
        }
        (demand.saturating_sub(u64::from(besides)) as u32).min(room)
    }

    /// [`PendingIndex::first`] among the jobs after `after` in share order, of which those
    /// that run only within the share's own quota need at most `max_own_only` instances.
    pub(crate) fn first_after(
        &self,
        max_count: u32,
        max_own_only: u32,
        after: Option<PendKey>,
    ) -> Option<(u32, PendKey)> {
        if after.is_none() && max_own_only >= max_count {
            return self.first(max_count);
        }
        let from = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let [borrows, own_only] = &self.by_count;
        borrows
            .range(..=max_count)
            .chain(own_only.range(..=max_count.min(max_own_only)))
            .filter_map(|(c, set)| {
                set.range((from, std::ops::Bound::Unbounded))
                    .next()
                    .map(|k| (*c, *k))
            })
            .min_by_key(|(_, k)| *k)
    }

    fn scan(&self, max_count: u32) -> Option<(u32, PendKey)> {
        self.by_count
            .iter()
            .flat_map(|m| m.range(..=max_count))
            .filter_map(|(c, set)| set.first().map(|k| (*c, *k)))
            .min_by_key(|(_, k)| *k)
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the cached head is the first job of all (checked by the invariants).
    pub(crate) fn head_is_consistent(&self) -> bool {
        self.head == self.scan(u32::MAX)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &PendKey)> {
        self.by_count
            .iter()
            .flatten()
            .flat_map(|(c, set)| set.iter().map(move |k| (*c, k)))
    }
}

/// Order of running attempts as preemption victims (DESIGN.md §2 rule 7), within one share:
/// lower priority first, then the least work lost (the most recent checkpoint, else start),
/// then the larger job, then the newer attempt. Across shares the victim search merges these
/// lists, inserting "more borrowed instances of the unit" after work lost (see
/// [`crate::victims::VictimRank`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RunKey {
    pub(crate) priority: u32,
    pub(crate) progress: Reverse<Millis>,
    pub(crate) count: Reverse<u32>,
    pub(crate) attempt: Reverse<AttemptId>,
}

/// One share's state on one unit of one queue.
#[derive(Clone, Debug, Default)]
pub(crate) struct Lane {
    /// Instances held by its attempts, stopping ones included.
    pub(crate) usage: u32,
    /// Of which held by attempts that are stopping.
    pub(crate) stopping: u32,
    /// Of which held by attempts that run only within the share's own quota (they may not be
    /// interrupted, or may not borrow): counted first against the entitlement, within it by
    /// admission (a lowered limit aside), and never freed by a reclaim.
    pub(crate) own_only: u32,
    pub(crate) pending: PendingIndex,
    /// Active (not stopping) attempts in victim order.
    pub(crate) running: BTreeSet<RunKey>,
    /// Instances of active attempts per priority, for "how much could in-share preemption free
    /// for priority p" without walking the attempts.
    pub(crate) running_by_priority: BTreeMap<u32, u32>,
    /// Pending jobs that preempted for their capacity and wait for it (a subset of
    /// `pending`); the pass decides them first.
    pub(crate) reclaimers: BTreeSet<PendKey>,
    /// Set by the last pass when this share's head held the lane (see `Hold`).
    pub(crate) held_for: Option<(JobId, Hold)>,
    /// Instances of active attempts backfilled onto an aged head's reservation, per head.
    pub(crate) backfill: BTreeMap<JobId, u32>,
}

impl Lane {
    /// An active attempt of this lane leaves the victim index (it stops or exits).
    pub(crate) fn deactivate(&mut self, att: &Attempt) {
        self.running.remove(&att.run_key());
        sub_priority(&mut self.running_by_priority, att.priority, att.count);
        if let Some(h) = att.backfill_for {
            sub_priority(&mut self.backfill, h, att.count);
        }
    }
}

/// Why the last pass let nothing past a share's head job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// The head waits for capacity that preempted attempts are releasing.
    Release,
    /// A job ahead holds the capacity: an aged head letting what was backfilled onto its
    /// reservation finish, or a job patient with the victims it would preempt.
    Starvation,
}

/// All shares' lanes for one unit of one queue.
#[derive(Clone, Debug, Default)]
pub(crate) struct UnitLanes {
    /// Indexed by `ShareIx`.
    pub(crate) lanes: Vec<Lane>,
    /// Set by the last pass: the jobs patient with their victims (see `Patience`). Rebuilt by
    /// every pass: a job the pass did not decide is no longer patient.
    pub(crate) patient: BTreeMap<JobId, Patience>,
    /// Set by the last pass: the earliest instant a patient job's patience runs out or, while
    /// jobs wait, a running job's thrash protection ends (see `Scheduler::set_wake`).
    pub(crate) wake: Option<Millis>,
}

/// A job waiting for its victims to checkpoint or finish before it preempts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Patience {
    /// The first pass that found it a victim set.
    pub(crate) since: Millis,
    /// With jobs backfilled onto its reservation (`Policy::backfill_patience_ms`), else with
    /// borrowers that checkpoint (`Policy::reclaim_patience_ms`).
    pub(crate) backfill: bool,
}

impl Patience {
    /// When it runs out under `policy`.
    pub(crate) fn until(&self, policy: &Policy) -> Millis {
        let wait = if self.backfill {
            policy.backfill_patience_ms
        } else {
            policy.reclaim_patience_ms
        };
        self.since.saturating_add(wait)
    }
}

impl UnitLanes {
    pub(crate) fn lane(&mut self, s: ShareIx) -> &mut Lane {
        let i = usize::from(s.0);
        if self.lanes.len() <= i {
            self.lanes.resize_with(i + 1, Lane::default);
        }
        &mut self.lanes[i]
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Share {
    pub(crate) spec: ShareSpec,
    pub(crate) limits: BTreeMap<UnitIx, u32>,
    /// Deleted shares stay as tombstones until their last attempt has exited, so that the
    /// capacity their stopping attempts hold stays accounted for.
    pub(crate) deleted: bool,
}

impl Share {
    /// Whether its jobs have thrash protection.
    pub(crate) fn protects(&self) -> bool {
        self.spec.min_runtime_ms > 0 || self.spec.max_preemptions_per_hour > 0
    }

    pub(crate) fn entitlement(&self, u: UnitIx) -> u32 {
        if self.deleted {
            0
        } else {
            self.limits.get(&u).copied().unwrap_or(0)
        }
    }

    /// Its account on unit `u`, as the attempts of its lane there hold it. A lowered limit
    /// applies to jobs that run only within their share's own quota (they may not be
    /// interrupted, or may not borrow) only as they end: until then what they hold counts as
    /// the share's own, not as borrowed (which would make owners wait for a reclaim that can
    /// never come).
    pub(crate) fn account(&self, u: UnitIx, lane: Option<&Lane>) -> crate::ledger::Account {
        let (usage, own_only) = lane.map_or((0, 0), |l| (l.usage, l.own_only));
        let entitlement = self.entitlement(u).max(own_only);
        let allowance = if self.deleted {
            Some(0)
        } else {
            self.spec.borrow_allowance(entitlement)
        };
        crate::ledger::Account {
            entitlement,
            usage,
            strategy: self.strategy(),
            allowance,
        }
    }

    /// Whether a higher-priority job may preempt lower-priority jobs of this share.
    pub(crate) fn in_share_preemption(&self) -> bool {
        self.spec.in_share_preemption && !self.deleted
    }

    pub(crate) fn strategy(&self) -> Strategy {
        if self.deleted {
            Strategy::Reserve
        } else {
            self.spec.strategy
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Queue {
    pub(crate) name: String,
    pub(crate) environment: BTreeMap<UnitIx, u32>,
    pub(crate) shares: Vec<Share>,
    pub(crate) share_ix: BTreeMap<String, ShareIx>,
    pub(crate) units: BTreeMap<UnitIx, UnitLanes>,
    /// Pending jobs that can never fit as configured, re-examined when the configuration
    /// changes (rare), never on the hot path.
    pub(crate) parked: BTreeSet<JobId>,
    /// How idle lendable capacity goes to waiting borrowers.
    pub(crate) idle_assignment: IdleAssignment,
    /// Whether borrowers may preempt each other for fairness.
    pub(crate) fair_reclaim: bool,
    /// Groups of shares, as configured (limits interned).
    pub(crate) groups: Vec<Group>,
    /// Per share index: the index of its group. Kept in step by `regroup` whenever shares or
    /// groups change.
    pub(crate) group_of: Vec<Option<u8>>,
}

impl Queue {
    pub(crate) fn new(name: String) -> Self {
        Queue {
            name,
            environment: BTreeMap::new(),
            shares: Vec::new(),
            share_ix: BTreeMap::new(),
            units: BTreeMap::new(),
            parked: BTreeSet::new(),
            idle_assignment: IdleAssignment::Fifo,
            fair_reclaim: false,
            groups: Vec::new(),
            group_of: Vec::new(),
        }
    }

    /// Recomputes `group_of` from the groups' member names and the live shares.
    pub(crate) fn regroup(&mut self) {
        self.group_of = vec![None; self.shares.len()];
        for (g, group) in self.groups.iter().enumerate() {
            for m in &group.spec.shares {
                if let Some(s) = self.share_ix.get(m) {
                    self.group_of[usize::from(s.0)] = Some(g as u8);
                }
            }
        }
    }

    /// Share `s`'s group, if any.
    pub(crate) fn group(&self, s: usize) -> Option<usize> {
        self.group_of.get(s).copied().flatten().map(usize::from)
    }

    /// Whether anything but FIFO order decides between borrowers: fair sharing, or groups
    /// (their members borrow their idle capacity first).
    pub(crate) fn orders_borrowers(&self) -> bool {
        self.idle_assignment == IdleAssignment::FairShare || !self.groups.is_empty()
    }
}

/// A group of a queue's shares, with its limits interned.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub(crate) spec: GroupSpec,
    pub(crate) limits: BTreeMap<UnitIx, u32>,
}

impl Group {
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    pub(crate) fn weight(&self) -> u32 {
        self.spec.weight
    }
}

/// What the core knows about a job.
#[derive(Clone, Debug)]
pub struct Job {
    /// As submitted (priority kept current). Shared with images: a snapshot takes a
    /// reference, and a priority change copies it then.
    pub spec: std::sync::Arc<JobSpec>,
    pub(crate) queue: QueueIx,
    pub(crate) share: ShareIx,
    pub(crate) unit: UnitIx,
    /// Submission order; keeps its value across preemptions and retries.
    pub seq: u64,
    /// When it was submitted.
    pub submitted_at: Millis,
    /// When it last became RUNNABLE.
    pub queued_at: Millis,
    /// Where it is.
    pub status: JobStatus,
    /// The attempt holding capacity for it (status Dispatched).
    pub attempt: Option<AttemptId>,
    /// A preempted attempt that has not exited yet.
    pub stopping: Option<AttemptId>,
    /// Set while it can never fit as configured.
    pub misconfigured: Option<Misconfiguration>,
    /// Attempts that failed (count against `retryStrategy.attempts`).
    pub failures: u32,
    /// Times preempted.
    pub preemptions: u32,
    /// Its latest attempts that were lost, in a row (`Exit::Lost`'s limit).
    pub lost_in_a_row: u32,
    /// When it was preempted within the last hour, oldest first (thrash protection).
    pub(crate) recent_preemptions: Vec<Millis>,
    /// A termination was requested.
    pub terminated: bool,
    /// The last thing that happened to it, in words (empty while nothing did).
    pub status_reason: String,
    /// The last checkpoint it reported.
    pub last_checkpoint: Option<Millis>,
    /// It preempted victims and waits for them to exit.
    pub(crate) reclaiming: bool,
    /// Set when it must become FAILED once its stopping attempt has exited (terminated, or
    /// out of preemption retries); the reason it will carry.
    pub(crate) fail_on_exit: Option<String>,
}

impl Job {
    /// Counts an attempt's exit: a failure or a loss of an attempt that was not being stopped
    /// counts against the job's retries or its lost attempts in a row; anything but a loss
    /// ends such a row.
    fn count_exit(&mut self, stopping: bool, exit: &Exit) {
        match exit {
            Exit::Lost { .. } if !stopping => self.lost_in_a_row += 1,
            Exit::Lost { .. } => {}
            Exit::Failed { .. } if !stopping => {
                self.lost_in_a_row = 0;
                self.failures += 1;
            }
            Exit::Failed { .. } | Exit::Succeeded => self.lost_in_a_row = 0,
        }
    }

    /// FAILED for `reason`, announced.
    fn fail(&mut self, id: JobId, reason: String, fx: &mut Vec<Effect>) {
        self.status = JobStatus::Failed;
        self.status_reason = reason.clone();
        fx.push(Effect::Finished {
            job: id,
            status: JobStatus::Failed,
            reason,
        });
    }

    pub(crate) fn pend_key(&self) -> PendKey {
        PendKey {
            priority: Reverse(self.spec.priority),
            seq: self.seq,
            job: self.spec.id,
            queued_at: self.queued_at,
            own_only: self.spec.own_only(),
        }
    }

    pub(crate) fn is_pending(&self) -> bool {
        self.status == JobStatus::Runnable
            && self.stopping.is_none()
            && self.misconfigured.is_none()
    }
}

/// One execution of a job, holding capacity until the shell reports it exited.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// Its id.
    pub id: AttemptId,
    /// Its job.
    pub job: JobId,
    pub(crate) queue: QueueIx,
    pub(crate) share: ShareIx,
    pub(crate) unit: UnitIx,
    /// Instances held.
    pub count: u32,
    /// When it started.
    pub started_at: Millis,
    /// The last checkpoint, else the start: what a preemption would lose.
    pub progress_at: Millis,
    /// The job's priority, mirrored for the victim index.
    pub priority: u32,
    /// Set once the core asked for it to stop.
    pub stopping: Option<StopCause>,
    /// Started on capacity the starvation guard held for this aged head (backfill): that job,
    /// while it is its share's head, may preempt it whatever its share and priority.
    pub backfill_for: Option<JobId>,
    /// Time between its last two checkpoints: a victim that keeps to it is worth waiting for
    /// (`Policy::reclaim_patience_ms`).
    pub checkpoint_gap: Option<Millis>,
    /// Its job may be interrupted ([`JobSpec::interruptible`]); else it is never a victim.
    pub interruptible: bool,
    /// Its job could borrow when it started ([`JobSpec::borrows`]).
    pub borrows: bool,
}

impl Attempt {
    /// Whether it is counted first against its share's entitlement and never borrows.
    pub fn own_only(&self) -> bool {
        !self.interruptible || !self.borrows
    }

    pub(crate) fn run_key(&self) -> RunKey {
        RunKey {
            priority: self.priority,
            progress: Reverse(self.progress_at),
            count: Reverse(self.count),
            attempt: Reverse(self.id),
        }
    }
}

/// An input to the core. Configuration, jobs and what the executor reports all come in here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// Create a queue with its service environment, or replace the environment's limits.
    PutQueue(QueueSpec),
    /// Create a share, or update every field of an existing one.
    PutShare {
        /// Queue name.
        queue: String,
        /// The share's full configuration.
        share: ShareSpec,
    },
    /// Delete a DISABLED share and terminate its jobs.
    DeleteShare {
        /// Queue name.
        queue: String,
        /// Share name.
        share: String,
    },
    /// Set (or clear) the physical instances of a type that all queues share.
    SetPhysicalCapacity {
        /// Instance type.
        instance_type: String,
        /// Instances; `None` = no physical limit.
        instances: Option<u32>,
    },
    /// Submit a job.
    Submit(JobSpec),
    /// Whether a job may run on borrowed capacity from its next start on
    /// ([`JobSpec::borrows`]; an attempt that holds capacity keeps what it started with).
    SetBorrows {
        /// The job.
        job: JobId,
        /// Whether it may borrow.
        borrows: bool,
    },
    /// Change a job's priority (UpdateServiceJob).
    UpdatePriority {
        /// The job.
        job: JobId,
        /// New priority.
        priority: u32,
    },
    /// The job reported a checkpoint at `now`.
    Checkpoint {
        /// The job.
        job: JobId,
    },
    /// An attempt's processes are gone.
    AttemptExited {
        /// The attempt.
        attempt: AttemptId,
        /// How it ended.
        exit: Exit,
    },
    /// Preempt a running job as a reclaim would (SIGTERM, grace, back to RUNNABLE, counted
    /// as a preemption), to check its resume path: `qm preempt`.
    Drill {
        /// The job.
        job: JobId,
        /// Who asked, and why (its attempt's status reason says it).
        reason: String,
    },
    /// Terminate a job (TerminateServiceJob).
    Terminate {
        /// The job.
        job: JobId,
        /// Recorded as its status reason.
        reason: String,
    },
    /// Drain the executor (`qm drain`): no pass starts or preempts anything until
    /// [`Input::EndDrain`]; waiting jobs say [`crate::PendingReason::Drained`]. With
    /// `requeue`, every running attempt is stopped as a preemption would stop it and its job
    /// queued again ([`StopCause::Requeue`]: no retry, no preemption counted). Draining a
    /// drained executor again replaces the reason (and may requeue).
    Drain {
        /// Who asked, and why: what waiting jobs and requeued attempts say.
        reason: String,
        /// Whether to stop the running attempts too.
        requeue: bool,
    },
    /// End the drain (`qm drain --cancel`): the next pass looks at every lane again.
    EndDrain,
}

/// The scheduling core. See the crate docs for how shells drive it.
#[derive(Clone, Debug, Default)]
pub struct Scheduler {
    pub(crate) policy: Policy,
    pub(crate) unit_names: Vec<String>,
    pub(crate) unit_ix: BTreeMap<String, UnitIx>,
    pub(crate) queues: Vec<Queue>,
    pub(crate) queue_ix: BTreeMap<String, QueueIx>,
    /// Physical instances per unit, when the executor reports them.
    pub(crate) physical: BTreeMap<UnitIx, u32>,
    /// Instances held across all queues, per unit (indexed by `UnitIx`).
    pub(crate) physical_used: Vec<u32>,
    /// Instances reclaiming jobs wait for across all queues, per unit: a queue leaves what
    /// another queue reclaimed to that queue, when a physical limit is shared.
    pub(crate) reclaim_demand: Vec<u32>,
    /// Looked up by id only; never iterated where order could reach a decision. Ids come from
    /// the shell, not from users, so a fast non-keyed hash is safe.
    pub(crate) jobs: FxHashMap<JobId, Box<Job>>,
    pub(crate) attempts: FxHashMap<AttemptId, Attempt>,
    pub(crate) next_attempt: u64,
    pub(crate) next_seq: u64,
    /// Lanes whose inputs changed since the last pass.
    pub(crate) dirty: BTreeSet<(QueueIx, UnitIx)>,
    /// The pass's working accounts, kept between passes only to reuse their allocations.
    pub(crate) scratch: Option<crate::view::View>,
    /// The victim search's allocations, kept between searches for the same reason.
    pub(crate) search_pool: crate::victims::SearchPool,
    /// The latest time the shell passed in: what `explain` judges thrash protection by.
    pub(crate) clock: Millis,
    /// Why the executor is drained (`Input::Drain`); `None` while it is not.
    pub(crate) drain: Option<String>,
    /// While a batch another build wrote is replayed: the decisions it logged that are not
    /// applied yet, which take the place of this build's rules ([`crate::logged`]).
    pub(crate) replaying: Option<crate::logged::Logged>,
}

impl Scheduler {
    /// An empty scheduler with the given policy.
    pub fn new(policy: Policy) -> Self {
        Scheduler {
            policy,
            ..Default::default()
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Applies one input, then runs the scheduling pass; returns every effect, in order.
    /// On error nothing changed.
    pub fn step(&mut self, now: Millis, input: Input) -> Result<Vec<Effect>, CoreError> {
        let mut effects = self.apply(now, input)?;
        effects.extend(self.schedule(now));
        Ok(effects)
    }

    /// Applies one input without running the pass (the shell calls [`Scheduler::schedule`]
    /// when it wants decisions, e.g. once per batch of inputs).
    pub fn apply(&mut self, now: Millis, input: Input) -> Result<Vec<Effect>, CoreError> {
        self.clock = self.clock.max(now);
        let mut fx = Vec::new();
        match input {
            Input::PutQueue(spec) => self.put_queue(spec)?,
            Input::PutShare { queue, share } => self.put_share(&queue, share)?,
            Input::DeleteShare { queue, share } => {
                self.delete_share(now, &queue, &share, &mut fx)?
            }
            Input::SetPhysicalCapacity {
                instance_type,
                instances,
            } => {
                let u = self.intern_unit(&instance_type);
                match instances {
                    Some(n) => self.physical.insert(u, n),
                    None => self.physical.remove(&u),
                };
                self.reexamine();
            }
            Input::Submit(spec) => self.submit(now, spec)?,
            Input::UpdatePriority { job, priority } => self.update_priority(job, priority)?,
            Input::SetBorrows { job, borrows } => self.set_borrows(job, borrows)?,
            Input::Checkpoint { job } => self.checkpoint(now, job)?,
            Input::AttemptExited { attempt, exit } => {
                self.attempt_exited(now, attempt, exit, &mut fx)?
            }
            Input::Terminate { job, reason } => self.terminate(now, job, reason, &mut fx)?,
            Input::Drill { job, reason } => self.drill(now, job, reason, &mut fx)?,
            Input::Drain { reason, requeue } => self.drain(now, reason, requeue, &mut fx),
            Input::EndDrain => {
                if self.drain.take().is_some() {
                    self.reexamine();
                }
            }
        }
        Ok(fx)
    }

    pub(crate) fn intern_unit(&mut self, name: &str) -> UnitIx {
        if let Some(u) = self.unit_ix.get(name) {
            return *u;
        }
        let u = UnitIx(self.unit_names.len() as u16);
        self.unit_names.push(name.to_string());
        self.unit_ix.insert(name.to_string(), u);
        self.physical_used.push(0);
        self.reclaim_demand.push(0);
        u
    }

    /// The name of an interned unit.
    pub(crate) fn unit_name(&self, u: UnitIx) -> &str {
        &self.unit_names[usize::from(u.0)]
    }

    fn queue_by_name(&self, name: &str) -> Result<QueueIx, CoreError> {
        self.queue_ix
            .get(name)
            .copied()
            .ok_or_else(|| CoreError::UnknownQueue(name.to_string()))
    }

    fn put_queue(&mut self, spec: QueueSpec) -> Result<(), CoreError> {
        if spec.environment.len() > MAX_LIMITS {
            return Err(CoreError::TooMany {
                what: "a service environment's capacity limits",
                max: MAX_LIMITS,
                got: spec.environment.len(),
            });
        }
        let env: BTreeMap<UnitIx, u32> = spec
            .environment
            .iter()
            .map(|(k, v)| (self.intern_unit(k), *v))
            .collect();
        check_groups(&spec)?;
        let groups: Vec<Group> = spec
            .groups
            .iter()
            .map(|g| Group {
                limits: g
                    .limits
                    .iter()
                    .map(|(k, v)| (self.intern_unit(k), *v))
                    .collect(),
                spec: g.clone(),
            })
            .collect();
        let q = match self.queue_ix.get(&spec.name) {
            Some(q) => *q,
            None => {
                let q = QueueIx(self.queues.len() as u32);
                self.queues.push(Queue::new(spec.name.clone()));
                self.queue_ix.insert(spec.name.clone(), q);
                q
            }
        };
        let queue = &mut self.queues[q.0 as usize];
        queue.environment = env;
        queue.idle_assignment = spec.idle_assignment;
        queue.fair_reclaim = spec.fair_reclaim;
        queue.groups = groups;
        queue.regroup();
        self.reexamine_queue(q);
        Ok(())
    }

    /// The queue's configuration as a [`QueueSpec`] (what `PutQueue` last set).
    pub fn queue_spec(&self, name: &str) -> Option<QueueSpec> {
        let q = &self.queues[self.queue_ix.get(name)?.0 as usize];
        Some(QueueSpec {
            name: q.name.clone(),
            environment: q
                .environment
                .iter()
                .map(|(u, n)| (self.unit_name(*u).to_string(), *n))
                .collect(),
            idle_assignment: q.idle_assignment,
            fair_reclaim: q.fair_reclaim,
            groups: q.groups.iter().map(|g| g.spec.clone()).collect(),
        })
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a share's update checked and applied in one place"
    )]
    fn put_share(&mut self, queue: &str, spec: ShareSpec) -> Result<(), CoreError> {
        let q = self.queue_by_name(queue)?;
        if spec.limits.len() > MAX_LIMITS {
            return Err(CoreError::TooMany {
                what: "a quota share's capacity limits",
                max: MAX_LIMITS,
                got: spec.limits.len(),
            });
        }
        if spec.borrow_limit_percent < -1 {
            return Err(CoreError::InvalidBorrowLimit(spec.borrow_limit_percent));
        }
        if spec.weight == 0 {
            return Err(CoreError::InvalidWeight {
                what: format!("quota share '{}'", spec.name),
            });
        }
        let limits: BTreeMap<UnitIx, u32> = spec
            .limits
            .iter()
            .map(|(k, v)| (self.intern_unit(k), *v))
            .collect();
        let queue = &mut self.queues[q.0 as usize];
        match queue.share_ix.get(&spec.name) {
            Some(s) => {
                let share = &mut queue.shares[usize::from(s.0)];
                share.spec = spec;
                share.limits = limits;
            }
            None => {
                let live = queue.shares.iter().filter(|s| !s.deleted).count();
                if live >= MAX_SHARES_PER_QUEUE {
                    return Err(CoreError::TooMany {
                        what: "a job queue's quota shares",
                        max: MAX_SHARES_PER_QUEUE,
                        got: live + 1,
                    });
                }
                // Reuse a tombstone whose attempts have all exited, so indices stay bounded.
                let reusable = (0..queue.shares.len()).find(|&i| {
                    queue.shares[i].deleted
                        && queue
                            .units
                            .values()
                            .all(|ul| ul.lanes.get(i).is_none_or(|l| l.usage == 0))
                });
                let ix = match reusable {
                    Some(i) => {
                        queue.shares[i] = Share {
                            spec: spec.clone(),
                            limits,
                            deleted: false,
                        };
                        for ul in queue.units.values_mut() {
                            if let Some(lane) = ul.lanes.get_mut(i) {
                                *lane = Lane::default();
                            }
                        }
                        i
                    }
                    None => {
                        queue.shares.push(Share {
                            spec: spec.clone(),
                            limits,
                            deleted: false,
                        });
                        queue.shares.len() - 1
                    }
                };
                queue.share_ix.insert(spec.name.clone(), ShareIx(ix as u16));
            }
        }
        queue.regroup();
        self.reexamine_queue(q);
        Ok(())
    }

    fn delete_share(
        &mut self,
        now: Millis,
        queue: &str,
        share: &str,
        fx: &mut Vec<Effect>,
    ) -> Result<(), CoreError> {
        let q = self.queue_by_name(queue)?;
        let s = self.share_by_name(q, share)?;
        if self.queues[q.0 as usize].shares[usize::from(s.0)]
            .spec
            .enabled
        {
            return Err(CoreError::ShareNotDisabled {
                queue: queue.into(),
                share: share.into(),
            });
        }
        // Rare administrative path: collecting the share's jobs may scan all jobs; sorted so
        // that the effects come out in the same order every time.
        let mut victims: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| j.queue == q && j.share == s && !j.status.is_final())
            .map(|j| j.spec.id)
            .collect();
        victims.sort();
        let reason = format!("Quota share {share} was deleted");
        for j in victims {
            self.terminate(now, j, reason.clone(), fx)?;
        }
        let queue = &mut self.queues[q.0 as usize];
        queue.shares[usize::from(s.0)].deleted = true;
        queue.share_ix.remove(share);
        queue.regroup();
        self.reexamine_queue(q);
        Ok(())
    }

    pub(crate) fn share_by_name(&self, q: QueueIx, name: &str) -> Result<ShareIx, CoreError> {
        let queue = &self.queues[q.0 as usize];
        queue
            .share_ix
            .get(name)
            .copied()
            .ok_or_else(|| CoreError::UnknownShare {
                queue: queue.name.clone(),
                share: name.to_string(),
            })
    }

    fn submit(&mut self, now: Millis, spec: JobSpec) -> Result<(), CoreError> {
        if self.jobs.contains_key(&spec.id) {
            return Err(CoreError::DuplicateJob(spec.id));
        }
        if spec.priority > MAX_PRIORITY {
            return Err(CoreError::InvalidPriority(spec.priority));
        }
        if spec.count == 0 {
            return Err(CoreError::InvalidCount);
        }
        if !(1..=10).contains(&spec.attempts) {
            return Err(CoreError::InvalidAttempts(spec.attempts));
        }
        let q = self.queue_by_name(&spec.queue)?;
        let s = self.share_by_name(q, &spec.share)?;
        if !self.queues[q.0 as usize].shares[usize::from(s.0)]
            .spec
            .enabled
        {
            return Err(CoreError::ShareDisabled {
                queue: spec.queue,
                share: spec.share,
            });
        }
        let u = self.intern_unit(&spec.instance_type);
        let seq = self.next_seq;
        self.next_seq += 1;
        let id = spec.id;
        let job = Job {
            spec: std::sync::Arc::new(spec),
            queue: q,
            share: s,
            unit: u,
            seq,
            submitted_at: now,
            queued_at: now,
            status: JobStatus::Runnable,
            attempt: None,
            stopping: None,
            misconfigured: None,
            failures: 0,
            lost_in_a_row: 0,
            preemptions: 0,
            terminated: false,
            status_reason: String::new(),
            last_checkpoint: None,
            reclaiming: false,
            recent_preemptions: Vec::new(),
            fail_on_exit: None,
        };
        self.jobs.insert(id, Box::new(job));
        self.enqueue(id);
        Ok(())
    }

    /// Puts a RUNNABLE job with no stopping attempt where the pass will find it: the pending
    /// index, or the parked set when it can never fit.
    pub(crate) fn enqueue(&mut self, id: JobId) {
        let misfit = self.misfit(id);
        self.enqueue_as(id, misfit);
    }

    /// [`Scheduler::enqueue`] with whether it can never fit given, not worked out: a state
    /// image keeps what the build that wrote it found.
    pub(crate) fn enqueue_as(&mut self, id: JobId, misfit: Option<Misconfiguration>) {
        let job = self.jobs.get_mut(&id).expect("enqueue of a known job");
        job.misconfigured = misfit;
        if misfit.is_some() {
            job.reclaiming = false;
        }
        let (q, u, s, count, key, reclaiming) = (
            job.queue,
            job.unit,
            job.share,
            job.spec.count,
            job.pend_key(),
            job.reclaiming,
        );
        let queue = &mut self.queues[q.0 as usize];
        if misfit.is_some() {
            queue.parked.insert(id);
        } else {
            let lane = queue.units.entry(u).or_default().lane(s);
            lane.pending.insert(count, key);
            if reclaiming && lane.reclaimers.insert(key) {
                self.reclaim_demand[usize::from(u.0)] += count;
            }
            self.dirty.insert((q, u));
        }
    }

    /// Takes a job out of the pending index or the parked set, wherever it is.
    pub(crate) fn dequeue(&mut self, id: JobId) {
        let job = &self.jobs[&id];
        let (q, u, s, count, key) = (
            job.queue,
            job.unit,
            job.share,
            job.spec.count,
            job.pend_key(),
        );
        let queue = &mut self.queues[q.0 as usize];
        if !queue.parked.remove(&id) {
            if let Some(ul) = queue.units.get_mut(&u) {
                let lane = ul.lane(s);
                lane.pending.remove(count, &key);
                if lane.reclaimers.remove(&key) {
                    self.reclaim_demand[usize::from(u.0)] -= count;
                }
            }
        }
    }

    /// Marks a pending job as waiting for capacity it preempted for.
    pub(crate) fn set_reclaiming(&mut self, id: JobId) {
        self.mark_reclaiming(id, true);
    }

    /// The job no longer holds a claim on released capacity.
    pub(crate) fn clear_reclaiming(&mut self, id: JobId) {
        self.mark_reclaiming(id, false);
    }

    /// Keeps the job's flag, its lane's reclaimer index and the unit's reclaim demand in step.
    fn mark_reclaiming(&mut self, id: JobId, on: bool) {
        let job = self.jobs.get_mut(&id).expect("reclaimer exists");
        job.reclaiming = on;
        let (q, u, s, key, count) = (
            job.queue,
            job.unit,
            job.share,
            job.pend_key(),
            job.spec.count,
        );
        let Some(ul) = self.queues[q.0 as usize].units.get_mut(&u) else {
            return;
        };
        let reclaimers = &mut ul.lane(s).reclaimers;
        let changed = if on {
            reclaimers.insert(key)
        } else {
            reclaimers.remove(&key)
        };
        if changed {
            let demand = &mut self.reclaim_demand[usize::from(u.0)];
            *demand = if on { *demand + count } else { *demand - count };
        }
    }

    /// Whether a job can never fit as the queue is configured (DESIGN.md §2 rule 10).
    pub(crate) fn misfit(&self, id: JobId) -> Option<Misconfiguration> {
        let job = &self.jobs[&id];
        let queue = &self.queues[job.queue.0 as usize];
        let (u, c) = (job.unit, job.spec.count);
        let env = queue.environment.get(&u).copied().unwrap_or(0);
        if c > env {
            return Some(Misconfiguration::EnvironmentMax);
        }
        let share = &queue.shares[usize::from(job.share.0)];
        let Some(&entitlement) = share.limits.get(&u) else {
            return Some(Misconfiguration::ShareLimit);
        };
        // A group's ceiling caps its members' total, so also any one job of theirs.
        let group_limit = queue
            .group(usize::from(job.share.0))
            .and_then(|g| queue.groups[g].limits.get(&u));
        if group_limit.is_some_and(|&l| c > l) {
            return Some(Misconfiguration::ShareLimit);
        }
        match share.spec.strategy {
            // A job that may not be interrupted never borrows, whatever its share's strategy.
            _ if c > entitlement && !job.spec.interruptible => {
                return Some(Misconfiguration::ShareLimit)
            }
            Strategy::Reserve | Strategy::Lend if c > entitlement => {
                return Some(Misconfiguration::ShareLimit)
            }
            Strategy::Reserve | Strategy::Lend => {}
            Strategy::LendAndBorrow => {
                if let Some(allow) = share.spec.borrow_allowance(entitlement) {
                    if u64::from(c) > u64::from(entitlement) + u64::from(allow) {
                        return Some(Misconfiguration::ShareAndBorrowLimit);
                    }
                }
                let lendable: u64 = queue
                    .shares
                    .iter()
                    .enumerate()
                    .filter(|(i, sh)| *i != usize::from(job.share.0) && sh.strategy().lends())
                    .map(|(_, sh)| u64::from(sh.entitlement(u)))
                    .sum();
                if u64::from(c) > u64::from(entitlement) + lendable {
                    return Some(Misconfiguration::BorrowableCapacity);
                }
            }
        }
        if let Some(&p) = self.physical.get(&u) {
            if c > p {
                return Some(Misconfiguration::PhysicalMax);
            }
        }
        None
    }

    /// After a configuration change: re-examine every waiting job of the queue (whether it
    /// fits at all may have changed) and mark all its lanes dirty. O(waiting jobs), on the
    /// administrative path only.
    fn reexamine_queue(&mut self, q: QueueIx) {
        let queue = &self.queues[q.0 as usize];
        let mut waiting: Vec<JobId> = queue.parked.iter().copied().collect();
        for ul in queue.units.values() {
            for lane in &ul.lanes {
                waiting.extend(lane.pending.iter().map(|(_, k)| k.job));
            }
        }
        waiting.sort();
        for id in waiting {
            self.dequeue(id);
            self.enqueue(id);
        }
        let units: Vec<UnitIx> = self.queues[q.0 as usize].units.keys().copied().collect();
        for u in units {
            self.dirty.insert((q, u));
        }
    }

    /// Every waiting job is judged again (whether it fits at all) and every lane is due for
    /// the next pass: after a configuration change, and after a replay of another build's
    /// batches or snapshot, whose rules decided until then.
    pub fn reexamine(&mut self) {
        for q in 0..self.queues.len() {
            self.reexamine_queue(QueueIx(q as u32));
        }
    }

    fn update_priority(&mut self, id: JobId, priority: u32) -> Result<(), CoreError> {
        if priority > MAX_PRIORITY {
            return Err(CoreError::InvalidPriority(priority));
        }
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        if job.status.is_final() {
            return Err(CoreError::JobFinished(id));
        }
        let pending = job.is_pending();
        if pending {
            self.dequeue(id);
        }
        let job = self.jobs.get_mut(&id).expect("checked above");
        std::sync::Arc::make_mut(&mut job.spec).priority = priority;
        let (q, u) = (job.queue, job.unit);
        if let Some(a) = job.attempt {
            self.rekey_attempt(a, |att| att.priority = priority);
        }
        if pending {
            self.enqueue(id);
        }
        let s = self.jobs[&id].share;
        self.untag_passed(q, u, s);
        self.dirty.insert((q, u));
        Ok(())
    }

    /// After a priority change in share `s`: a running job backfilled onto the reservation of
    /// a head of its own share that it now ranks ahead of is no longer backfill. It may pass
    /// that head (a job ahead of a share's head could start before it anyway), and taking it
    /// back for the head would only requeue it ahead of the head, to restart on the room it
    /// left (issue 42: a preemption for nothing).
    fn untag_passed(&mut self, q: QueueIx, u: UnitIx, s: ShareIx) {
        let Some(lane) = self.queues[q.0 as usize]
            .units
            .get(&u)
            .and_then(|ul| ul.lanes.get(usize::from(s.0)))
        else {
            return;
        };
        if lane.backfill.is_empty() {
            return;
        }
        let passed: Vec<(AttemptId, JobId, u32)> = lane
            .running
            .iter()
            .filter_map(|k| {
                let att = &self.attempts[&k.attempt.0];
                let h = att.backfill_for?;
                let head = self.jobs.get(&h)?;
                // Ahead in share order: its pending key sorts before the head's.
                let ahead = head.share == s && self.jobs[&att.job].pend_key() < head.pend_key();
                ahead.then_some((k.attempt.0, h, att.count))
            })
            .collect();
        for (a, head, count) in passed {
            self.attempts
                .get_mut(&a)
                .expect("running attempt")
                .backfill_for = None;
            let lane = self.queues[q.0 as usize]
                .units
                .get_mut(&u)
                .expect("lane group")
                .lane(s);
            sub_priority(&mut lane.backfill, head, count);
        }
    }

    fn set_borrows(&mut self, id: JobId, borrows: bool) -> Result<(), CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        if job.status.is_final() {
            return Err(CoreError::JobFinished(id));
        }
        if job.spec.borrows == borrows {
            return Ok(());
        }
        // The pending index buckets jobs by whether they may borrow.
        let pending = job.is_pending();
        if pending {
            self.dequeue(id);
        }
        let job = self.jobs.get_mut(&id).expect("checked above");
        std::sync::Arc::make_mut(&mut job.spec).borrows = borrows;
        let (q, u) = (job.queue, job.unit);
        if pending {
            self.enqueue(id);
        }
        self.dirty.insert((q, u));
        Ok(())
    }

    fn checkpoint(&mut self, now: Millis, id: JobId) -> Result<(), CoreError> {
        let job = self.jobs.get_mut(&id).ok_or(CoreError::UnknownJob(id))?;
        job.last_checkpoint = Some(now);
        let lane = (job.queue, job.unit);
        if let Some(a) = job.attempt {
            self.rekey_attempt(a, |att| {
                if att.progress_at > att.started_at {
                    att.checkpoint_gap = Some(now.saturating_sub(att.progress_at));
                }
                att.progress_at = now;
            });
            // The victim order changed, and with it which victim sets a waiting job finds.
            self.dirty.insert(lane);
        }
        Ok(())
    }

    /// Changes an active attempt's fields that its victim-index key depends on.
    fn rekey_attempt(&mut self, a: AttemptId, change: impl FnOnce(&mut Attempt)) {
        let att = self.attempts.get_mut(&a).expect("a job's attempt exists");
        let old = att.run_key();
        let old_priority = att.priority;
        change(att);
        if att.stopping.is_some() {
            return;
        }
        let (q, u, s, new, count, priority) = (
            att.queue,
            att.unit,
            att.share,
            att.run_key(),
            att.count,
            att.priority,
        );
        let lane = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane of a running attempt")
            .lane(s);
        lane.running.remove(&old);
        lane.running.insert(new);
        sub_priority(&mut lane.running_by_priority, old_priority, count);
        *lane.running_by_priority.entry(priority).or_default() += count;
    }

    fn drill(
        &mut self,
        now: Millis,
        id: JobId,
        reason: String,
        fx: &mut Vec<Effect>,
    ) -> Result<(), CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        if !job.spec.interruptible {
            return Err(CoreError::NotInterruptible(id));
        }
        let attempt = job
            .attempt
            .filter(|a| job.status == JobStatus::Dispatched && self.attempts[a].stopping.is_none())
            .ok_or(CoreError::NotRunning(id))?;
        self.preempt_attempt(now, attempt, StopCause::Drill { reason }, fx);
        Ok(())
    }

    /// Why the executor is drained, while it is (`qm drain`).
    pub fn drained(&self) -> Option<&str> {
        self.drain.as_deref()
    }

    fn drain(&mut self, now: Millis, reason: String, requeue: bool, fx: &mut Vec<Effect>) {
        if requeue {
            // By attempt id: the map's order must not reach the decisions.
            let mut running: Vec<AttemptId> = self
                .attempts
                .values()
                .filter(|a| a.stopping.is_none())
                .map(|a| a.id)
                .collect();
            running.sort();
            for a in running {
                let cause = StopCause::Requeue {
                    reason: reason.clone(),
                };
                self.preempt_attempt(now, a, cause, fx);
            }
        }
        self.drain = Some(reason);
    }

    fn terminate(
        &mut self,
        _now: Millis,
        id: JobId,
        reason: String,
        fx: &mut Vec<Effect>,
    ) -> Result<(), CoreError> {
        let job = self.jobs.get(&id).ok_or(CoreError::UnknownJob(id))?;
        match job.status {
            JobStatus::Succeeded | JobStatus::Failed => {}
            JobStatus::Runnable if job.stopping.is_some() => {
                // Its preempted attempt is still stopping: FAILED once it has exited.
                let job = self.jobs.get_mut(&id).expect("exists");
                job.terminated = true;
                job.status_reason = reason.clone();
                job.fail_on_exit = Some(reason);
            }
            JobStatus::Runnable => {
                self.jobs.get_mut(&id).expect("exists").terminated = true;
                self.end_waiting(id, JobStatus::Failed, reason, fx);
            }
            JobStatus::Dispatched => {
                let a = job.attempt.expect("dispatched job has an attempt");
                self.terminate_attempt(id, a, reason, fx);
            }
        }
        Ok(())
    }

    /// A waiting job (RUNNABLE, no attempt) reaches final `status` for `reason`.
    pub(crate) fn end_waiting(
        &mut self,
        id: JobId,
        status: JobStatus,
        reason: String,
        fx: &mut Vec<Effect>,
    ) {
        self.dequeue(id);
        let job = self.jobs.get_mut(&id).expect("exists");
        job.reclaiming = false;
        job.status = status;
        job.status_reason = reason.clone();
        // The lane's head may have changed: a job it held back may start now.
        self.dirty.insert((job.queue, job.unit));
        fx.push(Effect::Finished {
            job: id,
            status,
            reason,
        });
    }

    /// A termination of job `id`, whose attempt `a` holds capacity: FAILED once `a` has
    /// exited, and `a` stopped unless it is stopping already.
    pub(crate) fn terminate_attempt(
        &mut self,
        id: JobId,
        a: AttemptId,
        reason: String,
        fx: &mut Vec<Effect>,
    ) {
        let job = self.jobs.get_mut(&id).expect("exists");
        job.terminated = true;
        if job.fail_on_exit.is_none() {
            job.status_reason = reason.clone();
            job.fail_on_exit = Some(reason.clone());
        }
        if self.attempts[&a].stopping.is_none() {
            let cause = StopCause::Terminated { reason };
            self.stop_attempt(a, cause.clone());
            fx.push(Effect::Stop {
                job: id,
                attempt: a,
                cause,
            });
        }
    }

    /// Marks an active attempt as stopping: it leaves the victim index, keeps its capacity.
    pub(crate) fn stop_attempt(&mut self, a: AttemptId, cause: StopCause) {
        let att = self.attempts.get_mut(&a).expect("attempt exists");
        debug_assert!(att.stopping.is_none());
        let active = att.clone();
        att.stopping = Some(cause);
        let (q, u, s, count) = (att.queue, att.unit, att.share, att.count);
        let lane = self.queues[q.0 as usize]
            .units
            .get_mut(&u)
            .expect("lane")
            .lane(s);
        lane.deactivate(&active);
        lane.stopping += count;
    }

    fn attempt_exited(
        &mut self,
        now: Millis,
        a: AttemptId,
        exit: Exit,
        fx: &mut Vec<Effect>,
    ) -> Result<(), CoreError> {
        let att = self
            .attempts
            .remove(&a)
            .ok_or(CoreError::UnknownAttempt(a))?;
        self.release_attempt(&att);
        self.jobs
            .get_mut(&att.job)
            .expect("attempt's job exists")
            .count_exit(att.stopping.is_some(), &exit);
        if self.replaying.is_some() {
            return self.settle_logged_exit(now, &att, exit, fx);
        }
        self.settle_exit(now, &att, exit, fx);
        Ok(())
    }

    /// What the exited attempt held is free: its lane's and the unit's usage drop.
    fn release_attempt(&mut self, att: &Attempt) {
        let (q, u, s) = (att.queue, att.unit, att.share);
        {
            let lane = self.queues[q.0 as usize]
                .units
                .get_mut(&u)
                .expect("lane")
                .lane(s);
            lane.usage -= att.count;
            if att.own_only() {
                lane.own_only -= att.count;
            }
            if att.stopping.is_some() {
                lane.stopping -= att.count;
            } else {
                lane.deactivate(att);
            }
        }
        self.physical_used[usize::from(u.0)] -= att.count;
        self.mark_released(q, u);
    }

    /// What the exit of `att` leads to for its job, by this build's rules.
    fn settle_exit(&mut self, now: Millis, att: &Attempt, exit: Exit, fx: &mut Vec<Effect>) {
        let id = att.job;
        let job = self.jobs.get_mut(&id).expect("attempt's job exists");
        match (&att.stopping, exit) {
            (Some(_), _) if job.fail_on_exit.is_some() => {
                // Terminated, or out of preemption retries: FAILED now that the attempt's
                // processes are gone and its capacity is free.
                let reason = job.fail_on_exit.take().expect("checked");
                job.attempt = None;
                job.stopping = None;
                job.fail(id, reason, fx);
            }
            (Some(_preempted), _) => {
                // Whatever the exit code, a preempted attempt counts as preempted; the job's
                // new status was decided when the preemption was issued.
                job.stopping = None;
                if job.status == JobStatus::Runnable {
                    self.enqueue(id);
                }
            }
            (None, Exit::Succeeded) => {
                job.attempt = None;
                job.status = JobStatus::Succeeded;
                job.status_reason = "Training job completed".into();
                fx.push(Effect::Finished {
                    job: id,
                    status: JobStatus::Succeeded,
                    reason: job.status_reason.clone(),
                });
            }
            (None, Exit::Failed { reason, retryable }) => {
                self.settle_failure(now, id, reason, retryable, fx);
            }
            (
                None,
                Exit::Lost {
                    reason,
                    max_in_a_row,
                },
            ) => self.settle_lost(now, id, reason, max_in_a_row, fx),
        }
    }

    /// The job's attempt failed: it runs again if the failure is retryable, its retry rules
    /// allow and it has attempts left, else it FAILED.
    fn settle_failure(
        &mut self,
        now: Millis,
        id: JobId,
        reason: String,
        retryable: bool,
        fx: &mut Vec<Effect>,
    ) {
        let job = self.jobs.get_mut(&id).expect("attempt's job exists");
        job.attempt = None;
        let rule_retry = job
            .spec
            .evaluate_on_exit
            .iter()
            .find(|r| crate::glob::matches(&r.on_status_reason, &reason))
            .map(|r| r.retry)
            .unwrap_or(true);
        job.status_reason = reason.clone();
        if retryable && rule_retry && job.failures < job.spec.attempts {
            job.status = JobStatus::Runnable;
            job.queued_at = now;
            fx.push(Effect::Requeued { job: id, reason });
            self.enqueue(id);
        } else {
            job.status = JobStatus::Failed;
            fx.push(Effect::Finished {
                job: id,
                status: JobStatus::Failed,
                reason,
            });
        }
    }

    /// The job's attempt was lost: it runs again, unless it was lost more times in a row
    /// than `max_in_a_row` allows.
    fn settle_lost(
        &mut self,
        now: Millis,
        id: JobId,
        reason: String,
        max_in_a_row: Option<u32>,
        fx: &mut Vec<Effect>,
    ) {
        let job = self.jobs.get_mut(&id).expect("attempt's job exists");
        job.attempt = None;
        if let Some(max) = max_in_a_row.filter(|&m| job.lost_in_a_row > m) {
            let reason = format!(
                "{reason} — lost {} times in a row, more than max_lost_attempts ({max}) allows: \
                 the job FAILED rather than run again (a job that kills its server or node ends so)",
                job.lost_in_a_row
            );
            job.fail(id, reason, fx);
            return;
        }
        job.status = JobStatus::Runnable;
        job.queued_at = now;
        job.status_reason = reason.clone();
        fx.push(Effect::Requeued { job: id, reason });
        self.enqueue(id);
    }

    /// Released capacity can serve the lane, and, when the unit has a physical limit, every
    /// other queue's lane on the same unit.
    /// Under fair reclaim, a share's figure is its largest over the queue's units: one that
    /// falls here may let a borrower on another unit reclaim fairly, so those units pass too.
    fn mark_released(&mut self, q: QueueIx, u: UnitIx) {
        self.dirty.insert((q, u));
        let queue = &self.queues[q.0 as usize];
        if queue.fair_reclaim {
            let waiting = queue
                .units
                .iter()
                .filter(|(_, ul)| ul.lanes.iter().any(|l| l.pending.len() > 0))
                .map(|(&t, _)| (q, t));
            self.dirty.extend(waiting.collect::<Vec<_>>());
        }
        if self.physical.contains_key(&u) {
            for (i, queue) in self.queues.iter().enumerate() {
                if queue.units.contains_key(&u) {
                    self.dirty.insert((QueueIx(i as u32), u));
                }
            }
        }
    }
}

pub(crate) fn sub_priority<K: Ord>(map: &mut BTreeMap<K, u32>, key: K, count: u32) {
    let e = map.get_mut(&key).expect("bucket of a running attempt");
    *e -= count;
    if *e == 0 {
        map.remove(&key);
    }
}

/// Refuses a queue whose groups do not hold together: names unique and non-empty, weights at
/// least 1, a share in at most one group, limits within the AWS bound.
pub(crate) fn check_groups(spec: &QueueSpec) -> Result<(), CoreError> {
    if spec.groups.len() > MAX_SHARES_PER_QUEUE {
        return Err(CoreError::TooMany {
            what: "a job queue's groups of shares",
            max: MAX_SHARES_PER_QUEUE,
            got: spec.groups.len(),
        });
    }
    let mut names = BTreeSet::new();
    let mut member_of: BTreeMap<&str, &str> = BTreeMap::new();
    for g in &spec.groups {
        let bad = |why: String| CoreError::InvalidGroup {
            group: g.name.clone(),
            why,
        };
        if g.name.is_empty() || !names.insert(g.name.as_str()) {
            return Err(bad(
                "group names must be non-empty and unique in the queue".into()
            ));
        }
        if g.weight == 0 {
            return Err(CoreError::InvalidWeight {
                what: format!("group '{}'", g.name),
            });
        }
        if g.limits.len() > MAX_LIMITS {
            return Err(CoreError::TooMany {
                what: "a group's capacity limits",
                max: MAX_LIMITS,
                got: g.limits.len(),
            });
        }
        for m in &g.shares {
            if let Some(other) = member_of.insert(m, &g.name) {
                return Err(bad(format!(
                    "quota share '{m}' is already a member of group '{other}'; a share belongs to at most one group"
                )));
            }
        }
    }
    Ok(())
}
