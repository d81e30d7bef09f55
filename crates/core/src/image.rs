//! The core's state as plain data: what a snapshot stores so that a restart need not replay
//! the whole history. [`Scheduler::image`] takes one, [`Scheduler::from_image`] rebuilds a
//! scheduler that decides everything after it exactly as the original would (a property test
//! checks this at every step of random histories).
//!
//! An image holds the records (queues, shares, jobs, attempts, counters) and the little the
//! last pass left behind for the next one (holds, patient jobs, dirty lanes). The indexes (pending
//! and victim orders, usage, reclaim demand) are derived from the records on import and
//! checked by `check_invariants`, so an image cannot smuggle in an inconsistent index.
//!
//! These types are a persisted format: snapshots written by one release are read by the next.
//! Add fields with `#[serde(default)]`, rename with `#[serde(alias)]`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::model::*;
use crate::reason::Misconfiguration;
use crate::scheduler::{
    Attempt, Group, Hold, Job, Lane, Patience, Policy, Queue, Scheduler, Share, UnitLanes,
};

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The scheduler's state, by value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// Instance types in the order they were first seen (their index order).
    pub units: Vec<String>,
    /// Physical capacity per type, where known.
    pub physical: Vec<(String, u32)>,
    /// Queues in index order.
    pub queues: Vec<QueueImage>,
    /// Every job the core holds, by id.
    pub jobs: Vec<JobImage>,
    /// Every attempt holding capacity, by id.
    pub attempts: Vec<AttemptImage>,
    /// The next attempt id.
    pub next_attempt: u64,
    /// The next submission order.
    pub next_seq: u64,
    /// Lanes the next pass must look at: (queue index, unit index).
    pub dirty: Vec<(u32, u16)>,
    /// The latest time the shell passed in (images written before thrash protection: 0).
    #[serde(default)]
    pub clock: Millis,
    /// Why the executor is drained (`qm drain`), while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,
}

/// One queue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueImage {
    /// Its name.
    pub name: String,
    /// The environment's limits, by unit index.
    pub environment: Vec<(u16, u32)>,
    /// Shares in index order, deleted ones (tombstones) included.
    pub shares: Vec<ShareImage>,
    /// The units the queue has lanes on, with what the last pass left on them.
    pub units: Vec<UnitImage>,
    /// How idle capacity goes to borrowers (images written before fair sharing: FIFO).
    #[serde(default)]
    pub idle_assignment: IdleAssignment,
    /// Whether borrowers preempt each other for fairness (before fair sharing: no).
    #[serde(default)]
    pub fair_reclaim: bool,
    /// Groups of shares (before groups: none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupSpec>,
}

/// One share.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareImage {
    /// As configured.
    pub spec: ShareSpec,
    /// A tombstone kept until its last attempt has exited.
    pub deleted: bool,
}

/// One unit of a queue: what the last pass left for the next one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitImage {
    /// Unit index.
    pub unit: u16,
    /// Written by releases whose starvation guard barred later starts; no longer used (the
    /// guard's reservations are derived from the state at each pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barrier: Option<(JobId, u64, bool)>,
    /// Per share index, the job the last pass held the share's lane for, and whether because
    /// it is patient or drains a reservation (else for capacity being released).
    pub held_for: Vec<Option<(JobId, bool)>>,
    /// Jobs patient with their victims: (job, since, with backfilled victims); images written
    /// before patience existed have none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patient: Vec<(JobId, Millis, bool)>,
    /// When the last pass asked to be woken (kept as it was: recomputing it from a later
    /// clock could wake the restored scheduler where the original would not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<Millis>,
}

/// One job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobImage {
    /// As submitted, priority current.
    pub spec: std::sync::Arc<JobSpec>,
    /// Queue index.
    pub queue: u32,
    /// Share index (the name may belong to a newer share once this one is deleted).
    pub share: u16,
    /// Submission order.
    pub seq: u64,
    /// Submitted.
    pub submitted_at: Millis,
    /// Last became RUNNABLE.
    pub queued_at: Millis,
    /// Where it is.
    pub status: JobStatus,
    /// The attempt holding capacity for it.
    pub attempt: Option<AttemptId>,
    /// A preempted attempt not exited yet.
    pub stopping: Option<AttemptId>,
    /// Set while it can never fit.
    pub misconfigured: Option<Misconfiguration>,
    /// Failed attempts.
    pub failures: u32,
    /// Latest attempts lost in a row (images written before the limit have none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_in_a_row: u32,
    /// Times preempted.
    pub preemptions: u32,
    /// A termination was requested.
    pub terminated: bool,
    /// The last thing that happened to it.
    pub status_reason: String,
    /// The last checkpoint.
    pub last_checkpoint: Option<Millis>,
    /// It preempted and waits for the capacity.
    pub reclaiming: bool,
    /// When it was preempted within the last hour, oldest first (images written before
    /// thrash protection have none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_preemptions: Vec<Millis>,

    /// The reason it fails with once its stopping attempt has exited.
    pub fail_on_exit: Option<String>,
}

