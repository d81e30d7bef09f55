//! Who may do what (docs/security.md, "Permissions"): admins everything; everyone
//! authenticated may read; a share's `qm:submitters` may submit to it up to its
//! `qm:max-priority`, and change or terminate their own jobs; its `qm:leads` may do that
//! for any job of the share, at any priority, and preempt it for a drill; configuration is
//! for admins.
//!
//! The check runs when a [`Command::As`] is applied, on the state of that moment and on the
//! caller's identity as the command carries it, so a replay of the log decides the same.

use std::collections::BTreeMap;

use qm_api::validate::{TAG_LEADS, TAG_MAX_PRIORITY, TAG_SUBMITTERS};
use qm_api::ApiError;

use crate::command::{Caller, Command};
use crate::state::{JobRec, State};

fn denied(msg: String) -> ApiError {
    ApiError::forbidden("AccessDeniedException", msg)
}

/// Whether the list (`alice,group:research`) names the caller.
fn names(list: Option<&String>, caller: &Caller) -> bool {
    list.is_some_and(|l| {
        l.split(',')
            .map(str::trim)
            .any(|e| match e.strip_prefix("group:") {
                Some(g) => caller.groups.iter().any(|c| c == g),
                None => e == caller.name,
            })
    })
}

impl State {
    /// Refuses `cmd` when `caller` may not send it.
    pub(crate) fn permit(&self, caller: &Caller, cmd: &Command) -> Result<(), ApiError> {
        if caller.admin {
            return Ok(());
        }
        let who = &caller.name;
        let config = |action: &str| {
            Err(denied(format!(
                "{who} may not {action}: configuration changes are for admins"
            )))
        };
        match cmd {
            Command::CreateServiceEnvironment(_)
            | Command::UpdateServiceEnvironment(_)
            | Command::DeleteServiceEnvironment(_) => config("change service environments"),
            Command::CreateJobQueue(_)
            | Command::UpdateJobQueue(_)
            | Command::DeleteJobQueue(_) => config("change job queues"),
            Command::CreateSchedulingPolicy(_)
            | Command::UpdateSchedulingPolicy(_)
            | Command::DeleteSchedulingPolicy(_) => config("change scheduling policies"),
            Command::CreateQuotaShare(_)
            | Command::UpdateQuotaShare(_)
            | Command::DeleteQuotaShare(_) => config("change quota shares"),
            Command::TagResource(_) | Command::UntagResource(_) => config("change tags"),
            Command::PutQueueGroups { .. } => config("change groups of quota shares"),
            Command::Drain { .. } | Command::EndDrain => Err(denied(format!(
                "{who} may not drain the executor or end a drain: that is for admins"
            ))),
            Command::SubmitServiceJob { request, .. } => {
                let Some(share) = request.quota_share_name.as_deref() else {
                    return Ok(()); // the submit's own checks refuse it
                };
                let Ok(queue) = self.queue_name("jobQueue", &request.job_queue) else {
                    return Ok(());
                };
                let Some(tags) = self.share_tags(&queue, share) else {
                    return Ok(());
                };
                if names(tags.get(TAG_LEADS), caller) {
                    return Ok(());
                }
                if tags.contains_key(TAG_SUBMITTERS) && !names(tags.get(TAG_SUBMITTERS), caller) {
                    return Err(denied(format!(
                        "{who} may not submit to quota share {share}: not in its submitters ({TAG_SUBMITTERS} = {})",
                        tags[TAG_SUBMITTERS]
                    )));
                }
                let priority = request.scheduling_priority.unwrap_or(0);
                self.within_max(who, share, tags, priority, "submit with")
            }
            Command::UpdateServiceJob(r) => self.own_or_lead(
                caller,
                &r.job_id,
                "change the priority of",
                Some(r.scheduling_priority),
            ),
            Command::TerminateServiceJob(r) => {
                self.own_or_lead(caller, &r.job_id, "terminate", None)
            }
            Command::PreemptServiceJob { job_id, .. } => self.lead(caller, job_id),
            Command::TerminateServiceJobs(r) => r
                .jobs
                .iter()
                .try_for_each(|id| self.own_or_lead(caller, id, "terminate", None)),
            _ => Ok(()),
        }
    }

    fn share_tags(&self, queue: &str, share: &str) -> Option<&BTreeMap<String, String>> {
        self.queues
            .get(queue)
            .and_then(|q| q.shares.get(share))
            .map(|s| &s.tags)
    }

    fn within_max(
        &self,
        who: &str,
        share: &str,
        tags: &BTreeMap<String, String>,
        priority: i32,
        action: &str,
    ) -> Result<(), ApiError> {
        let max = tags
            .get(TAG_MAX_PRIORITY)
            .and_then(|m| m.parse::<i32>().ok());
        match max {
            Some(max) if priority > max => Err(denied(format!(
                "{who} may not {action} priority {priority} in quota share {share}: its maximum for submitters is {max} ({TAG_MAX_PRIORITY}); a lead of the share or an admin may"
            ))),
            _ => Ok(()),
        }
    }

    /// The job (`None`: unknown, which the operation's own checks answer for), and whether
    /// the caller leads its share.
    fn job_and_lead(&self, caller: &Caller, job_id: &str) -> Option<(&JobRec, bool)> {
        let core = self.job_core("jobId", job_id).ok()?;
        let rec = &self.jobs[&core];
        let tags = self.share_tags(&rec.queue, &rec.share);
        Some((rec, tags.is_some_and(|t| names(t.get(TAG_LEADS), caller))))
    }

    /// Only a lead of the job's share (or an admin) may drill it: a drill costs the job its
    /// progress since its last checkpoint, which is not for its submitter alone to decide.
    fn lead(&self, caller: &Caller, job_id: &str) -> Result<(), ApiError> {
        match self.job_and_lead(caller, job_id) {
            Some((rec, false)) => Err(denied(format!(
                "{} may not preempt job {job_id}: drills are for admins and the leads of quota share {} ({TAG_LEADS})",
                caller.name, rec.share
            ))),
            _ => Ok(()),
        }
    }

    /// A job's submitter may change it (within the share's maximum priority), a lead of its
    /// share may change it freely.
    fn own_or_lead(
        &self,
        caller: &Caller,
        job_id: &str,
        action: &str,
        priority: Option<i32>,
    ) -> Result<(), ApiError> {
        let Some((rec, false)) = self.job_and_lead(caller, job_id) else {
            return Ok(());
        };
        let who = &caller.name;
        if rec.principal.as_deref() != Some(who.as_str()) {
            return Err(denied(format!(
                "{who} may not {action} job {job_id}: it was submitted by {}, and {who} is not a lead of quota share {} ({TAG_LEADS})",
                rec.principal.as_deref().unwrap_or("an unknown principal"),
                rec.share
            )));
        }
        match (priority, self.share_tags(&rec.queue, &rec.share)) {
            (Some(p), Some(t)) => self.within_max(who, &rec.share, t, p, "raise a job to"),
            _ => Ok(()),
        }
    }
}
