//! `qm drain` (admins): this server's executor starts nothing until the drain ends, and with
//! `requeue` its running attempts are stopped as a preemption would stop them and their jobs
//! queued again, using neither a retry nor a preemption. The core owns the rule
//! (`qm_core::Input::Drain`); this module is its API face.

use qm_api::qm::{DrainStatus, PreemptResponse};
use qm_api::ApiError;
use qm_core::{Effect, Input};

use crate::reply::{reply, Reply};
use crate::state::State;

impl State {
    /// Drains the executor (`Command::Drain`).
    pub(crate) fn drain(&mut self, reason: &str, requeue: bool) -> Result<Reply, ApiError> {
        let from = self.decisions.len();
        self.core_apply(Input::Drain {
            reason: reason.to_string(),
            requeue,
        })?;
        let requeued = self.decisions[from..]
            .iter()
            .filter_map(|e| match e {
                Effect::Stop { job, .. } => self.jobs.get(job).map(|r| PreemptResponse {
                    job_id: r.id.clone(),
                    job_name: r.request.job_name.clone(),
                }),
                _ => None,
            })
            .collect();
        reply(DrainStatus {
            requeued,
            ..self.drain_status()
        })
    }

    /// Ends the drain (`Command::EndDrain`); refused when the executor is not drained, so
    /// that a mistyped command says so.
    pub(crate) fn end_drain(&mut self) -> Result<Reply, ApiError> {
        if self.core.drained().is_none() {
            return Err(ApiError::client(
                "cancel: the executor is not drained; `qm drain` drains it".to_string(),
            ));
        }
        self.core_apply(Input::EndDrain)?;
        reply(self.drain_status())
    }

    /// Whether the executor is drained now (`GET /qm/v1/drain`).
    pub(crate) fn drain_status(&self) -> DrainStatus {
        let attempts_holding = self.jobs.values().filter(|r| r.live.is_some()).count() as u32;
        DrainStatus {
            drained: self.core.drained().is_some(),
            reason: self.core.drained().map(str::to_string),
            requeued: Vec::new(),
            attempts_holding,
        }
    }
}
