//! `check_invariants()`: the state's internal consistency, asserted by every test after every
//! step and by the simulator after every event. O(jobs + attempts): never on a hot path.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::*;
use crate::scheduler::{Attempt, Job, Lane, Queue, Scheduler};

/// Usage recomputed from the attempts: (usage, stopping, own-only) per (queue, unit, share).
type LaneUsage = BTreeMap<(u32, u16, u16), (u32, u32, u32)>;

impl Scheduler {
    /// Checks that every index agrees with the jobs and attempts it summarizes, that no job
    /// holds two attempts, and that usage is what the attempts hold. Returns the first
    /// inconsistency found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let usage = self.check_attempts()?;
        let mut pending_seen: BTreeSet<JobId> = BTreeSet::new();
        let mut demand: BTreeMap<u16, u32> = BTreeMap::new();
        for (qi, queue) in self.queues.iter().enumerate() {
            for (u, ul) in &queue.units {
                for (si, lane) in ul.lanes.iter().enumerate() {
                    let want = usage
                        .get(&(qi as u32, u.0, si as u16))
                        .copied()
                        .unwrap_or((0, 0, 0));
                    self.check_lane_usage(queue, *u, si, lane, want)?;
                    self.check_running_index(*u, si, lane)?;
                    self.check_reclaimers(*u, lane, &mut demand)?;
                    self.check_pending_index(*u, si, lane, &mut pending_seen)?;
                }
            }
            self.check_parked(queue, &mut pending_seen)?;
        }
        for (u, d) in self.reclaim_demand.iter().enumerate() {
            if *d != demand.get(&(u as u16)).copied().unwrap_or(0) {
                return Err(format!(
                    "unit {} reclaim demand {d} disagrees with its reclaimers",
                    self.unit_names[u]
                ));
            }
        }
        self.check_jobs(&pending_seen)
    }

    /// Every attempt is recorded on its job, no job holds two, and the physical usage is what
    /// they hold; returns what they hold per lane.
    fn check_attempts(&self) -> Result<LaneUsage, String> {
        let mut usage = LaneUsage::new();
        let mut physical: BTreeMap<u16, u32> = BTreeMap::new();
        let mut holders: BTreeMap<JobId, u32> = BTreeMap::new();
        for a in self.attempts.values() {
            let e = usage.entry((a.queue.0, a.unit.0, a.share.0)).or_default();
            e.0 += a.count;
            if a.stopping.is_some() {
                e.1 += a.count;
            }
            if a.own_only() {
                e.2 += a.count;
            }
            *physical.entry(a.unit.0).or_default() += a.count;
            *holders.entry(a.job).or_default() += 1;
            let job = self
                .jobs
                .get(&a.job)
                .ok_or(format!("attempt {:?} of unknown job {:?}", a.id, a.job))?;
            check_attempt_recorded(a, job)?;
        }
        if let Some((job, n)) = holders.iter().find(|(_, n)| **n > 1) {
            return Err(format!("job {job:?} holds {n} attempts at once"));
        }
        for (u, used) in self.physical_used.iter().enumerate() {
            let want = physical.get(&(u as u16)).copied().unwrap_or(0);
            if *used != want {
                return Err(format!(
                    "unit {} physical usage {used}, attempts hold {want}",
                    self.unit_names[u]
                ));
            }
        }
        Ok(usage)
    }

    /// The lane's usage, stopping and own-only counts are what its attempts hold (`want`).
    fn check_lane_usage(
        &self,
        queue: &Queue,
        u: UnitIx,
        si: usize,
        lane: &Lane,
        want: (u32, u32, u32),
    ) -> Result<(), String> {
        let have = (lane.usage, lane.stopping, lane.own_only);
        if have != want {
            return Err(format!(
                "lane {}/{}/{}: usage, stopping, own-only {have:?}, attempts hold {want:?}",
                queue.name,
                self.unit_names[usize::from(u.0)],
                queue.shares.get(si).map_or("?", |s| &s.spec.name),
            ));
        }
        Ok(())
    }

    /// The lane's running index, and the backfill and by-priority figures kept from it, agree
    /// with its attempts.
    fn check_running_index(&self, u: UnitIx, si: usize, lane: &Lane) -> Result<(), String> {
        let mut by_priority: BTreeMap<u32, u32> = BTreeMap::new();
        for k in &lane.running {
            let a = self
                .attempts
                .get(&k.attempt.0)
                .ok_or("running index names a gone attempt")?;
            if a.stopping.is_some() || a.run_key() != *k || a.share.0 as usize != si || a.unit != u
            {
                return Err(format!("running index entry {k:?} is stale"));
            }
            *by_priority.entry(a.priority).or_default() += a.count;
        }
        let mut backfill: BTreeMap<JobId, u32> = BTreeMap::new();
        for k in &lane.running {
            if let Some(h) = self.attempts[&k.attempt.0].backfill_for {
                *backfill.entry(h).or_default() += k.count.0;
            }
        }
        if backfill != lane.backfill {
            return Err(format!(
                "backfill index of lane {si} disagrees with its attempts"
            ));
        }
        if by_priority != lane.running_by_priority {
            return Err(format!(
                "running-by-priority of lane {si} disagrees with its attempts"
            ));
        }
        Ok(())
    }

    /// The lane's reclaimers are waiting reclaiming jobs; adds their counts to the unit's
    /// `demand`.
    fn check_reclaimers(
        &self,
        u: UnitIx,
        lane: &Lane,
        demand: &mut BTreeMap<u16, u32>,
    ) -> Result<(), String> {
        for k in &lane.reclaimers {
            let job = self
                .jobs
                .get(&k.job)
                .ok_or("reclaimer index names an unknown job")?;
            if !job.reclaiming || !job.is_pending() || job.pend_key() != *k {
                return Err(format!("reclaimer entry for job {:?} is stale", k.job));
            }
            *demand.entry(u.0).or_default() += job.spec.count;
        }
        Ok(())
    }

    /// The lane's pending index names each of its waiting jobs once, as they are; adds them
    /// to `pending_seen`.
    fn check_pending_index(
        &self,
        u: UnitIx,
        si: usize,
        lane: &Lane,
        pending_seen: &mut BTreeSet<JobId>,
    ) -> Result<(), String> {
        if !lane.pending.head_is_consistent() {
            return Err(format!("pending head of lane {si} is stale"));
        }
        let mut n = 0;
        for (count, k) in lane.pending.iter() {
            n += 1;
            let job = self
                .jobs
                .get(&k.job)
                .ok_or("pending index names an unknown job")?;
            if !job.is_pending()
                || job.pend_key() != *k
                || job.spec.count != count
                || job.share.0 as usize != si
                || job.unit != u
            {
                return Err(format!("pending index entry for job {:?} is stale", k.job));
            }
            if !pending_seen.insert(k.job) {
                return Err(format!("job {:?} is pending twice", k.job));
            }
        }
        if n != lane.pending.len() {
            return Err("pending index length is wrong".into());
        }
        Ok(())
    }

    /// The queue's parked jobs are misconfigured and waiting; adds them to `pending_seen`.
    fn check_parked(
        &self,
        queue: &Queue,
        pending_seen: &mut BTreeSet<JobId>,
    ) -> Result<(), String> {
        for id in &queue.parked {
            let job = self.jobs.get(id).ok_or("parked set names an unknown job")?;
            if job.misconfigured.is_none()
                || job.status != JobStatus::Runnable
                || job.stopping.is_some()
            {
                return Err(format!("parked job {id:?} should not be parked"));
            }
            pending_seen.insert(*id);
        }
        Ok(())
    }

    /// Every job's status agrees with its attempt and with whether the queues hold it
    /// (`pending_seen`).
    fn check_jobs(&self, pending_seen: &BTreeSet<JobId>) -> Result<(), String> {
        for job in self.jobs.values() {
            if job.reclaiming && !job.is_pending() {
                return Err(format!("job {:?} reclaims but is not waiting", job.spec.id));
            }
            let waiting = job.status == JobStatus::Runnable && job.stopping.is_none();
            if waiting != pending_seen.contains(&job.spec.id) {
                return Err(format!(
                    "job {:?} ({:?}) is missing from or wrongly in the queues",
                    job.spec.id, job.status
                ));
            }
            if job.status == JobStatus::Dispatched && job.attempt.is_none() {
                return Err(format!("dispatched job {:?} has no attempt", job.spec.id));
            }
            if job.status == JobStatus::Runnable && job.attempt.is_some() {
                return Err(format!(
                    "runnable job {:?} still has an active attempt",
                    job.spec.id
                ));
            }
        }
        Ok(())
    }
}

/// The attempt is recorded on its job as what it is: the job's current attempt while active,
/// else the one stopping to fail it or for a preemption.
fn check_attempt_recorded(a: &Attempt, job: &Job) -> Result<(), String> {
    match &a.stopping {
        None => {
            if job.attempt != Some(a.id) || job.status != JobStatus::Dispatched {
                return Err(format!(
                    "active attempt {:?} is not job {:?}'s current attempt",
                    a.id, a.job
                ));
            }
        }
        Some(_) if job.fail_on_exit.is_some() => {
            if job.attempt != Some(a.id) && job.stopping != Some(a.id) {
                return Err(format!(
                    "attempt {:?} to fail job {:?} is not recorded on it",
                    a.id, a.job
                ));
            }
        }
        Some(cause) if cause.is_preemption() => {
            if job.stopping != Some(a.id) || job.attempt.is_some() {
                return Err(format!(
                    "preempted attempt {:?} not recorded on job {:?}",
                    a.id, a.job
                ));
            }
        }
        Some(_) => {
            return Err(format!(
                "terminating attempt {:?} of job {:?} will not fail it",
                a.id, a.job
            ))
        }
    }
    Ok(())
}