/// One attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptImage {
    /// Its id.
    pub id: AttemptId,
    /// Its job.
    pub job: JobId,
    /// Instances held.
    pub count: u32,
    /// Started.
    pub started_at: Millis,
    /// Last checkpoint, else start.
    pub progress_at: Millis,
    /// The job's priority as the victim index knows it.
    pub priority: u32,
    /// Set once asked to stop.
    pub stopping: Option<StopCause>,
    /// The aged head whose reservation it was backfilled onto; images written before backfill
    /// existed have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_for: Option<JobId>,
    /// Time between its last two checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_gap: Option<Millis>,
    /// Whether it was started as a job that may borrow ([`JobSpec::borrows`] then).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub borrows: bool,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl Scheduler {
    /// The state as data. Jobs and attempts come out sorted by id, so the same state always
    /// gives the same image.
    pub fn image(&self) -> Image {
        // Ordered by id before the images are made: sorting the images themselves moved
        // every one of them several times (a third of the image's cost, which the server's
        // driver pays while its requests wait). Ids are unique: an unstable sort is exact.
        let mut order: Vec<(JobId, &Job)> = self.jobs.iter().map(|(id, j)| (*id, &**j)).collect();
        order.sort_unstable_by_key(|(id, _)| *id);
        let jobs: Vec<JobImage> = order.into_iter().map(|(_, j)| job_image(j)).collect();
        let mut attempts: Vec<(AttemptId, &Attempt)> =
            self.attempts.iter().map(|(id, a)| (*id, a)).collect();
        attempts.sort_unstable_by_key(|(id, _)| *id);
        let attempts: Vec<AttemptImage> = attempts
            .into_iter()
            .map(|(_, a)| attempt_image(a))
            .collect();
        Image {
            units: self.unit_names.clone(),
            physical: self
                .physical
                .iter()
                .map(|(u, n)| (self.unit_name(*u).to_string(), *n))
                .collect(),
            queues: self.queues.iter().map(queue_image).collect(),
            jobs,
            attempts,
            next_attempt: self.next_attempt,
            next_seq: self.next_seq,
            clock: self.clock,
            drain: self.drain.clone(),
            dirty: self.dirty.iter().map(|(q, u)| (q.0, u.0)).collect(),
        }
    }

    /// A scheduler in the state of `image`, under `policy`. Refused when the image does not
    /// hold together (an index out of range, or records the invariants reject).
    pub fn from_image(policy: Policy, image: Image) -> Result<Scheduler, CoreError> {
        let bad = |what: String| CoreError::BadImage(what);
        let mut s = Scheduler::new(policy);
        for name in &image.units {
            s.intern_unit(name);
        }
        let unit = |s: &Scheduler, name: &str| {
            s.unit_ix.get(name).copied().ok_or_else(|| {
                bad(format!(
                    "instance type {name} is not among the image's units"
                ))
            })
        };
        for (name, n) in &image.physical {
            let u = unit(&s, name)?;
            s.physical.insert(u, *n);
        }
        for qi in image.queues {
            let q = QueueIx(s.queues.len() as u32);
            let queue = import_queue(&s, qi)?;
            s.queue_ix.insert(queue.name.clone(), q);
            s.queues.push(queue);
        }
        for j in image.jobs {
            let job = import_job(&s, j)?;
            s.jobs.insert(job.spec.id, Box::new(job));
        }
        for a in image.attempts {
            s.import_attempt(a)?;
        }
        // Where each waiting job waits is what the image says (parked where its writer found
        // it can never fit): nothing is worked out again by this build's rules on loading;
        // they decide from the next pass on.
        let mut pending: Vec<(JobId, Option<Misconfiguration>)> = s
            .jobs
            .values()
            .filter(|j| j.status == JobStatus::Runnable && j.stopping.is_none())
            .map(|j| (j.spec.id, j.misconfigured))
            .collect();
        pending.sort();
        for (id, misfit) in pending {
            s.enqueue_as(id, misfit);
        }
        s.next_attempt = image.next_attempt;
        s.next_seq = image.next_seq;
        s.clock = image.clock;
        s.drain = image.drain;

        // Enqueueing marked lanes dirty; the image says which ones the next pass must visit.
        s.dirty = image
            .dirty
            .iter()
            .map(|(q, u)| (QueueIx(*q), UnitIx(*u)))
            .collect();
        s.check_invariants()
            .map_err(|e| bad(format!("the image's records do not hold together: {e}")))?;
        Ok(s)
    }

    fn import_attempt(&mut self, a: AttemptImage) -> Result<(), CoreError> {
        let job = self
            .jobs
            .get(&a.job)
            .ok_or_else(|| CoreError::BadImage(format!("attempt {} of unknown job", a.id.0)))?;
        let att = Attempt {
            id: a.id,
            job: a.job,
            queue: job.queue,
            share: job.share,
            unit: job.unit,
            count: a.count,
            started_at: a.started_at,
            progress_at: a.progress_at,
            priority: a.priority,
            stopping: a.stopping,
            backfill_for: a.backfill_for,
            checkpoint_gap: a.checkpoint_gap,
            interruptible: job.spec.interruptible,
            borrows: a.borrows,
        };
        let (q, u, s) = (att.queue, att.unit, att.share);
        let lane = self.queues[q.0 as usize]
            .units
            .entry(u)
            .or_default()
            .lane(s);
        lane.usage += att.count;
        if att.own_only() {
            lane.own_only += att.count;
        }
        if att.stopping.is_some() {
            lane.stopping += att.count;
        } else {
            lane.running.insert(att.run_key());
            *lane.running_by_priority.entry(att.priority).or_default() += att.count;
            if let Some(h) = att.backfill_for {
                *lane.backfill.entry(h).or_default() += att.count;
            }
        }
        self.physical_used[usize::from(u.0)] += att.count;
        self.attempts.insert(att.id, att);
        Ok(())
    }
}

