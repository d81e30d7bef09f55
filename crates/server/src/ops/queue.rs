//! Job queues: bound to one service environment and one quota-share scheduling policy. A
//! queue is a core queue whose environment is its service environment's limits.

use std::collections::{BTreeMap, BTreeSet};

use qm_api::*;
use qm_core::Input;

use super::page;
use crate::reply::{reply, Reply};
use crate::state::{QueueRec, State};

impl State {
    pub(crate) fn queue_name(&self, field: &str, value: &str) -> Result<String, ApiError> {
        let name = self
            .arns
            .name_or_arn(field, value, ResourceKind::JobQueue)?;
        if !self.queues.contains_key(&name) {
            return Err(ApiError::client(format!(
                "{field}: job queue '{name}' does not exist; create it with CreateJobQueue or check the name"
            )));
        }
        Ok(name)
    }

    /// The single service environment of a `serviceEnvironmentOrder`, checked free for `queue`.
    fn order_environment(
        &self,
        order: &[ServiceEnvironmentOrder],
        queue: &str,
    ) -> Result<String, ApiError> {
        if order.len() != 1 {
            return Err(ApiError::client(format!(
                "serviceEnvironmentOrder: a SAGEMAKER_TRAINING queue takes exactly one service environment, got {}",
                order.len()
            )));
        }
        let env = self.env_name(
            "serviceEnvironmentOrder[0].serviceEnvironment",
            &order[0].service_environment,
        )?;
        if let Some(other) = self.environments[&env].queue.as_deref() {
            if other != queue {
                return Err(ApiError::client(format!(
                    "serviceEnvironmentOrder[0].serviceEnvironment: '{env}' is already connected to job queue '{other}'; a quota-management environment serves one queue, create another environment"
                )));
            }
        }
        Ok(env)
    }

    fn quota_policy(&self, field: &str, arn: &str) -> Result<String, ApiError> {
        let name = self.policy_name(field, arn)?;
        if self.policies[&name].quota.is_none() {
            return Err(ApiError::client(format!(
                "{field}: scheduling policy '{name}' is a fair-share policy; SAGEMAKER_TRAINING queues here need a policy with quotaSharePolicy"
            )));
        }
        Ok(self.arns.scheduling_policy(&name))
    }

    pub(crate) fn create_job_queue(
        &mut self,
        r: &CreateJobQueueRequest,
    ) -> Result<Reply, ApiError> {
        validate_create_job_queue(r)?;
        if self.queues.contains_key(&r.job_queue_name) {
            return Err(ApiError::client("Object already exists"));
        }
        let policy_arn = self.quota_policy(
            "schedulingPolicyArn",
            r.scheduling_policy_arn.as_deref().unwrap_or_default(),
        )?;
        let env = self.order_environment(
            r.service_environment_order.as_deref().unwrap_or_default(),
            &r.job_queue_name,
        )?;
        let name = r.job_queue_name.clone();
        self.queues.insert(
            name.clone(),
            QueueRec {
                name: name.clone(),
                state: r.state.unwrap_or(JQState::Enabled),
                priority: r.priority,
                policy_arn,
                environment: env.clone(),
                actions: r.job_state_time_limit_actions.clone().unwrap_or_default(),
                tags: r.tags.clone().unwrap_or_default(),
                shares: BTreeMap::new(),
                runnable: BTreeSet::new(),
                generation: self.next_queue_generation,
                verified_resume: BTreeMap::new(),
                groups: Vec::new(),
            },
        );
        let limits = self.environments[&env].limits.clone();
        // The policy's rules for idle capacity hold for the new queue at once.
        let created = self
            .put_queue_limits(&name, &limits)
            .and_then(|()| self.sync_fair_rules(&name));
        if let Err(e) = created {
            self.queues.remove(&name);
            return Err(e);
        }
        self.next_queue_generation += 1;
        self.environments.get_mut(&env).expect("checked").queue = Some(name.clone());
        reply(CreateJobQueueResponse {
            job_queue_name: name.clone(),
            job_queue_arn: self.arns.job_queue(&name),
        })
    }

