//! Replaying a batch another build wrote ([`crate::logged`]): its inputs applied as inputs
//! are, with the decisions it logged imposed wherever a rule of this build would decide.

use crate::error::CoreError;
use crate::logged::Logged;
use crate::model::{AttemptId, Effect, Exit, JobId, JobStatus, Millis, StopCause};
use crate::scheduler::{Input, Scheduler};

impl Scheduler {
    /// Applies one input of a batch another build wrote, with that build's decisions from
    /// `logged` wherever a rule would decide; returns the decisions it applied (the logged
    /// ones). Unlike [`Scheduler::apply`], an error may leave the state half-changed: the log
    /// cannot be replayed, and the caller stops.
    pub fn apply_logged(
        &mut self,
        now: Millis,
        input: Input,
        logged: &mut Logged,
    ) -> Result<Vec<Effect>, CoreError> {
        self.with_logged(logged, |s| s.apply(now, input))
    }

    /// Runs `decide` with `logged` as the decisions it consults in place of this build's
    /// rules; what it decided must be the front of `logged`, which it takes off.
    fn with_logged(
        &mut self,
        logged: &mut Logged,
        decide: impl FnOnce(&mut Self) -> Result<Vec<Effect>, CoreError>,
    ) -> Result<Vec<Effect>, CoreError> {
        self.replaying = Some(std::mem::take(logged));
        let decided = decide(self);
        *logged = self.replaying.take().unwrap_or_default();
        let fx = decided?;
        logged.expect(&fx)?;
        Ok(fx)
    }

    /// Imposes the rest of a logged batch's decisions — its pass: the attempts it started and
    /// the ones it preempted (with their requeues) — in place of a pass of this build.
    pub fn impose_logged(
        &mut self,
        now: Millis,
        logged: &mut Logged,
    ) -> Result<Vec<Effect>, CoreError> {
        let mut fx = Vec::new();
        while let Some(decision) = logged.pending.front().cloned() {
            match decision {
                Effect::Start {
                    job,
                    attempt,
                    unit,
                    count,
                } => {
                    logged.pending.pop_front();
                    self.impose_start(now, job, attempt, &unit, count, &mut fx)?;
                }
                Effect::Stop {
                    job,
                    attempt,
                    cause,
                } => {
                    let stopped =
                        self.with_logged(logged, |s| s.impose_stop(now, job, attempt, cause))?;
                    fx.extend(stopped);
                }
                // A waiting job ended by a command this build refuses (a termination an
                // older build accepted): it ended as logged.
                Effect::Finished {
                    job,
                    status,
                    reason,
                } if self
                    .jobs
                    .get(&job)
                    .is_some_and(|j| j.status == JobStatus::Runnable && j.stopping.is_none())
                    && status.is_final() =>
                {
                    logged.pending.pop_front();
                    self.end_waiting(job, status, reason, &mut fx);
                }
                other => {
                    return Err(CoreError::Replay(format!(
                        "{other:?} follows no input or stop that leads to it"
                    )))
                }
            }
        }
        Ok(fx)
    }

    /// Whether a pass has lanes to look at (and may run: the executor is not drained). After a
    /// batch's pass there are none; after a replay of another build's batches, every lane.
    pub fn pass_due(&self) -> bool {
        self.drain.is_none() && !self.dirty.is_empty()
    }

    /// Starts attempt `attempt` of `job` as logged: the job must be waiting, for `count`
    /// instances of `unit`, and the id the next one.
    fn impose_start(
        &mut self,
        now: Millis,
        job: JobId,
        attempt: AttemptId,
        unit: &str,
        count: u32,
        fx: &mut Vec<Effect>,
    ) -> Result<(), CoreError> {
        let j = self
            .jobs
            .get(&job)
            .ok_or_else(|| CoreError::Replay(format!("job {job} starts but does not exist")))?;
        // Waiting: in the pending index, or parked where this build's rules say it never fits.
        if j.status != JobStatus::Runnable || j.stopping.is_some() {
            return Err(CoreError::Replay(format!(
                "job {job} starts attempt {attempt} but is not waiting ({:?})",
                j.status
            )));
        }
        if self.unit_name(j.unit) != unit || j.spec.count != count {
            return Err(CoreError::Replay(format!(
                "job {job} starts on {count} x {unit}, but asks for {} x {}",
                j.spec.count,
                self.unit_name(j.unit)
            )));
        }
        if attempt.0 < self.next_attempt || self.attempts.contains_key(&attempt) {
            return Err(CoreError::Replay(format!(
                "attempt {attempt} of job {job} starts, but ids up to {} are taken",
                self.next_attempt
            )));
        }
        self.next_attempt = attempt.0;
        // A job this build parks has no lane on its unit yet.
        let (q, u, s) = (j.queue, j.unit, j.share);
        self.queues[q.0 as usize]
            .units
            .entry(u)
            .or_default()
            .lane(s);
        self.start(now, job, None, fx);
        Ok(())
    }

