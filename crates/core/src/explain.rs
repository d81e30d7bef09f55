//! Why a job waits (DESIGN.md §2 rule 11), computed on demand from the state: the pass stores
//! no per-job reason, so explaining costs nothing while nobody asks.

use crate::model::*;
use crate::pass::Decision;
use crate::reason::PendingReason;
use crate::scheduler::{Hold, Scheduler};

impl Scheduler {
    /// Why a RUNNABLE job is not running; `None` for a job that is not RUNNABLE or unknown.
    pub fn explain(&self, id: JobId) -> Option<PendingReason> {
        let reason = self.explain_bare(id)?;
        Some(self.with_reservation(id, reason))
    }

    /// A head past the starvation guard that waits for an ordinary reason also says that it
    /// holds a reservation and what runs on it, backfilled.
    fn with_reservation(&self, id: JobId, reason: PendingReason) -> PendingReason {
        let job = &self.jobs[&id];
        let since = job.queued_at.saturating_add(self.policy.reserve_after_ms);
        let waits_plainly = !matches!(
            reason,
            PendingReason::Misconfigured(_)
                | PendingReason::AwaitingPass
                | PendingReason::PreviousAttemptStopping
                | PendingReason::BackfillFinishing { .. }
                | PendingReason::HeldForOlderJob { .. }
                | PendingReason::Drained { .. }
        );
        let Some(ul) = self.queues[job.queue.0 as usize].units.get(&job.unit) else {
            return reason;
        };
        let head = ul
            .lanes
            .get(usize::from(job.share.0))
            .and_then(|l| l.pending.first(u32::MAX))
            .is_some_and(|(_, k)| k.job == id);
        if !waits_plainly || !head || self.clock < since {
            return reason;
        }
        let backfilled = ul.lanes.iter().filter_map(|l| l.backfill.get(&id)).sum();
        PendingReason::Reserved {
            reason: Box::new(reason),
            since,
            backfilled,
        }
    }

    fn explain_bare(&self, id: JobId) -> Option<PendingReason> {
        let job = self.jobs.get(&id)?;
        if job.status != JobStatus::Runnable {
            return None;
        }
        if job.stopping.is_some() {
            return Some(PendingReason::PreviousAttemptStopping);
        }
        if let Some(m) = job.misconfigured {
            return Some(PendingReason::Misconfigured(m));
        }
        if let Some(reason) = &self.drain {
            return Some(PendingReason::Drained {
                reason: reason.clone(),
            });
        }
        if self.dirty.contains(&(job.queue, job.unit)) {
            return Some(PendingReason::AwaitingPass);
        }
        let view = self.view(job.queue, job.unit);
        let ul = self.queues[job.queue.0 as usize].units.get(&job.unit)?;
        let s = usize::from(job.share.0);
        match self.decide(id, &view) {
            Decision::Wait(violation) => {
                Some(self.protected_victims(id, &view).unwrap_or_else(|| {
                    let reason =
                        self.wait_reason(id, &view.for_share(usize::from(job.share.0)), violation);
                    self.behind_fair_share(id, reason)
                }))
            }
            Decision::Release(instances) => Some(PendingReason::WaitingForRelease { instances }),
            Decision::Preempt(victims) if ul.patient.contains_key(&id) => {
                // Patient with its victims (see `Scheduler::patience`). Only a head has
                // jobs backfilled onto its reservation.
                let p = ul.patient[&id];
                let instances = victims.iter().map(|a| self.attempts[a].count).sum();
                let until = p.until(&self.policy);
                Some(if p.backfill {
                    PendingReason::BackfillFinishing { instances, until }
                } else {
                    PendingReason::WaitingForCheckpoint { instances, until }
                })
            }
            Decision::Drain => unreachable!("decide never drains; the pass does"),
            // It could start or preempt on its own, so the last pass held it behind another
            // job: its share's head waiting for released capacity, a job patient with its
            // victims, or an aged head whose reservation covers it and is draining.
            Decision::Start | Decision::Preempt(_) => {
                let lane = ul.lanes.get(s)?;
                Some(match lane.held_for {
                    Some((_, Hold::Release)) => PendingReason::WaitingForRelease {
                        instances: view.releasing,
                    },
                    Some((head, Hold::Starvation)) => PendingReason::HeldForOlderJob { job: head },
                    None => PendingReason::AwaitingPass,
                })
            }
        }
    }

    /// `VICTIMS_PROTECTED` when thrash protection alone keeps the job from preempting: it
    /// would find victims if their shares' protection were off.
    fn protected_victims(&self, id: JobId, view: &crate::view::View) -> Option<PendingReason> {
        let job = &self.jobs[&id];
        let queue = &self.queues[job.queue.0 as usize];
        if !queue.shares.iter().any(|s| s.protects()) {
            return None;
        }
        let view = view.for_share(usize::from(job.share.0));
        let victims = self
            .find_victims_among(id, &view, false)
            .or_else(|| self.fair_victims(id, &view, false))?;
        let until = victims
            .iter()
            .filter_map(|a| self.protected_until(&self.attempts[a], self.clock))
            .max()?;
        Some(PendingReason::VictimsProtected { until })
    }
}
