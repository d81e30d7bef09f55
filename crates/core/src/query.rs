//! Read-only views of the state for shells: jobs, attempts and per-share accounting.

use crate::model::*;
use crate::scheduler::{Attempt, Job, Scheduler};

/// One share's position on one unit, as the CLI and dashboard show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareUsage {
    /// Share name.
    pub share: String,
    /// Instance type.
    pub instance_type: String,
    /// Its limit for the type.
    pub entitlement: u32,
    /// Instances its attempts hold (stopping ones included).
    pub usage: u32,
    /// Of which still stopping.
    pub stopping: u32,
    /// Usage above the entitlement.
    pub borrowed: u32,
    /// Idle entitlement others may borrow.
    pub lendable: u32,
    /// RUNNABLE jobs of the share on the type (misconfigured ones excluded).
    pub pending: usize,
}

impl Scheduler {
    /// A job by id.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.jobs.get(&id).map(|j| &**j)
    }

    /// An attempt that has not exited yet.
    pub fn attempt(&self, id: AttemptId) -> Option<&Attempt> {
        self.attempts.get(&id)
    }

    /// Every job id, ascending.
    pub fn job_ids(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.jobs.keys().copied().collect();
        ids.sort();
        ids
    }

    /// Number of jobs the core remembers.
    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Forgets a finished job (the shell keeps its history); returns whether it did.
    pub fn forget(&mut self, id: JobId) -> bool {
        match self.jobs.get(&id) {
            Some(j) if j.status.is_final() && j.stopping.is_none() && j.attempt.is_none() => {
                self.jobs.remove(&id);
                true
            }
            _ => false,
        }
    }

    /// Per share and unit accounting of a queue, shares in name order.
    pub fn usage(&self, queue: &str) -> Option<Vec<ShareUsage>> {
        let q = *self.queue_ix.get(queue)?;
        let qu = &self.queues[q.0 as usize];
        let mut out = Vec::new();
        for (&u, _) in qu.units.iter() {
            let view = self.view(q, u);
            for (name, &s) in &qu.share_ix {
                // What attempts hold, without the claims of jobs waiting for their victims.
                let a = view.held(usize::from(s.0));
                let lane = qu.units[&u].lanes.get(usize::from(s.0));
                out.push(ShareUsage {
                    share: name.clone(),
                    instance_type: self.unit_name(u).to_string(),
                    entitlement: a.entitlement,
                    usage: a.usage,
                    stopping: lane.map_or(0, |l| l.stopping),
                    borrowed: a.borrowed(),
                    lendable: a.lendable(),
                    pending: lane.map_or(0, |l| l.pending.len()),
                });
            }
        }
        out.sort_by(|a, b| (&a.share, &a.instance_type).cmp(&(&b.share, &b.instance_type)));
        Some(out)
    }
}