fn job_image(j: &Job) -> JobImage {
    JobImage {
        spec: j.spec.clone(),
        queue: j.queue.0,
        share: j.share.0,
        seq: j.seq,
        submitted_at: j.submitted_at,
        queued_at: j.queued_at,
        status: j.status,
        attempt: j.attempt,
        stopping: j.stopping,
        misconfigured: j.misconfigured,
        failures: j.failures,
        lost_in_a_row: j.lost_in_a_row,
        preemptions: j.preemptions,
        terminated: j.terminated,
        status_reason: j.status_reason.clone(),
        last_checkpoint: j.last_checkpoint,
        reclaiming: j.reclaiming,
        recent_preemptions: j.recent_preemptions.clone(),
        fail_on_exit: j.fail_on_exit.clone(),
    }
}

fn attempt_image(a: &Attempt) -> AttemptImage {
    AttemptImage {
        id: a.id,
        job: a.job,
        count: a.count,
        started_at: a.started_at,
        progress_at: a.progress_at,
        priority: a.priority,
        stopping: a.stopping.clone(),
        backfill_for: a.backfill_for,
        checkpoint_gap: a.checkpoint_gap,
        borrows: a.borrows,
    }
}

fn queue_image(q: &Queue) -> QueueImage {
    let units = q
        .units
        .iter()
        .map(|(u, ul)| UnitImage {
            unit: u.0,
            barrier: None,
            wake: ul.wake,
            patient: ul
                .patient
                .iter()
                .map(|(j, p)| (*j, p.since, p.backfill))
                .collect(),
            held_for: ul
                .lanes
                .iter()
                .map(|l| l.held_for.map(|(j, h)| (j, matches!(h, Hold::Starvation))))
                .collect(),
        })
        .collect();
    QueueImage {
        name: q.name.clone(),
        environment: q.environment.iter().map(|(u, n)| (u.0, *n)).collect(),
        shares: q
            .shares
            .iter()
            .map(|s| ShareImage {
                spec: s.spec.clone(),
                deleted: s.deleted,
            })
            .collect(),
        units,
        idle_assignment: q.idle_assignment,
        fair_reclaim: q.fair_reclaim,
        groups: q.groups.iter().map(|g| g.spec.clone()).collect(),
    }
}

fn import_queue(s: &Scheduler, qi: QueueImage) -> Result<Queue, CoreError> {
    let units = s.unit_names.len();
    let mut environment = BTreeMap::new();
    for (u, n) in &qi.environment {
        environment.insert(check_unit(units, &qi.name, *u)?, *n);
    }
    let (shares, share_ix) = import_shares(s, &qi.shares)?;
    let lanes = import_lanes(units, &qi, shares.len())?;
    let spec = QueueSpec {
        groups: qi.groups.clone(),
        ..Default::default()
    };
    crate::scheduler::check_groups(&spec)
        .map_err(|e| CoreError::BadImage(format!("queue {}: {e}", qi.name)))?;
    let mut groups = Vec::new();
    for g in qi.groups {
        let mut limits = BTreeMap::new();
        for (name, n) in &g.limits {
            let u = s.unit_ix.get(name).copied().ok_or_else(|| {
                CoreError::BadImage(format!("group {} names unknown unit {name}", g.name))
            })?;
            limits.insert(u, *n);
        }
        groups.push(Group { spec: g, limits });
    }
    let mut queue = Queue::new(qi.name);
    queue.environment = environment;
    queue.shares = shares;
    queue.share_ix = share_ix;
    queue.units = lanes;
    queue.idle_assignment = qi.idle_assignment;
    queue.fair_reclaim = qi.fair_reclaim;
    queue.groups = groups;
    queue.regroup();
    Ok(queue)
}

