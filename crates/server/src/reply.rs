//! What the state answers to a command or an API read: one typed value per response shape
//! ([`Reply`]), encoded to JSON only at the HTTP edge. The driver thread never encodes, and a
//! replay, whose answers nobody reads, encodes nothing. Part of the requests layer: it names
//! only the wire types of `qm_api`.

use serde::Serialize;

use qm_api::qm::{
    AuditLog, DrainStatus, JobAttemptNow, PreemptResponse, QueueGroups, Usage, WhatIf,
};
use qm_api::*;

/// The `{}` body: the answer of a command with nothing to say (audit entries, wake-ups, the
/// executor's reports). A struct without fields, so that it encodes as `{}`, not `null`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Empty {}

/// The answer of a retirement (`RetireJobs`, `RetireAudit`): how many were retired. Only the
/// driver asks for these, so no wire type names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Retired {
    /// Jobs or audit entries removed from the state.
    pub retired: u64,
}

/// Declares [`Reply`] with one variant per response type, and `From` for each, so that an
/// operation answers `reply(SomeResponse { .. })`.
macro_rules! replies {
    ($($(#[$doc:meta])* $variant:ident($ty:ty),)*) => {
        /// A response body, typed. Untagged: each variant encodes exactly as its inner value,
        /// so `serde_json::to_vec(&reply)` is the JSON the server answers.
        #[derive(Debug, Serialize)]
        #[serde(untagged)]
        pub enum Reply {
            $($(#[$doc])* $variant($ty),)*
        }

        $(impl From<$ty> for Reply {
            fn from(v: $ty) -> Self {
                Reply::$variant(v)
            }
        })*
    };
}

replies! {
    /// `{}`.
    Empty(Empty),
    /// A retirement's count.
    Retired(Retired),
    /// CreateServiceEnvironment.
    CreateServiceEnvironment(CreateServiceEnvironmentResponse),
    /// UpdateServiceEnvironment.
    UpdateServiceEnvironment(UpdateServiceEnvironmentResponse),
    /// DeleteServiceEnvironment.
    DeleteServiceEnvironment(DeleteServiceEnvironmentResponse),
    /// DescribeServiceEnvironments.
    DescribeServiceEnvironments(DescribeServiceEnvironmentsResponse),
    /// CreateJobQueue.
    CreateJobQueue(CreateJobQueueResponse),
    /// UpdateJobQueue.
    UpdateJobQueue(UpdateJobQueueResponse),
    /// DeleteJobQueue.
    DeleteJobQueue(DeleteJobQueueResponse),
    /// DescribeJobQueues.
    DescribeJobQueues(DescribeJobQueuesResponse),
    /// CreateSchedulingPolicy.
    CreateSchedulingPolicy(CreateSchedulingPolicyResponse),
    /// UpdateSchedulingPolicy.
    UpdateSchedulingPolicy(UpdateSchedulingPolicyResponse),
    /// DeleteSchedulingPolicy.
    DeleteSchedulingPolicy(DeleteSchedulingPolicyResponse),
    /// DescribeSchedulingPolicies.
    DescribeSchedulingPolicies(DescribeSchedulingPoliciesResponse),
    /// ListSchedulingPolicies.
    ListSchedulingPolicies(ListSchedulingPoliciesResponse),
    /// CreateQuotaShare.
    CreateQuotaShare(CreateQuotaShareResponse),
    /// UpdateQuotaShare.
    UpdateQuotaShare(UpdateQuotaShareResponse),
    /// DeleteQuotaShare.
    DeleteQuotaShare(DeleteQuotaShareResponse),
    /// DescribeQuotaShare.
    DescribeQuotaShare(DescribeQuotaShareResponse),
    /// ListQuotaShares.
    ListQuotaShares(ListQuotaSharesResponse),
    /// SubmitServiceJob.
    SubmitServiceJob(SubmitServiceJobResponse),
    /// UpdateServiceJob.
    UpdateServiceJob(UpdateServiceJobResponse),
    /// TerminateServiceJob.
    TerminateServiceJob(TerminateServiceJobResponse),
    /// TerminateServiceJobs.
    TerminateServiceJobs(TerminateServiceJobsResponse),
    /// DescribeServiceJob, boxed: by far the largest response, it would size every reply.
    DescribeServiceJob(Box<DescribeServiceJobResponse>),
    /// ListServiceJobs.
    ListServiceJobs(ListServiceJobsResponse),
    /// GetJobQueueSnapshot.
    GetJobQueueSnapshot(GetJobQueueSnapshotResponse),
    /// TagResource.
    TagResource(TagResourceResponse),
    /// UntagResource.
    UntagResource(UntagResourceResponse),
    /// ListTagsForResource.
    ListTagsForResource(ListTagsForResourceResponse),
    /// `POST /qm/v1/jobs/{job}/preempt`.
    Preempt(PreemptResponse),
    /// `GET /qm/v1/jobs/{job}/attempt`.
    JobAttemptNow(JobAttemptNow),
    /// `GET /qm/v1/usage`.
    Usage(Usage),
    /// `GET`, `POST` and `DELETE /qm/v1/drain`.
    Drain(DrainStatus),
    /// `GET` and `PUT /qm/v1/queues/{queue}/groups`.
    QueueGroups(QueueGroups),
    /// `POST /qm/v1/what-if`.
    WhatIf(WhatIf),
    /// `GET /qm/v1/audit`.
    Audit(AuditLog),
}

impl From<DescribeServiceJobResponse> for Reply {
    fn from(v: DescribeServiceJobResponse) -> Self {
        Reply::DescribeServiceJob(Box::new(v))
    }
}

impl Reply {
    /// The JSON body the HTTP layer answers.
    pub fn to_json(&self) -> Result<Vec<u8>, ApiError> {
        encode(self)
    }
}

/// Encodes a response body; an error (a value JSON cannot hold) is the server's.
pub fn encode<T: Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(v).map_err(|e| ApiError::server(format!("encoding the response: {e}")))
}

/// An operation's answer: `value` as a [`Reply`]. Infallible today; a `Result` so that an
/// operation ends in `reply(..)` as it ended in an encoding that could fail.
pub fn reply<T: Into<Reply>>(value: T) -> Result<Reply, ApiError> {
    Ok(value.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_encodes_exactly_as_the_value_it_holds() {
        assert_eq!(Reply::from(Empty {}).to_json().unwrap(), b"{}");
        assert_eq!(
            Reply::from(DeleteJobQueueResponse {}).to_json().unwrap(),
            b"{}"
        );
        assert_eq!(
            Reply::from(Retired { retired: 3 }).to_json().unwrap(),
            br#"{"retired":3}"#
        );
        let audit = AuditLog {
            entries: Vec::new(),
            next_token: Some("7".into()),
            archived: 2,
        };
        let direct = serde_json::to_vec(&audit).unwrap();
        assert_eq!(Reply::from(audit).to_json().unwrap(), direct);
    }
}
