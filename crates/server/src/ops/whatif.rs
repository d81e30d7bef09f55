//! `POST /qm/v1/what-if`: what the scheduler would decide if a queue's configuration were
//! changed, worked out by the core on a copy of its state ([`qm_core::Scheduler::what_if`]).
//! `qm plan` names the jobs a change would preempt from this answer, so that the victim
//! choice has one definition, the core's. The request is validated as the real operations
//! would validate it; nothing is changed or logged.

use std::collections::{BTreeMap, BTreeSet};

use qm_api::qm::{GroupDef, WhatIf, WhatIfAction, WhatIfDecision, WhatIfJob, WhatIfRequest};
use qm_api::*;
use qm_core::{Effect, Input, JobId, QueueSpec, StopCause, MAX_SHARES_PER_QUEUE};

use crate::reply::{reply, Reply};
use crate::state::{ShareRec, State};

impl State {
    pub(crate) fn what_if(&self, r: &WhatIfRequest) -> Result<Reply, ApiError> {
        let queue = self.queue_name("jobQueue", &r.job_queue)?;
        let inputs = self.what_if_inputs(&queue, r)?;
        let policy = self.core.policy();
        let horizon = policy.reclaim_patience_ms.max(policy.backfill_patience_ms);
        let (effects, ranked) = self
            .core
            .foresee(self.now as u64, inputs, horizon, |copy| {
                copy.victim_order(&queue).unwrap_or_default()
            })?;
        let victim_order = ranked
            .into_iter()
            .filter_map(|(_, job)| self.what_if_job(job))
            .collect();
        let decisions = effects
            .into_iter()
            .filter_map(|(at, e)| self.what_if_decision(at, e))
            .collect();
        reply(WhatIf {
            now: self.now,
            decisions,
            horizon_ms: horizon,
            victim_order,
        })
    }

    /// The core inputs that make `queue` look as `r` says: the environment's limits, every
    /// listed share put, every other share disabled and deleted.
    fn what_if_inputs(&self, queue: &str, r: &WhatIfRequest) -> Result<Vec<Input>, ApiError> {
        let q = &self.queues[queue];
        let mut inputs = Vec::new();
        let mut spec = self
            .core
            .queue_spec(queue)
            .unwrap_or_else(|| QueueSpec::new(queue, Default::default()));
        if let Some(limits) = &r.capacity_limits {
            capacity_limits("capacityLimits", limits, 1)?;
            inputs.extend(self.physical_for_new_units(limits));
            spec.environment = environment_limits(limits);
        }
        // The fair-sharing rules as the change would leave them: the policy's tags over its
        // current ones, the groups given (or the current), members by the shares' tags below.
        validate::policy_tags("policyTags", &r.policy_tags)?;
        let mut policy_tags = self.policy_tags_of_queue(queue);
        policy_tags.extend(r.policy_tags.clone());
        (spec.idle_assignment, spec.fair_reclaim) = validate::idle_rules(&policy_tags);
        let defs = self.what_if_groups(queue, r)?;
        let mut share_tags = Vec::new();
        if r.quota_shares.len() > MAX_SHARES_PER_QUEUE {
            return Err(ApiError::client(format!(
                "quotaShares: {} shares listed, more than the {MAX_SHARES_PER_QUEUE} a queue can have",
                r.quota_shares.len()
            )));
        }
        let mut listed = BTreeSet::new();
        for (i, s) in r.quota_shares.iter().enumerate() {
            self.check_what_if_share(queue, i, s, &mut listed)?;
            let tags = what_if_share_tags(q.shares.get(&s.quota_share_name), s, &r.keep_tags);
            share_tags.push((s.quota_share_name.clone(), tags.clone()));
            inputs.push(Input::PutShare {
                queue: queue.to_string(),
                share: share_spec(
                    &s.quota_share_name,
                    &s.capacity_limits,
                    &s.resource_sharing_configuration,
                    &s.preemption_configuration,
                    s.state.unwrap_or(QuotaShareState::Enabled),
                    &tags,
                ),
            });
        }
        let named: Vec<(&str, &std::collections::BTreeMap<String, String>)> =
            share_tags.iter().map(|(n, t)| (n.as_str(), t)).collect();
        spec.groups = Self::group_specs_from(&defs, &named);
        // Before the shares: groups may name shares not created yet, which join as they are.
        inputs.insert(inputs.len() - r.quota_shares.len(), Input::PutQueue(spec));
        inputs.extend(self.unlisted_shares_removed(queue, &listed));
        Ok(inputs)
    }