/// Unit index `u` of queue `queue`, if the image has that many units.
fn check_unit(units: usize, queue: &str, u: u16) -> Result<UnitIx, CoreError> {
    if usize::from(u) < units {
        Ok(UnitIx(u))
    } else {
        Err(CoreError::BadImage(format!(
            "queue {queue} names unit index {u} of {units}"
        )))
    }
}

/// A queue's shares, in index order, and the index of each live one by name.
fn import_shares(
    s: &Scheduler,
    images: &[ShareImage],
) -> Result<(Vec<Share>, BTreeMap<String, ShareIx>), CoreError> {
    let mut shares = Vec::new();
    let mut share_ix = BTreeMap::new();
    for (i, sh) in images.iter().enumerate() {
        let mut limits = BTreeMap::new();
        for (name, n) in &sh.spec.limits {
            let u = s.unit_ix.get(name).copied().ok_or_else(|| {
                CoreError::BadImage(format!("share {} names unknown unit {name}", sh.spec.name))
            })?;
            limits.insert(u, *n);
        }
        if !sh.deleted {
            share_ix.insert(sh.spec.name.clone(), ShareIx(i as u16));
        }
        shares.push(Share {
            spec: sh.spec.clone(),
            limits,
            deleted: sh.deleted,
        });
    }
    Ok((shares, share_ix))
}

/// A queue's lane groups, with what the last pass left on them (holds, patient jobs,
/// wake-ups); their indexes are rebuilt from the jobs and attempts.
fn import_lanes(
    units: usize,
    qi: &QueueImage,
    nshares: usize,
) -> Result<BTreeMap<UnitIx, UnitLanes>, CoreError> {
    let mut lanes: BTreeMap<UnitIx, UnitLanes> = BTreeMap::new();
    for ui in &qi.units {
        if ui.held_for.len() > nshares {
            return Err(CoreError::BadImage(format!(
                "queue {} has {} lanes on unit {} for {} shares",
                qi.name,
                ui.held_for.len(),
                ui.unit,
                nshares
            )));
        }
        let held = |h: &Option<(JobId, bool)>| {
            h.map(|(j, starvation)| {
                let why = if starvation {
                    Hold::Starvation
                } else {
                    Hold::Release
                };
                (j, why)
            })
        };
        let patient: BTreeMap<JobId, Patience> = ui
            .patient
            .iter()
            .map(|&(j, since, backfill)| (j, Patience { since, backfill }))
            .collect();
        let ul = UnitLanes {
            lanes: ui
                .held_for
                .iter()
                .map(|h| Lane {
                    held_for: held(h),
                    ..Lane::default()
                })
                .collect(),
            patient,
            wake: ui.wake,
        };
        lanes.insert(check_unit(units, &qi.name, ui.unit)?, ul);
    }
    Ok(lanes)
}

fn import_job(s: &Scheduler, j: JobImage) -> Result<Job, CoreError> {
    let bad = |what: String| CoreError::BadImage(format!("job {}: {what}", j.spec.id.0));
    let queue = s
        .queues
        .get(j.queue as usize)
        .ok_or_else(|| bad(format!("queue index {} out of range", j.queue)))?;
    if usize::from(j.share) >= queue.shares.len() {
        return Err(bad(format!("share index {} out of range", j.share)));
    }
    let unit = s
        .unit_ix
        .get(&j.spec.instance_type)
        .copied()
        .ok_or_else(|| bad(format!("unknown unit {}", j.spec.instance_type)))?;
    Ok(Job {
        queue: QueueIx(j.queue),
        share: ShareIx(j.share),
        unit,
        seq: j.seq,
        submitted_at: j.submitted_at,
        queued_at: j.queued_at,
        status: j.status,
        attempt: j.attempt,
        stopping: j.stopping,
        misconfigured: j.misconfigured,
        failures: j.failures,
        lost_in_a_row: j.lost_in_a_row,
        preemptions: j.preemptions,
        terminated: j.terminated,
        status_reason: j.status_reason,
        last_checkpoint: j.last_checkpoint,
        reclaiming: j.reclaiming,
        recent_preemptions: j.recent_preemptions,
        fail_on_exit: j.fail_on_exit,
        spec: j.spec,
    })
}
