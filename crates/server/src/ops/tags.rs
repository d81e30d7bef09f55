//! TagResource / UntagResource / ListTagsForResource for every taggable resource: service
//! environments, scheduling policies, job queues, quota shares and service jobs.

use std::collections::BTreeMap;

use qm_api::*;

use crate::state::{body, State};

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

    pub(crate) fn tag_resource(&mut self, r: &TagResourceRequest) -> Result<Vec<u8>, ApiError> {
        validate::tags("tags", &r.tags)?;
        let tags = self.tags_mut(&r.resource_arn)?;
        let mut merged = tags.clone();
        merged.extend(r.tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        validate::tags("tags", &merged)?;
        *tags = merged;
        body(&TagResourceResponse {})
    }

    pub(crate) fn untag_resource(&mut self, r: &UntagResourceRequest) -> Result<Vec<u8>, ApiError> {
        if r.tag_keys.is_empty() {
            return Err(ApiError::client(
                "tagKeys: is empty; name at least one tag key to remove",
            ));
        }
        let tags = self.tags_mut(&r.resource_arn)?;
        for k in &r.tag_keys {
            tags.remove(k);
        }
        body(&UntagResourceResponse {})
    }

    pub(crate) fn list_tags_for_resource(
        &self,
        r: &ListTagsForResourceRequest,
    ) -> Result<Vec<u8>, ApiError> {
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
        body(&ListTagsForResourceResponse {
            tags: Some(tags.clone()),
        })
    }
}

fn missing(arn: &str) -> ApiError {
    ApiError::client(format!(
        "resourceArn: no resource with ARN '{arn}' exists; check the ARN returned when it was created"
    ))
}
