//! Service environments: the pool's limits per instance type. Connected to at most one queue
//! (AWS rule for quota management); its limits become the core queue's environment.

use qm_api::*;
use qm_core::{Input, QueueSpec};

use super::page;
use crate::reply::{reply, Reply};
use crate::state::{EnvRec, State};

impl State {
    pub(crate) fn env_name(&self, field: &str, value: &str) -> Result<String, ApiError> {
        let name = self
            .arns
            .name_or_arn(field, value, ResourceKind::ServiceEnvironment)?;
        if !self.environments.contains_key(&name) {
            return Err(ApiError::client(format!(
                "{field}: service environment '{name}' does not exist; create it with CreateServiceEnvironment or check the name"
            )));
        }
        Ok(name)
    }

    /// Pushes an environment's limits to the core queue it serves.
    /// Gives the core queue `queue` the limits `limits` (its service environment's). Instance
    /// types the executor does not offer get a physical capacity of zero, so that their jobs
    /// wait with a reason instead of being started on an instance that does not exist.
    pub(crate) fn put_queue_limits(
        &mut self,
        queue: &str,
        limits: &[CapacityLimit],
    ) -> Result<(), ApiError> {
        let environment = environment_limits(limits);
        for input in self.physical_for_new_units(limits) {
            self.core_apply(input)?;
        }
        // The queue's rules for idle capacity (fair sharing, groups) stay as they are.
        let mut spec = self
            .core
            .queue_spec(queue)
            .unwrap_or_else(|| QueueSpec::new(queue, Default::default()));
        spec.environment = environment;
        self.core_apply(Input::PutQueue(spec))
    }

    /// Zero physical capacity for each instance type of `limits` that the executor does not
    /// offer (none when it reports no pools).
    pub(crate) fn physical_for_new_units(&self, limits: &[CapacityLimit]) -> Vec<Input> {
        if self.capacity.is_empty() {
            return Vec::new();
        }
        environment_limits(limits)
            .into_keys()
            .filter(|unit| !self.capacity.contains_key(unit))
            .map(|unit| Input::SetPhysicalCapacity {
                instance_type: unit,
                instances: Some(0),
            })
            .collect()
    }

    pub(crate) fn create_service_environment(
        &mut self,
        r: &CreateServiceEnvironmentRequest,
    ) -> Result<Reply, ApiError> {
        validate_create_service_environment(r)?;
        if self.environments.contains_key(&r.service_environment_name) {
            return Err(ApiError::client("Object already exists"));
        }
        let rec = EnvRec {
            name: r.service_environment_name.clone(),
            state: r.state.unwrap_or(ServiceEnvironmentState::Enabled),
            limits: r.capacity_limits.clone(),
            tags: r.tags.clone().unwrap_or_default(),
            queue: None,
        };
        self.environments.insert(rec.name.clone(), rec);
        reply(CreateServiceEnvironmentResponse {
            service_environment_name: r.service_environment_name.clone(),
            service_environment_arn: self.arns.service_environment(&r.service_environment_name),
        })
    }

    pub(crate) fn update_service_environment(
        &mut self,
        r: &UpdateServiceEnvironmentRequest,
    ) -> Result<Reply, ApiError> {
        validate_update_service_environment(r)?;
        let name = self.env_name("serviceEnvironment", &r.service_environment)?;
        // Change a copy, apply it to the core, and only then keep it: on error nothing changed.
        let mut env = self.environments[&name].clone();
        if let Some(s) = &r.state {
            env.state = *s;
        }
        if let Some(l) = &r.capacity_limits {
            env.limits = l.clone();
        }
        if let Some(q) = env.queue.clone() {
            self.put_queue_limits(&q, &env.limits)?;
        }
        self.environments.insert(name.clone(), env);
        reply(UpdateServiceEnvironmentResponse {
            service_environment_name: name.clone(),
            service_environment_arn: self.arns.service_environment(&name),
        })
    }

    pub(crate) fn delete_service_environment(
        &mut self,
        r: &DeleteServiceEnvironmentRequest,
    ) -> Result<Reply, ApiError> {
        let name = self.env_name("serviceEnvironment", &r.service_environment)?;
        let env = &self.environments[&name];
        if env.state != ServiceEnvironmentState::Disabled {
            return Err(ApiError::client(format!(
                "serviceEnvironment: '{name}' is ENABLED; set its state to DISABLED with UpdateServiceEnvironment before deleting it"
            )));
        }
        if let Some(q) = &env.queue {
            return Err(ApiError::client(format!(
                "serviceEnvironment: '{name}' is connected to job queue '{q}'; delete the queue or connect it to another environment first"
            )));
        }
        self.environments.remove(&name);
        reply(DeleteServiceEnvironmentResponse {})
    }

    pub(crate) fn describe_service_environments(
        &self,
        r: &DescribeServiceEnvironmentsRequest,
    ) -> Result<Reply, ApiError> {
        let max = max_results("maxResults", r.max_results, 100)?;
        let wanted: Option<Vec<String>> = match &r.service_environments {
            Some(list) if !list.is_empty() => Some(
                list.iter()
                    .map(|v| {
                        self.arns.name_or_arn(
                            "serviceEnvironments",
                            v,
                            ResourceKind::ServiceEnvironment,
                        )
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => None,
        };
        let items = self
            .environments
            .iter()
            .filter(|(n, _)| wanted.as_ref().is_none_or(|w| w.contains(n)))
            .map(|(n, e)| (n.as_str(), self.env_detail(e)));
        let (list, next) = page(items, r.next_token.as_deref(), max)?;
        reply(DescribeServiceEnvironmentsResponse {
            service_environments: Some(list),
            next_token: next,
        })
    }

    fn env_detail(&self, e: &EnvRec) -> ServiceEnvironmentDetail {
        ServiceEnvironmentDetail {
            service_environment_name: e.name.clone(),
            service_environment_arn: self.arns.service_environment(&e.name),
            service_environment_type: ServiceEnvironmentType::SagemakerTraining,
            state: Some(e.state),
            status: Some(ServiceEnvironmentStatus::Valid),
            capacity_limits: e.limits.clone(),
            tags: (!e.tags.is_empty()).then(|| e.tags.clone()),
        }
    }
}
