//! TagResource / UntagResource / ListTagsForResource for every taggable resource: service
//! environments, scheduling policies, job queues, quota shares and service jobs.

use std::collections::BTreeMap;

use qm_api::*;

use crate::command::Command;
use crate::reply::{reply, Reply};
use crate::state::State;

impl State {
    fn tags_mut(&mut self, arn: &str) -> Result<&mut BTreeMap<String, String>, ApiError> {
        let missing = || missing(arn);
        match self.arns.parse("resourceArn", arn)? {
            Resource::ServiceEnvironment(n) => self
                .environments
                .get_mut(&n)
                .map(|e| &mut e.tags)
                .ok_or_else(missing),
            Resource::SchedulingPolicy(n) => self
                .policies
                .get_mut(&n)
                .map(|p| &mut p.tags)
                .ok_or_else(missing),
            Resource::JobQueue(n) => self
                .queues
                .get_mut(&n)
                .map(|q| &mut q.tags)
                .ok_or_else(missing),
            Resource::QuotaShare { queue, share } => self
                .queues
                .get_mut(&queue)
                .and_then(|q| q.shares.get_mut(&share))
                .map(|s| &mut s.tags)
                .ok_or_else(missing),
            Resource::ServiceJob(id) => self.job_tags_mut(&id).ok_or_else(missing),
        }
    }

    /// The tags of the resource `command` tags or untags, as they are now (for the audit
    /// entry's before and after); `None` for any other command.
    pub(crate) fn tags_changed_by(
        &mut self,
        command: &Command,
    ) -> Option<(String, BTreeMap<String, String>)> {
        let arn = match command {
            Command::TagResource(r) => &r.resource_arn,
            Command::UntagResource(r) => &r.resource_arn,
            _ => return None,
        };
        let tags = self.tags_mut(arn).ok()?.clone();
        Some((arn.clone(), tags))
    }

    pub(crate) fn tag_resource(&mut self, r: &TagResourceRequest) -> Result<Reply, ApiError> {
        validate::tags("tags", &r.tags)?;
        let share = self.quota_share_of(&r.resource_arn)?;
        if share.is_some() {
            validate::protection_tags("tags", &r.tags)?;
        }
        match self.arns.parse("resourceArn", &r.resource_arn)? {
            Resource::JobQueue(_) => qm_api::class::queue_class_tags("tags", &r.tags)?,
            Resource::SchedulingPolicy(_) => validate::policy_tags("tags", &r.tags)?,
            _ => {}
        }
        let tags = self.tags_mut(&r.resource_arn)?;
        let old = tags.clone();
        let mut merged = old.clone();
        merged.extend(r.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        validate::tags("tags", &merged)?;
        *tags = merged;
        if let Err(e) = self.tags_changed(&r.resource_arn, share) {
            *self.tags_mut(&r.resource_arn)? = old;
            return Err(e);
        }
        reply(TagResourceResponse {})
    }

    /// What follows a change of a resource's tags: a share's `qm:` tags go to the core, a
    /// queue's classes to its waiting jobs, a policy's and a share's rules for idle capacity
    /// to the queues they concern.
    fn tags_changed(&mut self, arn: &str, share: Option<(String, String)>) -> Result<(), ApiError> {
        if let Some((queue, share)) = share {
            self.put_share_tags(&queue, &share)?;
            self.sync_fair_rules(&queue)?;
        }
        if let Resource::SchedulingPolicy(policy) = self.arns.parse("resourceArn", arn)? {
            self.sync_policy_queues(&policy)?;
        }
        self.queue_classes_changed(arn)
    }

    /// A job queue's tags changed, and with them perhaps its classes: its waiting jobs borrow
    /// as their classes now say.
    fn queue_classes_changed(&mut self, arn: &str) -> Result<(), ApiError> {
        if let Resource::JobQueue(queue) = self.arns.parse("resourceArn", arn)? {
            self.expire_verified();
            self.sync_borrows(&queue);
        }
        Ok(())
    }

    /// (queue, share) when the ARN names a quota share.
    fn quota_share_of(&self, arn: &str) -> Result<Option<(String, String)>, ApiError> {
        Ok(match self.arns.parse("resourceArn", arn)? {
            Resource::QuotaShare { queue, share } => Some((queue, share)),
            _ => None,
        })
    }

    /// A quota share's tags changed: its thrash protection (the `qm:` tags) goes to the core.
    fn put_share_tags(&mut self, queue: &str, share: &str) -> Result<(), ApiError> {
        let rec = &self.queues[queue].shares[share];
        let spec = self.share_spec_of(rec);
        self.core_apply(qm_core::Input::PutShare {
            queue: queue.to_string(),
            share: spec,
        })
    }

    pub(crate) fn untag_resource(&mut self, r: &UntagResourceRequest) -> Result<Reply, ApiError> {
        if r.tag_keys.is_empty() {
            return Err(ApiError::client(
                "tagKeys: is empty; name at least one tag key to remove",
            ));
        }
        let share = self.quota_share_of(&r.resource_arn)?;
        let tags = self.tags_mut(&r.resource_arn)?;
        let old = tags.clone();
        for k in &r.tag_keys {
            tags.remove(k);
        }
        if let Err(e) = self.tags_changed(&r.resource_arn, share) {
            *self.tags_mut(&r.resource_arn)? = old;
            return Err(e);
        }
        reply(UntagResourceResponse {})
    }

    pub(crate) fn list_tags_for_resource(
        &self,
        r: &ListTagsForResourceRequest,
    ) -> Result<Reply, ApiError> {
        let arn = &r.resource_arn;
        let tags = match self.arns.parse("resourceArn", arn)? {
            Resource::ServiceEnvironment(n) => self.environments.get(&n).map(|e| &e.tags),
            Resource::SchedulingPolicy(n) => self.policies.get(&n).map(|p| &p.tags),
            Resource::JobQueue(n) => self.queues.get(&n).map(|q| &q.tags),
            Resource::QuotaShare { queue, share } => self
                .queues
                .get(&queue)
                .and_then(|q| q.shares.get(&share))
                .map(|x| &x.tags),
            Resource::ServiceJob(id) => self
                .by_id
                .get(&id)
                .and_then(|c| self.jobs.get(c))
                .map(|j| &j.tags),
        }
        .ok_or_else(|| missing(arn))?;
        reply(ListTagsForResourceResponse {
            tags: Some(tags.clone()),
        })
    }
}

fn missing(arn: &str) -> ApiError {
    ApiError::client(format!(
        "resourceArn: no resource with ARN '{arn}' exists; check the ARN returned when it was created"
    ))
}
