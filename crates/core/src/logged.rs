//! Replaying what another build decided. A batch in the log is a record: the inputs it took
//! and the decisions it logged (starts, stops, requeues, final statuses), which the clients
//! were told. This build's own batches are decided again on replay and compared (that is
//! the determinism check); a batch another build wrote is *applied*: its inputs change the
//! state as inputs do, and wherever a rule would decide — what an exit leads to, whether a
//! preempted job is queued again or fails, what the pass starts and stops — the decision it
//! logged is imposed instead, and checked to fit the state (the job and attempt it names, its
//! unit and size). Only after the replay do this build's rules take over, from the first pass
//! on. An upgrade can therefore change what happens next, never what happened.
//!
//! This module holds a batch's decisions ([`Logged`]); `replay` applies them to the
//! scheduler.

use std::collections::VecDeque;

use crate::error::CoreError;
use crate::model::{AttemptId, Effect, JobId};

/// The decisions one logged batch took, in the order it logged them; replay consumes them.
#[derive(Clone, Debug, Default)]
pub struct Logged {
    pub(crate) pending: VecDeque<Effect>,
}

impl Logged {
    /// The decisions of one batch, as logged.
    pub fn new(decisions: Vec<Effect>) -> Self {
        Logged {
            pending: decisions.into(),
        }
    }

    /// Decisions not applied yet.
    pub fn remaining(&self) -> usize {
        self.pending.len()
    }

    /// Whether the logged stop of `attempt` (of `job`) is followed by the job's requeue.
    pub(crate) fn requeues_after_stop(&self, job: JobId, attempt: AttemptId) -> bool {
        let stop = self
            .pending
            .iter()
            .position(|e| matches!(e, Effect::Stop { attempt: a, .. } if *a == attempt));
        stop.is_some_and(|i| {
            matches!(self.pending.get(i + 1), Some(Effect::Requeued { job: j, .. }) if *j == job)
        })
    }

    /// What the batch decided about `job` when its attempt exited: the final status or requeue
    /// at the front, if it is about `job`.
    pub(crate) fn exit_decision(&self, job: JobId) -> Option<Effect> {
        match self.pending.front() {
            Some(e @ (Effect::Finished { job: j, .. } | Effect::Requeued { job: j, .. }))
                if *j == job =>
            {
                Some(e.clone())
            }
            _ => None,
        }
    }

    /// Takes `made` off the front: what a replayed input decided must be what was logged.
    pub(crate) fn expect(&mut self, made: &[Effect]) -> Result<(), CoreError> {
        for e in made {
            match self.pending.pop_front() {
                Some(logged) if logged == *e => {}
                Some(logged) => {
                    return Err(CoreError::Replay(format!(
                        "the input leads to {e:?} where the log has {logged:?}"
                    )))
                }
                None => {
                    return Err(CoreError::Replay(format!(
                        "the input leads to {e:?}, which the log does not have"
                    )))
                }
            }
        }
        Ok(())
    }
}