    pub(crate) fn update_job_queue(
        &mut self,
        r: &UpdateJobQueueRequest,
    ) -> Result<Reply, ApiError> {
        validate_update_job_queue(r)?;
        let name = self.queue_name("jobQueue", &r.job_queue)?;
        let policy_arn = match &r.scheduling_policy_arn {
            Some(a) => Some(self.quota_policy("schedulingPolicyArn", a)?),
            None => None,
        };
        let env = match &r.service_environment_order {
            Some(o) => Some(self.order_environment(o, &name)?),
            None => None,
        };
        // The core first (the only step that can fail), then the records.
        if let Some(env) = &env {
            let limits = self.environments[env].limits.clone();
            self.put_queue_limits(&name, &limits)?;
        }
        let q = self.queues.get_mut(&name).expect("checked");
        if let Some(s) = &r.state {
            q.state = *s;
        }
        if let Some(p) = r.priority {
            q.priority = p;
        }
        if let Some(a) = policy_arn {
            q.policy_arn = a;
        }
        if let Some(a) = &r.job_state_time_limit_actions {
            q.actions = a.clone();
        }
        if let Some(env) = env {
            let old = std::mem::replace(&mut q.environment, env.clone());
            if old != env {
                if let Some(e) = self.environments.get_mut(&old) {
                    e.queue = None;
                }
                self.environments.get_mut(&env).expect("checked").queue = Some(name.clone());
            }
        }
        // Another policy may assign idle capacity differently.
        self.sync_fair_rules(&name)?;
        reply(UpdateJobQueueResponse {
            job_queue_name: Some(name.clone()),
            job_queue_arn: Some(self.arns.job_queue(&name)),
        })
    }

    pub(crate) fn delete_job_queue(
        &mut self,
        r: &DeleteJobQueueRequest,
    ) -> Result<Reply, ApiError> {
        let name = self.queue_name("jobQueue", &r.job_queue)?;
        if self.queues[&name].state != JQState::Disabled {
            return Err(ApiError::client(format!(
                "jobQueue: '{name}' is ENABLED; set its state to DISABLED with UpdateJobQueue before deleting it"
            )));
        }
        // Deleting the queue terminates its jobs: each share is disabled and deleted in the
        // core, which stops their attempts (they finish FAILED once their processes are gone).
        let shares: Vec<(String, qm_core::ShareSpec)> = self.queues[&name]
            .shares
            .values()
            .map(|s| (s.name.clone(), self.share_spec_of(s)))
            .collect();
        for (share, mut spec) in shares {
            spec.enabled = false;
            self.core_apply(Input::PutShare {
                queue: name.clone(),
                share: spec,
            })?;
            let doomed = self.unfinished_jobs_of(&name, &share);
            self.core_apply(Input::DeleteShare {
                queue: name.clone(),
                share: share.clone(),
            })?;
            self.mark_terminated(&doomed);
            self.record_share(&name, &share, None);
        }
        let q = self.queues.remove(&name).expect("checked");
        if let Some(e) = self.environments.get_mut(&q.environment) {
            e.queue = None;
        }
        reply(DeleteJobQueueResponse {})
    }

    pub(crate) fn describe_job_queues(
        &self,
        r: &DescribeJobQueuesRequest,
    ) -> Result<Reply, ApiError> {
        let max = max_results("maxResults", r.max_results, 100)?;
        let wanted: Option<Vec<String>> = match &r.job_queues {
            Some(list) if !list.is_empty() => Some(
                list.iter()
                    .map(|v| {
                        self.arns
                            .name_or_arn("jobQueues", v, ResourceKind::JobQueue)
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => None,
        };
        let items = self
            .queues
            .iter()
            .filter(|(n, _)| wanted.as_ref().is_none_or(|w| w.contains(n)))
            .map(|(n, q)| {
                (
                    n.as_str(),
                    JobQueueDetail {
                        job_queue_name: q.name.clone(),
                        job_queue_arn: self.arns.job_queue(&q.name),
                        state: q.state,
                        scheduling_policy_arn: Some(q.policy_arn.clone()),
                        status: Some(JQStatus::Valid),
                        status_reason: Some("JobQueue Healthy".into()),
                        priority: q.priority,
                        compute_environment_order: Vec::new(),
                        service_environment_order: Some(vec![ServiceEnvironmentOrder {
                            order: 1,
                            service_environment: self.arns.service_environment(&q.environment),
                        }]),
                        job_queue_type: Some(JobQueueType::SagemakerTraining),
                        tags: (!q.tags.is_empty()).then(|| q.tags.clone()),
                        job_state_time_limit_actions: (!q.actions.is_empty())
                            .then(|| q.actions.clone()),
                    },
                )
            });
        let (list, next) = page(items, r.next_token.as_deref(), max)?;
        reply(DescribeJobQueuesResponse {
            job_queues: Some(list),
            next_token: next,
        })
    }
}
