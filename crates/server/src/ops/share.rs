//! Quota shares: a team's slice of a queue. Every change goes to the core as the share's full
//! configuration (`PutShare`), so the core always holds exactly what DescribeQuotaShare shows.

use qm_api::*;
use qm_core::{Input, ShareSpec, MAX_SHARES_PER_QUEUE};

use super::page;
use crate::reply::{reply, Reply};
use crate::state::{ShareRec, State};

impl State {
    pub(crate) fn share_spec_of(&self, s: &ShareRec) -> ShareSpec {
        share_spec(
            &s.name,
            &s.limits,
            &s.sharing,
            &s.preemption,
            s.state,
            &s.tags,
        )
    }

    /// (queue, share) of a share ARN that exists.
    fn share_ref(&self, field: &str, arn: &str) -> Result<(String, String), ApiError> {
        let (queue, share) = self.arns.quota_share_arn(field, arn)?;
        let exists = self
            .queues
            .get(&queue)
            .is_some_and(|q| q.shares.contains_key(&share));
        if !exists {
            return Err(ApiError::client(format!(
                "{field}: quota share '{share}' does not exist in job queue '{queue}'; check the ARN (ListQuotaShares shows the shares of a queue)"
            )));
        }
        Ok((queue, share))
    }

    pub(crate) fn create_quota_share(
        &mut self,
        r: &CreateQuotaShareRequest,
    ) -> Result<Reply, ApiError> {
        validate_create_quota_share(r)?;
        let queue = self.queue_name("jobQueue", &r.job_queue)?;
        let q = &self.queues[&queue];
        if q.shares.contains_key(&r.quota_share_name) {
            return Err(ApiError::client(format!(
                "quotaShareName: quota share '{}' already exists in job queue '{queue}'; choose another name or update it with UpdateQuotaShare",
                r.quota_share_name
            )));
        }
        if q.shares.len() >= MAX_SHARES_PER_QUEUE {
            return Err(ApiError::client(format!(
                "jobQueue: job queue '{queue}' already has {MAX_SHARES_PER_QUEUE} quota shares, the most a queue can have; delete one first"
            )));
        }
        let rec = ShareRec {
            name: r.quota_share_name.clone(),
            limits: r.capacity_limits.clone(),
            sharing: r.resource_sharing_configuration.clone(),
            preemption: r.preemption_configuration.clone(),
            state: r.state.unwrap_or(QuotaShareState::Enabled),
            tags: r.tags.clone().unwrap_or_default(),
        };
        self.core_apply(Input::PutShare {
            queue: queue.clone(),
            share: self.share_spec_of(&rec),
        })?;
        let name = rec.name.clone();
        self.record_share(&queue, &name, Some(&rec));
        self.queues
            .get_mut(&queue)
            .expect("checked")
            .shares
            .insert(name.clone(), rec);
        // Its `qm:group` tag may make it a member of a group.
        self.sync_fair_rules(&queue)?;
        reply(CreateQuotaShareResponse {
            quota_share_name: Some(name.clone()),
            quota_share_arn: Some(self.arns.quota_share(&queue, &name)),
        })
    }

    pub(crate) fn update_quota_share(
        &mut self,
        r: &UpdateQuotaShareRequest,
    ) -> Result<Reply, ApiError> {
        validate_update_quota_share(r)?;
        let (queue, name) = self.share_ref("quotaShareArn", &r.quota_share_arn)?;
        let mut rec = self.queues[&queue].shares[&name].clone();
        if let Some(l) = &r.capacity_limits {
            rec.limits = l.clone();
        }
        if let Some(s) = &r.resource_sharing_configuration {
            rec.sharing = s.clone();
        }
        if let Some(p) = &r.preemption_configuration {
            rec.preemption = p.clone();
        }
        if let Some(s) = &r.state {
            rec.state = *s;
        }
        self.core_apply(Input::PutShare {
            queue: queue.clone(),
            share: self.share_spec_of(&rec),
        })?;
        self.record_share(&queue, &name, Some(&rec));
        self.queues
            .get_mut(&queue)
            .expect("checked")
            .shares
            .insert(name.clone(), rec);
        reply(UpdateQuotaShareResponse {
            quota_share_name: Some(name.clone()),
            quota_share_arn: Some(self.arns.quota_share(&queue, &name)),
        })
    }

    pub(crate) fn delete_quota_share(
        &mut self,
        r: &DeleteQuotaShareRequest,
    ) -> Result<Reply, ApiError> {
        let (queue, name) = self.share_ref("quotaShareArn", &r.quota_share_arn)?;
        if self.queues[&queue].shares[&name].state != QuotaShareState::Disabled {
            return Err(ApiError::client(format!(
                "quotaShareArn: quota share '{name}' is ENABLED; set its state to DISABLED with UpdateQuotaShare before deleting it"
            )));
        }
        let doomed = self.unfinished_jobs_of(&queue, &name);
        self.core_apply(Input::DeleteShare {
            queue: queue.clone(),
            share: name.clone(),
        })?;
        self.mark_terminated(&doomed);
        self.record_share(&queue, &name, None);
        self.queues
            .get_mut(&queue)
            .expect("checked")
            .shares
            .remove(&name);
        // A deleted share leaves its group.
        self.sync_fair_rules(&queue)?;
        reply(DeleteQuotaShareResponse {})
    }

    fn share_detail(&self, queue: &str, s: &ShareRec) -> QuotaShareDetail {
        QuotaShareDetail {
            quota_share_name: Some(s.name.clone()),
            quota_share_arn: Some(self.arns.quota_share(queue, &s.name)),
            job_queue_arn: Some(self.arns.job_queue(queue)),
            capacity_limits: Some(s.limits.clone()),
            resource_sharing_configuration: Some(s.sharing.clone()),
            preemption_configuration: Some(s.preemption.clone()),
            state: Some(s.state),
            status: Some(QuotaShareStatus::Valid),
        }
    }

    pub(crate) fn describe_quota_share(
        &self,
        r: &DescribeQuotaShareRequest,
    ) -> Result<Reply, ApiError> {
        let (queue, name) = self.share_ref("quotaShareArn", &r.quota_share_arn)?;
        let s = &self.queues[&queue].shares[&name];
        let d = self.share_detail(&queue, s);
        reply(DescribeQuotaShareResponse {
            quota_share_name: d.quota_share_name,
            quota_share_arn: d.quota_share_arn,
            job_queue_arn: d.job_queue_arn,
            capacity_limits: d.capacity_limits,
            resource_sharing_configuration: d.resource_sharing_configuration,
            preemption_configuration: d.preemption_configuration,
            state: d.state,
            status: d.status,
            tags: (!s.tags.is_empty()).then(|| s.tags.clone()),
        })
    }

    pub(crate) fn list_quota_shares(&self, r: &ListQuotaSharesRequest) -> Result<Reply, ApiError> {
        let max = max_results("maxResults", r.max_results, 100)?;
        let queue = self.queue_name("jobQueue", &r.job_queue)?;
        let q = &self.queues[&queue];
        let items = q
            .shares
            .iter()
            .map(|(n, s)| (n.as_str(), self.share_detail(&queue, s)));
        let (list, next) = page(items, r.next_token.as_deref(), max)?;
        reply(ListQuotaSharesResponse {
            quota_shares: Some(list),
            next_token: next,
        })
    }
}