    /// The fair-sharing groups of the what-if: those `r` gives, checked, else the current.
    fn what_if_groups(&self, queue: &str, r: &WhatIfRequest) -> Result<Vec<GroupDef>, ApiError> {
        match &r.groups {
            Some(groups) => {
                let checked = qm_api::qm::QueueGroups {
                    groups: groups.clone(),
                }
                .checked(MAX_SHARES_PER_QUEUE)?
                .groups;
                self.groups_fit_queue(queue, &checked)?;
                Ok(checked)
            }
            None => Ok(self.queues[queue].groups.clone()),
        }
    }

    /// Refuses the `i`th share of a what-if unless it is a valid share of `queue` and not
    /// already `listed`; lists it.
    fn check_what_if_share<'r>(
        &self,
        queue: &str,
        i: usize,
        s: &'r CreateQuotaShareRequest,
        listed: &mut BTreeSet<&'r str>,
    ) -> Result<(), ApiError> {
        let field = format!("quotaShares[{i}]");
        validate_create_quota_share(s)
            .map_err(|e| ApiError::client(format!("{field}.{}", e.message())))?;
        if self.queue_name(&format!("{field}.jobQueue"), &s.job_queue)? != queue {
            return Err(ApiError::client(format!(
                "{field}.jobQueue: names another queue than jobQueue '{queue}'; a what-if changes one queue"
            )));
        }
        if !listed.insert(s.quota_share_name.as_str()) {
            return Err(ApiError::client(format!(
                "{field}.quotaShareName: '{}' is listed twice; list each share once",
                s.quota_share_name
            )));
        }
        Ok(())
    }

    /// Every share of `queue` the what-if does not list, disabled and then deleted.
    fn unlisted_shares_removed(&self, queue: &str, listed: &BTreeSet<&str>) -> Vec<Input> {
        let mut inputs = Vec::new();
        for (name, rec) in &self.queues[queue].shares {
            if listed.contains(name.as_str()) {
                continue;
            }
            let mut disabled = self.share_spec_of(rec);
            disabled.enabled = false;
            inputs.push(Input::PutShare {
                queue: queue.to_string(),
                share: disabled,
            });
            inputs.push(Input::DeleteShare {
                queue: queue.to_string(),
                share: name.clone(),
            });
        }
        inputs
    }

    /// One core effect as a decision the client is shown (requeues and final statuses follow
    /// from the stops and are left out).
    fn what_if_decision(&self, at: u64, e: Effect) -> Option<WhatIfDecision> {
        let (job, action, for_job) = match e {
            Effect::Start { job, .. } => (job, WhatIfAction::Start, None),
            Effect::Stop { job, cause, .. } => match cause {
                StopCause::Reclaim { for_job, .. } | StopCause::InShare { for_job } => {
                    (job, WhatIfAction::Preempt, Some(for_job))
                }
                StopCause::Terminated { .. } => (job, WhatIfAction::Terminate, None),
                StopCause::Drill { .. } | StopCause::Requeue { .. } => {
                    (job, WhatIfAction::Preempt, None)
                }
            },
            Effect::Finished { .. } | Effect::Requeued { .. } => return None,
        };
        Some(WhatIfDecision {
            at: at as i64,
            action,
            job: self.what_if_job(job)?,
            for_job: for_job.and_then(|j| self.what_if_job(j)),
        })
    }

    fn what_if_job(&self, job: JobId) -> Option<WhatIfJob> {
        let rec = self.jobs.get(&job)?;
        let spec = &self.core.job(job)?.spec;
        Some(WhatIfJob {
            job_id: rec.id.clone(),
            job_name: rec.request.job_name.clone(),
            quota_share_name: rec.share.to_string(),
            capacity_unit: spec.instance_type.clone(),
            instances: spec.count,
            priority: spec.priority,
        })
    }
}

/// A listed share's tags: those given, else its current ones, with the current values of the
/// `keep` keys it does not set.
fn what_if_share_tags(
    current: Option<&ShareRec>,
    s: &CreateQuotaShareRequest,
    keep: &[String],
) -> BTreeMap<String, String> {
    let mut tags = s
        .tags
        .clone()
        .or_else(|| current.map(|c| c.tags.clone()))
        .unwrap_or_default();
    for key in keep {
        if let Some(v) = current.and_then(|c| c.tags.get(key)) {
            tags.entry(key.clone()).or_insert_with(|| v.clone());
        }
    }
    tags
}
