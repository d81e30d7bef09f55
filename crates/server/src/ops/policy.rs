//! Scheduling policies. Only `quotaSharePolicy` policies can drive a queue here; a fair-share
//! policy may be stored (so that scripts written for AWS do not fail half-way) but a queue
//! refuses it.

use qm_api::*;

use super::page;
use crate::reply::{reply, Reply};
use crate::state::{PolicyRec, State};

impl State {
    pub(crate) fn policy_name(&self, field: &str, arn: &str) -> Result<String, ApiError> {
        let name = self.arns.scheduling_policy_arn(field, arn)?;
        if !self.policies.contains_key(&name) {
            return Err(ApiError::client(format!(
                "{field}: scheduling policy '{arn}' does not exist; create it with CreateSchedulingPolicy or check the ARN"
            )));
        }
        Ok(name)
    }

    pub(crate) fn create_scheduling_policy(
        &mut self,
        r: &CreateSchedulingPolicyRequest,
    ) -> Result<Reply, ApiError> {
        validate_create_scheduling_policy(r)?;
        if self.policies.contains_key(&r.name) {
            return Err(ApiError::client("Object already exists"));
        }
        self.policies.insert(
            r.name.clone(),
            PolicyRec {
                name: r.name.clone(),
                quota: r.quota_share_policy.clone(),
                fairshare: r.fairshare_policy.clone(),
                tags: r.tags.clone().unwrap_or_default(),
            },
        );
        reply(CreateSchedulingPolicyResponse {
            name: r.name.clone(),
            arn: self.arns.scheduling_policy(&r.name),
        })
    }

    pub(crate) fn update_scheduling_policy(
        &mut self,
        r: &UpdateSchedulingPolicyRequest,
    ) -> Result<Reply, ApiError> {
        validate_update_scheduling_policy(r)?;
        let name = self.policy_name("arn", &r.arn)?;
        let p = self.policies.get_mut(&name).expect("checked");
        if p.quota.is_some() && r.fairshare_policy.is_some() {
            return Err(ApiError::client(
                "fairsharePolicy: this policy is a quotaSharePolicy; a policy's type cannot be switched, create a new policy instead",
            ));
        }
        if p.fairshare.is_some() && r.quota_share_policy.is_some() {
            return Err(ApiError::client(
                "quotaSharePolicy: this policy is a fairsharePolicy; a policy's type cannot be switched, create a new policy instead",
            ));
        }
        if let Some(q) = &r.quota_share_policy {
            p.quota = Some(q.clone());
        }
        if let Some(f) = &r.fairshare_policy {
            p.fairshare = Some(f.clone());
        }
        reply(UpdateSchedulingPolicyResponse {})
    }

    pub(crate) fn delete_scheduling_policy(
        &mut self,
        r: &DeleteSchedulingPolicyRequest,
    ) -> Result<Reply, ApiError> {
        let name = self.policy_name("arn", &r.arn)?;
        let arn = self.arns.scheduling_policy(&name);
        if let Some(q) = self.queues.values().find(|q| q.policy_arn == arn) {
            return Err(ApiError::client(format!(
                "arn: scheduling policy '{name}' is used by job queue '{}'; delete the queue or give it another policy first",
                q.name
            )));
        }
        self.policies.remove(&name);
        reply(DeleteSchedulingPolicyResponse {})
    }

    pub(crate) fn describe_scheduling_policies(
        &self,
        r: &DescribeSchedulingPoliciesRequest,
    ) -> Result<Reply, ApiError> {
        let mut out = Vec::new();
        for arn in &r.arns {
            let name = self.arns.scheduling_policy_arn("arns", arn)?;
            if let Some(p) = self.policies.get(&name) {
                out.push(SchedulingPolicyDetail {
                    name: p.name.clone(),
                    arn: self.arns.scheduling_policy(&p.name),
                    quota_share_policy: p.quota.clone(),
                    fairshare_policy: p.fairshare.clone(),
                    tags: (!p.tags.is_empty()).then(|| p.tags.clone()),
                });
            }
        }
        reply(DescribeSchedulingPoliciesResponse {
            scheduling_policies: Some(out),
        })
    }

    pub(crate) fn list_scheduling_policies(
        &self,
        r: &ListSchedulingPoliciesRequest,
    ) -> Result<Reply, ApiError> {
        let max = max_results("maxResults", r.max_results, 100)?;
        let items = self.policies.keys().map(|n| {
            (
                n.as_str(),
                SchedulingPolicyListingDetail {
                    arn: self.arns.scheduling_policy(n),
                },
            )
        });
        let (list, next) = page(items, r.next_token.as_deref(), max)?;
        reply(ListSchedulingPoliciesResponse {
            scheduling_policies: Some(list),
            next_token: next,
        })
    }
}