    /// Stops `attempt` of `job` as the logged pass did (a preemption; a termination's stop
    /// when this build refused the termination itself).
    fn impose_stop(
        &mut self,
        now: Millis,
        job: JobId,
        attempt: AttemptId,
        cause: StopCause,
    ) -> Result<Vec<Effect>, CoreError> {
        let running = self
            .attempts
            .get(&attempt)
            .is_some_and(|a| a.job == job && a.stopping.is_none());
        if !running {
            return Err(CoreError::Replay(format!(
                "attempt {attempt} of job {job} is stopped but is not running"
            )));
        }
        let mut fx = Vec::new();
        match &cause {
            StopCause::Terminated { reason } => {
                self.terminate_attempt(job, attempt, reason.clone(), &mut fx);
            }
            StopCause::Reclaim { for_job, .. } | StopCause::InShare { for_job } => {
                // The job it stopped for waits for the capacity, as the pass would have it.
                if self
                    .jobs
                    .get(for_job)
                    .is_some_and(|j| j.is_pending() && !j.reclaiming)
                {
                    self.set_reclaiming(*for_job);
                }
                self.preempt_attempt(now, attempt, cause, &mut fx);
            }
            StopCause::Drill { .. } | StopCause::Requeue { .. } => {
                self.preempt_attempt(now, attempt, cause, &mut fx);
            }
        }
        Ok(fx)
    }

    /// The rest of an exit while replaying: the attempt's capacity is released already; the
    /// job becomes what the log says the exit led to. An exit the log decided nothing about
    /// is a preempted attempt's, whose job was queued again when it was stopped.
    pub(crate) fn settle_logged_exit(
        &mut self,
        now: Millis,
        att: &crate::scheduler::Attempt,
        exit: Exit,
        fx: &mut Vec<Effect>,
    ) -> Result<(), CoreError> {
        let id = att.job;
        // A preempted attempt's job was queued again when it was stopped: its exit decides
        // nothing (unless the job is to fail once it exits), and a decision about the job at
        // the front belongs to a later input of the batch.
        let decides = att.stopping.is_none() || self.jobs[&id].fail_on_exit.is_some();
        let decision = self
            .replaying
            .as_ref()
            .filter(|_| decides)
            .and_then(|l| l.exit_decision(id));
        // Counted already ([`Job::count_exit`]), as every exit is.
        let job = self.jobs.get_mut(&id).expect("attempt's job exists");
        if job.attempt == Some(att.id) {
            job.attempt = None;
        }
        if job.stopping == Some(att.id) {
            job.stopping = None;
        }
        match decision {
            Some(Effect::Finished { status, reason, .. }) => {
                job.fail_on_exit = None;
                job.status = status;
                job.status_reason = reason.clone();
                fx.push(Effect::Finished {
                    job: id,
                    status,
                    reason,
                });
            }
            Some(Effect::Requeued { reason, .. }) => {
                job.fail_on_exit = None;
                job.status = JobStatus::Runnable;
                job.queued_at = now;
                job.status_reason = reason.clone();
                fx.push(Effect::Requeued { job: id, reason });
                self.enqueue(id);
            }
            _ if att.stopping.is_some() && job.status == JobStatus::Runnable => {
                self.enqueue(id);
            }
            _ => {
                return Err(CoreError::Replay(format!(
                "attempt {} of job {id} exited ({exit:?}), and the log has no decision about it",
                att.id
            )))
            }
        }
        Ok(())
    }
}
